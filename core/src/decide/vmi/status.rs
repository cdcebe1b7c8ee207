//! The status the VMI controller owns (KubeVirt's `updateStatus`): phase and its transition
//! timestamps, conditions, active pods, node name, launcher image, volume and interface status —
//! written as a JSON patch tested against the snapshot, or, once virt-handler owns the VMI
//! (Scheduled, Running), as KubeVirt's field-by-field patch.

use serde_json::{Map, Value, json};

use super::lifecycle::{
    DEPRECATED_VMI_FINALIZER, MEMORY_OVERHEAD_ANNOTATION, MIGRATION_TRANSPORT_ANNOTATION,
    NODE_NAME_LABEL, OUTDATED_LAUNCHER_LABEL, SyncError, VMI_FINALIZER,
};
use super::pod_sync::{sync_dynamic_metadata_to_pod, sync_paused_condition_to_pod};
use super::{VmiWorld, pod, state};
use crate::api::VirtualMachineInstance;
use crate::decide::patch::{self, op};
use crate::decide::vmi::state::phase;
use crate::decide::{ApiWrite, Expectation, PatchType, Plan, WriteOp, meta};

fn conds_mut(v: &mut Value) -> &mut Vec<Value> {
    if !v["status"].is_object() {
        v["status"] = json!({});
    }
    if !v["status"]["conditions"].is_array() {
        v["status"]["conditions"] = json!([]);
    }
    v["status"]["conditions"]
        .as_array_mut()
        .expect("made an array above")
}

pub(super) fn find_cond<'a>(v: &'a Value, t: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

/// Sets `c` unless a condition of its type with the same status and reason exists.
fn update_cond(v: &mut Value, c: Value) {
    let conds = conds_mut(v);
    match conds.iter_mut().find(|x| x["type"] == c["type"]) {
        Some(x) => {
            if x["status"] != c["status"] || x.get("reason") != c.get("reason") {
                *x = c;
            }
        }
        None => conds.push(c),
    }
}

fn remove_cond(v: &mut Value, t: &str) {
    if let Some(a) = v
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        a.retain(|c| c["type"] != t);
    }
}

fn cond(t: &str, status: &str, reason: &str, message: &str, now: i64) -> Value {
    json!({
        "type": t, "status": status, "reason": reason, "message": message,
        "lastProbeTime": meta::time_json(now), "lastTransitionTime": meta::time_json(now),
    })
}

fn ready_condition(vmi: &VirtualMachineInstance, p: Option<&Value>, now: i64) -> Value {
    match p {
        None => cond(
            "Ready",
            "False",
            "PodNotExists",
            "virt-launcher pod has not yet been scheduled",
            now,
        ),
        Some(p) if pod::is_temp(p) => cond(
            "Ready",
            "False",
            "PodNotExists",
            "virt-launcher pod has not yet been scheduled",
            now,
        ),
        Some(p) if pod::is_down_or_going_down(p) => cond(
            "Ready",
            "False",
            "PodTerminating",
            "virt-launcher pod is terminating",
            now,
        ),
        Some(_) if state::phase_of(vmi) != phase::RUNNING => cond(
            "Ready",
            "False",
            "GuestNotRunning",
            "Guest VM is not reported as running",
            now,
        ),
        Some(p) => match pod::condition(p, "Ready") {
            Some(pc) => {
                let mut c = json!({"type": "Ready", "status": pc["status"]});
                for k in ["reason", "message"] {
                    if let Some(v) = pc
                        .get(k)
                        .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                    {
                        c[k] = v.clone();
                    }
                }
                c["lastProbeTime"] = pc.get("lastProbeTime").cloned().unwrap_or(Value::Null);
                c["lastTransitionTime"] =
                    pc.get("lastTransitionTime").cloned().unwrap_or(Value::Null);
                c
            }
            None => cond(
                "Ready",
                "False",
                "PodConditionMissing",
                "virt-launcher pod is missing the Ready condition",
                now,
            ),
        },
    }
}

fn set_phase(v: &mut Value, p: &str) {
    v["status"]["phase"] = json!(p);
}

fn has_finalizer(v: &Value, f: &str) -> bool {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == f))
}

fn remove_finalizer(v: &mut Value, f: &str) {
    if let Some(a) = v
        .pointer_mut("/metadata/finalizers")
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
    if let Some(m) = v
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        m.remove(k);
    }
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
            vm.pointer("/metadata/name").and_then(Value::as_str) == Some(owner.name.as_str())
                && vm.pointer("/metadata/uid").and_then(Value::as_str) == Some(owner.uid.as_str())
        })
}

/// Volume status entries for every volume (existing entries kept).
fn update_volume_status(v: &mut Value) {
    let old: Vec<Value> = v
        .pointer("/status/volumeStatus")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let vols: Vec<String> = v
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|x| x["name"].as_str().map(String::from))
        .collect();
    let new: Vec<Value> = vols
        .iter()
        .map(|n| {
            old.iter()
                .find(|o| o["name"] == n.as_str())
                .cloned()
                .unwrap_or_else(|| json!({"name": n, "target": ""}))
        })
        .collect();
    if new.is_empty() && old.is_empty() {
        return;
    }
    v["status"]["volumeStatus"] = Value::Array(new);
}

/// Interface status entries for pod-network interfaces (`eth0`), existing entries kept.
fn update_network_status(v: &mut Value) {
    let old: Vec<Value> = v
        .pointer("/status/interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let nets: Vec<Value> = v
        .pointer("/spec/networks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut new = Vec::new();
    for n in nets {
        let Some(name) = n["name"].as_str() else {
            continue;
        };
        if let Some(o) = old.iter().find(|o| o["name"] == name) {
            new.push(o.clone());
        } else if n.get("pod").is_some() {
            new.push(json!({"name": name, "podInterfaceName": "eth0"}));
        }
    }
    if new.is_empty() && old.is_empty() {
        return;
    }
    v["status"]["interfaces"] = Value::Array(new);
}

pub(super) fn update_status(
    w: &VmiWorld<'_>,
    plan: &mut Plan,
    p: Option<&Value>,
    sync_err: Option<&SyncError>,
) -> Option<Value> {
    let vmi = w.vmi;
    let now = w.now;
    let ns = meta::namespace(&vmi.metadata).to_string();
    let orig = serde_json::to_value(vmi).unwrap_or_default();
    let mut c = orig.clone();
    if !c["status"].is_object() {
        c["status"] = json!({});
    }
    if has_finalizer(&c, DEPRECATED_VMI_FINALIZER) {
        remove_finalizer(&mut c, DEPRECATED_VMI_FINALIZER);
        add_finalizer(&mut c, VMI_FINALIZER);
    }
    let pod_exists = p.is_some_and(|p| !pod::is_temp(p));

    // Active pods: every pod the VMI controls (including one just created), by UID -> node.
    let mut active = Map::new();
    let mut controlled: Vec<&Value> = w
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
        if let Some(uid) = x.pointer("/metadata/uid").and_then(Value::as_str) {
            active.insert(uid.into(), json!(pod::node_name(x)));
        }
    }
    if !active.is_empty()
        || c.pointer("/status/activePods")
            .is_some_and(|a| !a.is_null())
    {
        c["status"]["activePods"] = Value::Object(active);
    }

    update_cond(&mut c, ready_condition(vmi, p, now));
    if let Some(p) = p.filter(|_| pod_exists) {
        let image = pod::compute_image(p);
        if !image.is_empty() && image != w.config.launcher_image {
            set_label(&mut c, OUTDATED_LAUNCHER_LABEL, "");
        } else {
            remove_label(&mut c, OUTDATED_LAUNCHER_LABEL);
        }
        c["status"]["launcherContainerImageVersion"] = json!(image);
        // KubeVirt also patches a pod it has just deleted in this reconcile (the patch then fails
        // with NotFound and the key is retried); kvrs leaves pods it deletes alone.
        let deleted_here = plan.writes.iter().any(|w| {
            w.resource == "pods" && w.name == pod::name(p) && matches!(w.op, WriteOp::Delete { .. })
        });
        if !deleted_here {
            sync_paused_condition_to_pod(&c, p, plan, &ns, now);
            sync_dynamic_metadata_to_pod(&c, vmi, p, plan, &ns);
        }
        if let Some(bytes) = p
            .pointer(&format!(
                "/metadata/annotations/{}",
                patch::escape(MEMORY_OVERHEAD_ANNOTATION)
            ))
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<i64>().ok())
        {
            let q = crate::Quantity::from_value(bytes, crate::quantity::QuantityFormat::BinarySI);
            c["status"]["memory"]["memoryOverhead"] = json!(q.to_string());
        }
    }

    let mut sync_err_override: Option<SyncError> = None;
    let current_phase = state::phase_of(vmi);
    match current_phase {
        "" | phase::PENDING => {
            if pod_exists {
                set_phase(&mut c, phase::SCHEDULING);
            } else if state::is_deleting(vmi) {
                set_phase(&mut c, phase::FAILED);
            } else {
                set_phase(&mut c, phase::PENDING);
            }
        }
        phase::SCHEDULING => {
            remove_cond(&mut c, "Provisioning");
            match p.filter(|_| pod_exists) {
                Some(p) => {
                    match p
                        .pointer("/status/qosClass")
                        .and_then(Value::as_str)
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
                        Some(pc) if pc["status"] == "False" => {
                            if find_cond(&c, "PodScheduled").is_none() {
                                let mut nc =
                                    json!({"type": "PodScheduled", "status": pc["status"]});
                                for k in
                                    ["reason", "message", "lastProbeTime", "lastTransitionTime"]
                                {
                                    nc[k] = pc.get(k).cloned().unwrap_or(Value::Null);
                                }
                                conds_mut(&mut c).push(nc);
                            }
                        }
                        _ => remove_cond(&mut c, "PodScheduled"),
                    }
                    if let Some((reason, message)) = pod::image_error(p) {
                        sync_err_override = Some(SyncError { reason, message });
                    }
                    if pod::is_ready(p) && !state::is_deleting(vmi) {
                        update_volume_status(&mut c);
                        update_network_status(&mut c);
                        set_phase(&mut c, phase::SCHEDULED);
                        let node = pod::node_name(p).to_string();
                        set_label(&mut c, NODE_NAME_LABEL, &node);
                        c["status"]["nodeName"] = json!(node);
                        let transport = p
                            .pointer(&format!(
                                "/metadata/annotations/{}",
                                patch::escape(MIGRATION_TRANSPORT_ANNOTATION)
                            ))
                            .is_some();
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
            let has_finalizers = c
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
            if !has_owner_vm(w) && has_finalizers {
                remove_finalizer(&mut c, crate::decide::vm::VM_CONTROLLER_FINALIZER);
            }
        }
        phase::RUNNING => {
            if !pod_exists {
                set_phase(&mut c, phase::FAILED);
            } else {
                update_volume_status(&mut c);
                update_network_status(&mut c);
            }
        }
        phase::SCHEDULED => {
            if !pod_exists {
                set_phase(&mut c, phase::FAILED);
            } else {
                update_volume_status(&mut c);
            }
        }
        phase::WAITING_FOR_SYNC => {
            if state::is_deleting(vmi) {
                remove_finalizer(&mut c, DEPRECATED_VMI_FINALIZER);
                remove_finalizer(&mut c, VMI_FINALIZER);
                let has_finalizers = c
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
                if !has_owner_vm(w) && has_finalizers {
                    remove_finalizer(&mut c, crate::decide::vm::VM_CONTROLLER_FINALIZER);
                }
            } else if pod_exists {
                set_phase(&mut c, phase::SCHEDULING);
            }
        }
        other => {
            plan.fail(format!("unknown vmi phase {other}"));
            return None;
        }
    }

    let evacuating = c
        .pointer("/status/evacuationNodeName")
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
        return handed_over_patch(plan, &orig, &mut c, &ns, meta::name(&vmi.metadata));
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
        .pointer("/status/phase")
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
    let mut o = orig.clone();
    tidy(&mut o);
    let changed = ["status", "metadata"].iter().any(|k| {
        let a = meta::without_zero_values(&o[*k]);
        let b = meta::without_zero_values(&c[*k]);
        if *k == "metadata" {
            ["finalizers", "annotations", "labels"]
                .iter()
                .any(|f| a.get(*f) != b.get(*f))
        } else {
            a != b
        }
    });
    if !changed {
        return None;
    }
    let mut ops = patch::field_ops("/status", o.get("status"), &c["status"]);
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
    plan.writes.push(
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

/// Drops empty maps/lists Go would omit, so the patch does not churn on them.
fn tidy(v: &mut Value) {
    for (sect, keys) in [
        ("metadata", &["labels", "annotations", "finalizers"][..]),
        ("status", &["conditions", "activePods"][..]),
    ] {
        if let Some(m) = v.get_mut(sect).and_then(Value::as_object_mut) {
            for k in keys {
                let empty = m.get(*k).is_some_and(|x| {
                    x.is_null()
                        || x.as_array().is_some_and(Vec::is_empty)
                        || x.as_object().is_some_and(Map::is_empty)
                });
                if empty && *k != "activePods" {
                    m.remove(*k);
                }
            }
        }
    }
}

/// KubeVirt's `prepareVMIPatch`: conditions, volume and interface status, active pods, phase,
/// launcher image, labels and finalizers — each tested against the old value.
fn handed_over_patch(
    plan: &mut Plan,
    orig: &Value,
    c: &mut Value,
    ns: &str,
    name: &str,
) -> Option<Value> {
    let mut ops = Vec::new();
    let st = |v: &Value, k: &str| {
        v.pointer(&format!("/status/{k}"))
            .cloned()
            .filter(|x| !x.is_null())
    };
    let mut replace = |path: &str, old: Option<Value>, new: Option<Value>, add_if_absent: bool| {
        if old == new {
            return;
        }
        let new = new.unwrap_or(Value::Null);
        match old {
            None if add_if_absent => ops.push(op("add", path, Some(new))),
            old => {
                ops.push(op("test", path, Some(old.unwrap_or(Value::Null))));
                ops.push(op("replace", path, Some(new)));
            }
        }
    };
    replace(
        "/status/volumeStatus",
        st(orig, "volumeStatus"),
        st(c, "volumeStatus"),
        true,
    );
    let cond_key = |v: &Value| -> Vec<(String, String, String)> {
        v.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (s("type"), s("status"), s("reason"))
            })
            .collect()
    };
    let (mut ka, mut kb) = (cond_key(orig), cond_key(c));
    ka.sort();
    kb.sort();
    if ka != kb {
        replace(
            "/status/conditions",
            st(orig, "conditions"),
            st(c, "conditions"),
            false,
        );
    }
    replace(
        "/status/activePods",
        st(orig, "activePods"),
        st(c, "activePods"),
        false,
    );
    replace("/status/phase", st(orig, "phase"), st(c, "phase"), false);
    replace(
        "/status/launcherContainerImageVersion",
        st(orig, "launcherContainerImageVersion"),
        st(c, "launcherContainerImageVersion"),
        true,
    );
    let md = |v: &Value, k: &str| {
        v.pointer(&format!("/metadata/{k}"))
            .cloned()
            .filter(|x| !x.is_null())
    };
    replace(
        "/metadata/labels",
        md(orig, "labels"),
        md(c, "labels"),
        true,
    );
    replace(
        "/metadata/finalizers",
        md(orig, "finalizers"),
        md(c, "finalizers"),
        true,
    );
    let sorted = |v: Option<Value>| {
        let mut a = v.and_then(|x| x.as_array().cloned()).unwrap_or_default();
        a.sort_by_key(|x| x["name"].as_str().unwrap_or_default().to_string());
        a
    };
    let (old_if, new_if) = (st(orig, "interfaces"), st(c, "interfaces"));
    if sorted(old_if.clone()) != sorted(new_if.clone()) {
        ops.push(op(
            "test",
            "/status/interfaces",
            Some(old_if.unwrap_or(Value::Null)),
        ));
        ops.push(op(
            "add",
            "/status/interfaces",
            Some(new_if.unwrap_or(Value::Null)),
        ));
    }
    if ops.is_empty() {
        return None;
    }
    plan.writes.push(ApiWrite::new(
        "virtualmachineinstances",
        ns,
        name,
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: Value::Array(ops),
        },
    ));
    Some(c.clone())
}
