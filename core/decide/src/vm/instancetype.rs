//! The VMI of a VM that references an instancetype or a preference, expanded from the
//! ControllerRevisions that store them (KubeVirt v1.9.0's `Reference` policy: the revisions are
//! named in the matcher's `revisionName` or in `status.instancetypeRef` / `preferenceRef`).
//!
//! Order, as KubeVirt's VM controller: the VMI from the template, the preference's auto-attach
//! values, the controller's input device and pod network, then the annotations naming the
//! instancetype and preference and the application at `spec`. A reference whose revision is
//! not among the namespace's ControllerRevisions stops the start with KubeVirt's reasons
//! (`FailedFindInstancetype` / `FailedFindPreference`): storing the revisions
//! ([`kvrs_instancetype::revision::store_plan`]) comes first.

use kvrs_instancetype::Catalog;
use kvrs_instancetype::vm::controller_apply;

use super::{Reconcile, SyncError, run_strategy};
use crate::api::VirtualMachineInstance;

/// The VMI to start, expanded when the VM has references (see the module documentation).
pub(super) fn vmi_to_start(r: &Reconcile<'_, '_>) -> Result<VirtualMachineInstance, SyncError> {
    let vm = &r.vm;
    let start_error = |e: &dyn std::fmt::Display| {
        SyncError::new(
            run_strategy::FAILED_CREATE,
            format!("Failure while starting VMI: {e}"),
        )
    };
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return kvrs_admission::template::vmi_to_start(vm, r.w.config).map_err(|e| start_error(&e));
    }
    let mut catalog = Catalog::default();
    let namespace = r.ns();
    for cr in r.w.revisions {
        if cr
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|n| n != namespace)
        {
            continue;
        }
        if let Ok(doc) = serde_json::to_value(cr) {
            // A revision whose data does not read is not one this VM can use; the finder then
            // reports the reference as not found.
            let _ = catalog.add(doc);
        }
    }
    let instancetype = catalog
        .find_instancetype(vm)
        .map_err(|e| SyncError::new("FailedFindInstancetype", e.to_string()))?;
    let preference = catalog
        .find_preference(vm)
        .map_err(|e| SyncError::new("FailedFindPreference", e.to_string()))?;
    let mut vmi = kvrs_admission::template::vmi_from_vm(vm).map_err(|e| start_error(&e))?;
    if vm.spec.preference.is_some() {
        kvrs_instancetype::apply_autoattach_preferences(preference.as_ref(), &mut vmi.spec);
    }
    kvrs_admission::template::add_controller_devices(&mut vmi, r.w.config)
        .map_err(|e| start_error(&e))?;
    controller_apply(
        vm,
        instancetype.as_ref(),
        preference.as_ref(),
        &mut vmi.spec,
        &mut vmi.metadata,
    )
    .map_err(|e| start_error(&format!("Failed to apply instancetype: {e}")))?;
    Ok(vmi)
}
