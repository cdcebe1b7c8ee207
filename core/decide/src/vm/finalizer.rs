//! The VM controller finalizer on VMs and on the VMIs it started.
//!
//! On the VM it guarantees the controller sees the deletion and stops the VMI first; on a VMI it
//! guarantees the controller records the final VMI state (start failures) before the VMI goes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::{Reconcile, VM_CONTROLLER_FINALIZER};
use crate::api::VirtualMachineInstance;
use crate::patch::op;
use crate::{ApiWrite, PatchType, WriteOp, meta};

fn finalizers_patch(old: Option<&Vec<String>>, new: &[String]) -> Value {
    let path = "/metadata/finalizers";
    Value::Array(vec![
        op(
            "test",
            path,
            Some(
                old.and_then(|o| serde_json::to_value(o).ok())
                    .unwrap_or(Value::Null),
            ),
        ),
        op(
            "replace",
            path,
            Some(serde_json::to_value(new).unwrap_or(Value::Null)),
        ),
    ])
}

/// Adds the controller finalizer to the VM if missing.
pub(super) fn add_vm_finalizer(r: &mut Reconcile<'_, '_>) {
    if meta::has_finalizer(&r.vm.metadata, VM_CONTROLLER_FINALIZER) {
        return;
    }
    let orig = r.vm.metadata.finalizers.clone();
    let old = orig.clone().unwrap_or_default();
    let mut new = old.clone();
    new.push(VM_CONTROLLER_FINALIZER.into());
    r.push_vm_patch(finalizers_patch(orig.as_ref(), &new));
    r.vm.metadata.finalizers = Some(new);
}

/// The object's finalizers as they are, and without the VM controller's finalizer.
fn without_controller_finalizer(md: &ObjectMeta) -> (Option<Vec<String>>, Vec<String>) {
    let orig = md.finalizers.clone();
    let new = orig
        .iter()
        .flatten()
        .filter(|f| *f != VM_CONTROLLER_FINALIZER)
        .cloned()
        .collect();
    (orig, new)
}

/// Removes the controller finalizer from the VM (letting its deletion complete).
pub(super) fn remove_vm_finalizer(r: &mut Reconcile<'_, '_>) {
    if !meta::has_finalizer(&r.vm.metadata, VM_CONTROLLER_FINALIZER) {
        return;
    }
    let (orig, new) = without_controller_finalizer(&r.vm.metadata);
    r.push_vm_patch(finalizers_patch(orig.as_ref(), &new));
    r.vm.metadata.finalizers = Some(new);
}

/// Removes the controller finalizer from a VMI whose final state has been recorded.
pub(super) fn remove_vmi_finalizer(r: &mut Reconcile<'_, '_>, vmi: &VirtualMachineInstance) {
    if !meta::has_finalizer(&vmi.metadata, VM_CONTROLLER_FINALIZER) {
        return;
    }
    let (orig, new) = without_controller_finalizer(&vmi.metadata);
    r.plan.push_write(ApiWrite::new(
        "virtualmachineinstances",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata),
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: finalizers_patch(orig.as_ref(), &new),
        },
    ));
}
