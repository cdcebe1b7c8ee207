//! The objects a VM's volumes name, given in the same manifest as the VM: ConfigMaps, Secrets,
//! PersistentVolumeClaims and the PersistentVolumes they bind to (a `hostPath` or `local` PV
//! stands for this machine's storage). They are created before the VM.
//!
//! `kvrs run` has no PV controller: a claim is bound here, as kube-controller-manager would bind
//! it, to the PV it names (`spec.volumeName`), the PV whose `claimRef` names it, or else the
//! first free PV of the same storage class and volume mode that is large enough. A claim with no
//! PV stays Pending (and its VM's pod cannot start, as on a cluster).

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::input::{CliError, Workload, parse_documents, read_text, typed};

/// The kinds accepted beside VirtualMachines and VirtualMachineInstances.
pub const KINDS: [&str; 4] = [
    "ConfigMap",
    "Secret",
    "PersistentVolume",
    "PersistentVolumeClaim",
];

/// The manifest's documents: (origin, supporting object) and (origin, workload).
pub type Documents = (Vec<(String, Value)>, Vec<(String, Workload)>);

/// Reads the manifest: every document (and List item) is a VM, a VMI or one of [`KINDS`].
pub fn read(path: &std::path::Path) -> Result<Documents, CliError> {
    let file = crate::input::origin_of(path);
    let docs = parse_documents(&read_text(path)?, &file)?;
    let several = docs.len() > 1;
    let mut flat = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        let origin = if several {
            format!("{file} (document {index})")
        } else {
            file.clone()
        };
        if doc.get("kind").and_then(Value::as_str) == Some("List") {
            let items = doc["items"].as_array().cloned().unwrap_or_default();
            for (i, item) in items.into_iter().enumerate() {
                flat.push((format!("{origin} (items[{i}])"), item));
            }
        } else {
            flat.push((origin, doc));
        }
    }
    let mut supporting = Vec::new();
    let mut workloads = Vec::new();
    for (origin, doc) in flat {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        match kind {
            "VirtualMachine" => {
                workloads.push((origin.clone(), Workload::Vm(Box::new(typed(doc, &origin)?))))
            }
            "VirtualMachineInstance" => workloads.push((
                origin.clone(),
                Workload::Vmi(Box::new(typed(doc, &origin)?)),
            )),
            k if KINDS.contains(&k) => {
                if doc
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(CliError::Input(format!("{origin}: metadata.name: missing")));
                }
                supporting.push((origin, doc));
            }
            "" => {
                return Err(CliError::Input(format!(
                    "{origin}: kind: missing; expected VirtualMachineInstance or VirtualMachine"
                )));
            }
            other => {
                return Err(CliError::Input(format!(
                    "{origin}: kind: {other:?} is not VirtualMachineInstance, VirtualMachine, \
                     ConfigMap, Secret, PersistentVolumeClaim or PersistentVolume"
                )));
            }
        }
    }
    if workloads.is_empty() {
        return Err(CliError::Input(format!(
            "{file}: no VirtualMachineInstance or VirtualMachine"
        )));
    }
    Ok((supporting, workloads))
}

fn storage(v: &Value) -> Option<i64> {
    v.as_str()
        .and_then(|s| kvrs_core::quantity::Quantity::new(s).value().ok())
}

fn mode(v: &Value) -> &str {
    v.pointer("/spec/volumeMode")
        .and_then(Value::as_str)
        .unwrap_or("Filesystem")
}

fn class(v: &Value) -> &str {
    v.pointer("/spec/storageClassName")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn name(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn namespace(v: &Value) -> &str {
    v.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
}

/// Binds each claim of `docs` to a PV of `docs` (see the module doc): sets the claim's
/// `spec.volumeName` and the PV's `spec.claimRef`, and answers (claim index, PV index) pairs.
pub fn bind(docs: &mut [Value]) -> Vec<(usize, usize)> {
    let claims: Vec<usize> = (0..docs.len())
        .filter(|&i| docs[i]["kind"] == "PersistentVolumeClaim")
        .collect();
    let pvs: Vec<usize> = (0..docs.len())
        .filter(|&i| docs[i]["kind"] == "PersistentVolume")
        .collect();
    let mut taken: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    for c in claims {
        let (cn, cns) = (name(&docs[c]).to_string(), namespace(&docs[c]).to_string());
        let wanted = docs[c]
            .pointer("/spec/volumeName")
            .and_then(Value::as_str)
            .map(String::from);
        let free = |p: &usize| !taken.contains(p);
        let by_name = pvs
            .iter()
            .copied()
            .filter(free)
            .find(|&p| Some(name(&docs[p])) == wanted.as_deref());
        let by_ref = pvs.iter().copied().filter(free).find(|&p| {
            docs[p]
                .pointer("/spec/claimRef/name")
                .and_then(Value::as_str)
                == Some(cn.as_str())
                && docs[p]
                    .pointer("/spec/claimRef/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    == cns
        });
        let request = docs[c]
            .pointer("/spec/resources/requests/storage")
            .and_then(storage)
            .unwrap_or(0);
        let by_fit = pvs.iter().copied().filter(free).find(|&p| {
            docs[p].pointer("/spec/claimRef").is_none()
                && class(&docs[p]) == class(&docs[c])
                && mode(&docs[p]) == mode(&docs[c])
                && docs[p]
                    .pointer("/spec/capacity/storage")
                    .and_then(storage)
                    .unwrap_or(0)
                    >= request
        });
        let Some(p) = (if wanted.is_some() {
            by_name
        } else {
            by_ref.or(by_fit)
        }) else {
            continue;
        };
        taken.push(p);
        docs[c]["spec"]["volumeName"] = json!(name(&docs[p]));
        docs[p]["spec"]["claimRef"] = json!({
            "kind": "PersistentVolumeClaim", "apiVersion": "v1",
            "namespace": cns, "name": cn,
        });
        out.push((c, p));
    }
    out
}

fn resource(kind: &str) -> ApiResource {
    let plural = match kind {
        "ConfigMap" => "configmaps",
        "Secret" => "secrets",
        "PersistentVolume" => "persistentvolumes",
        _ => "persistentvolumeclaims",
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", kind), plural)
}

fn api(client: &kube::Client, doc: &Value) -> Api<DynamicObject> {
    let kind = doc["kind"].as_str().unwrap_or("");
    if kind == "PersistentVolume" {
        Api::all_with(client.clone(), &resource(kind))
    } else {
        Api::namespaced_with(client.clone(), namespace(doc), &resource(kind))
    }
}

/// Creates the supporting objects (PVs first, then claims bound to them, ConfigMaps and
/// Secrets), and writes the bound claims' and PVs' status as the PV controller would.
pub async fn apply(client: &kube::Client, docs: &[Value]) -> Result<(), CliError> {
    let mut docs = docs.to_vec();
    let bound = bind(&mut docs);
    let order = |d: &Value| usize::from(d["kind"] != "PersistentVolume");
    let mut sorted: Vec<&Value> = docs.iter().collect();
    sorted.sort_by_key(|d| order(d));
    for doc in sorted {
        let obj: DynamicObject = serde_json::from_value(doc.clone())
            .map_err(|e| CliError::Failed(format!("{} {}: {e}", doc["kind"], name(doc))))?;
        api(client, doc)
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| {
                CliError::Failed(format!(
                    "creating {} {}: {e}",
                    doc["kind"].as_str().unwrap_or(""),
                    name(doc)
                ))
            })?;
    }
    for (c, p) in bound {
        let (claim, pv) = (&docs[c], &docs[p]);
        let status = json!({"status": {
            "phase": "Bound",
            "accessModes": pv.pointer("/spec/accessModes").cloned().unwrap_or(json!([])),
            "capacity": pv.pointer("/spec/capacity").cloned().unwrap_or(json!({})),
        }});
        let fail = |what: &str, e: kube::Error| CliError::Failed(format!("binding {what}: {e}"));
        api(client, claim)
            .patch_status(name(claim), &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| fail(name(claim), e))?;
        api(client, pv)
            .patch_status(
                name(pv),
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"phase": "Bound"}})),
            )
            .await
            .map_err(|e| fail(name(pv), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(name: &str, size: &str, mode: &str) -> Value {
        json!({"kind": "PersistentVolume", "metadata": {"name": name},
               "spec": {"capacity": {"storage": size}, "volumeMode": mode,
                        "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/srv/x"}}})
    }

    fn pvc(name: &str, size: &str, mode: &str) -> Value {
        json!({"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "ns"},
               "spec": {"volumeMode": mode, "resources": {"requests": {"storage": size}}}})
    }

    #[test]
    fn claims_bind_to_the_first_free_pv_that_fits() {
        let mut docs = vec![
            pv("small", "1Gi", "Filesystem"),
            pv("big", "10Gi", "Filesystem"),
            pv("raw", "10Gi", "Block"),
            pvc("root", "2Gi", "Filesystem"),
            pvc("disk", "1Gi", "Block"),
            pvc("none", "20Gi", "Filesystem"),
        ];
        let bound = bind(&mut docs);
        assert_eq!(bound, [(3, 1), (4, 2)]);
        assert_eq!(docs[3]["spec"]["volumeName"], "big");
        assert_eq!(docs[1]["spec"]["claimRef"]["name"], "root");
        assert_eq!(docs[1]["spec"]["claimRef"]["namespace"], "ns");
        assert!(docs[5]["spec"]["volumeName"].is_null());
    }

    #[test]
    fn a_named_volume_is_the_only_candidate() {
        let mut docs = vec![pv("a", "1Gi", "Filesystem"), pvc("c", "1Gi", "Filesystem")];
        docs[1]["spec"]["volumeName"] = json!("b");
        assert!(bind(&mut docs).is_empty());
        docs[1]["spec"]["volumeName"] = json!("a");
        assert_eq!(bind(&mut docs), [(1, 0)]);
    }
}
