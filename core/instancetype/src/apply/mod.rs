//! Applying an instancetype and a preference to a VMI spec, as KubeVirt v1.9.0's
//! `apply.NewVMIApplier().ApplyToVMI` does.
//!
//! Order: the instancetype's parts — node selector, scheduler name, CPU (with the preference's
//! topology), memory, IO threads, IO threads policy, launch security, GPUs, host devices,
//! annotations — each reporting the VM fields it owns that the VM sets as [`Conflict`]s; any
//! conflict ends the application (the preference is not applied). Then the preference
//! ([`apply_preference`]), which only fills what is unset.
//!
//! `field` is where the spec sits in the object reported on: `spec.template.spec` for the VM
//! webhook, `spec` for the VMI the VM controller creates; annotation conflicts are reported at
//! `annotations.<key>` whatever it is, as KubeVirt does.

mod devices;
mod instancetype;
mod preference;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::VirtualMachineInstanceSpec;

pub use devices::apply_autoattach_preferences;
pub use instancetype::{guest_topology, overcommitted_request};
pub use preference::{apply_architecture, apply_machine_type, apply_preference};

use crate::conflict::{Conflict, Conflicts};
use crate::types::{InstancetypeSpec, PreferenceSpec};

/// The spec and metadata after a successful application.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The VMI spec with the instancetype and preference applied.
    pub spec: VirtualMachineInstanceSpec,
    /// The metadata with their annotations added.
    pub metadata: ObjectMeta,
}

/// The pure form of [`apply_in_place`]: the applied spec and metadata, or the conflicts.
pub fn apply(
    field: &str,
    spec: &VirtualMachineInstanceSpec,
    metadata: &ObjectMeta,
    instancetype: Option<&InstancetypeSpec>,
    preference: Option<&PreferenceSpec>,
) -> Result<Applied, Conflicts> {
    let mut applied = Applied {
        spec: spec.clone(),
        metadata: metadata.clone(),
    };
    apply_in_place(
        field,
        instancetype,
        preference,
        &mut applied.spec,
        &mut applied.metadata,
    )?;
    Ok(applied)
}

/// Applies `instancetype` and `preference` to `spec` and `metadata` (see the module
/// documentation). On conflicts the spec is left part-applied, as KubeVirt leaves it: callers
/// throw it away.
pub fn apply_in_place(
    field: &str,
    instancetype: Option<&InstancetypeSpec>,
    preference: Option<&PreferenceSpec>,
    spec: &mut VirtualMachineInstanceSpec,
    metadata: &mut ObjectMeta,
) -> Result<(), Conflicts> {
    if let Some(it) = instancetype {
        let mut conflicts: Vec<Conflict> = Vec::new();
        conflicts.extend(instancetype::node_selector(field, it, spec));
        conflicts.extend(instancetype::scheduler_name(field, it, spec));
        conflicts.extend(instancetype::cpu(field, it, preference, spec));
        conflicts.extend(instancetype::memory(field, it, spec));
        conflicts.extend(instancetype::io_threads(field, it, spec));
        conflicts.extend(instancetype::io_threads_policy(field, it, spec));
        conflicts.extend(instancetype::launch_security(field, it, spec));
        conflicts.extend(instancetype::gpus(field, it, spec));
        conflicts.extend(instancetype::host_devices(field, it, spec));
        conflicts.extend(instancetype::annotations(it, metadata));
        if !conflicts.is_empty() {
            return Err(Conflicts(conflicts));
        }
    }
    if let Some(p) = preference {
        apply_preference(p, spec, metadata);
    }
    Ok(())
}
