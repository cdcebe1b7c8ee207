//! The VMI conditions the controller owns, edited on the VMI's JSON working copy: the helpers
//! that add, replace and drop conditions the way KubeVirt's condition manager does, and the
//! `Ready` condition derived from the launcher pod.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::{pod, state};
use crate::api::VirtualMachineInstance;
use crate::meta;
use crate::small_json::{get, get_mut, index, is_str, member, member_mut, object_mut, set};
use crate::vmi_state::phase;

pub(super) fn conds_mut(v: &mut Value) -> &mut Vec<Value> {
    if !v.is_object() {
        *v = json!({});
    }
    let Value::Object(root) = v else {
        unreachable!("made an object above")
    };
    let status = object_mut(root, "status");
    if !member(status, "conditions").is_some_and(Value::is_array) {
        set(status, "conditions", json!([]));
    }
    member_mut(status, "conditions")
        .and_then(Value::as_array_mut)
        .expect("made an array above")
}

/// The VMI's condition of type `t` (`meta::json_condition`, looked up by scanning).
pub(super) fn find_cond<'a>(v: &'a Value, t: &str) -> Option<&'a Value> {
    get(v, "status")
        .and_then(|s| get(s, "conditions"))?
        .as_array()?
        .iter()
        .find(|c| is_str(c, "type", t))
}

/// Sets `c` unless a condition of its type with the same status and reason exists.
pub(super) fn update_cond(v: &mut Value, c: Value) {
    let conds = conds_mut(v);
    match conds
        .iter_mut()
        .find(|x| index(x, "type") == index(&c, "type"))
    {
        Some(x) => {
            if index(x, "status") != index(&c, "status") || get(x, "reason") != get(&c, "reason") {
                *x = c;
            }
        }
        None => conds.push(c),
    }
}

pub(super) fn remove_cond(v: &mut Value, t: &str) {
    if let Some(a) = get_mut(v, "status")
        .and_then(|s| get_mut(s, "conditions"))
        .and_then(Value::as_array_mut)
    {
        a.retain(|c| !is_str(c, "type", t));
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

/// The `Ready` condition the VMI should carry, before it is built as JSON: nearly every sync
/// finds it in place (same status and reason), and building it (two timestamps, six keys) only
/// to drop it again cost ~5 k instructions per sync.
pub(super) struct Wanted<'a> {
    status: &'a str,
    reason: Option<&'a str>,
    message: Option<&'a str>,
    times: Times<'a>,
}

enum Times<'a> {
    /// Both timestamps are the decision's `now`.
    Now(i64),
    /// The pod condition's own timestamps (`null` when unset).
    Pod(Option<&'a Time>, Option<&'a Time>),
}

impl Wanted<'_> {
    fn fixed(status: &'static str, reason: &'static str, message: &'static str, now: i64) -> Self {
        Wanted {
            status,
            reason: Some(reason),
            message: Some(message),
            times: Times::Now(now),
        }
    }

    /// As JSON, keys in the order [`cond`] writes them (`reason` and `message` left out when
    /// unset).
    fn to_json(&self, t: &str) -> Value {
        let mut c = json!({"type": t, "status": self.status});
        if let Some(r) = self.reason {
            c["reason"] = json!(r);
        }
        if let Some(m) = self.message {
            c["message"] = json!(m);
        }
        let (probe, transition) = match self.times {
            Times::Now(now) => (meta::time_json(now), meta::time_json(now)),
            Times::Pod(probe, transition) => (time_value(probe), time_value(transition)),
        };
        c["lastProbeTime"] = probe;
        c["lastTransitionTime"] = transition;
        c
    }
}

/// [`update_cond`] for a condition of type `t` built only when it is written.
pub(super) fn update_wanted_cond(v: &mut Value, t: &str, w: &Wanted<'_>) {
    let conds = conds_mut(v);
    match conds.iter_mut().find(|x| is_str(x, "type", t)) {
        Some(x) => {
            let same_reason = match w.reason {
                Some(r) => is_str(x, "reason", r),
                None => get(x, "reason").is_none(),
            };
            if !is_str(x, "status", w.status) || !same_reason {
                *x = w.to_json(t);
            }
        }
        None => conds.push(w.to_json(t)),
    }
}

pub(super) fn ready_condition<'a>(
    vmi: &VirtualMachineInstance,
    p: Option<&'a Pod>,
    now: i64,
) -> Wanted<'a> {
    const NOT_SCHEDULED: &str = "virt-launcher pod has not yet been scheduled";
    match p {
        None => Wanted::fixed("False", "PodNotExists", NOT_SCHEDULED, now),
        Some(p) if pod::is_temp(p) => Wanted::fixed("False", "PodNotExists", NOT_SCHEDULED, now),
        Some(p) if pod::is_down_or_going_down(p) => Wanted::fixed(
            "False",
            "PodTerminating",
            "virt-launcher pod is terminating",
            now,
        ),
        Some(_) if state::phase_of(vmi) != phase::RUNNING => Wanted::fixed(
            "False",
            "GuestNotRunning",
            "Guest VM is not reported as running",
            now,
        ),
        Some(p) => match pod::condition(p, "Ready") {
            Some(pc) => Wanted {
                status: &pc.status,
                reason: pc.reason.as_deref().filter(|s| !s.is_empty()),
                message: pc.message.as_deref().filter(|s| !s.is_empty()),
                times: Times::Pod(
                    pc.last_probe_time.as_ref(),
                    pc.last_transition_time.as_ref(),
                ),
            },
            None => Wanted::fixed(
                "False",
                "PodConditionMissing",
                "virt-launcher pod is missing the Ready condition",
                now,
            ),
        },
    }
}
