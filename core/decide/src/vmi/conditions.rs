//! The VMI conditions the controller owns, edited on the VMI's JSON working copy: the helpers
//! that add, replace and drop conditions the way KubeVirt's condition manager does, and the
//! `Ready` condition derived from the launcher pod.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::{pod, state};
use crate::api::VirtualMachineInstance;
use crate::meta;
pub(super) use crate::meta::json_condition as find_cond;
use crate::vmi_state::phase;
use kvrs_api::json_pointer::JsonPointer;

pub(super) fn conds_mut(v: &mut Value) -> &mut Vec<Value> {
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

/// Sets `c` unless a condition of its type with the same status and reason exists.
pub(super) fn update_cond(v: &mut Value, c: Value) {
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

pub(super) fn remove_cond(v: &mut Value, t: &str) {
    if let Some(a) = v.at_mut("/status/conditions").and_then(Value::as_array_mut) {
        a.retain(|c| c["type"] != t);
    }
}

pub(super) fn cond(t: &str, status: &str, reason: &str, message: &str, now: i64) -> Value {
    json!({
        "type": t, "status": status, "reason": reason, "message": message,
        "lastProbeTime": meta::time_json(now), "lastTransitionTime": meta::time_json(now),
    })
}

/// A pod condition's timestamp as the VMI condition carries it (`null` when unset).
pub(super) fn time_value(t: Option<&Time>) -> Value {
    t.and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or(Value::Null)
}

pub(super) fn ready_condition(vmi: &VirtualMachineInstance, p: Option<&Pod>, now: i64) -> Value {
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
                let mut c = json!({"type": "Ready", "status": pc.status});
                for (k, v) in [("reason", &pc.reason), ("message", &pc.message)] {
                    if let Some(v) = v.as_deref().filter(|s| !s.is_empty()) {
                        c[k] = json!(v);
                    }
                }
                c["lastProbeTime"] = time_value(pc.last_probe_time.as_ref());
                c["lastTransitionTime"] = time_value(pc.last_transition_time.as_ref());
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
