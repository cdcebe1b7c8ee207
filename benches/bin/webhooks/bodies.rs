//! The AdmissionReview v1 requests both virt-apis receive: built at run time from KubeVirt's own
//! oracle inputs (`../shared/oracle`, `../shared/oracle-vm`), never stored in the repository.
//! Plain data in, plain data out: no I/O beyond reading the given files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// One webhook path and the bodies sent to it.
#[derive(Debug, Clone)]
pub struct PathBodies {
    /// The HTTP path, as KubeVirt's operator registers it.
    pub path: &'static str,
    /// Serialized AdmissionReview requests, one per input object.
    pub bodies: Vec<Vec<u8>>,
}

/// The admin the test cluster's kubeconfig authenticates as: what the API server would put in
/// `userInfo` for a `kubectl create` by that user (not one of KubeVirt's service accounts, so
/// both webhooks apply their full defaulting and validation).
fn user_info() -> Value {
    json!({"username": "kvrs-admin", "groups": ["system:masters", "system:authenticated"]})
}

/// An AdmissionReview v1 for a CREATE of `object` (`kind` / `resource` of kubevirt.io/v1).
pub fn review(uid: &str, kind: &str, resource: &str, object: &Value) -> Value {
    let gvk = json!({"group": "kubevirt.io", "version": "v1", "kind": kind});
    let gvr = json!({"group": "kubevirt.io", "version": "v1", "resource": resource});
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": user_info(),
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
}

/// What the API server hands a webhook for a create: namespace filled in (`default` when
/// empty, as the oracle's pipeline does), no `status` (the status subresource drops it).
pub fn as_created(mut object: Value) -> Result<Value> {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        bail!("object has no metadata");
    };
    if meta
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        bail!("metadata.name is missing");
    }
    if meta
        .get("namespace")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        meta.insert("namespace".into(), json!("default"));
    }
    for k in [
        "resourceVersion",
        "uid",
        "generation",
        "creationTimestamp",
        "managedFields",
    ] {
        meta.remove(k);
    }
    if let Some(o) = object.as_object_mut() {
        o.remove("status");
    }
    Ok(object)
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn sorted_files(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.file_name().and_then(|n| n.to_str()).is_some_and(&keep) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// The oracle's VMI cases KubeVirt admits with the default cluster configuration: `NAME.vmi.json`
/// with a `NAME.defaulted.json` and no `NAME.featuregates.txt` (both virt-apis run with
/// KubeVirt's default gates). Returns (mutate bodies: the input VMIs; validate-create bodies:
/// the VMIs as KubeVirt's mutating webhook left them).
pub fn vmi_bodies(oracle: &Path) -> Result<(PathBodies, PathBodies)> {
    let mut mutate = Vec::new();
    let mut validate = Vec::new();
    for input in sorted_files(oracle, |n| n.ends_with(".vmi.json"))? {
        let name = input
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".vmi.json"))
            .unwrap_or_default()
            .to_string();
        let defaulted = oracle.join(format!("{name}.defaulted.json"));
        if !defaulted.is_file() || oracle.join(format!("{name}.featuregates.txt")).exists() {
            continue;
        }
        let vmi = as_created(read_json(&input)?).with_context(|| input.display().to_string())?;
        let def =
            as_created(read_json(&defaulted)?).with_context(|| defaulted.display().to_string())?;
        let body = |i: usize, v: &Value| {
            serde_json::to_vec(&review(
                &format!("{name}-{i}"),
                "VirtualMachineInstance",
                "virtualmachineinstances",
                v,
            ))
        };
        mutate.push(body(0, &vmi)?);
        validate.push(body(1, &def)?);
    }
    if mutate.is_empty() {
        bail!(
            "{}: no VMI case with a defaulted.json and no featuregates.txt",
            oracle.display()
        );
    }
    Ok((
        PathBodies {
            path: "/virtualmachineinstances-mutate",
            bodies: mutate,
        },
        PathBodies {
            path: "/virtualmachineinstances-validate-create",
            bodies: validate,
        },
    ))
}

/// The VMs of the controller oracle's scenarios (`vm-*.json`, key `vm`), distinct by spec, as
/// creates: (mutate bodies, validate bodies), the same objects for both.
pub fn vm_bodies(oracle_vm: &Path) -> Result<(PathBodies, PathBodies)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut mutate = Vec::new();
    let mut validate = Vec::new();
    for file in sorted_files(oracle_vm, |n| {
        n.starts_with("vm-") && n.ends_with(".json") && !n.ends_with(".out.json")
    })? {
        let scenario = read_json(&file)?;
        let Some(vm) = scenario.get("vm") else {
            continue;
        };
        let vm = as_created(vm.clone()).with_context(|| format!("{}: vm", file.display()))?;
        if !seen.insert(vm["spec"].to_string()) {
            continue;
        }
        let stem = file
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let body = |i: usize| {
            serde_json::to_vec(&review(
                &format!("{stem}-{i}"),
                "VirtualMachine",
                "virtualmachines",
                &vm,
            ))
        };
        mutate.push(body(0)?);
        validate.push(body(1)?);
    }
    if mutate.is_empty() {
        bail!("{}: no vm-*.json scenario with a `vm`", oracle_vm.display());
    }
    Ok((
        PathBodies {
            path: "/virtualmachines-mutate",
            bodies: mutate,
        },
        PathBodies {
            path: "/virtualmachines-validate",
            bodies: validate,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_gets_the_default_namespace_and_loses_its_status() {
        let vm = json!({"metadata": {"name": "a", "uid": "u"}, "spec": {}, "status": {"x": 1}});
        let out = as_created(vm).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {}})
        );
    }

    #[test]
    fn an_object_without_a_name_is_refused_naming_the_field() {
        let err = as_created(json!({"metadata": {}})).unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }
}
