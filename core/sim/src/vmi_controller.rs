//! The VMI controller in the simulator: kvrs's VMI decision with a small launcher pod renderer
//! (the decision takes the renderer as a parameter; the simulator's kubelet needs only the
//! owner reference, the labels and the grace period of the real pod, and the VMI decision reads
//! the compute container's image).

use serde_json::{Value, json};

use super::cache::Cache;
use crate::api::VirtualMachineInstance;
use kvrs_admission::ClusterConfig;
use kvrs_decide::meta;
use kvrs_decide::vmi::decide_vmi;
use kvrs_decide::{Now, PendingExpectations, Plan};
use kvrs_executor::world::{VmiInputs, vmi_world};

/// The launcher pod of a VMI running `image`, reduced to what the simulated kubelet and the VMI
/// decision read.
///
/// The compute container carries the launcher image, as every real launcher pod does. Without
/// one the VMI decision wants `status.launcherContainerImageVersion: ""`, which the typed store
/// drops again on every write: each VMI was then rewritten on every sync, ~25 writes per VMI
/// within 3 virtual seconds and more the longer a run lasts.
pub(crate) fn launcher_pod(vmi: &VirtualMachineInstance, image: &str) -> Result<Value, String> {
    let name = meta::name(&vmi.metadata);
    let grace = vmi.spec.termination_grace_period_seconds.unwrap_or(180) + 15;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("virt-launcher-{name}-"),
            "namespace": meta::namespace(&vmi.metadata),
            "labels": {
                "kubevirt.io": "virt-launcher",
                "kubevirt.io/created-by": meta::uid(&vmi.metadata),
                "vm.kubevirt.io/name": name,
            },
            "ownerReferences": [meta::controller_ref_json("VirtualMachineInstance", name, meta::uid(&vmi.metadata))],
            // Real launcher pods always carry annotations; the VMI decision patches keys into the map.
            "annotations": {"kubevirt.io/domain": name},
        },
        "spec": {"containers": [{"name": "compute", "image": image}], "terminationGracePeriodSeconds": grace},
        "status": {"phase": "Pending"},
    }))
}

/// One sync of the VMI controller, decided from the controller's cache with the world function
/// virt-controller uses (`None` when the VMI is not cached as a typed object). Pure:
/// virt-controller's pass runs it on its decision thread.
pub(super) fn decide_vmi_sync(
    cache: &Cache,
    config: &ClusterConfig,
    now: Now,
    key: &str,
    expectations: PendingExpectations,
    suffix: &str,
) -> Option<Plan> {
    let inputs = VmiInputs {
        expectations,
        now,
        config,
    };
    let image = config.launcher_image.as_str();
    let render = |vmi: &VirtualMachineInstance| launcher_pod(vmi, image);
    let (_, plan) = vmi_world(cache, key, inputs, |world| {
        decide_vmi(world, &render, suffix).plan
    })?;
    Some(plan)
}
