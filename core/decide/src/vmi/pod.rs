//! Reading launcher pods the way the VMI controller does.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodCondition};

use crate::api::VirtualMachineInstance;
use crate::meta;

/// Annotation marking a temporary pod that only triggers WaitForFirstConsumer volume binding
/// (KubeVirt's `EphemeralProvisioningObject`).
pub const EPHEMERAL_PROVISIONING_ANNOTATION: &str = "kubevirt.io/ephemeral-provisioning";

/// The pod's name.
pub fn name(pod: &Pod) -> &str {
    meta::name(&pod.metadata)
}

/// The pod's phase.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// The node the pod is bound to, empty when unscheduled.
pub fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// Whether the pod's controller owner reference points at this VMI (by UID).
pub fn is_controlled_by(pod: &Pod, vmi: &VirtualMachineInstance) -> bool {
    let uid = meta::uid(&vmi.metadata);
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
        && meta::namespace(&pod.metadata) == meta::namespace(&vmi.metadata)
}

/// Whether the pod is a WaitForFirstConsumer trigger pod.
pub fn is_temp(pod: &Pod) -> bool {
    meta::annotation(&pod.metadata, EPHEMERAL_PROVISIONING_ANNOTATION).is_some()
}

/// Whether the pod has a deletion timestamp.
pub fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn container_statuses(pod: &Pod) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default()
}

fn compute_state(pod: &Pod) -> Option<&ContainerState> {
    container_statuses(pod)
        .iter()
        .find(|c| c.name == "compute")?
        .state
        .as_ref()
}

/// Succeeded or Failed.
pub fn is_down(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Down, its compute container terminated, or being deleted.
pub fn is_down_or_going_down(pod: &Pod) -> bool {
    is_down(pod) || compute_state(pod).is_some_and(|st| st.terminated.is_some()) || is_deleting(pod)
}

/// Failed, its compute container failed, or being deleted.
pub fn is_failed_or_going_down(pod: &Pod) -> bool {
    let compute_failed = compute_state(pod)
        .and_then(|st| st.terminated.as_ref())
        .is_some_and(|t| t.exit_code != 0);
    phase(pod) == "Failed" || compute_failed || is_deleting(pod)
}

/// Running with the compute container started and every other container ready (the compute
/// container's readiness is the guest's and comes later).
pub fn is_ready(pod: &Pod) -> bool {
    if is_down_or_going_down(pod) {
        return false;
    }
    for c in container_statuses(pod) {
        let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
        match c.name.as_str() {
            "compute" | "istio-proxy" => {
                if !running {
                    return false;
                }
            }
            _ => {
                if !c.ready {
                    return false;
                }
            }
        }
    }
    phase(pod) == "Running"
}

/// The pod condition of type `t`.
pub fn condition<'a>(pod: &'a Pod, t: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
}

/// The image of the compute container.
pub fn compute_image(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "compute"))
        .and_then(|c| c.image.as_deref())
        .unwrap_or_default()
}

/// The first image pull error of any (init) container: (reason, message).
pub fn image_error(pod: &Pod) -> Option<(String, String)> {
    let status = pod.status.as_ref()?;
    [&status.init_container_statuses, &status.container_statuses]
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            let reason = w.reason.as_deref()?;
            matches!(reason, "ErrImagePull" | "ImagePullBackOff")
                .then(|| (reason.to_string(), w.message.clone().unwrap_or_default()))
        })
}

/// The launcher pod the VMI currently uses: among the pods it controls (on its node once it
/// has one), the most recently created.
pub fn current_pod<'a>(vmi: &VirtualMachineInstance, pods: &[&'a Pod]) -> Option<&'a Pod> {
    let node = vmi
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    let created = |p: &Pod| {
        p.metadata
            .creation_timestamp
            .as_ref()
            .map_or(i64::MIN, meta::unix_of)
    };
    let mut best: Option<&'a Pod> = None;
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
