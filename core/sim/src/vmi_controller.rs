//! The VMI controller in the simulator: kvrs's VMI decision with a small launcher pod renderer
//! (the decision takes the renderer as a parameter; the simulator's kubelet needs only the
//! owner reference, the labels and the grace period of the real pod, and the VMI decision reads
//! the compute container's image).

use serde_json::{Value, json};

use super::Sim;
use super::store::res;
use super::virt_controller::Controller;
use crate::api::VirtualMachineInstance;
use kvrs_decide::Now;
use kvrs_decide::meta;
use kvrs_decide::vmi::{VmiWorld, decide_vmi};

/// The launcher pod of a VMI running `image`, reduced to what the simulated kubelet and the VMI
/// decision read.
///
/// The compute container carries the launcher image, as every real launcher pod does. Without
/// one the VMI decision wants `status.launcherContainerImageVersion: ""`, which the typed store
/// drops again on every write: each VMI was then rewritten on every sync, ~25 writes per VMI
/// within 3 virtual seconds and more the longer a run lasts.
pub fn launcher_pod(vmi: &VirtualMachineInstance, image: &str) -> Result<Value, String> {
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

impl Sim {
    /// One sync of the VMI controller.
    pub(super) fn sync_vmi(&mut self, key: &str) {
        if self.ctrl.behind_own_writes(key) {
            // The event of the pending write queues the key again.
            self.stats.held_back_syncs += 1;
            return;
        }
        self.stats.vmi_syncs += 1;
        let Some(obj) = self.ctrl.cache.get(res::VMIS, key).cloned() else {
            self.ctrl.vmi_expectations.forget(key);
            return;
        };
        let Some(vmi) = obj.vmi() else { return };
        let expectations = self.ctrl.vmi_expectations.pending(key, self.now);
        let suffix: String = (0..5)
            .map(|_| {
                char::from(
                    b"bcdfghjklmnpqrstvwxz2456789"
                        [usize::try_from(self.rng.range(0, 26)).unwrap_or(0)],
                )
            })
            .collect();
        // The pods are borrowed from the cache, not copied: the decision only reads them.
        let vm_obj = self.ctrl.cache.get(res::VMS, key).cloned();
        let world = VmiWorld {
            vmi,
            pods: self.ctrl.cache.pods_of(meta::uid(&vmi.metadata)),
            vms: &[],
            vm: vm_obj.as_deref().and_then(|o| o.vm()),
            migrations: &[],
            expectations,
            now: Now::from_unix(self.now_unix()),
            config: &self.config,
        };
        let image = self.config.launcher_image.as_str();
        let render = |vmi: &VirtualMachineInstance| launcher_pod(vmi, image);
        let decision = decide_vmi(&world, &render, &suffix);
        self.execute_plan(key, decision.plan, Controller::Vmi);
    }
}
