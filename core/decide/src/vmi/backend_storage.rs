//! The backend-storage claim: where a VMI with a persistent TPM or persistent EFI variables
//! keeps that state, so it survives a restart (KubeVirt v1.9.0's `pkg/storage/backend-storage`
//! as its VMI controller uses it).
//!
//! Before the launcher pod exists the controller makes sure the VMI has its claim: one labelled
//! `persistent-state-for: <vmi>` (or, from older KubeVirt, named `persistent-state-for-<vmi>`)
//! in the VMI's namespace. Without one it creates it — 10Mi, filesystem, owned by the VMI's
//! owners (its VM, so a restart finds the same claim) — and waits for the claim to show in the
//! cache; the pod is rendered once the claim is bound (or waits for its first consumer). A VMI
//! that needs no state has any such claim deleted, as KubeVirt does when persistence is turned
//! off. The claim's name and access modes are in the VMI's `status.volumeStatus` under
//! `persistent-state-for-this-vm`.
//!
//! The launcher renderer mounts the claim by KubeVirt's legacy name (it cannot know the
//! generated one): the decision, which found or created the claim, names it in the rendered
//! pod's `vm-state` volume.
//!
//! Not modelled: changed-block-tracking state (KubeVirt's CBT feature, alpha) as a reason for
//! the claim, labelling a legacy claim (KubeVirt patches the label onto it; kvrs finds it by
//! name every time, which has the same effect), and the migration-target claims.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use super::VmiWorld;
use super::lifecycle::SyncError;
use crate::api::VirtualMachineInstance;
use crate::small_json::ScanPointer;
use crate::{ApiWrite, Expectation, Plan, WriteOp, meta};

/// The label naming the VMI a backend-storage claim belongs to, and the claims' name prefix.
pub const PVC_PREFIX: &str = "persistent-state-for";
/// The size of a new backend-storage claim.
pub const PVC_SIZE: &str = "10Mi";
/// The `status.volumeStatus` entry of the claim.
pub const VOLUME_NAME: &str = "persistent-state-for-this-vm";
/// The launcher pod's volume of the claim (`kvrs_pod`'s backend-storage rendering).
const POD_VOLUME: &str = "vm-state";
/// CDI's label asking its webhook to fill a claim's unset fields from the storage profile.
const APPLY_STORAGE_PROFILE_LABEL: &str = "cdi.kubevirt.io/applyStorageProfile";
const KUBEVIRT_DEFAULT_CLASS: &str = "storageclass.kubevirt.io/is-default-virt-class";
const KUBERNETES_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// What the launcher pod may do about the backend storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum BackendStorage {
    /// The VMI keeps no state: the pod mounts no claim.
    NotNeeded,
    /// The claim is usable: the pod mounts it.
    Ready(String),
    /// A claim was just created and is not cached yet: no pod this time (its appearance queues
    /// the VMI again).
    Created,
}

/// Whether the VMI keeps state on a backend-storage claim (persistent TPM or EFI).
pub fn needed(vmi: &VirtualMachineInstance) -> bool {
    kvrs_pod::needs_backend_storage(vmi)
}

/// KubeVirt's `PVCForVMI`: the claim labelled for the VMI, else the one with the legacy name;
/// claims being deleted do not count.
pub fn claim_of<'a>(
    vmi: &VirtualMachineInstance,
    pvcs: &'a [PersistentVolumeClaim],
) -> Option<&'a PersistentVolumeClaim> {
    let ns = meta::namespace(&vmi.metadata);
    let name = meta::name(&vmi.metadata);
    let legacy = legacy_name(name);
    let live = pvcs.iter().filter(|p| {
        p.metadata.namespace.as_deref().is_none_or(|n| n == ns)
            && p.metadata.deletion_timestamp.is_none()
    });
    let mut legacy_claim = None;
    for p in live {
        let label = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PVC_PREFIX))
            .map(String::as_str);
        if label == Some(name) {
            return Some(p);
        }
        if p.metadata.name.as_deref() == Some(legacy.as_str()) {
            legacy_claim = Some(p);
        }
    }
    legacy_claim
}

/// The VMI a claim is the backend storage of (its `persistent-state-for` label), for the
/// shells' claim watches: a new one queues that VMI and is the creation it waited for.
pub fn vmi_of_claim(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.metadata
        .labels
        .as_ref()?
        .get(PVC_PREFIX)
        .map(String::as_str)
}

fn legacy_name(vmi_name: &str) -> String {
    format!("{PVC_PREFIX}-{vmi_name}")
}

/// KubeVirt's `handleBackendStorage` and `IsPVCReady`, before the launcher pod is created.
/// `suffix` names a new claim (`persistent-state-for-<vmi>-<suffix>`, as the API server's
/// `generateName` would).
pub(super) fn prepare(
    w: &VmiWorld<'_>,
    suffix: &str,
    plan: &mut Plan,
) -> Result<BackendStorage, SyncError> {
    let vmi = w.vmi;
    let ns = meta::namespace(&vmi.metadata);
    let existing = claim_of(vmi, w.pvcs);
    if !needed(vmi) {
        if let Some(pvc) = existing {
            plan.push_write(ApiWrite::new(
                "persistentvolumeclaims",
                ns,
                pvc.metadata.name.as_deref().unwrap_or_default(),
                WriteOp::Delete {
                    precondition_uid: pvc.metadata.uid.clone(),
                },
            ));
        }
        return Ok(BackendStorage::NotNeeded);
    }
    let Some(pvc) = existing else {
        let claim = new_claim(w, suffix).map_err(|message| SyncError {
            kind: crate::ErrorKind::Sync,
            reason: "FailedBackendStorageCreate".into(),
            message,
        })?;
        let name = claim["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        plan.push_write(
            ApiWrite::new(
                "persistentvolumeclaims",
                ns,
                &name,
                WriteOp::Create { object: claim },
            )
            .expecting(Expectation::Creations {
                key: meta::key(&vmi.metadata),
                count: 1,
            }),
        );
        return Ok(BackendStorage::Created);
    };
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let not_ready = |reason: &str, message: String| SyncError {
        kind: crate::ErrorKind::Sync,
        reason: reason.into(),
        message,
    };
    let phase = pvc
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    match phase {
        "Bound" => Ok(BackendStorage::Ready(name)),
        "Lost" => Err(not_ready(
            "FailedBackendStorageProbe",
            "backend storage PVC lost".into(),
        )),
        "Pending" => {
            let class = pvc
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
                .ok_or_else(|| {
                    not_ready("FailedBackendStorageProbe", "no storage class name".into())
                })?;
            let sc = w
                .storage_classes
                .iter()
                .find(|sc| sc.at("/metadata/name").and_then(Value::as_str) == Some(class))
                .ok_or_else(|| {
                    not_ready(
                        "FailedBackendStorageProbe",
                        format!("storage class {class} not found"),
                    )
                })?;
            if sc["volumeBindingMode"] == "WaitForFirstConsumer" {
                Ok(BackendStorage::Ready(name))
            } else {
                Err(not_ready("BackendStorageNotReady", "PVC pending".into()))
            }
        }
        _ => Err(not_ready("BackendStorageNotReady", "PVC pending".into())),
    }
}

/// KubeVirt's `createPVC` for the VMI: the class from the configuration or the cluster's
/// defaults, the access mode the class's CDI storage profile offers for filesystem claims.
fn new_claim(w: &VmiWorld<'_>, suffix: &str) -> Result<Value, String> {
    let vmi = w.vmi;
    let class = storage_class(w)?;
    let access_mode = access_mode(w, &class);
    let owners = match vmi.metadata.owner_references.as_deref() {
        Some(o) if !o.is_empty() => serde_json::to_value(o).unwrap_or(Value::Null),
        _ => json!([{
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "name": meta::name(&vmi.metadata), "uid": vmi.metadata.uid.as_deref().unwrap_or_default(),
            "controller": true, "blockOwnerDeletion": true,
        }]),
    };
    let prefix = format!("{}-", legacy_name(meta::name(&vmi.metadata)));
    Ok(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": format!("{prefix}{suffix}"),
            "generateName": prefix,
            "namespace": meta::namespace(&vmi.metadata),
            "ownerReferences": owners,
            "labels": {
                APPLY_STORAGE_PROFILE_LABEL: "true",
                PVC_PREFIX: meta::name(&vmi.metadata),
            },
        },
        "spec": {
            "accessModes": [access_mode],
            "resources": {"requests": {"storage": PVC_SIZE}},
            "storageClassName": class,
            "volumeMode": "Filesystem",
        },
    }))
}

/// KubeVirt's `getStorageClass`: the configured class, else the class marked KubeVirt's
/// default, else the cluster's default.
fn storage_class(w: &VmiWorld<'_>) -> Result<String, String> {
    if !w.config.vm_state_storage_class.is_empty() {
        return Ok(w.config.vm_state_storage_class.clone());
    }
    let marked = |annotation: &str| {
        w.storage_classes
            .iter()
            .filter(|sc| {
                sc.at("/metadata/annotations")
                    .and_then(|a| a.get(annotation))
                    .and_then(Value::as_str)
                    == Some("true")
            })
            .filter_map(|sc| sc.at("/metadata/name").and_then(Value::as_str))
            .next_back()
            .map(String::from)
    };
    marked(KUBEVIRT_DEFAULT_CLASS)
        .or_else(|| marked(KUBERNETES_DEFAULT_CLASS))
        .ok_or_else(|| "no default storage class found".to_string())
}

/// KubeVirt's `getAccessMode` for a filesystem claim of `class`: ReadWriteMany when the
/// class's storage profile offers it, else ReadWriteOnce when it offers that; without a
/// profile, ReadWriteMany for a configured class and ReadWriteOnce for a default one.
fn access_mode(w: &VmiWorld<'_>, class: &str) -> &'static str {
    let fallback = if w.config.vm_state_storage_class.is_empty() {
        "ReadWriteOnce"
    } else {
        "ReadWriteMany"
    };
    let Some(profile) = w
        .storage_profiles
        .iter()
        .find(|p| p.at("/metadata/name").and_then(Value::as_str) == Some(class))
    else {
        return fallback;
    };
    let sets = profile
        .at("/status/claimPropertySets")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut rwo = false;
    for set in sets {
        if set["volumeMode"] != "Filesystem" {
            continue;
        }
        for mode in set["accessModes"].as_array().into_iter().flatten() {
            match mode.as_str() {
                Some("ReadWriteMany") => return "ReadWriteMany",
                Some("ReadWriteOnce") => rwo = true,
                _ => {}
            }
        }
    }
    if rwo { "ReadWriteOnce" } else { fallback }
}

/// Names the claim in the rendered launcher pod's backend-storage volume.
pub(super) fn name_claim_in_pod(pod: &mut Value, claim: &str) {
    let Some(volumes) = pod
        .pointer_mut("/spec/volumes")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for v in volumes.iter_mut().filter(|v| v["name"] == POD_VOLUME) {
        if let Some(pvc) = v.get_mut("persistentVolumeClaim") {
            pvc["claimName"] = json!(claim);
        }
    }
}

/// KubeVirt's `UpdateVolumeStatus`: the claim's entry (added at the end when missing; an entry
/// under an older name takes the current one) with its name and access modes.
pub(super) fn update_volume_status(w: &VmiWorld<'_>, c: &mut Value) {
    let Some(pvc) = claim_of(w.vmi, w.pvcs) else {
        return;
    };
    let info = json!({
        "claimName": pvc.metadata.name.as_deref().unwrap_or_default(),
        "accessModes": pvc.spec.as_ref().and_then(|s| s.access_modes.clone()),
    });
    let list = &mut c["status"]["volumeStatus"];
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else {
        return;
    };
    match list.iter_mut().find(|e| {
        e["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(PVC_PREFIX))
    }) {
        Some(e) => {
            e["name"] = json!(VOLUME_NAME);
            let pci = &mut e["persistentVolumeClaimInfo"];
            if !pci.is_object() {
                *pci = json!({});
            }
            pci["claimName"] = info["claimName"].clone();
            match &info["accessModes"] {
                Value::Null => {
                    if let Some(m) = pci.as_object_mut() {
                        m.remove("accessModes");
                    }
                }
                modes => pci["accessModes"] = modes.clone(),
            }
        }
        None => {
            let mut pci = json!({"claimName": info["claimName"]});
            if !info["accessModes"].is_null() {
                pci["accessModes"] = info["accessModes"].clone();
            }
            // `target` is never omitted (Go's `json:"target"`), and the CRD requires it.
            list.push(json!({"name": VOLUME_NAME, "target": "", "persistentVolumeClaimInfo": pci}));
        }
    }
}

/// The claim's entry among `old` volume statuses (under its current or legacy name), kept
/// when the controller rebuilds the list from the spec (KubeVirt's `updateVolumeStatus`).
pub(super) fn kept_entry(w: &VmiWorld<'_>, old: &[Value]) -> Option<Value> {
    let pvc = claim_of(w.vmi, w.pvcs)?;
    let legacy = pvc.metadata.name.as_deref().unwrap_or_default();
    let mut e = old
        .iter()
        .find(|e| e["name"] == VOLUME_NAME)
        .or_else(|| old.iter().find(|e| e["name"] == legacy))?
        .clone();
    e["name"] = json!(VOLUME_NAME);
    Some(e)
}
