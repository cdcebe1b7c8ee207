//! The Kubernetes manifests kvrs deploys (`bins/deploy`): the CRDs `scripts/gen-crds.py` writes
//! from KubeVirt v1.9.0's OpenAPI document, and the virt-controller / virt-handler objects.
//!
//! KubeVirt's swagger document is not part of the repository, so the checks that always run are
//! structural: every file parses, names a Kubernetes object and survives a round trip through
//! k8s-openapi's types (no unknown or misspelt field), every CRD schema obeys the apiserver's
//! structural-schema rules and carries virt-operator's facts, and the roles grant no wildcard.
//! Byte-for-byte regeneration runs on demand (it needs the document):
//!
//! ```text
//! KVRS_KUBEVIRT_SWAGGER=/path/to/swagger.json \
//!   cargo test -p kvrs-tests --test deploy_manifests -- --ignored
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Deserialize;
use serde_json::{Value, json};

/// The repository root, from the manifest dir cargo names at run time.
fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("..")
}

fn deploy_dir() -> PathBuf {
    repo().join("bins/deploy")
}

/// Every `.yaml` file below `dir`, sorted; panics when there is none.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    assert!(!out.is_empty(), "no manifests under {}", dir.display());
    out
}

/// The YAML documents of a file, as JSON values (empty documents skipped).
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect();
    assert!(!docs.is_empty(), "{}: no document", path.display());
    docs
}

/// Every object under `bins/deploy`, with the file it came from (relative to `bins/deploy`).
fn all_objects() -> Vec<(String, Value)> {
    let root = deploy_dir();
    yaml_files(&root)
        .into_iter()
        .flat_map(|path| {
            let rel = path.strip_prefix(&root).unwrap().display().to_string();
            documents(&path)
                .into_iter()
                .map(move |doc| (rel.clone(), doc))
        })
        .collect()
}

fn objects_of(kind: &str) -> Vec<(String, Value)> {
    all_objects()
        .into_iter()
        .filter(|(_, o)| o["kind"] == kind)
        .collect()
}

fn one_object(rel: &str) -> Value {
    let mut docs = documents(&deploy_dir().join(rel));
    assert_eq!(docs.len(), 1, "{rel}: one object per file");
    docs.remove(0)
}

/// The first place two JSON values differ, as a path.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => first_difference(p, q, &format!("{path}.{k}")),
                (p, q) => Some(format!("{path}.{k}: {p:?} vs {q:?}")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(rel: &str, obj: &Value) {
    let typed: T = serde_json::from_value(obj.clone()).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    if let Some(diff) = first_difference(obj, &back, "") {
        panic!("{rel}: not what k8s-openapi reads (unknown or mistyped field?): {diff}");
    }
}

// --- every manifest -------------------------------------------------------------------------------

const EXPECTED_FILES: &[&str] = &[
    "crds/kubevirts.kubevirt.io.yaml",
    "crds/migrationpolicies.migrations.kubevirt.io.yaml",
    "crds/virtualmachineclusterinstancetypes.instancetype.kubevirt.io.yaml",
    "crds/virtualmachineclusterpreferences.instancetype.kubevirt.io.yaml",
    "crds/virtualmachineinstancemigrations.kubevirt.io.yaml",
    "crds/virtualmachineinstances.kubevirt.io.yaml",
    "crds/virtualmachineinstancetypes.instancetype.kubevirt.io.yaml",
    "crds/virtualmachinepreferences.instancetype.kubevirt.io.yaml",
    "crds/virtualmachines.kubevirt.io.yaml",
    "virt-api/aggregated-clusterroles.yaml",
    "virt-api/apiservice.yaml",
    "virt-api/auth-reader-rolebinding.yaml",
    "virt-api/clusterrole.yaml",
    "virt-api/clusterrolebinding.yaml",
    "virt-api/deployment.yaml",
    "virt-api/mutatingwebhookconfiguration.yaml",
    "virt-api/role.yaml",
    "virt-api/rolebinding.yaml",
    "virt-api/service.yaml",
    "virt-api/serviceaccount.yaml",
    "virt-api/validatingwebhookconfiguration.yaml",
    "virt-controller/00-namespace.yaml",
    "virt-controller/clusterrole.yaml",
    "virt-controller/clusterrolebinding.yaml",
    "virt-controller/deployment.yaml",
    "virt-controller/role.yaml",
    "virt-controller/rolebinding.yaml",
    "virt-controller/serviceaccount.yaml",
    "virt-handler/clusterrole.yaml",
    "virt-handler/clusterrolebinding.yaml",
    "virt-handler/daemonset.yaml",
    "virt-handler/serviceaccount.yaml",
];

#[test]
fn the_expected_manifests_are_there_and_nothing_else() {
    let root = deploy_dir();
    let found: Vec<String> = yaml_files(&root)
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert_eq!(found, EXPECTED_FILES);
    assert!(
        root.join("README.md").is_file(),
        "bins/deploy/README.md is missing"
    );
}

#[test]
fn every_manifest_is_a_named_kubernetes_object() {
    const NAMESPACED: &[&str] = &[
        "ServiceAccount",
        "Service",
        "Role",
        "RoleBinding",
        "Deployment",
        "DaemonSet",
    ];
    for (rel, obj) in all_objects() {
        for key in ["apiVersion", "kind"] {
            assert!(
                obj[key].as_str().is_some_and(|s| !s.is_empty()),
                "{rel}: no {key}"
            );
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        assert!(!name.is_empty(), "{rel}: no metadata.name");
        let kind = obj["kind"].as_str().unwrap();
        if rel == "virt-api/auth-reader-rolebinding.yaml" {
            // Binds Kubernetes' own Role where it lives.
            assert_eq!(
                obj["metadata"]["namespace"], "kube-system",
                "{rel}: namespace"
            );
        } else if NAMESPACED.contains(&kind) {
            assert_eq!(obj["metadata"]["namespace"], "kubevirt", "{rel}: namespace");
        } else {
            assert!(
                obj["metadata"].get("namespace").is_none(),
                "{rel}: cluster-scoped"
            );
        }
    }
}

#[test]
fn manifests_read_back_through_the_kubernetes_types() {
    for (rel, obj) in all_objects() {
        match obj["kind"].as_str().unwrap() {
            "Namespace" => round_trip::<Namespace>(&rel, &obj),
            "ServiceAccount" => round_trip::<ServiceAccount>(&rel, &obj),
            "ClusterRole" => round_trip::<ClusterRole>(&rel, &obj),
            "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(&rel, &obj),
            "Role" => round_trip::<Role>(&rel, &obj),
            "RoleBinding" => round_trip::<RoleBinding>(&rel, &obj),
            "Deployment" => round_trip::<Deployment>(&rel, &obj),
            "DaemonSet" => round_trip::<DaemonSet>(&rel, &obj),
            "Service" => round_trip::<Service>(&rel, &obj),
            "MutatingWebhookConfiguration" => {
                round_trip::<MutatingWebhookConfiguration>(&rel, &obj)
            }
            "ValidatingWebhookConfiguration" => {
                round_trip::<ValidatingWebhookConfiguration>(&rel, &obj)
            }
            "CustomResourceDefinition" => round_trip::<CustomResourceDefinition>(&rel, &obj),
            "APIService" => round_trip::<APIService>(&rel, &obj),
            other => panic!("{rel}: unexpected kind {other}"),
        }
    }
}

// --- RBAC -------------------------------------------------------------------------------------------

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// (group, resource) -> verbs granted by a role.
fn grants(role: &Value) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().expect("rules") {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                out.entry((group.into(), resource.into()))
                    .or_default()
                    .extend(strings(&rule["verbs"]).into_iter().map(String::from));
            }
        }
    }
    out
}

#[test]
fn roles_grant_no_wildcards() {
    let roles: Vec<_> = objects_of("ClusterRole")
        .into_iter()
        .chain(objects_of("Role"))
        .collect();
    assert_eq!(
        roles.len(),
        8,
        "three ClusterRoles, KubeVirt's three aggregated roles, the leader-election Role and virt-api's Secret Role"
    );
    for (rel, role) in roles {
        for (i, rule) in role["rules"].as_array().expect("rules").iter().enumerate() {
            for key in ["apiGroups", "resources", "verbs", "resourceNames"] {
                assert!(
                    !strings(&rule[key]).contains(&"*"),
                    "{rel}: rule {i} has {key} *"
                );
            }
            assert!(
                rule.get("nonResourceURLs").is_none(),
                "{rel}: rule {i}: nonResourceURLs"
            );
            assert!(
                !strings(&rule["verbs"]).is_empty(),
                "{rel}: rule {i} grants nothing"
            );
        }
    }
}

fn gr(group: &str, resource: &str) -> (String, String) {
    (group.to_string(), resource.to_string())
}

fn verbs(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn controller_role_grants_what_virt_controller_uses() {
    let g = grants(&one_object("virt-controller/clusterrole.yaml"));
    let read = ["get", "list", "watch"];
    assert_eq!(
        g[&gr("kubevirt.io", "virtualmachines")],
        verbs(&["get", "list", "watch", "patch"])
    );
    assert_eq!(
        g[&gr("kubevirt.io", "virtualmachines/status")],
        verbs(&["patch"])
    );
    assert_eq!(
        g[&gr("kubevirt.io", "virtualmachineinstances")],
        verbs(&["get", "list", "watch", "create", "patch", "delete"])
    );
    assert_eq!(
        g[&gr("", "pods")],
        verbs(&["get", "list", "watch", "create", "patch", "delete"])
    );
    assert_eq!(g[&gr("", "pods/status")], verbs(&["patch"]));
    assert_eq!(
        g[&gr("kubevirt.io", "virtualmachineinstancemigrations")],
        verbs(&["get", "list", "watch", "create", "patch", "delete"])
    );
    // The migration controller's MigrationPolicies and the namespace labels they select on.
    assert_eq!(
        g[&gr("migrations.kubevirt.io", "migrationpolicies")],
        verbs(&read)
    );
    assert_eq!(g[&gr("", "namespaces")], verbs(&read));
    assert_eq!(
        g[&gr("kubevirt.io", "virtualmachineinstancemigrations/status")],
        verbs(&["patch"])
    );
    assert_eq!(
        g[&gr("apps", "controllerrevisions")],
        verbs(&["get", "list", "watch", "create", "delete"])
    );
    // Backend-storage claims (persistent TPM / EFI) are created and deleted by the VMI
    // controller, in a class found among the storage classes and CDI's profiles.
    assert_eq!(
        g[&gr("", "persistentvolumeclaims")],
        verbs(&["get", "list", "watch", "create", "delete"])
    );
    assert_eq!(g[&gr("storage.k8s.io", "storageclasses")], verbs(&read));
    assert_eq!(g[&gr("cdi.kubevirt.io", "storageprofiles")], verbs(&read));
    assert_eq!(
        g[&gr("cdi.kubevirt.io", "datavolumes")],
        verbs(&["get", "list", "watch", "create"])
    );
    assert_eq!(g[&gr("", "nodes")], verbs(&read));
    assert_eq!(g[&gr("kubevirt.io", "kubevirts")], verbs(&read));
    for resource in [
        "virtualmachineinstancetypes",
        "virtualmachineclusterinstancetypes",
        "virtualmachinepreferences",
        "virtualmachineclusterpreferences",
    ] {
        assert_eq!(
            g[&gr("instancetype.kubevirt.io", resource)],
            verbs(&read),
            "{resource}"
        );
    }
    // Core events only, as KubeVirt's ClusterRoles grant them.
    assert_eq!(g[&gr("", "events")], verbs(&["create", "patch"]));
    assert!(!g.contains_key(&gr("events.k8s.io", "events")));
    let lease = grants(&one_object("virt-controller/role.yaml"));
    assert_eq!(
        lease,
        BTreeMap::from([(
            gr("coordination.k8s.io", "leases"),
            verbs(&["get", "create", "update"])
        )])
    );
}

/// The API group of a plural resource a decision writes (a resource missing here is a new kind
/// of write: give it its group and a grant).
fn group_of(resource: &str) -> &'static str {
    match resource {
        "virtualmachines" | "virtualmachineinstances" | "virtualmachineinstancemigrations" => {
            "kubevirt.io"
        }
        "pods" | "persistentvolumeclaims" | "nodes" => "",
        "controllerrevisions" => "apps",
        "datavolumes" => "cdi.kubevirt.io",
        other => panic!("a decision writes {other}: add its API group here and grant it"),
    }
}

/// Every (group, resource[/subresource], verb) the VM and VMI decisions write when run over the
/// scenarios of KubeVirt's own VM/VMI oracle corpus, plus a VM with a `dataVolumeTemplates`
/// entry (the corpus has none), plus the events they record.
fn controller_writes() -> BTreeSet<(String, String, String)> {
    use kvrs_core::decide::Plan;
    use kvrs_core::decide::scenario::Scenario;
    let dir = kvrs_tests::shared_dir("oracle-vm");
    let mut scenarios: Vec<(String, Value)> = kvrs_tests::cases_with(&dir, "out.json")
        .into_iter()
        .map(|name| {
            let raw = kvrs_tests::read_json(&dir.join(format!("{name}.json")));
            (name, raw)
        })
        .collect();
    assert!(!scenarios.is_empty(), "no scenario in {}", dir.display());
    let absent = scenarios
        .iter()
        .find(|(n, _)| n == "vm-always-absent")
        .expect("vm-always-absent")
        .1
        .clone();
    let mut with_dv = absent;
    with_dv["vm"]["spec"]["dataVolumeTemplates"] = json!([{
        "metadata": {"name": "dv1"},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }]);
    with_dv["vm"]["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "dv1", "disk": {"bus": "virtio"}}));
    with_dv["vm"]["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "dv1", "dataVolume": {"name": "dv1"}}));
    scenarios.push(("vm-with-data-volume-template".into(), with_dv));

    let mut out = BTreeSet::new();
    for (name, raw) in scenarios {
        let s = Scenario::from_value(raw).unwrap_or_else(|e| panic!("{name}: {e}"));
        let config = s.config();
        let plan: Plan = if name.starts_with("vmi-") {
            let world = s.vmi_world(&config).expect("vmi world");
            let inputs = kvrs_core::pod::PodInputs::default();
            let render = kvrs_core::decide::vmi::launcher_renderer(&config, &inputs);
            kvrs_core::decide::vmi::decide_vmi(&world, &render, "00000").plan
        } else {
            let extra = s.vmi_from_list();
            let world = s.vm_world(&config, &extra).expect("vm world");
            kvrs_core::decide::vm::decide_vm(&world).plan
        };
        for w in plan.writes() {
            let resource = match &w.subresource {
                Some(sub) => format!("{}/{sub}", w.resource),
                None => w.resource.clone(),
            };
            out.insert((
                group_of(&w.resource).to_string(),
                resource,
                w.op.verb().to_string(),
            ));
        }
        if !plan.events.is_empty() {
            // Recorded as core/v1 events (created, then patched with their count).
            for verb in ["create", "patch"] {
                out.insert(("".into(), "events".into(), verb.into()));
            }
        }
    }
    out
}

#[test]
fn controller_role_grants_every_write_its_decisions_make() {
    let writes = controller_writes();
    // The case that pinned the read-only grant: the VM decision creates DataVolumes.
    assert!(
        writes.contains(&(
            "cdi.kubevirt.io".into(),
            "datavolumes".into(),
            "create".into()
        )),
        "{writes:?}"
    );
    let g = grants(&one_object("virt-controller/clusterrole.yaml"));
    let missing: Vec<String> = writes
        .iter()
        .filter(|(group, resource, verb)| {
            !g.get(&gr(group, resource))
                .is_some_and(|verbs| verbs.contains(verb))
        })
        .map(|(group, resource, verb)| format!("{verb} {resource} ({group:?})"))
        .collect();
    assert!(
        missing.is_empty(),
        "virt-controller's ClusterRole does not grant what its decisions do: {missing:?}"
    );
}

#[test]
fn handler_role_grants_what_virt_handler_uses() {
    let g = grants(&one_object("virt-handler/clusterrole.yaml"));
    let read = ["get", "list", "watch"];
    let expected = BTreeMap::from([
        (
            gr("kubevirt.io", "virtualmachineinstances"),
            verbs(&["get", "list", "watch", "patch", "update"]),
        ),
        (gr("kubevirt.io", "kubevirts"), verbs(&read)),
        (gr("", "nodes"), verbs(&["get", "list", "watch", "patch"])),
        (gr("", "pods"), verbs(&read)),
        (gr("", "events"), verbs(&["create", "patch"])),
    ]);
    assert_eq!(g, expected);
}

#[test]
fn status_grants_exist_only_for_crds_with_a_status_subresource() {
    let mut with_status = BTreeSet::new();
    let mut shipped_groups = BTreeSet::new();
    for (_, crd) in objects_of("CustomResourceDefinition") {
        let group = crd["spec"]["group"].as_str().unwrap().to_string();
        shipped_groups.insert(group.clone());
        if crd["spec"]["versions"][0]["subresources"]
            .get("status")
            .is_some()
        {
            with_status.insert(gr(&group, crd["spec"]["names"]["plural"].as_str().unwrap()));
        }
    }
    for (rel, role) in objects_of("ClusterRole") {
        for (group, resource) in grants(&role).into_keys() {
            if let Some(plural) = resource.strip_suffix("/status")
                && shipped_groups.contains(&group)
            {
                assert!(
                    with_status.contains(&gr(&group, plural)),
                    "{rel}: grants {resource} but its CRD has no status subresource"
                );
            }
        }
    }
}

#[test]
fn bindings_name_the_shipped_roles_and_accounts() {
    let accounts: BTreeSet<String> = objects_of("ServiceAccount")
        .into_iter()
        .map(|(_, sa)| sa["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        accounts,
        BTreeSet::from([
            "kvrs-controller".into(),
            "kvrs-handler".into(),
            "kvrs-virt-api".into()
        ])
    );
    for (binding_kind, role_kind) in [
        ("ClusterRoleBinding", "ClusterRole"),
        ("RoleBinding", "Role"),
    ] {
        let roles: BTreeSet<String> = objects_of(role_kind)
            .into_iter()
            .map(|(_, r)| r["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        for (rel, binding) in objects_of(binding_kind) {
            assert_eq!(binding["roleRef"]["kind"], role_kind, "{rel}");
            assert_eq!(
                binding["roleRef"]["apiGroup"], "rbac.authorization.k8s.io",
                "{rel}"
            );
            let role = binding["roleRef"]["name"].as_str().unwrap();
            // Kubernetes' bootstrap Role every aggregated API server binds.
            let bootstrap = rel == "virt-api/auth-reader-rolebinding.yaml"
                && role == "extension-apiserver-authentication-reader";
            assert!(
                bootstrap || roles.contains(role),
                "{rel}: no {role_kind} {role} shipped"
            );
            for subject in binding["subjects"].as_array().expect("subjects") {
                assert_eq!(subject["kind"], "ServiceAccount", "{rel}");
                assert_eq!(subject["namespace"], "kubevirt", "{rel}");
                let name = subject["name"].as_str().unwrap();
                assert!(accounts.contains(name), "{rel}: no ServiceAccount {name}");
            }
        }
    }
    for (rel, workload) in objects_of("Deployment")
        .into_iter()
        .chain(objects_of("DaemonSet"))
    {
        let sa = workload["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap();
        assert!(accounts.contains(sa), "{rel}: no ServiceAccount {sa}");
    }
}

/// (group, resource) -> (verbs, resourceNames) of a role, one entry per rule.
fn rules(role: &Value) -> Vec<(String, String, BTreeSet<String>, BTreeSet<String>)> {
    let mut out = Vec::new();
    for rule in role["rules"].as_array().expect("rules") {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                out.push((
                    group.to_string(),
                    resource.to_string(),
                    strings(&rule["verbs"])
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    strings(&rule["resourceNames"])
                        .into_iter()
                        .map(String::from)
                        .collect(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn virt_api_roles_grant_what_virt_api_uses_and_only_by_name_where_it_can() {
    let set = |l: &[&str]| {
        l.iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<String>>()
    };
    let cluster = rules(&one_object("virt-api/clusterrole.yaml"));
    let mut expected = vec![
        (
            "kubevirt.io".into(),
            "kubevirts".into(),
            set(&["get", "list", "watch"]),
            set(&[]),
        ),
        // The subresources: start/stop/restart read the VM and its VMI and patch them (the
        // VM's stateChangeRequests through its status subresource).
        (
            "kubevirt.io".into(),
            "virtualmachineinstances".into(),
            set(&["get", "patch"]),
            set(&[]),
        ),
        (
            "kubevirt.io".into(),
            "virtualmachines".into(),
            set(&["get", "patch"]),
            set(&[]),
        ),
        (
            "kubevirt.io".into(),
            "virtualmachines/status".into(),
            set(&["patch"]),
            set(&[]),
        ),
        // The migration webhook lists a VMI's migrations; `migrate` creates one.
        (
            "kubevirt.io".into(),
            "virtualmachineinstancemigrations".into(),
            set(&["list", "create"]),
            set(&[]),
        ),
        // The eviction webhook reads the pod being evicted (and marks its VMI, above).
        ("".into(), "pods".into(), set(&["get"]), set(&[])),
        // `expand-spec`: the objects a VM's instancetype and preference matchers name.
        (
            "instancetype.kubevirt.io".into(),
            "virtualmachineinstancetypes".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "instancetype.kubevirt.io".into(),
            "virtualmachineclusterinstancetypes".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "instancetype.kubevirt.io".into(),
            "virtualmachinepreferences".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "instancetype.kubevirt.io".into(),
            "virtualmachineclusterpreferences".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "apps".into(),
            "controllerrevisions".into(),
            set(&["get"]),
            set(&[]),
        ),
        // The VM mutator's `inferFromVolume`: the labels of the objects a volume comes from.
        (
            "".into(),
            "persistentvolumeclaims".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "cdi.kubevirt.io".into(),
            "datasources".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "cdi.kubevirt.io".into(),
            "datavolumes".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "snapshot.storage.k8s.io".into(),
            "volumesnapshots".into(),
            set(&["get"]),
            set(&[]),
        ),
        (
            "admissionregistration.k8s.io".into(),
            "mutatingwebhookconfigurations".into(),
            set(&["get", "patch"]),
            set(&["kvrs-virt-api-mutator"]),
        ),
        (
            "admissionregistration.k8s.io".into(),
            "validatingwebhookconfigurations".into(),
            set(&["get", "patch"]),
            set(&["kvrs-virt-api-validator"]),
        ),
        (
            "apiregistration.k8s.io".into(),
            "apiservices".into(),
            set(&["get", "patch"]),
            set(&[
                "v1.subresources.kubevirt.io",
                "v1alpha3.subresources.kubevirt.io",
            ]),
        ),
    ];
    expected.sort();
    assert_eq!(cluster, expected);
    let role = one_object("virt-api/role.yaml");
    assert_eq!(role["metadata"]["namespace"], "kubevirt");
    let mut expected = vec![
        ("".into(), "secrets".into(), set(&["create"]), set(&[])),
        (
            "".into(),
            "secrets".into(),
            set(&["get", "patch"]),
            set(&[
                "kvrs-virt-api-certs",
                kvrs_virt_api::subresources::vmi::HANDLER_SECRET,
            ]),
        ),
        // The virt-handler pod of a VMI's node, for the VMI subresources.
        ("".into(), "pods".into(), set(&["list"]), set(&[])),
    ];
    expected.sort();
    assert_eq!(rules(&role), expected);
}

/// The configurations register exactly the webhooks virt-api serves, with KubeVirt v1.9.0's
/// names, rules, paths, failure policy, side effects and timeout, through kvrs's Service.
#[test]
fn webhook_configurations_register_what_virt_api_serves() {
    use kvrs_virt_api::webhooks::Webhook;
    for (file, mutating) in [
        ("virt-api/mutatingwebhookconfiguration.yaml", true),
        ("virt-api/validatingwebhookconfiguration.yaml", false),
    ] {
        let conf = one_object(file);
        let expected: Vec<Webhook> = Webhook::ALL
            .into_iter()
            .filter(|w| w.is_mutating() == mutating)
            .collect();
        let hooks = conf["webhooks"].as_array().unwrap();
        assert_eq!(hooks.len(), expected.len(), "{file}");
        for (hook, webhook) in hooks.iter().zip(expected) {
            let r = webhook.registration();
            assert_eq!(hook["name"], r.name, "{file}");
            assert_eq!(hook["admissionReviewVersions"], json!(["v1"]), "{}", r.name);
            assert_eq!(hook["failurePolicy"], "Fail", "{}", r.name);
            assert_eq!(hook["sideEffects"], webhook.side_effects(), "{}", r.name);
            assert_eq!(hook["timeoutSeconds"], 10, "{}", r.name);
            assert_eq!(
                hook["rules"],
                json!([{"operations": r.operations, "apiGroups": [r.group],
                    "apiVersions": r.versions, "resources": r.resources}]),
                "{}",
                r.name
            );
            assert_eq!(
                hook["clientConfig"],
                json!({"service": {"namespace": "kubevirt", "name": "kvrs-virt-api",
                    "path": r.path, "port": 443}}),
                "{}: virt-api fills in the caBundle",
                r.name
            );
        }
    }
}

#[test]
fn virt_api_deployment_and_service_are_locked_down() {
    let d = one_object("virt-api/deployment.yaml");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "kvrs-virt-api");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        format!("kvrs/virt-api:v{}", env!("CARGO_PKG_VERSION")),
        "tied to the workspace version as the other images"
    );
    assert_eq!(c["command"], json!(["virt-api"]));
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz", "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], 8443, "{probe}");
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    let selector = &d["spec"]["selector"]["matchLabels"];
    let svc = one_object("virt-api/service.yaml");
    assert_eq!(svc["metadata"]["name"], "kvrs-virt-api");
    assert_eq!(
        &svc["spec"]["selector"], selector,
        "the Service reaches the pods"
    );
    assert_eq!(svc["spec"]["ports"][0]["port"], 443);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8443);
}

/// With virt-api applied, the controller stops admitting the VMIs it creates itself: the patch
/// shipped in `bins/deploy/patches` adds `--virt-api-webhooks` to the controller's args.
#[test]
fn the_controller_patch_turns_on_virt_api_webhooks() {
    let path = deploy_dir().join("patches/virt-controller-webhooks.patch.json");
    let patch: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("JSON patch");
    let d = one_object("virt-controller/deployment.yaml");
    let ops = patch.as_array().unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0]["op"], "test");
    let tested = ops[0]["path"].as_str().unwrap().replace('/', ".");
    assert_eq!(tested, ".spec.template.spec.containers.0.name");
    assert_eq!(
        ops[0]["value"],
        d["spec"]["template"]["spec"]["containers"][0]["name"]
    );
    assert_eq!(
        ops[1],
        json!({"op": "add", "path": "/spec/template/spec/containers/0/args/-",
            "value": "--virt-api-webhooks"})
    );
    let args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    assert!(
        !args.iter().any(|a| a == "--virt-api-webhooks"),
        "without virt-api the controller admits its own VMIs"
    );
}

// --- workloads ---------------------------------------------------------------------------------------

#[test]
fn controller_deployment_is_locked_down() {
    let d = one_object("virt-controller/deployment.yaml");
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 2);
    let selector = &spec["selector"]["matchLabels"];
    let labels = spec["template"]["metadata"]["labels"].as_object().unwrap();
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(
            labels.get(k),
            Some(v),
            "the template carries the selector's labels"
        );
    }
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let anti =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    let term = &anti[0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        &term["labelSelector"]["matchLabels"], selector,
        "anti-affinity spreads the replicas"
    );

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(
        c["image"],
        format!("kvrs/virt-controller:v{}", env!("CARGO_PKG_VERSION")),
        "the image scripts/images.sh builds for this version"
    );
    assert_eq!(c["command"], json!(["virt-controller"]));
    assert_eq!(
        c["args"],
        json!([
            "--namespace",
            "kubevirt",
            "--lease-name",
            "virt-controller",
            "--metrics-addr",
            "0.0.0.0:8443"
        ])
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], 8443);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], 8443);
    assert_eq!(c["ports"][0]["containerPort"], 8443);
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(sc["capabilities"].get("add").is_none());
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert!(sc.get("privileged").is_none_or(|p| p == false));
    for resource in ["cpu", "memory"] {
        assert!(
            c["resources"]["requests"][resource].is_string(),
            "requests.{resource}"
        );
    }
}

#[test]
fn handler_daemonset_has_kubevirts_shape() {
    let ds = one_object("virt-handler/daemonset.yaml");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    assert!(
        pod.get("hostNetwork").is_none_or(|h| h == false),
        "not on the host network"
    );
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        format!("kvrs/virt-handler:v{}", env!("CARGO_PKG_VERSION")),
        "the image scripts/images.sh builds for this version"
    );
    assert_eq!(c["command"], json!(["virt-handler"]));
    assert_eq!(
        c["args"],
        json!([
            "--hostname-override",
            "$(NODE_NAME)",
            "--metrics-addr",
            "0.0.0.0:8443",
            "--console-server-port",
            "8186",
            "--server-cert-dir",
            "/etc/virt-handler/servercertificates",
            // Migrations over mutual TLS with the same Secret (its client.crt/client.key too).
            "--migration-cert-dir",
            "/etc/virt-handler/servercertificates"
        ])
    );
    assert_eq!(c["securityContext"]["privileged"], true);
    // The REST server virt-api forwards the VMI subresources to: KubeVirt's port, virt-api's
    // default `--console-server-port`, and the certificate Secret virt-api writes, mounted.
    assert_eq!(
        c["ports"][1],
        json!({"name": "console", "containerPort": kvrs_virt_api::subresources::vmi::HANDLER_PORT, "protocol": "TCP"})
    );
    let certs = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "server-certificates")
        .expect("server-certificates volume");
    assert_eq!(
        certs["secret"],
        json!({"secretName": kvrs_virt_api::subresources::vmi::HANDLER_SECRET, "optional": true})
    );
    // Probes on what the handler serves on --metrics-addr (not on the host network: the
    // kubelet reaches the pod IP), with KubeVirt's timings for its virt-handler.
    assert_eq!(c["ports"][0]["containerPort"], 8443);
    for (probe, path, period) in [
        ("livenessProbe", "/healthz", 45),
        ("readinessProbe", "/readyz", 20),
    ] {
        let p = &c[probe];
        assert_eq!(p["httpGet"]["path"], path, "{probe}");
        assert_eq!(p["httpGet"]["port"], 8443, "{probe}");
        assert_eq!(p["httpGet"]["scheme"], "HTTP", "{probe}");
        assert_eq!(p["initialDelaySeconds"], 15, "{probe}");
        assert_eq!(p["timeoutSeconds"], 10, "{probe}");
        assert_eq!(p["periodSeconds"], period, "{probe}");
    }
    assert_eq!(c["livenessProbe"]["failureThreshold"], 3);
    let env = c["env"].as_array().unwrap();
    let node_name = env
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .expect("NODE_NAME env");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );

    let volumes = pod["volumes"].as_array().unwrap();
    let host_paths: BTreeMap<&str, &str> = volumes
        .iter()
        .filter_map(|v| Some((v["name"].as_str()?, v["hostPath"]["path"].as_str()?)))
        .collect();
    let mounts: BTreeMap<&str, &str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["mountPath"].as_str().unwrap(),
                m["name"].as_str().unwrap(),
            )
        })
        .collect();
    for (mount, host) in [
        ("/var/run/kubevirt", "/var/run/kubevirt"),
        ("/var/run/kubevirt-private", "/var/run/kubevirt-private"),
        (
            "/var/run/kubevirt-libvirt-runtimes",
            "/var/run/kubevirt-libvirt-runtimes",
        ),
        ("/pods", "/var/lib/kubelet/pods"),
        ("/var/lib/kubelet", "/var/lib/kubelet"),
        // The node's cgroups, where a hotplugged block claim is allowed to the launcher.
        ("/sys/fs/cgroup", "/sys/fs/cgroup"),
    ] {
        let volume = mounts
            .get(mount)
            .unwrap_or_else(|| panic!("no mount at {mount}"));
        assert_eq!(
            host_paths.get(volume),
            Some(&host),
            "{mount} comes from the host's {host}"
        );
    }
    assert_eq!(
        mounts.get("/var/lib/kubevirt-node-labeller"),
        Some(&"node-labeller"),
        "the init container's machine list, where --node-labeller-dir looks by default"
    );
    assert_eq!(
        mounts.get("/etc/virt-handler/servercertificates"),
        Some(&"server-certificates")
    );
    assert_eq!(mounts.len(), volumes.len(), "every volume is mounted");

    // The node labeller's init container: KubeVirt's name, the launcher image of this version,
    // QEMU's machine list and libvirt's capabilities written into an emptyDir shared with the
    // handler (KubeVirt: a hostPath). The script itself runs in tests/nodelabeller_oracle.rs.
    let labeller = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "node-labeller")
        .expect("node-labeller volume");
    assert_eq!(labeller["emptyDir"], json!({}), "not on the host");
    let inits = pod["initContainers"].as_array().expect("initContainers");
    assert_eq!(inits.len(), 1);
    let init = &inits[0];
    assert_eq!(init["name"], "virt-launcher");
    assert_eq!(
        init["image"],
        format!("kvrs/virt-launcher:v{}", env!("CARGO_PKG_VERSION")),
        "the launcher image scripts/images.sh builds for this version"
    );
    assert_eq!(init["command"], json!(["/bin/sh", "-c"]));
    let script = init["args"][0].as_str().expect("the init script");
    for written in [
        "qemu-machines.txt",
        "virsh_domcapabilities.xml",
        "supported_features.xml",
        "capabilities.xml",
    ] {
        assert!(
            script.contains(written),
            "the init container writes {written}"
        );
    }
    assert_eq!(
        init["securityContext"],
        json!({"privileged": true, "runAsUser": 0}),
        "KubeVirt's: root in a privileged container, to hand /dev/kvm to libvirt's user"
    );
    assert_eq!(
        init["volumeMounts"],
        json!([{"name": "node-labeller", "mountPath": "/var/lib/kubevirt-node-labeller"}])
    );
}

// --- CRDs ----------------------------------------------------------------------------------------------

struct CrdFacts {
    kind: &'static str,
    group: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    scope: &'static str,
    /// (name, served, storage)
    versions: &'static [(&'static str, bool, bool)],
    status: bool,
    columns: &'static [&'static str],
}

const CORE: &[(&str, bool, bool)] = &[("v1", true, true), ("v1alpha3", true, false)];
const INSTANCETYPE: &[(&str, bool, bool)] = &[("v1beta1", true, true)];
const MIGRATIONS: &[(&str, bool, bool)] = &[("v1alpha1", true, true)];

/// What virt-operator v1.9.0 installs (pkg/virt-operator/resource/generate/components/crds.go).
const CRDS: &[CrdFacts] = &[
    CrdFacts {
        kind: "VirtualMachine",
        group: "kubevirt.io",
        plural: "virtualmachines",
        short_names: &["vm", "vms"],
        categories: &["all"],
        scope: "Namespaced",
        versions: CORE,
        status: true,
        columns: &["Age", "Status", "Ready"],
    },
    CrdFacts {
        kind: "VirtualMachineInstance",
        group: "kubevirt.io",
        plural: "virtualmachineinstances",
        short_names: &["vmi", "vmis"],
        categories: &["all"],
        scope: "Namespaced",
        versions: CORE,
        status: false,
        columns: &[
            "Age",
            "Phase",
            "IP",
            "NodeName",
            "Ready",
            "Live-Migratable",
            "Paused",
        ],
    },
    CrdFacts {
        kind: "VirtualMachineInstanceMigration",
        group: "kubevirt.io",
        plural: "virtualmachineinstancemigrations",
        short_names: &["vmim", "vmims"],
        categories: &["all"],
        scope: "Namespaced",
        versions: CORE,
        status: true,
        columns: &["Phase", "VMI"],
    },
    CrdFacts {
        kind: "KubeVirt",
        group: "kubevirt.io",
        plural: "kubevirts",
        short_names: &["kv", "kvs"],
        categories: &["all"],
        scope: "Namespaced",
        versions: CORE,
        status: true,
        columns: &["Age", "Phase"],
    },
    CrdFacts {
        kind: "VirtualMachineInstancetype",
        group: "instancetype.kubevirt.io",
        plural: "virtualmachineinstancetypes",
        short_names: &["vminstancetype", "vminstancetypes", "vmf", "vmfs"],
        categories: &["all"],
        scope: "Namespaced",
        versions: INSTANCETYPE,
        status: false,
        columns: &[],
    },
    CrdFacts {
        kind: "VirtualMachineClusterInstancetype",
        group: "instancetype.kubevirt.io",
        plural: "virtualmachineclusterinstancetypes",
        short_names: &[
            "vmclusterinstancetype",
            "vmclusterinstancetypes",
            "vmcf",
            "vmcfs",
        ],
        categories: &[],
        scope: "Cluster",
        versions: INSTANCETYPE,
        status: false,
        columns: &[],
    },
    CrdFacts {
        kind: "VirtualMachinePreference",
        group: "instancetype.kubevirt.io",
        plural: "virtualmachinepreferences",
        short_names: &["vmpref", "vmprefs", "vmp", "vmps"],
        categories: &["all"],
        scope: "Namespaced",
        versions: INSTANCETYPE,
        status: false,
        columns: &[],
    },
    CrdFacts {
        kind: "VirtualMachineClusterPreference",
        group: "instancetype.kubevirt.io",
        plural: "virtualmachineclusterpreferences",
        short_names: &["vmcp", "vmcps"],
        categories: &[],
        scope: "Cluster",
        versions: INSTANCETYPE,
        status: false,
        columns: &[],
    },
    CrdFacts {
        kind: "MigrationPolicy",
        group: "migrations.kubevirt.io",
        plural: "migrationpolicies",
        short_names: &[],
        categories: &[],
        scope: "Cluster",
        versions: MIGRATIONS,
        status: true,
        columns: &[],
    },
];

fn crd_file(facts: &CrdFacts) -> String {
    format!("crds/{}.{}.yaml", facts.plural, facts.group)
}

#[test]
fn crds_carry_virt_operators_facts() {
    assert_eq!(objects_of("CustomResourceDefinition").len(), CRDS.len());
    for facts in CRDS {
        let rel = crd_file(facts);
        let crd = one_object(&rel);
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1", "{rel}");
        assert_eq!(
            crd["metadata"]["name"],
            format!("{}.{}", facts.plural, facts.group),
            "{rel}"
        );
        let spec = &crd["spec"];
        assert_eq!(spec["group"], facts.group, "{rel}");
        assert_eq!(spec["scope"], facts.scope, "{rel}");
        let names = &spec["names"];
        assert_eq!(names["kind"], facts.kind, "{rel}");
        assert_eq!(names["plural"], facts.plural, "{rel}");
        let singular = match facts.plural.strip_suffix("ies") {
            Some(stem) => format!("{stem}y"),
            None => facts.plural.strip_suffix('s').unwrap().to_string(),
        };
        assert_eq!(names["singular"], singular.as_str(), "{rel}");
        assert_eq!(strings(&names["shortNames"]), facts.short_names, "{rel}");
        assert_eq!(strings(&names["categories"]), facts.categories, "{rel}");
        let versions = spec["versions"].as_array().unwrap();
        let got: Vec<(&str, bool, bool)> = versions
            .iter()
            .map(|v| {
                let flag = |k: &str| v[k].as_bool().unwrap();
                (v["name"].as_str().unwrap(), flag("served"), flag("storage"))
            })
            .collect();
        assert_eq!(got, facts.versions, "{rel}: versions");
        for v in versions {
            let name = v["name"].as_str().unwrap();
            assert_eq!(
                v["subresources"].get("status").is_some(),
                facts.status,
                "{rel} {name}: status"
            );
            assert!(
                v["subresources"].get("scale").is_none(),
                "{rel} {name}: no scale"
            );
            let columns: Vec<&str> = v["additionalPrinterColumns"]
                .as_array()
                .map(|cs| cs.iter().map(|c| c["name"].as_str().unwrap()).collect())
                .unwrap_or_default();
            assert_eq!(columns, facts.columns, "{rel} {name}: printer columns");
            assert_eq!(
                v["schema"], versions[0]["schema"],
                "{rel}: one schema for every version"
            );
            assert_eq!(
                v["deprecated"].as_bool().unwrap_or(false),
                name == "v1alpha3",
                "{rel} {name}"
            );
        }
    }
}

/// The structural-schema rules the apiserver applies to a CRD's `openAPIV3Schema`, plus the
/// ones of this generator (no defaults, nothing left unresolved).
fn structural_errors(s: &Value, path: &str, errs: &mut Vec<String>) {
    let Some(node) = s.as_object() else {
        errs.push(format!("{path}: not a schema object"));
        return;
    };
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = node.get("x-kubernetes-preserve-unknown-fields");
    if preserve.is_some_and(|p| p != true) {
        errs.push(format!(
            "{path}: x-kubernetes-preserve-unknown-fields must be true"
        ));
    }
    if int_or_string {
        if node.contains_key("type") {
            errs.push(format!("{path}: int-or-string with a type"));
        }
        if node.get("anyOf") != Some(&json!([{"type": "integer"}, {"type": "string"}])) {
            errs.push(format!(
                "{path}: int-or-string without anyOf [integer, string]"
            ));
        }
    } else {
        match node.get("type").and_then(Value::as_str) {
            Some("object" | "array" | "string" | "integer" | "number" | "boolean") => {}
            Some(t) => errs.push(format!("{path}: type {t}")),
            None if preserve.is_some() => {}
            None => errs.push(format!("{path}: no type")),
        }
        for junctor in ["anyOf", "allOf", "oneOf", "not"] {
            if node.contains_key(junctor) {
                errs.push(format!("{path}: {junctor} outside int-or-string"));
            }
        }
    }
    for forbidden in [
        "$ref",
        "default",
        "uniqueItems",
        "definitions",
        "dependencies",
        "id",
    ] {
        if node.contains_key(forbidden) {
            errs.push(format!("{path}: {forbidden}"));
        }
    }
    let ty = node.get("type").and_then(Value::as_str);
    let props = node.get("properties").and_then(Value::as_object);
    if props.is_some() && node.contains_key("additionalProperties") {
        errs.push(format!("{path}: both properties and additionalProperties"));
    }
    if (props.is_some() || node.contains_key("additionalProperties")) && ty != Some("object") {
        errs.push(format!("{path}: properties on a non-object"));
    }
    if node.contains_key("items") != (ty == Some("array")) {
        errs.push(format!("{path}: items iff array"));
    }
    let required = strings(node.get("required").unwrap_or(&Value::Null));
    for r in &required {
        if !props.is_some_and(|p| p.contains_key(*r)) {
            errs.push(format!("{path}: required {r} is not a property"));
        }
    }
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None => {
            if node.contains_key("x-kubernetes-list-map-keys") {
                errs.push(format!("{path}: list map keys without listType=map"));
            }
        }
        Some("atomic") => {}
        Some("set") => {
            let t = node["items"]["type"].as_str();
            if !matches!(t, Some("string" | "integer" | "number" | "boolean")) {
                errs.push(format!("{path}: listType=set of non-scalars"));
            }
        }
        Some("map") => {
            let items = &node["items"];
            let item_required = strings(&items["required"]);
            let keys = strings(
                node.get("x-kubernetes-list-map-keys")
                    .unwrap_or(&Value::Null),
            );
            if keys.is_empty() || items["type"] != "object" {
                errs.push(format!("{path}: listType=map without keys or object items"));
            }
            for k in keys {
                if !item_required.contains(&k) {
                    errs.push(format!("{path}: list map key {k} is not required"));
                }
            }
        }
        Some(other) => errs.push(format!("{path}: listType {other}")),
    }
    if let Some(props) = props {
        for (k, v) in props {
            structural_errors(v, &format!("{path}.{k}"), errs);
        }
    }
    if let Some(extra) = node.get("additionalProperties") {
        if extra.is_object() {
            structural_errors(extra, &format!("{path}.*"), errs);
        } else if extra != true {
            errs.push(format!("{path}: additionalProperties {extra}"));
        }
    }
    if let Some(items) = node.get("items") {
        structural_errors(items, &format!("{path}[]"), errs);
    }
}

#[test]
fn crd_schemas_are_structural() {
    for facts in CRDS {
        let rel = crd_file(facts);
        let crd = one_object(&rel);
        for v in crd["spec"]["versions"].as_array().unwrap() {
            let schema = &v["schema"]["openAPIV3Schema"];
            assert_eq!(schema["type"], "object", "{rel}: root type");
            assert_eq!(
                schema["properties"]["metadata"],
                json!({"type": "object"}),
                "{rel}: metadata"
            );
            for key in ["apiVersion", "kind", "spec"] {
                assert!(
                    schema["properties"].get(key).is_some(),
                    "{rel}: no {key} in the schema"
                );
            }
            // kubevirt.io kinds and MigrationPolicy have a status; instance types and
            // preferences have none.
            let has_status = schema["properties"].get("status").is_some();
            assert_eq!(
                has_status,
                facts.group != "instancetype.kubevirt.io",
                "{rel}: status in the schema"
            );
            let mut errs = Vec::new();
            structural_errors(schema, facts.kind, &mut errs);
            assert!(
                errs.is_empty(),
                "{rel}: not structural:\n  {}",
                errs.join("\n  ")
            );
        }
    }
}

#[test]
fn crd_schemas_hold_the_fields_kvrs_writes() {
    // A handful of paths the controllers read or write; pruning would silently drop a field the
    // schema does not know, so their absence would lose data on a real cluster.
    let vm = one_object("crds/virtualmachines.kubevirt.io.yaml");
    let vmi = one_object("crds/virtualmachineinstances.kubevirt.io.yaml");
    let at = |crd: &Value, path: &[&str]| -> Value {
        let mut node = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        for step in path {
            node = if *step == "[]" {
                &node["items"]
            } else {
                &node["properties"][*step]
            };
        }
        node.clone()
    };
    assert_eq!(at(&vm, &["spec", "runStrategy"])["type"], "string");
    assert_eq!(at(&vm, &["status", "printableStatus"])["type"], "string");
    assert_eq!(
        at(&vm, &["spec", "template", "metadata"]),
        json!({"type": "object", "nullable": true, "x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(at(&vmi, &["status", "phase"])["type"], "string");
    assert_eq!(at(&vmi, &["status", "nodeName"])["type"], "string");
    let condition_time = at(&vmi, &["status", "conditions", "[]", "lastTransitionTime"]);
    assert_eq!(
        condition_time["nullable"], true,
        "Go writes zero times as null"
    );
    let memory = at(&vmi, &["spec", "domain", "resources", "requests"]);
    assert_eq!(
        memory["additionalProperties"]["x-kubernetes-int-or-string"],
        true
    );
    let guest = at(&vmi, &["spec", "domain", "memory", "guest"]);
    assert_eq!(
        guest["x-kubernetes-int-or-string"], true,
        "Quantity is int-or-string"
    );
    let port = at(&vmi, &["spec", "readinessProbe", "httpGet", "port"]);
    assert_eq!(port["x-kubernetes-int-or-string"], true, "IntOrString");
    assert_eq!(strings(&at(&vmi, &[])["required"]), ["spec"]);
}

#[test]
fn crds_fit_client_side_apply() {
    // `kubectl apply` stores the whole object in an annotation, and all of an object's
    // annotations together may not exceed 256 KiB.
    for facts in CRDS {
        let rel = crd_file(facts);
        let compact = serde_json::to_string(&one_object(&rel)).unwrap();
        assert!(
            compact.len() < 200 * 1024,
            "{rel}: {} bytes as JSON",
            compact.len()
        );
    }
}

/// The swagger digest `scripts/gen-crds.py` expects.
fn expected_swagger_sha256() -> String {
    let script = std::fs::read_to_string(repo().join("scripts/gen-crds.py")).expect("gen-crds.py");
    let line = script
        .lines()
        .find(|l| l.starts_with("SWAGGER_SHA256 = "))
        .expect("SWAGGER_SHA256 in gen-crds.py");
    line.split('"').nth(1).unwrap().to_string()
}

#[test]
fn crds_name_the_swagger_they_were_generated_from() {
    let sha = expected_swagger_sha256();
    assert_eq!(sha.len(), 64);
    for facts in CRDS {
        let rel = crd_file(facts);
        let text = std::fs::read_to_string(deploy_dir().join(&rel)).unwrap();
        assert!(
            text.starts_with("# Generated by scripts/gen-crds.py"),
            "{rel}: header"
        );
        assert!(
            text.lines()
                .take(5)
                .any(|l| l == format!("# swagger sha256: {sha}")),
            "{rel}: not generated from the swagger document gen-crds.py expects"
        );
    }
}

#[test]
#[ignore = "needs KVRS_KUBEVIRT_SWAGGER=<KubeVirt v1.9.0 api/openapi-spec/swagger.json>"]
fn crds_regenerate_byte_for_byte() {
    let swagger = std::env::var_os("KVRS_KUBEVIRT_SWAGGER").expect(
        "set KVRS_KUBEVIRT_SWAGGER to KubeVirt v1.9.0's api/openapi-spec/swagger.json \
         (git show v1.9.0:api/openapi-spec/swagger.json in a kubevirt clone)",
    );
    let out = std::env::temp_dir().join(format!("kvrs-gen-crds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("python3")
        .arg(repo().join("scripts/gen-crds.py"))
        .arg(&swagger)
        .arg(&out)
        .status()
        .expect("run python3 scripts/gen-crds.py");
    assert!(status.success(), "gen-crds.py failed: {status}");
    let committed = deploy_dir().join("crds");
    let names = |dir: &Path| -> Vec<String> {
        yaml_files(dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(&out), names(&committed), "the same files");
    for name in names(&committed) {
        let fresh = std::fs::read(out.join(&name)).unwrap();
        let old = std::fs::read(committed.join(&name)).unwrap();
        assert!(
            fresh == old,
            "bins/deploy/crds/{name} differs from what gen-crds.py writes now"
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// Next to KubeVirt, kvrs's manifests never overwrite an object virt-operator owns: everything
/// but the CRDs (the same kinds, necessarily) and the shared `kubevirt` namespace is named
/// `kvrs-*`, a prefix KubeVirt's operator never uses.
#[test]
fn every_object_but_the_crds_and_the_namespace_is_named_kvrs() {
    let mut seen = 0;
    for dir in ["virt-controller", "virt-handler", "virt-api"] {
        let path = deploy_dir().join(dir);
        for entry in std::fs::read_dir(&path).expect("the manifests directory") {
            let file = entry.expect("an entry").path();
            if file.extension().is_none_or(|e| e != "yaml") {
                continue; // virt-api's patch of the controller's Deployment, not an object
            }
            for doc in documents(&file) {
                let kind = doc["kind"].as_str().unwrap_or_default();
                let name = doc["metadata"]["name"].as_str().unwrap_or_default();
                if kind == "Namespace" {
                    assert_eq!(name, "kubevirt", "{}", file.display());
                    continue;
                }
                if kind == "APIService" {
                    // Kubernetes fixes the name: VERSION.GROUP.
                    assert!(
                        name.ends_with(".subresources.kubevirt.io"),
                        "{}",
                        file.display()
                    );
                    continue;
                }
                seen += 1;
                assert!(
                    name.starts_with("kvrs-"),
                    "{}: {kind} {name:?} could be an object KubeVirt's operator owns",
                    file.display()
                );
            }
        }
    }
    assert!(seen >= 10, "only {seen} objects read");
}

// --- the aggregated API --------------------------------------------------------------------------

/// The APIServices register both versions KubeVirt v1.9.0 serves through kvrs's Service, with
/// TLS verified (virt-api writes the caBundle).
#[test]
fn api_services_register_the_subresource_group_through_kvrs_service() {
    let services = objects_of("APIService");
    let mut versions = Vec::new();
    for (rel, svc) in &services {
        let spec = &svc["spec"];
        assert_eq!(spec["group"], "subresources.kubevirt.io", "{rel}");
        let version = spec["version"].as_str().unwrap();
        assert_eq!(
            svc["metadata"]["name"],
            format!("{version}.subresources.kubevirt.io"),
            "{rel}"
        );
        assert_eq!(
            spec["service"],
            json!({"namespace": "kubevirt", "name": "kvrs-virt-api", "port": 443}),
            "{rel}"
        );
        assert!(spec.get("insecureSkipTLSVerify").is_none(), "{rel}");
        assert!(
            spec.get("caBundle").is_none(),
            "{rel}: virt-api fills in the caBundle"
        );
        versions.push(version.to_string());
    }
    versions.sort();
    assert_eq!(versions, ["v1", "v1alpha3"]);
}

/// KubeVirt's aggregated roles: edit and admin may start / stop / restart a VM and pause a VMI,
/// view may not; each aggregates into the Kubernetes role it is named after.
#[test]
fn aggregated_roles_carry_kubevirts_subresource_verbs() {
    let roles: BTreeMap<String, Value> = objects_of("ClusterRole")
        .into_iter()
        .filter_map(|(_, r)| {
            let name = r["metadata"]["name"]
                .as_str()?
                .strip_prefix("kvrs-kubevirt.io:")?;
            Some((name.to_string(), r))
        })
        .collect();
    assert_eq!(
        roles.keys().map(String::as_str).collect::<Vec<_>>(),
        ["admin", "edit", "view"]
    );
    let sub = |r: &str| gr("subresources.kubevirt.io", r);
    for (name, role) in &roles {
        assert_eq!(
            role["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{name}")],
            "true",
            "{name}"
        );
        let g = grants(role);
        let may = |r: &str, verb: &str| g.get(&sub(r)).is_some_and(|v| v.contains(verb));
        let writer = name != "view";
        for r in [
            "virtualmachines/start",
            "virtualmachines/stop",
            "virtualmachines/restart",
            "virtualmachineinstances/pause",
            "virtualmachineinstances/unpause",
            "virtualmachineinstances/softreboot",
        ] {
            assert_eq!(may(r, "update"), writer, "{name}: update {r}");
        }
        for r in [
            "virtualmachineinstances/console",
            "virtualmachineinstances/vnc",
        ] {
            assert_eq!(may(r, "get"), writer, "{name}: get {r}");
        }
        assert!(may("virtualmachineinstances/guestosinfo", "get"), "{name}");
        assert!(may("virtualmachines/expand-spec", "get"), "{name}");
        assert!(may("expand-vm-spec", "update"), "{name}");
        assert_eq!(
            g[&gr("kubevirt.io", "virtualmachines")].contains("create"),
            writer,
            "{name}"
        );
    }
}

/// `kubectl apply -f bins/deploy/<dir>` takes every `.yaml`, `.yml` and `.json` file of the
/// directory: each must be a Kubernetes object (a patch file in one made the README's command
/// fail on a real cluster), so only manifests live in the applied directories.
#[test]
fn every_file_kubectl_applies_from_a_deploy_directory_is_an_object() {
    for dir in ["crds", "virt-controller", "virt-handler", "virt-api"] {
        for entry in std::fs::read_dir(deploy_dir().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !matches!(ext, "yaml" | "yml" | "json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in serde_norway::Deserializer::from_str(&text) {
                let v: Value = serde::Deserialize::deserialize(doc).unwrap();
                if v.is_null() {
                    continue;
                }
                assert!(
                    v["apiVersion"].is_string() && v["kind"].is_string(),
                    "{} holds something kubectl apply refuses: {v}",
                    path.display()
                );
            }
        }
    }
}
