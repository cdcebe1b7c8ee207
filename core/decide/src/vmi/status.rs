//! The status the VMI controller owns (KubeVirt's `updateStatus`): phase and its transition
//! timestamps, conditions, active pods, node name, launcher image, volume and interface status —
//! written as a JSON patch tested against the snapshot, or, once virt-handler owns the VMI
//! (Scheduled, Running), as KubeVirt's field-by-field patch.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use super::conditions::{
    cond, conds_mut, find_cond, ready_condition, remove_cond, time_value, update_cond,
    update_wanted_cond,
};
use super::handover::{handed_over_patch, tidy};
use super::lifecycle::{
    DEPRECATED_VMI_FINALIZER, MEMORY_OVERHEAD_ANNOTATION, MIGRATION_TRANSPORT_ANNOTATION,
    NODE_NAME_LABEL, OUTDATED_LAUNCHER_LABEL, SyncError, VMI_FINALIZER,
};
use super::pod_sync::{sync_dynamic_metadata_to_pod, sync_paused_condition_to_pod};
use super::{VmiWorld, data_volumes, pod, state};
use crate::api::{VirtualMachineInstance, VirtualMachineInstanceStatus};
use crate::patch::{self, op};
use crate::vmi_state::phase;
use crate::{ApiWrite, Expectation, PatchType, Plan, WriteOp, meta};
use kvrs_api::json_pointer::JsonPointer;

fn set_phase(v: &mut Value, p: &str) {
    v["status"]["phase"] = json!(p);
}

fn has_finalizer(v: &Value, f: &str) -> bool {
    v.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == f))
}

fn remove_finalizer(v: &mut Value, f: &str) {
    if let Some(a) = v
        .at_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    {
        a.retain(|x| x != f);
    }
}

fn add_finalizer(v: &mut Value, f: &str) {
    if !has_finalizer(v, f) {
        if !v["metadata"]["finalizers"].is_array() {
            v["metadata"]["finalizers"] = json!([]);
        }
        if let Some(a) = v["metadata"]["finalizers"].as_array_mut() {
            a.push(json!(f));
        }
    }
}

fn set_label(v: &mut Value, k: &str, val: &str) {
    if !v["metadata"]["labels"].is_object() {
        v["metadata"]["labels"] = json!({});
    }
    v["metadata"]["labels"][k] = json!(val);
}

fn remove_label(v: &mut Value, k: &str) {
    if let Some(m) = v.at_mut("/metadata/labels").and_then(Value::as_object_mut) {
        m.remove(k);
    }
}

/// A Pending VMI waiting for a WaitForFirstConsumer DataVolume: the `Provisioning` condition,
/// and the temporary pod's scheduling failure as the VMI's `PodScheduled` condition (removed
/// once it is scheduled); the VMI fails with its temporary pod.
fn provisioning(c: &mut Value, temp_pod: Option<&Pod>) {
    if find_cond(c, "Provisioning").is_none() {
        conds_mut(c).push(json!({"type": "Provisioning", "status": "True",
                                 "lastProbeTime": null, "lastTransitionTime": null}));
    }
    let Some(p) = temp_pod else {
        return;
    };
    match pod::condition(p, "PodScheduled") {
        Some(pc) if pc.status == "False" => {
            if find_cond(c, "PodScheduled").is_none() {
                conds_mut(c).push(pod_condition_json(pc));
            }
        }
        _ => remove_cond(c, "PodScheduled"),
    }
    if pod::is_failed_or_going_down(p) {
        set_phase(c, phase::FAILED);
    }
}

/// A pod condition as the VMI condition KubeVirt copies it into (`AddPodCondition`).
fn pod_condition_json(pc: &k8s_openapi::api::core::v1::PodCondition) -> Value {
    json!({
        "type": pc.type_,
        "status": pc.status,
        "reason": pc.reason,
        "message": pc.message,
        "lastProbeTime": time_value(pc.last_probe_time.as_ref()),
        "lastTransitionTime": time_value(pc.last_transition_time.as_ref()),
    })
}

fn has_owner_vm(w: &VmiWorld<'_>) -> bool {
    let Some(owner) = meta::controller_of(&w.vmi.metadata).filter(|o| o.kind == "VirtualMachine")
    else {
        return false;
    };
    let typed = w.vm.is_some_and(|vm| {
        meta::name(&vm.metadata) == owner.name && meta::uid(&vm.metadata) == owner.uid
    });
    typed
        || w.vms.iter().any(|vm| {
            vm.metadata.name.as_deref() == Some(owner.name.as_str())
                && vm.metadata.uid.as_deref() == Some(owner.uid.as_str())
        })
}

/// A VMI no cached VM owns keeps no VM-controller finalizer: nobody else would remove it.
fn release_orphan(w: &VmiWorld<'_>, c: &mut Value) {
    let has_finalizers = c
        .at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if has_finalizers && !has_owner_vm(w) {
        remove_finalizer(c, kvrs_api::names::finalizers::VM_CONTROLLER);
    }
}

/// Rebuilds the status list `status_key` from the spec list `spec_key`, in spec order: an
/// existing status entry of the same name is kept, otherwise `fresh` may make one. Nothing is
/// written when the old and the new list are both empty.
fn rebuild_status_list(
    v: &mut Value,
    spec_key: &str,
    status_key: &str,
    fresh: impl Fn(&str, &Value) -> Option<Value>,
) {
    // The old list is taken out (and put back when nothing is written), not copied: only the
    // entries kept are cloned.
    let taken = v
        .get_mut("status")
        .and_then(|s| s.get_mut(status_key))
        .map(Value::take);
    let empty = Vec::new();
    let old: &Vec<Value> = taken.as_ref().and_then(Value::as_array).unwrap_or(&empty);
    let new: Vec<Value> = v
        .get("spec")
        .and_then(|s| s.get(spec_key))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| {
            let name = item["name"].as_str()?;
            match old.iter().find(|o| o["name"] == name) {
                Some(o) => Some(o.clone()),
                None => fresh(name, item),
            }
        })
        .collect();
    if new.is_empty() && old.is_empty() {
        if let Some(t) = taken {
            v["status"][status_key] = t;
        }
        return;
    }
    v["status"][status_key] = Value::Array(new);
}

/// Volume status entries for every volume (existing entries kept), sorted by name as KubeVirt's
/// VMI controller sorts them — virt-handler writes them in that order too, and a list the two
/// order differently is rewritten by each in turn, forever.
///
/// With the launcher pod at hand, hotplugged volumes' entries follow their attachment pod, and
/// entries of volumes gone from the spec stay while one still carries them
/// ([`super::hotplug::update_volume_status`]).
fn update_volume_status(w: &VmiWorld<'_>, v: &mut Value, launcher: Option<&Pod>, plan: &mut Plan) {
    let pvcs = w.pvcs;
    let old: Vec<Value> = v
        .at("/status/volumeStatus")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    rebuild_status_list(v, "volumes", "volumeStatus", |name, _| {
        Some(json!({"name": name, "target": ""}))
    });
    if let Some(l) = launcher {
        super::hotplug::update_volume_status(w, v, &old, l, plan);
    }
    if let Some(kept) = super::backend_storage::kept_entry(w, &old)
        && let Some(list) = v
            .at_mut("/status/volumeStatus")
            .and_then(Value::as_array_mut)
        && !list.iter().any(|e| e["name"] == kept["name"])
    {
        list.push(kept);
    }
    if let Some(list) = v
        .at_mut("/status/volumeStatus")
        .and_then(Value::as_array_mut)
    {
        list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    }
    super::pvc_info::fill(v, pvcs);
}

/// Interface status entries for pod-network interfaces (`eth0`), existing entries kept, and
/// for secondary Multus networks what KubeVirt's `UpdateVMIStatus` takes from the pod's Multus
/// `network-status` (see [`super::network_status`]).
fn update_network_status(v: &mut Value, pod: Option<&Pod>) {
    let statuses = pod
        .and_then(|p| meta::annotation(&p.metadata, super::network_status::ANNOTATION))
        .map(super::network_status::parse)
        .unwrap_or_default();
    let secondary = super::network_status::secondary_pod_ifaces(v, &statuses);
    rebuild_status_list(v, "networks", "interfaces", |name, net| {
        if net.get("pod").is_some() {
            return Some(json!({"name": name, "podInterfaceName": "eth0"}));
        }
        secondary
            .get(name)
            .filter(|s| s.reported)
            .map(|s| json!({"name": name, "infoSource": "multus-status", "podInterfaceName": s.pod_iface}))
    });
    super::network_status::apply_to_existing(v, &secondary);
}

/// The part of the VMI this step reads and writes, as JSON: the metadata's labels, annotations
/// and finalizers, the status, and the spec's volumes and networks (whose status lists it
/// rebuilds) — each exactly as the VMI writes it, so the patch's `test` operations match what
/// is stored. Serialising the whole VMI (its domain spec above all) on every sync cost about as
/// much as the rest of the step; its whole metadata, a tenth of it. The spec part comes apart:
/// only the working copy reads it, so it is moved there rather than cloned with the view.
fn status_view(vmi: &VirtualMachineInstance) -> (Value, Value) {
    let mut view = Map::new();
    view.insert("metadata".into(), metadata_view(&vmi.metadata));
    let mut spec = Map::new();
    if let Some(volumes) = vmi.spec.volumes.as_ref().filter(|v| !v.is_empty()) {
        spec.insert(
            "volumes".into(),
            serde_json::to_value(volumes).unwrap_or_default(),
        );
    }
    if let Some(networks) = vmi.spec.networks.as_ref().filter(|n| !n.is_empty()) {
        spec.insert(
            "networks".into(),
            serde_json::to_value(networks).unwrap_or_default(),
        );
    }
    // As the VMI writes it: a missing status is Go's zero status.
    let status = match &vmi.status {
        Some(s) => serde_json::to_value(s),
        None => serde_json::to_value(VirtualMachineInstanceStatus::default()),
    };
    view.insert("status".into(), status.unwrap_or_default());
    (Value::Object(view), Value::Object(spec))
}

/// The metadata's labels, annotations and finalizers as the VMI writes them (Go's `omitempty`:
/// an empty map or list is left out; keys in the serialiser's order), built directly: cloning
/// the three into an `ObjectMeta` and serialising it cost ~6 k instructions per sync.
fn metadata_view(m: &ObjectMeta) -> Value {
    fn string_map(m: Option<&std::collections::BTreeMap<String, String>>) -> Option<Value> {
        m.filter(|m| !m.is_empty()).map(|m| {
            Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            )
        })
    }
    let mut view = Map::new();
    if let Some(a) = string_map(m.annotations.as_ref()) {
        view.insert("annotations".into(), a);
    }
    if let Some(f) = m.finalizers.as_ref().filter(|f| !f.is_empty()) {
        view.insert(
            "finalizers".into(),
            Value::Array(f.iter().map(|x| Value::String(x.clone())).collect()),
        );
    }
    if let Some(l) = string_map(m.labels.as_ref()) {
        view.insert("labels".into(), l);
    }
    Value::Object(view)
}

pub(super) fn update_status(
    w: &VmiWorld<'_>,
    dvs: &[&Value],
    plan: &mut Plan,
    p: Option<&Pod>,
    sync_err: Option<&SyncError>,
) -> Option<Value> {
    let vmi = w.vmi;
    let now = w.now.unix();
    let ns = meta::namespace(&vmi.metadata).to_string();
    let (orig, spec) = status_view(vmi);
    let mut c = orig.clone();
    c["spec"] = spec;
    if !c["status"].is_object() {
        c["status"] = json!({});
    }
    if has_finalizer(&c, DEPRECATED_VMI_FINALIZER) {
        remove_finalizer(&mut c, DEPRECATED_VMI_FINALIZER);
        add_finalizer(&mut c, VMI_FINALIZER);
    }
    let pod_exists = p.is_some_and(|p| !pod::is_temp(p));
    let temp_pod = p.filter(|p| pod::is_temp(p));
    let failed_dv = data_volumes::any_failed(dvs);
    // No reason to look for one waiting for its consumer once one failed.
    let wffc_dv = !failed_dv && data_volumes::any_wait_for_first_consumer(dvs);

    // Active pods: every pod the VMI controls (including one just created), by UID -> node.
    let mut active = Map::new();
    let mut controlled: Vec<&Pod> = w
        .pods
        .iter()
        .copied()
        .filter(|x| pod::is_controlled_by(x, vmi))
        .collect();
    if let Some(p) = p
        && !controlled.iter().any(|x| pod::name(x) == pod::name(p))
    {
        controlled.push(p);
    }
    for x in &controlled {
        if let Some(uid) = x.metadata.uid.as_deref() {
            active.insert(uid.into(), json!(pod::node_name(x)));
        }
    }
    if !active.is_empty() || c.at("/status/activePods").is_some_and(|a| !a.is_null()) {
        c["status"]["activePods"] = Value::Object(active);
    }

    update_wanted_cond(&mut c, "Ready", &ready_condition(vmi, p, now));
    if let Some(p) = p.filter(|_| pod_exists) {
        let image = pod::compute_image(p);
        if !image.is_empty() && image != w.config.launcher_image {
            set_label(&mut c, OUTDATED_LAUNCHER_LABEL, "");
        } else {
            remove_label(&mut c, OUTDATED_LAUNCHER_LABEL);
        }
        // Go omits the empty string (`omitempty`): a pod without an image leaves an absent
        // field absent, or every sync would write `""` the API server then drops again.
        let stored = c["status"]["launcherContainerImageVersion"].as_str();
        if !image.is_empty() || stored.is_some_and(|s| !s.is_empty()) {
            c["status"]["launcherContainerImageVersion"] = json!(image);
        }
        // As KubeVirt does, also for a pod deleted earlier in this reconcile (issue 18 class 6):
        // the API server keeps a bound pod until its grace period ends, so the paused condition
        // and labels it carries while terminating are the VMI's, as for a pod found terminating
        // (oracle case vmi-deleting-pod-terminating). A pod no node holds and no finalizer keeps
        // is gone once deleted: KubeVirt's patches of it fail with NotFound and the key is
        // retried; kvrs does not send those doomed writes.
        let deleted_here = plan.writes().any(|w| {
            w.resource == "pods" && w.name == pod::name(p) && matches!(w.op, WriteOp::Delete { .. })
        });
        let outlives_delete = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
            || p.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty());
        if !deleted_here || outlives_delete {
            sync_paused_condition_to_pod(&c, vmi, p, plan, now);
            sync_dynamic_metadata_to_pod(&c, vmi, p, plan, &ns);
        }
        if let Some(bytes) = meta::annotation(&p.metadata, MEMORY_OVERHEAD_ANNOTATION)
            .and_then(|s| s.parse::<i64>().ok())
        {
            let q = crate::Quantity::from_value(bytes, crate::quantity::QuantityFormat::BinarySI);
            c["status"]["memory"]["memoryOverhead"] = json!(q.to_string());
        }
    }

    data_volumes::aggregate_condition(&mut c, dvs);
    super::backend_storage::update_volume_status(w, &mut c);

    let mut sync_err_override: Option<SyncError> = None;
    let current_phase = state::phase_of(vmi);
    match current_phase {
        "" | phase::PENDING => {
            if pod_exists {
                set_phase(&mut c, phase::SCHEDULING);
            } else if state::is_deleting(vmi) || failed_dv {
                set_phase(&mut c, phase::FAILED);
            } else {
                set_phase(&mut c, phase::PENDING);
                if wffc_dv {
                    provisioning(&mut c, temp_pod);
                }
                if let Some(e) = sync_err.filter(|e| e.reason == "FailedPvcNotFound") {
                    // Replaced on every sync, timestamps unset, as KubeVirt appends it.
                    remove_cond(&mut c, "PodScheduled");
                    conds_mut(&mut c).push(json!({
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": e.message, "lastProbeTime": null, "lastTransitionTime": null,
                    }));
                }
            }
        }
        phase::SCHEDULING => {
            remove_cond(&mut c, "Provisioning");
            match p.filter(|_| pod_exists) {
                Some(p) => {
                    match p
                        .status
                        .as_ref()
                        .and_then(|s| s.qos_class.as_deref())
                        .filter(|q| !q.is_empty())
                    {
                        Some(q) => c["status"]["qosClass"] = json!(q),
                        None => {
                            if let Some(m) = c["status"].as_object_mut() {
                                m.remove("qosClass");
                            }
                        }
                    }
                    match pod::condition(p, "PodScheduled") {
                        Some(pc) if pc.status == "False" => {
                            if find_cond(&c, "PodScheduled").is_none() {
                                conds_mut(&mut c).push(pod_condition_json(pc));
                            }
                        }
                        _ => remove_cond(&mut c, "PodScheduled"),
                    }
                    if let Some((reason, message)) = pod::image_error(p) {
                        sync_err_override = Some(SyncError {
                            kind: crate::ErrorKind::Sync,
                            reason,
                            message,
                        });
                    }
                    if pod::is_ready(p) && !state::is_deleting(vmi) {
                        update_volume_status(w, &mut c, Some(p), plan);
                        update_network_status(&mut c, Some(p));
                        set_phase(&mut c, phase::SCHEDULED);
                        let node = pod::node_name(p).to_string();
                        set_label(&mut c, NODE_NAME_LABEL, &node);
                        c["status"]["nodeName"] = json!(node);
                        let transport =
                            meta::annotation(&p.metadata, MIGRATION_TRANSPORT_ANNOTATION).is_some();
                        if transport {
                            c["status"]["migrationTransport"] = json!("Unix");
                        }
                    } else if pod::is_down_or_going_down(p) {
                        set_phase(&mut c, phase::FAILED);
                    }
                }
                None => set_phase(&mut c, phase::FAILED),
            }
        }
        phase::FAILED | phase::SUCCEEDED => {
            let all_deleted = !w.pods.iter().any(|x| pod::is_controlled_by(x, vmi));
            if all_deleted {
                remove_finalizer(&mut c, DEPRECATED_VMI_FINALIZER);
                remove_finalizer(&mut c, VMI_FINALIZER);
                remove_label(&mut c, OUTDATED_LAUNCHER_LABEL);
                if let Some(m) = c["status"].as_object_mut() {
                    m.remove("launcherContainerImageVersion");
                }
            }
            release_orphan(w, &mut c);
        }
        phase::RUNNING => {
            if !pod_exists {
                set_phase(&mut c, phase::FAILED);
            } else {
                update_volume_status(w, &mut c, p, plan);
                update_network_status(&mut c, p);
            }
        }
        phase::SCHEDULED => {
            if !pod_exists {
                set_phase(&mut c, phase::FAILED);
            } else {
                update_volume_status(w, &mut c, p, plan);
            }
        }
        phase::WAITING_FOR_SYNC => {
            if state::is_deleting(vmi) {
                remove_finalizer(&mut c, DEPRECATED_VMI_FINALIZER);
                remove_finalizer(&mut c, VMI_FINALIZER);
                release_orphan(w, &mut c);
            } else if pod_exists {
                set_phase(&mut c, phase::SCHEDULING);
            }
        }
        other => {
            plan.fail(
                crate::ErrorKind::InvalidObject,
                format!("unknown vmi phase {other}"),
            );
            return None;
        }
    }

    let evacuating = c
        .at("/status/evacuationNodeName")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if evacuating {
        if !find_cond(&c, "EvictionRequested").is_some_and(|x| x["status"] == "True") {
            update_cond(
                &mut c,
                cond(
                    "EvictionRequested",
                    "True",
                    "EvictionRequested",
                    "VMI is marked for eviction",
                    now,
                ),
            );
        }
    } else {
        remove_cond(&mut c, "EvictionRequested");
    }

    // virt-handler owns Scheduled and Running VMIs: only patch what this controller keeps.
    if matches!(current_phase, phase::RUNNING | phase::SCHEDULED) {
        return handed_over_patch(plan, &orig, c, &ns, meta::name(&vmi.metadata));
    }

    let err = sync_err_override.as_ref().or(sync_err);
    match err {
        Some(e) => {
            let already = find_cond(&c, "Synchronized")
                .is_some_and(|x| x["status"] == "False" && x["reason"] == e.reason.as_str());
            if !already {
                remove_cond(&mut c, "Synchronized");
                conds_mut(&mut c).push(json!({
                    "type": "Synchronized", "status": "False", "reason": e.reason, "message": e.message,
                    "lastProbeTime": null, "lastTransitionTime": meta::time_json(now),
                }));
            }
        }
        None => remove_cond(&mut c, "Synchronized"),
    }
    let new_phase = c
        .at("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if new_phase != current_phase {
        let ts = c["status"]["phaseTransitionTimestamps"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !ts.iter().any(|t| t["phase"] == new_phase.as_str()) {
            let mut ts = ts;
            ts.push(json!({"phase": new_phase, "phaseTransitionTimestamp": meta::time_json(now)}));
            c["status"]["phaseTransitionTimestamps"] = Value::Array(ts);
        }
    }
    tidy(&mut c);
    let mut o = orig;
    tidy(&mut o);
    let changed = !meta::eq_without_zero_values(&o["status"], &c["status"])
        || ["finalizers", "annotations", "labels"].iter().any(|f| {
            !meta::eq_entry_without_zero_values(o["metadata"].get(*f), c["metadata"].get(*f))
        });
    if !changed {
        return None;
    }
    // KubeVirt writes a VMI it still owns with a full `Update`: conditional on the version read.
    let mut ops: Vec<Value> = patch::resource_version_test(&vmi.metadata)
        .into_iter()
        .collect();
    ops.extend(patch::field_ops("/status", o.get("status"), &c["status"]));
    for f in ["labels", "annotations", "finalizers"] {
        let (a, b) = (o["metadata"].get(f), c["metadata"].get(f));
        if a != b {
            let path = format!("/metadata/{f}");
            match (a, b) {
                (Some(a), Some(b)) => {
                    ops.push(op("test", &path, Some(a.clone())));
                    ops.push(op("replace", &path, Some(b.clone())));
                }
                (None, Some(b)) => ops.push(op("add", &path, Some(b.clone()))),
                (Some(a), None) => {
                    ops.push(op("test", &path, Some(a.clone())));
                    ops.push(op("remove", &path, None));
                }
                (None, None) => {}
            }
        }
    }
    plan.push_write(
        ApiWrite::new(
            "virtualmachineinstances",
            &ns,
            meta::name(&vmi.metadata),
            WriteOp::Patch {
                patch_type: PatchType::Json,
                patch: Value::Array(ops),
            },
        )
        .expecting(Expectation::ObservedUpdate {
            key: meta::key(&vmi.metadata),
        }),
    );
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The direct view is what serialising the three fields as the VMI writes them gives,
    /// empty maps and lists included.
    #[test]
    fn metadata_view_is_the_serialised_metadata() {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        let cases = [
            ObjectMeta::default(),
            ObjectMeta {
                labels: map(&[]),
                annotations: map(&[]),
                finalizers: Some(vec![]),
                ..ObjectMeta::default()
            },
            ObjectMeta {
                labels: map(&[("b", "1"), ("a", "")]),
                annotations: map(&[("kubevirt.io/x", "y")]),
                finalizers: Some(vec!["f2".into(), "f1".into()]),
                ..ObjectMeta::default()
            },
            ObjectMeta {
                labels: map(&[("a", "b")]),
                ..ObjectMeta::default()
            },
        ];
        for m in cases {
            let want = kvrs_api::object_meta_json(&m).unwrap();
            let got = metadata_view(&m);
            assert_eq!(got, want, "{m:?}");
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&want).unwrap(),
                "key order of {m:?}"
            );
        }
    }
}
