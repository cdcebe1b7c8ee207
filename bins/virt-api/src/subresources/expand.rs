//! `expand-spec` as KubeVirt v1.9.0 serves it (`pkg/virt-api/rest/expand.go`): a VM with its
//! instancetype and preference applied to the template and the references removed.
//!
//! Two routes: `GET .../virtualmachines/NAME/expand-spec` expands a stored VM (its failures are
//! 500s), `PUT .../namespaces/NS/expand-vm-spec` one sent in the body (its failures are 400s).
//! The expansion itself (KubeVirt's `expand.Expand`) is pure: [`references`] says which objects
//! the VM needs, the shell reads those it can find and hands them to [`expand`].
//!
//! KubeVirt's expansion, in order: a disk for every bare volume and the default pod network
//! and interface, the instancetype and preference applied (conflicts refused), the spec defaults
//! (`SetDefaultVirtualMachineInstanceSpec`), then `spec.instancetype`, `spec.preference` and
//! their status references dropped. kvrs takes the defaults from `kvrs-admission`'s defaulting
//! and keeps of them exactly the fields KubeVirt's spec defaults set ([`spec_defaults`]), so
//! the expanded VM is KubeVirt's (`tests/instancetype_differential.rs` compares both live).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_admission::ClusterConfig;
use kvrs_api::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceSpec};
use kvrs_instancetype::{Catalog, instancetype_is_namespaced, preference_is_namespaced};
use serde_json::{Value, json};

use super::ApiError;

/// The instancetype API group.
pub const INSTANCETYPE_GROUP: &str = "instancetype.kubevirt.io";

/// One object an expansion may need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `instancetype.kubevirt.io` or `apps`.
    pub group: &'static str,
    /// The API version within the group.
    pub version: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// The resource.
    pub plural: &'static str,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

/// A kind and its resource.
type KindAndPlural = (&'static str, &'static str);

/// A matcher family: the VM field, the status reference and the two kinds it may name.
struct Family {
    field: &'static str,
    status_field: &'static str,
    namespaced: KindAndPlural,
    cluster: KindAndPlural,
}

const FAMILIES: [Family; 2] = [
    Family {
        field: "instancetype",
        status_field: "instancetypeRef",
        namespaced: ("VirtualMachineInstancetype", "virtualmachineinstancetypes"),
        cluster: (
            "VirtualMachineClusterInstancetype",
            "virtualmachineclusterinstancetypes",
        ),
    },
    Family {
        field: "preference",
        status_field: "preferenceRef",
        namespaced: ("VirtualMachinePreference", "virtualmachinepreferences"),
        cluster: (
            "VirtualMachineClusterPreference",
            "virtualmachineclusterpreferences",
        ),
    },
];

fn text(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| !s.is_empty())
}

/// The objects `vm`'s instancetype and preference matchers can be found in: the revisions the
/// matcher and the status name, and the named object of the matcher's kind.
pub fn references(vm: &Value) -> Vec<Reference> {
    let namespace = vm["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let mut out = Vec::new();
    for Family {
        field,
        status_field,
        namespaced,
        cluster,
    } in FAMILIES
    {
        let matcher = &vm["spec"][field];
        if !matcher.is_object() {
            continue;
        }
        let revision = |name: &str| Reference {
            group: "apps",
            version: "v1",
            kind: "ControllerRevision",
            plural: "controllerrevisions",
            namespace: Some(namespace.clone()),
            name: name.to_string(),
        };
        let status_revision = &vm["status"][status_field]["controllerRevisionRef"]["name"];
        for name in [text(&matcher["revisionName"]), text(status_revision)]
            .into_iter()
            .flatten()
        {
            out.push(revision(name));
        }
        let Some(name) = text(&matcher["name"]) else {
            continue;
        };
        let kind = matcher["kind"].as_str();
        let is_namespaced = if field == "instancetype" {
            instancetype_is_namespaced(kind)
        } else {
            preference_is_namespaced(kind)
        };
        let Some(is_namespaced) = is_namespaced else {
            continue;
        };
        let (kind, plural) = if is_namespaced { namespaced } else { cluster };
        out.push(Reference {
            group: INSTANCETYPE_GROUP,
            version: "v1beta1",
            kind,
            plural,
            namespace: is_namespaced.then(|| namespace.clone()),
            name: name.to_string(),
        });
    }
    out
}

/// KubeVirt's `SetDefaultVolumeDisk`: a disk named after every volume that has none.
fn add_volume_disks(spec: &mut Value) {
    let volumes: Vec<String> = spec["volumes"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if volumes.is_empty() {
        return;
    }
    let devices = &mut spec["domain"]["devices"];
    if !devices["disks"].is_array() {
        devices["disks"] = json!([]);
    }
    let disks = devices["disks"].as_array_mut().expect("an array");
    for v in volumes {
        if !disks.iter().any(|d| d["name"] == v.as_str()) {
            disks.push(json!({"name": v}));
        }
    }
}

/// Copies `pointer` from `defaulted` into `spec` where `spec` has nothing there.
fn fill(spec: &mut Value, defaulted: &Value, pointer: &str) {
    let Some(value) = defaulted.pointer(pointer) else {
        return;
    };
    if spec.pointer(pointer).is_some_and(|v| !v.is_null()) {
        return;
    }
    let mut at = &mut *spec;
    let parts: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            at[*p] = value.clone();
        } else {
            if !at[*p].is_object() {
                at[*p] = json!({});
            }
            at = &mut at[*p];
        }
    }
}

/// Whether a field reads as unset to KubeVirt's defaulting: absent, or Go's zero value for the
/// fields that are plain strings and counts there.
fn unset(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_i64() == Some(0),
        Some(_) => false,
    }
}

/// Copies `pointer` from `defaulted` into `spec` where KubeVirt sees it unset ([`unset`]).
fn fill_unset(spec: &mut Value, defaulted: &Value, pointer: &str) {
    if unset(spec.pointer(pointer))
        && let Some(v) = spec.pointer_mut(pointer)
    {
        *v = Value::Null;
    }
    if spec.pointer(pointer).is_some_and(Value::is_null)
        && let Some(parent) = pointer
            .rsplit_once('/')
            .and_then(|(p, _)| spec.pointer_mut(p))
        && let Some(field) = pointer.rsplit('/').next()
        && let Some(o) = parent.as_object_mut()
    {
        o.remove(field);
    }
    fill(spec, defaulted, pointer);
}

/// KubeVirt's `SetDefaultVirtualMachineInstanceSpec`, the defaults `Expand` adds after the
/// application, taken field by field from `kvrs-admission`'s defaulting (which runs the same
/// steps in the same order, and more besides): the architecture and machine type; the CPU
/// request from the limit (or the cluster's); the guest memory from the requests, limits or
/// hugepages; the CPU topology when no count is given; container disks' pull policies; the
/// eviction strategy; the default pod network and interface; a disk for every bare volume.
fn spec_defaults(spec: &mut Value, config: &ClusterConfig) -> Result<(), String> {
    let after = defaulted(spec, config)?;
    fill_unset(spec, &after, "/architecture");
    fill_unset(spec, &after, "/domain/machine/type");
    fill(spec, &after, "/domain/resources/requests/cpu");
    // Go's `setGuestMemory` leaves an empty `memory` behind when nothing gives the guest's.
    if !spec["domain"]["memory"].is_object() {
        spec["domain"]["memory"] = json!({});
    }
    fill(spec, &after, "/domain/memory/guest");
    let cpu = &spec["domain"]["cpu"];
    if ["sockets", "cores", "threads"]
        .iter()
        .all(|f| unset(cpu.get(*f)))
    {
        for f in ["sockets", "cores", "threads"] {
            fill_unset(spec, &after, &format!("/domain/cpu/{f}"));
        }
    }
    let volumes = spec["volumes"].as_array().map_or(0, Vec::len);
    for i in 0..volumes {
        let pointer = format!("/volumes/{i}/containerDisk/imagePullPolicy");
        if spec["volumes"][i]["containerDisk"].is_object()
            && unset(spec.pointer(&pointer))
            && let Some(policy) = after.pointer(&pointer)
        {
            spec["volumes"][i]["containerDisk"]["imagePullPolicy"] = policy.clone();
        }
    }
    fill(spec, &after, "/evictionStrategy");
    if spec["networks"].is_null() && spec["domain"]["devices"]["interfaces"].is_null() {
        fill(spec, &after, "/networks");
        fill(spec, &after, "/domain/devices/interfaces");
    }
    add_volume_disks(spec);
    Ok(())
}

/// `spec` as `kvrs-admission`'s defaulting leaves it (namespace and name as the VM's).
fn defaulted(spec: &Value, config: &ClusterConfig) -> Result<Value, String> {
    let spec: VirtualMachineInstanceSpec =
        serde_json::from_value(spec.clone()).map_err(|e| format!("spec.template.spec: {e}"))?;
    let mut vmi = VirtualMachineInstance {
        spec,
        ..Default::default()
    };
    kvrs_admission::defaults::apply_defaults(&mut vmi, config);
    serde_json::to_value(&vmi.spec).map_err(|e| e.to_string())
}

/// KubeVirt's `Expand`: `vm` unchanged when it references neither an instancetype nor a
/// preference, else expanded with the objects `found` (those of [`references`] that exist);
/// the error is the message KubeVirt's handlers wrap (500 for a stored VM, 400 for a sent one).
pub fn expand(vm: Value, found: Vec<Value>, config: &ClusterConfig) -> Result<Value, String> {
    let spec = &vm["spec"];
    if !spec["instancetype"].is_object() && !spec["preference"].is_object() {
        return Ok(vm);
    }
    let typed: VirtualMachine =
        serde_json::from_value(vm.clone()).map_err(|e| format!("the VirtualMachine: {e}"))?;
    let mut catalog = Catalog::default();
    for object in found {
        catalog.add(object).map_err(|e| e.to_string())?;
    }
    let instancetype = catalog
        .find_instancetype(&typed)
        .map_err(|e| e.to_string())?;
    let preference = catalog.find_preference(&typed).map_err(|e| e.to_string())?;

    let mut expanded = vm;
    let mut template_spec = expanded["spec"]["template"]["spec"].take();
    if !template_spec.is_object() {
        template_spec = json!({"domain": {"devices": {}}});
    }
    add_volume_disks(&mut template_spec);
    let before = defaulted(&template_spec, config)?;
    if template_spec["networks"].is_null()
        && template_spec["domain"]["devices"]["interfaces"].is_null()
    {
        fill(&mut template_spec, &before, "/networks");
        fill(&mut template_spec, &before, "/domain/devices/interfaces");
    }
    let spec: VirtualMachineInstanceSpec =
        serde_json::from_value(template_spec).map_err(|e| format!("spec.template.spec: {e}"))?;
    let metadata: ObjectMeta = typed.spec.template.metadata.clone();
    let applied = kvrs_instancetype::apply(
        "spec.template.spec",
        &spec,
        &metadata,
        instancetype.as_ref(),
        preference.as_ref(),
    )
    .map_err(|conflicts| conflicts.to_string())?;
    let mut spec = serde_json::to_value(&applied.spec).map_err(|e| e.to_string())?;
    spec_defaults(&mut spec, config)?;
    expanded["spec"]["template"]["spec"] = spec;
    let metadata = serde_json::to_value(&applied.metadata).map_err(|e| e.to_string())?;
    if metadata.as_object().is_some_and(|m| !m.is_empty()) {
        expanded["spec"]["template"]["metadata"] = metadata;
    }
    for field in ["instancetype", "preference"] {
        if let Some(s) = expanded["spec"].as_object_mut() {
            s.remove(field);
        }
    }
    for field in ["instancetypeRef", "preferenceRef"] {
        if let Some(s) = expanded["status"].as_object_mut() {
            s.remove(field);
        }
    }
    Ok(expanded)
}

/// The VM a `PUT .../expand-vm-spec` sends, read as KubeVirt's `ExpandSpecRequestHandler`
/// reads it: JSON (else 400), in the request's namespace (another namespace is a 400).
pub fn read_sent_vm(namespace: &str, body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(&format!(
            "Can not unmarshal Request body to struct, error: {}",
            "unexpected end of JSON input"
        )));
    }
    let mut vm: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(&format!(
            "Can not unmarshal Request body to struct, error: {e}"
        ))
    })?;
    if !vm.is_object() {
        return Err(ApiError::bad_request(
            "Can not unmarshal Request body to struct, error: json: cannot unmarshal a non-object into a VirtualMachine",
        ));
    }
    if let Err(e) = serde_json::from_value::<VirtualMachine>(vm.clone()) {
        return Err(invalid_vm(&e.to_string()));
    }
    if namespace.is_empty() {
        return Err(ApiError::bad_request(
            "The request namespace must not be empty",
        ));
    }
    match vm["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() && ns != namespace => {
            return Err(ApiError::bad_request(&format!(
                "VM namespace must be empty or {namespace}"
            )));
        }
        _ => {}
    }
    vm["metadata"]["namespace"] = json!(namespace);
    Ok(vm)
}

/// KubeVirt's `writeValidationErrors`: a 400 `Object is not a valid VirtualMachine` whose
/// causes carry the validator's messages (kvrs: the typed read's error).
fn invalid_vm(message: &str) -> ApiError {
    let mut e = ApiError::bad_request("Object is not a valid VirtualMachine");
    e.causes = vec![message.to_string()];
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(spec_extra: Value) -> Value {
        let mut vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "ns1"},
            "spec": {"runStrategy": "Halted", "template": {"spec": {
                "domain": {"devices": {}},
                "volumes": [{"name": "root", "containerDisk": {"image": "x"}}]}}}});
        for (k, v) in spec_extra.as_object().unwrap() {
            vm["spec"][k] = v.clone();
        }
        vm
    }

    fn cluster_instancetype() -> Value {
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "u1.small"},
            "spec": {"cpu": {"guest": 2}, "memory": {"guest": "2Gi"}}})
    }

    fn preference() -> Value {
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachinePreference", "metadata": {"name": "fedora", "namespace": "ns1"},
            "spec": {"devices": {"preferredDiskBus": "sata"}}})
    }

    #[test]
    fn references_name_the_objects_to_read() {
        let v = vm(json!({"instancetype": {"name": "u1.small"},
            "preference": {"name": "fedora", "kind": "VirtualMachinePreference",
                "revisionName": "vm1-fedora-1"}}));
        let refs = references(&v);
        let names: Vec<(&str, Option<&str>, &str)> = refs
            .iter()
            .map(|r| (r.plural, r.namespace.as_deref(), r.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("virtualmachineclusterinstancetypes", None, "u1.small"),
                ("controllerrevisions", Some("ns1"), "vm1-fedora-1"),
                ("virtualmachinepreferences", Some("ns1"), "fedora"),
            ]
        );
        assert!(references(&vm(json!({}))).is_empty());
    }

    #[test]
    fn a_vm_without_references_is_returned_as_is() {
        let v = vm(json!({}));
        assert_eq!(
            expand(v.clone(), vec![], &ClusterConfig::default()).unwrap(),
            v
        );
    }

    #[test]
    fn the_instancetype_and_preference_are_applied_and_dropped() {
        let mut v = vm(json!({"instancetype": {"name": "u1.small"},
            "preference": {"name": "fedora", "kind": "VirtualMachinePreference"}}));
        v["status"] =
            json!({"instancetypeRef": {"name": "u1.small"}, "printableStatus": "Stopped"});
        let out = expand(
            v,
            vec![cluster_instancetype(), preference()],
            &ClusterConfig::default(),
        )
        .unwrap();
        assert!(out["spec"].get("instancetype").is_none());
        assert!(out["spec"].get("preference").is_none());
        assert!(out["status"].get("instancetypeRef").is_none());
        assert_eq!(out["status"]["printableStatus"], "Stopped");
        let spec = &out["spec"]["template"]["spec"];
        assert_eq!(spec["domain"]["cpu"]["sockets"], 2);
        assert_eq!(spec["domain"]["memory"]["guest"], "2Gi");
        // The bare volume got a disk, on the preferred bus.
        assert_eq!(
            spec["domain"]["devices"]["disks"][0],
            json!({"name": "root", "disk": {"bus": "sata"}})
        );
        // The pod network and its interface, the architecture and machine type defaulted.
        assert_eq!(spec["networks"][0]["name"], "default");
        assert_eq!(
            spec["domain"]["devices"]["interfaces"][0]["name"],
            "default"
        );
        assert!(spec["architecture"].is_string(), "{spec}");
        assert!(spec["domain"]["machine"]["type"].is_string(), "{spec}");
    }

    #[test]
    fn missing_objects_and_conflicts_are_refused() {
        let v = vm(json!({"instancetype": {"name": "u1.small"}}));
        let e = expand(v, vec![], &ClusterConfig::default()).unwrap_err();
        assert!(e.contains("u1.small") && e.contains("not found"), "{e}");
        let mut sized = vm(json!({"instancetype": {"name": "u1.small"}}));
        sized["spec"]["template"]["spec"]["domain"]["cpu"] = json!({"sockets": 4});
        let e = expand(
            sized,
            vec![cluster_instancetype()],
            &ClusterConfig::default(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type"
        );
    }

    #[test]
    fn a_sent_vm_is_read_as_kubevirt_reads_it() {
        let v = read_sent_vm("ns1", &serde_json::to_vec(&vm(json!({}))).unwrap()).unwrap();
        assert_eq!(v["metadata"]["namespace"], "ns1");
        let mut bare = vm(json!({}));
        bare["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        let v = read_sent_vm("ns2", &serde_json::to_vec(&bare).unwrap()).unwrap();
        assert_eq!(v["metadata"]["namespace"], "ns2");
        let e = read_sent_vm("ns2", &serde_json::to_vec(&vm(json!({}))).unwrap()).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "VM namespace must be empty or ns2")
        );
        let e = read_sent_vm("ns1", b"{nope").unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message
                .starts_with("Can not unmarshal Request body to struct, error: ")
        );
        let e = read_sent_vm("ns1", br#"{"spec": {"runStrategy": 3}}"#).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "Object is not a valid VirtualMachine")
        );
        assert_eq!(e.body()["details"]["causes"].as_array().unwrap().len(), 1);
    }
}
