//! Discovery documents: enough of `/api`, `/apis` and the per-version resource lists for
//! kube-rs (`kube::discovery`) and `kubectl` to find the catalogue's resources. Groups that are
//! not served (`cdi.kubevirt.io`) are 404, so virt-controller runs without DataVolumes.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use kvrs_store::{ResourceType, catalogue};

/// What `/version` reports.
pub const GIT_VERSION: &str = "v1.36.0-kvrs";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "gitVersion": GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "n/a",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

/// Group → its one served version.
fn groups() -> BTreeMap<&'static str, &'static str> {
    catalogue()
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| (r.group.as_str(), r.version.as_str()))
        .collect()
}

/// `/api`.
pub fn core_versions(addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}],
    })
}

fn group_doc(name: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{name}/{version}"), "version": version});
    json!({"name": name, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `/apis`, with the extensions' `APIGroup`s after the catalogue's.
pub fn group_list(extra: &[Value]) -> Value {
    let mut groups: Vec<Value> = groups().into_iter().map(|(g, v)| group_doc(g, v)).collect();
    groups.extend(extra.iter().cloned());
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if served.
pub fn group(name: &str) -> Option<Value> {
    let version = groups().get(name).copied()?;
    let mut doc = group_doc(name, version);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn resource_entry(r: &ResourceType) -> Vec<Value> {
    let verbs = [
        "create", "delete", "get", "list", "patch", "update", "watch",
    ];
    let mut out = vec![json!({
        "name": r.plural,
        "singularName": r.kind.to_lowercase(),
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": verbs,
        "shortNames": r.short_names,
    })];
    if r.status_subresource {
        out.push(json!({
            "name": format!("{}/status", r.plural),
            "singularName": "",
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if r.group.is_empty() && r.plural == "pods" {
        out.push(json!({
            "name": "pods/binding",
            "singularName": "",
            "namespaced": true,
            "kind": "Binding",
            "verbs": ["create"],
        }));
    }
    out
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = catalogue()
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(|r| resource_entry(r))
        .collect();
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
