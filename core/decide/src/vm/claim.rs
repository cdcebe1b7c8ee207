//! Claiming the VMI of the same name: the VM controls it, adopts it, or leaves it alone.

use std::borrow::Cow;

use serde_json::json;

use super::Reconcile;
use crate::api::VirtualMachineInstance;
use crate::vmi_state as state;
use crate::{ApiWrite, PatchType, WriteOp, meta};

/// The VMI this VM may act on, recording an adoption patch when an orphan VMI of the same name
/// is taken over. A VMI controlled by something else is invisible to the VM.
pub(super) fn claim_vmi<'a>(r: &mut Reconcile<'_, 'a>) -> Option<Cow<'a, VirtualMachineInstance>> {
    let vmi = r.w.vmi?;
    if meta::name(&vmi.metadata) != r.name() {
        return None;
    }
    let vm_uid = meta::uid(&r.vm.metadata).to_string();
    match meta::controller_of(&vmi.metadata) {
        Some(owner) if owner.uid == vm_uid => Some(Cow::Borrowed(vmi)),
        Some(_) => None,
        None => {
            // A VM being deleted, or a VMI being deleted, is not adopted.
            if r.vm.metadata.deletion_timestamp.is_some() || state::is_deleting(vmi) {
                return None;
            }
            let patch = json!({
                "metadata": {
                    "ownerReferences": [meta::controller_ref_json("VirtualMachine", &r.name(), &vm_uid)],
                    "uid": meta::uid(&vmi.metadata),
                }
            });
            r.plan.push_write(ApiWrite::new(
                "virtualmachineinstances",
                &r.ns(),
                meta::name(&vmi.metadata),
                WriteOp::Patch {
                    patch_type: PatchType::Merge,
                    patch,
                },
            ));
            Some(Cow::Borrowed(vmi))
        }
    }
}
