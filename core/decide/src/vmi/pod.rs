//! Reading launcher pods (as JSON objects) the way the VMI controller does.

use serde_json::Value;

use crate::api::VirtualMachineInstance;
use crate::{meta, parse_rfc3339};

/// Annotation marking a temporary pod that only triggers WaitForFirstConsumer volume binding.
pub const EPHEMERAL_PROVISIONING_ANNOTATION: &str = "cdi.kubevirt.io/storage.pvc.ephemeral";

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

/// The pod's name.
pub fn name(pod: &Value) -> &str {
    s(pod, "/metadata/name")
}

/// The pod's phase.
pub fn phase(pod: &Value) -> &str {
    s(pod, "/status/phase")
}

/// The node the pod is bound to, empty when unscheduled.
pub fn node_name(pod: &Value) -> &str {
    s(pod, "/spec/nodeName")
}

/// Whether the pod's controller owner reference points at this VMI (by UID).
pub fn is_controlled_by(pod: &Value, vmi: &VirtualMachineInstance) -> bool {
    let uid = meta::uid(&vmi.metadata);
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|o| o["controller"] == true && o["uid"] == uid)
        && meta::json_namespace(pod) == meta::namespace(&vmi.metadata)
}

/// Whether the pod is a WaitForFirstConsumer trigger pod.
pub fn is_temp(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(EPHEMERAL_PROVISIONING_ANNOTATION))
}

/// Whether the pod has a deletion timestamp.
pub fn is_deleting(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn compute_state(pod: &Value) -> Option<&Value> {
    pod.pointer("/status/containerStatuses")?
        .as_array()?
        .iter()
        .find(|c| c["name"] == "compute")
        .map(|c| &c["state"])
}

/// Succeeded or Failed.
pub fn is_down(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Down, its compute container terminated, or being deleted.
pub fn is_down_or_going_down(pod: &Value) -> bool {
    is_down(pod)
        || compute_state(pod).is_some_and(|st| st.get("terminated").is_some_and(|t| !t.is_null()))
        || is_deleting(pod)
}

/// Failed, its compute container failed, or being deleted.
pub fn is_failed_or_going_down(pod: &Value) -> bool {
    let compute_failed = compute_state(pod)
        .and_then(|st| st.get("terminated"))
        .is_some_and(|t| t["exitCode"].as_i64().unwrap_or(0) != 0);
    phase(pod) == "Failed" || compute_failed || is_deleting(pod)
}

/// Running with the compute container started and every other container ready (the compute
/// container's readiness is the guest's and comes later).
pub fn is_ready(pod: &Value) -> bool {
    if is_down_or_going_down(pod) {
        return false;
    }
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    for c in statuses.into_iter().flatten() {
        let running = c.pointer("/state/running").is_some_and(|r| !r.is_null());
        match c["name"].as_str() {
            Some("compute") | Some("istio-proxy") => {
                if !running {
                    return false;
                }
            }
            _ => {
                if c["ready"] != true {
                    return false;
                }
            }
        }
    }
    phase(pod) == "Running"
}

/// The pod condition of type `t`.
pub fn condition<'a>(pod: &'a Value, t: &str) -> Option<&'a Value> {
    meta::json_condition(pod, t)
}

/// The image of the compute container.
pub fn compute_image(pod: &Value) -> &str {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "compute")
        .and_then(|c| c["image"].as_str())
        .unwrap_or_default()
}

/// The first image pull error of any (init) container: (reason, message).
pub fn image_error(pod: &Value) -> Option<(String, String)> {
    ["/status/initContainerStatuses", "/status/containerStatuses"]
        .iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .find_map(|c| {
            let w = c.pointer("/state/waiting").filter(|w| !w.is_null())?;
            let reason = w["reason"].as_str()?;
            matches!(reason, "ErrImagePull" | "ImagePullBackOff").then(|| {
                (
                    reason.to_string(),
                    w["message"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
}

/// The launcher pod the VMI currently uses: among the pods it controls (on its node once it
/// has one), the most recently created.
pub fn current_pod<'a>(vmi: &VirtualMachineInstance, pods: &[&'a Value]) -> Option<&'a Value> {
    let node = vmi
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    let created = |p: &Value| {
        p.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(parse_rfc3339)
            .unwrap_or(i64::MIN)
    };
    let mut best: Option<&'a Value> = None;
    for p in pods.iter().copied().filter(|p| is_controlled_by(p, vmi)) {
        if !node.is_empty() && node_name(p) != node {
            continue;
        }
        if best.is_none_or(|b| created(b) < created(p)) {
            best = Some(p);
        }
    }
    best
}
