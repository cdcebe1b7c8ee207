//! The VMI controller's part of volume hotplug (KubeVirt v1.9.0's `volume-hotplug.go` and the
//! hotplug half of `updateVolumeStatus`): one attachment pod carrying the running VMI's current
//! set of hotplugged claims to its node, and the `status.volumeStatus` entries of those volumes
//! up to `AttachedToNode` — virt-handler takes them on from there.
//!
//! The set of claims changes as volumes come and go: a new pod is created for the new set, and
//! the old one is kept until the new one runs (so a volume in use never loses its attachment),
//! then deleted once virt-handler has unmounted every volume only it carried.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::lifecycle::SyncError;
use super::{VmiWorld, data_volumes, pod, vmi_ref};
use crate::api::{VirtualMachineInstance, Volume};
use crate::{ApiWrite, Event, Expectation, Plan, WriteOp, meta};
use kvrs_pod::hotplug::{AttachmentClaim, claim_of, render_attachment_pod};

/// `Ready`: the launcher attached the disk.
const VOLUME_READY: &str = "Ready";
/// `MountedToPod`: virt-handler made the claim visible in the launcher pod.
const MOUNTED_TO_POD: &str = "MountedToPod";
/// `Detaching`: the volume left the spec and its attachment pod goes.
const DETACHING: &str = "Detaching";

/// Whether the volume is hotpluggable (KubeVirt's `IsHotpluggableVolumeSource`).
fn is_hotpluggable(v: &Volume) -> bool {
    v.persistent_volume_claim
        .as_ref()
        .is_some_and(|p| p.hotpluggable == Some(true))
        || v.data_volume
            .as_ref()
            .is_some_and(|d| d.hotpluggable == Some(true))
        || v.memory_dump.is_some()
}

/// The VMI's hotplugged volumes (KubeVirt's `GetHotplugVolumes`): hotpluggable volumes the
/// launcher pod was not created with.
pub(super) fn hotplug_volumes<'a>(
    vmi: &'a VirtualMachineInstance,
    launcher: &Pod,
) -> Vec<&'a Volume> {
    let in_pod: BTreeSet<&str> = launcher
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| v.name.as_str())
        .collect();
    vmi.spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| !in_pod.contains(v.name.as_str()) && is_hotpluggable(v))
        .collect()
}

/// The pods `launcher` controls (KubeVirt's `AttachmentPods`).
pub(super) fn attachment_pods<'a>(launcher: &Pod, pods: &[&'a Pod]) -> Vec<&'a Pod> {
    let uid = launcher.metadata.uid.as_deref().unwrap_or_default();
    pods.iter()
        .copied()
        .filter(|p| {
            !uid.is_empty()
                && p.metadata.namespace == launcher.metadata.namespace
                && p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect()
}

/// The claim volumes of an attachment pod, by name.
fn claim_volume_names(p: &Pod) -> BTreeSet<&str> {
    p.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.persistent_volume_claim.is_some())
        .map(|v| v.name.as_str())
        .collect()
}

/// Whether the pod carries exactly `volumes` (KubeVirt's `podVolumesMatchesReadyVolumes`, which
/// counts the pod's volumes less its emptyDir and service-account token: the claim names
/// compared as sets, so a cluster that mounts no token does not make every pod look old).
fn carries_exactly(p: &Pod, volumes: &[&Volume]) -> bool {
    let wanted: BTreeSet<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
    claim_volume_names(p) == wanted
}

/// The pod carrying exactly `volumes` and not being deleted, and the others, newest first
/// (KubeVirt's `getActiveAndOldAttachmentPods`).
fn active_and_old<'a>(volumes: &[&Volume], pods: &[&'a Pod]) -> (Option<&'a Pod>, Vec<&'a Pod>) {
    let mut current = None;
    let mut old = Vec::new();
    for p in pods.iter().copied() {
        if !carries_exactly(p, volumes) {
            old.push(p);
        } else if !pod::is_deleting(p) {
            current = Some(p);
        }
    }
    let created = |p: &Pod| {
        p.metadata
            .creation_timestamp
            .as_ref()
            .map_or(i64::MIN, meta::unix_of)
    };
    old.sort_by_key(|p| std::cmp::Reverse(created(p)));
    (current, old)
}

/// Phases in which virt-handler still holds the volume: its attachment pod must stay.
fn blocks_pod_delete(phase: &str) -> bool {
    matches!(phase, VOLUME_READY | MOUNTED_TO_POD)
}

/// Deletes an attachment pod (KubeVirt deletes with a zero grace period, which the pod's own
/// `terminationGracePeriodSeconds: 0` gives here).
fn delete_attachment_pod(vmi: &VirtualMachineInstance, p: &Pod, plan: &mut Plan) {
    if pod::is_deleting(p) {
        return;
    }
    let ns = meta::namespace(&vmi.metadata);
    let name = pod::name(p);
    plan.push_write(
        ApiWrite::new(
            "pods",
            ns,
            name,
            WriteOp::Delete {
                precondition_uid: p.metadata.uid.clone(),
            },
        )
        .expecting(Expectation::Deletions {
            key: meta::key(&vmi.metadata),
            objects: vec![format!("{ns}/{name}")],
        }),
    );
    plan.events.push(Event::normal(
        vmi_ref(vmi),
        "SuccessfulDelete",
        format!("Deleted attachment pod {name}"),
    ));
}

/// Deletes every attachment pod of the launcher pods of `w` that match `which` (a final VMI's
/// current pod, or launcher pods that are down: KubeVirt's `deleteAllAttachmentPods` and
/// `deleteOrphanedAttachmentPods`).
pub(super) fn delete_attachment_pods_of(w: &VmiWorld<'_>, launchers: &[&Pod], plan: &mut Plan) {
    for l in launchers {
        for p in attachment_pods(l, &w.pods) {
            delete_attachment_pod(w.vmi, p, plan);
        }
    }
}

/// The hotplug volume status entries, by name, as the decision saw them.
fn hotplug_phases(vmi: &VirtualMachineInstance) -> BTreeMap<&str, &str> {
    vmi.status
        .iter()
        .flat_map(|s| s.volume_status.iter().flatten())
        .filter(|s| s.hotplug_volume.is_some())
        .map(|s| (s.name.as_str(), s.phase.as_deref().unwrap_or_default()))
        .collect()
}

/// KubeVirt's `needsHandleHotplug` then `handleHotplugVolumes` for the running VMI's ready
/// `launcher` pod: the attachment pod for the volumes whose claims are ready, and the old pods
/// cleaned up. `suffix` names a pod it creates.
pub(super) fn sync(
    w: &VmiWorld<'_>,
    dvs: &[&Value],
    launcher: &Pod,
    suffix: &str,
    plan: &mut Plan,
) -> Option<SyncError> {
    let vmi = w.vmi;
    if pod::is_deleting(launcher) {
        return None;
    }
    let volumes = hotplug_volumes(vmi, launcher);
    let pods = attachment_pods(launcher, &w.pods);
    let settled = pods.len() == 1 && carries_exactly(pods[0], &volumes);
    if settled || (volumes.is_empty() && pods.is_empty()) {
        return None;
    }
    let ns = meta::namespace(&vmi.metadata);
    let mut ready: Vec<&Volume> = Vec::new();
    let mut claims = BTreeMap::new();
    // Trigger pods made by this reconcile: each pod it creates needs its own name.
    let mut triggered = 0;
    for v in &volumes {
        let Some(claim) = claim_of(v) else {
            continue;
        };
        let Some(pvc) = data_volumes::find_pvc(w.pvcs, ns, claim) else {
            return Some(SyncError {
                kind: crate::ErrorKind::Sync,
                reason: "PVCNotReady".into(),
                message: format!("Error determining volume status didn't find PVC {claim}"),
            });
        };
        match data_volumes::claim_readiness(pvc, ns, dvs, w.data_volumes) {
            Err(e) => {
                return Some(SyncError {
                    kind: crate::ErrorKind::Sync,
                    reason: "PVCNotReady".into(),
                    message: format!("Error determining volume status {e}"),
                });
            }
            // A claim waiting for its first consumer: KubeVirt's population trigger pod
            // consumes it on this node; the volume itself waits like one not populated yet.
            Ok((false, true)) => {
                let block =
                    pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block");
                let name = pod_name(suffix, triggered);
                if let Err(e) = create_trigger_pod(w, launcher, v, claim, block, &name, plan) {
                    return Some(e);
                }
                triggered += 1;
                continue;
            }
            Ok((false, false)) => continue,
            Ok((true, _)) => {}
        }
        let block = pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block");
        claims.insert(
            v.name.clone(),
            AttachmentClaim {
                block,
                uid: pvc.metadata.uid.clone().unwrap_or_default(),
            },
        );
        ready.push(v);
    }

    let (current, old) = active_and_old(&ready, &pods);
    let pending_old = old
        .iter()
        .any(|p| !matches!(pod::phase(p), "Running" | "Succeeded" | "Failed"));
    if current.is_none() && !pending_old && !ready.is_empty() {
        // KubeVirt goes on with the pod it just created, which does not run yet.
        let name = pod_name(suffix, triggered);
        if let Err(e) = create_attachment_pod(w, launcher, &ready, &claims, &name, plan) {
            return Some(e);
        }
    }
    let current_running = current.is_some_and(|p| pod::phase(p) == "Running");
    cleanup(vmi, current_running, &old, ready.len(), plan);
    None
}

/// Creates the attachment pod; nothing when it cannot be rendered, which KubeVirt passes over
/// silently (a VMI whose SELinux context virt-handler has not recorded yet is synced again
/// when it has).
fn create_attachment_pod(
    w: &VmiWorld<'_>,
    launcher: &Pod,
    ready: &[&Volume],
    claims: &BTreeMap<String, AttachmentClaim>,
    name: &str,
    plan: &mut Plan,
) -> Result<(), SyncError> {
    let vmi = w.vmi;
    let key = meta::key(&vmi.metadata);
    let Ok(rendered) = render_attachment_pod(vmi, launcher, ready, claims, w.config) else {
        return Ok(());
    };
    let mut object = serde_json::to_value(&rendered).map_err(|e| SyncError {
        kind: crate::ErrorKind::Sync,
        reason: "FailedCreate".into(),
        message: format!("Error creating attachment pod {e}"),
    })?;
    object["metadata"]["name"] = json!(name);
    plan.push_write(
        ApiWrite::new(
            "pods",
            meta::namespace(&vmi.metadata),
            name,
            WriteOp::Create { object },
        )
        .expecting(Expectation::Creations { key, count: 1 }),
    );
    plan.events.push(Event::normal(
        vmi_ref(vmi),
        "SuccessfulCreate",
        format!("Created attachment pod {name}"),
    ));
    Ok(())
}

/// The name of the `n`th pod this reconcile creates (KubeVirt's `generateName` gives each its
/// own): `hp-volume-<suffix>`, then `hp-volume-<suffix>-<n>`.
fn pod_name(suffix: &str, n: usize) -> String {
    let prefix = kvrs_pod::hotplug::ATTACHMENT_POD_PREFIX;
    if n == 0 {
        format!("{prefix}{suffix}")
    } else {
        format!("{prefix}{suffix}-{n}")
    }
}

/// KubeVirt's `triggerHotplugPopulation`: the trigger pod for `volume`'s claim waiting for its
/// first consumer, with its event. A template that cannot be rendered is KubeVirt's
/// `FailedCreate` sync error.
fn create_trigger_pod(
    w: &VmiWorld<'_>,
    launcher: &Pod,
    volume: &Volume,
    claim: &str,
    block: bool,
    name: &str,
    plan: &mut Plan,
) -> Result<(), SyncError> {
    let vmi = w.vmi;
    let rendered =
        kvrs_pod::hotplug::render_trigger_pod(vmi, launcher, volume, claim, block, w.config)
            .map_err(|e| SyncError {
                kind: crate::ErrorKind::Sync,
                reason: "FailedCreate".into(),
                message: format!("Error creating trigger pod template {e}"),
            })?;
    let mut object = serde_json::to_value(&rendered).map_err(|e| SyncError {
        kind: crate::ErrorKind::Sync,
        reason: "FailedCreate".into(),
        message: format!("Error creating trigger pod template {e}"),
    })?;
    object["metadata"]["name"] = json!(name);
    plan.push_write(
        ApiWrite::new(
            "pods",
            meta::namespace(&vmi.metadata),
            name,
            WriteOp::Create { object },
        )
        .expecting(Expectation::Creations {
            key: meta::key(&vmi.metadata),
            count: 1,
        }),
    );
    plan.events.push(Event::normal(
        vmi_ref(vmi),
        "SuccessfulCreate",
        format!("Created hotplug trigger pod for volume {}", volume.name),
    ));
    Ok(())
}

/// KubeVirt's `cleanupAttachmentPods`: old pods are deleted, except the newest running one while
/// the current pod does not run yet and it still carries a volume the VMI needs, and any pod
/// carrying a removed volume virt-handler has not unmounted yet.
fn cleanup(
    vmi: &VirtualMachineInstance,
    current_running: bool,
    old: &[&Pod],
    ready_count: usize,
    plan: &mut Plan,
) {
    let mut phases = hotplug_phases(vmi);
    let in_spec: BTreeSet<&str> = vmi
        .spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| is_hotpluggable(v))
        .map(|v| v.name.as_str())
        .collect();
    for name in &in_spec {
        phases.remove(name);
    }
    let mut kept_running = false;
    for p in old {
        let names = claim_volume_names(p);
        let preserves = names
            .iter()
            .any(|n| in_spec.contains(n) || phases.get(n).is_some_and(|ph| blocks_pod_delete(ph)));
        if !kept_running
            && pod::phase(p) == "Running"
            && !pod::is_deleting(p)
            && ready_count > 0
            && !current_running
            && preserves
        {
            kept_running = true;
            continue;
        }
        let still_mounted = names
            .iter()
            .filter(|n| phases.get(*n).is_some_and(|ph| blocks_pod_delete(ph)))
            .count();
        if still_mounted > 0 {
            continue;
        }
        delete_attachment_pod(vmi, p, plan);
    }
}

/// The claim a status entry's volume stands on, from the spec's JSON.
fn claim_of_json(volume: &Value) -> Option<&str> {
    volume
        .pointer("/persistentVolumeClaim/claimName")
        .or_else(|| volume.pointer("/dataVolume/name"))
        .or_else(|| volume.pointer("/memoryDump/claimName"))
        .and_then(Value::as_str)
}

/// Sets a string field of a status entry, leaving it out when empty (Go's `omitempty`).
fn set_str(entry: &mut Value, key: &str, value: &str) {
    if let Some(m) = entry.as_object_mut() {
        if value.is_empty() {
            m.remove(key);
        } else {
            m.insert(key.into(), json!(value));
        }
    }
}

fn hotplug_field(entry: &mut Value) -> &mut Value {
    if !entry["hotplugVolume"].is_object() {
        entry["hotplugVolume"] = json!({});
    }
    &mut entry["hotplugVolume"]
}

/// The phase, reason and message the claim itself gives (KubeVirt's
/// `getVolumePhaseMessageReason`).
fn phase_from_claim(w: &VmiWorld<'_>, claim: &str) -> (&'static str, &'static str, String) {
    let ns = meta::namespace(&w.vmi.metadata);
    let Some(pvc) = data_volumes::find_pvc(w.pvcs, ns, claim) else {
        return (
            "Pending",
            "FailedPvcNotFound",
            format!("PVC {claim} not found"),
        );
    };
    match pvc.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => (
            "Pending",
            "PVCNotReady",
            "PVC is in phase ClaimPending".into(),
        ),
        Some("Bound") => ("Bound", "PVCNotReady", "PVC is in phase Bound".into()),
        _ => ("Pending", "PVCNotReady", "PVC is in phase Lost".into()),
    }
}

fn set_from_claim(w: &VmiWorld<'_>, entry: &mut Value, claim: &str) {
    let (phase, reason, message) = phase_from_claim(w, claim);
    set_str(entry, "phase", phase);
    set_str(entry, "reason", reason);
    set_str(entry, "message", &message);
}

/// The hotplug half of KubeVirt's `updateVolumeStatus` on the status view `c` (whose status
/// list has just been rebuilt from the spec): `old` is the list before, `launcher` the launcher
/// pod. Entries of hotplugged volumes follow their attachment pod (`processHotplugVolumeStatus`);
/// entries of volumes gone from the spec are kept while an attachment pod still carries them.
pub(super) fn update_volume_status(
    w: &VmiWorld<'_>,
    c: &mut Value,
    old: &[Value],
    launcher: &Pod,
    plan: &mut Plan,
) {
    let vmi = w.vmi;
    let volumes = hotplug_volumes(vmi, launcher);
    let pods = attachment_pods(launcher, &w.pods);
    // Nothing to follow: no entry is a hotplugged volume's, and no pod carries a volume gone
    // from the spec (nearly every sync; the spec's volumes are not copied for it).
    if volumes.is_empty() && pods.is_empty() {
        return;
    }
    let (active, _) = active_and_old(&volumes, &pods);
    let spec_volumes: Vec<Value> = c
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(list) = c
        .pointer_mut("/status/volumeStatus")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for entry in list.iter_mut() {
        let Some(name) = entry["name"].as_str().map(String::from) else {
            continue;
        };
        if !volumes.iter().any(|v| v.name == name) {
            continue;
        }
        let claim = spec_volumes
            .iter()
            .find(|v| v["name"] == name.as_str())
            .and_then(claim_of_json)
            .unwrap_or_default()
            .to_string();
        process_hotplug_entry(w, entry, &name, &claim, active, plan);
    }
    // Volumes gone from the spec: kept while a pod carries them, then dropped.
    for entry in old {
        let Some(name) = entry["name"].as_str() else {
            continue;
        };
        if list.iter().any(|e| e["name"] == name) {
            continue;
        }
        let Some(p) = pods.iter().find(|p| claim_volume_names(p).contains(name)) else {
            continue;
        };
        let mut e = entry.clone();
        let hp = hotplug_field(&mut e);
        set_str(hp, "attachPodName", pod::name(p));
        set_str(
            hp,
            "attachPodUID",
            p.metadata.uid.as_deref().unwrap_or_default(),
        );
        let phase = e["phase"].as_str().unwrap_or_default();
        let phase = if blocks_pod_delete(phase) {
            phase
        } else {
            DETACHING
        }
        .to_string();
        set_str(&mut e, "phase", &phase);
        if phase == DETACHING && pod::is_deleting(p) {
            let message = format!(
                "Deleted hotplug attachment pod {}, for volume {name}",
                pod::name(p)
            );
            set_str(&mut e, "reason", "SuccessfulDelete");
            set_str(&mut e, "message", &message);
            plan.events
                .push(Event::normal(vmi_ref(vmi), "SuccessfulDelete", message));
        }
        list.push(e);
    }
}

/// KubeVirt's `processHotplugVolumeStatus` for one entry.
fn process_hotplug_entry(
    w: &VmiWorld<'_>,
    entry: &mut Value,
    name: &str,
    claim: &str,
    active: Option<&Pod>,
    plan: &mut Plan,
) {
    hotplug_field(entry);
    let phase = entry["phase"].as_str().unwrap_or_default().to_string();
    let Some(p) = active else {
        if phase != VOLUME_READY {
            set_str(&mut entry["hotplugVolume"], "attachPodUID", "");
            set_from_claim(w, entry, claim);
        }
        return;
    };
    let hp = &mut entry["hotplugVolume"];
    set_str(hp, "attachPodName", pod::name(p));
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let uid = if statuses.len() == 1 && statuses[0].ready {
        p.metadata.uid.as_deref().unwrap_or_default()
    } else {
        // A new pod not ready yet: virt-handler must not mount from it.
        ""
    };
    set_str(hp, "attachPodUID", uid);
    if matches!(phase.as_str(), "" | "Bound" | "Pending") {
        let message = format!(
            "Created hotplug attachment pod {}, for volume {name}",
            pod::name(p)
        );
        set_str(entry, "phase", "AttachedToNode");
        set_str(entry, "reason", "SuccessfulCreate");
        set_str(entry, "message", &message);
        plan.events
            .push(Event::normal(vmi_ref(w.vmi), "SuccessfulCreate", message));
    }
    // A volume unplugged and plugged again quickly inherits the old pod's Detaching: it starts
    // over from its claim.
    if phase == DETACHING {
        set_from_claim(w, entry, claim);
    }
}

/// Whether a pod object the plan creates is an attachment pod (labelled `kubevirt.io:
/// hotplug-disk`).
pub fn is_attachment_pod_object(object: &Value) -> bool {
    object
        .pointer("/metadata/labels/kubevirt.io")
        .and_then(Value::as_str)
        == Some(kvrs_pod::hotplug::HOTPLUG_DISK)
}

/// The plan for an attachment pod create the API server rejected: KubeVirt's Warning event and
/// a retry. Unlike a launcher pod's, no condition is written: virt-handler owns the running VMI.
pub fn attachment_pod_create_failed(vmi: &VirtualMachineInstance, server_message: &str) -> Plan {
    let mut plan = Plan::idle();
    plan.events.push(Event::warning(
        vmi_ref(vmi),
        "FailedCreate",
        format!("Error creating attachment pod: {server_message}"),
    ));
    plan.fail(
        crate::ErrorKind::Sync,
        format!("Error creating attachment pod {server_message}"),
    );
    plan
}
