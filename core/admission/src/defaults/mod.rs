//! KubeVirt v1.9.0's VMI defaulting: what virt-api's mutating webhook writes into a
//! VirtualMachineInstance on CREATE.
//!
//! [`apply_defaults`] runs the steps in the webhook's order, because later steps read what earlier
//! ones wrote (the CPU topology reads the CPU request copied from the limit, memory hotplug reads
//! the guest memory taken from the request, the disk bus is chosen after bare volumes got disks).
//! Each area lives in its own module; every step only fills what is missing, so the whole function
//! is idempotent: defaulting an already defaulted VMI changes nothing.
//!
//! One deliberate difference from KubeVirt: a missing `spec.domain.firmware.uuid` is not random
//! (kvrs's pure functions take no randomness) but derived from the VMI's identity, see
//! [`firmware::stable_uuid_for`].

mod cpu;
mod disks;
mod features;
pub mod firmware;
mod interfaces;
mod machine;
mod memory;
mod metadata;
pub mod uuid;
mod volumes;

use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;

pub use interfaces::DefaultInterfaceError;
pub(crate) use interfaces::add_default_pod_interface;
pub use machine::{machine_type_for, supports_pcie_hotplug};
pub(crate) use memory::hotplug_blocker as memory_hotplug_blocker;
pub use metadata::{
    DEFAULT_NAMESPACE, PCI_TOPOLOGY_ANNOTATION, PCI_TOPOLOGY_VERSION, RUNTIME_USER_NON_ROOT,
    VMI_FINALIZER, default_namespace,
};
pub(crate) use volumes::add_disks_for_bare_volumes;

/// Applies every default KubeVirt's mutating webhook applies to a new VMI.
///
/// Covers, in the webhook's order: architecture and machine type, CPU request from the limit,
/// guest memory from requests/limits, CPU topology, container disk pull policies, eviction
/// strategy, the default pod network and interface, a disk for every bare volume, the API-level
/// defaults (firmware UUID, feature and timer states, disk and CD-ROM targets, inputs, probes),
/// Hyper-V feature dependencies, per-architecture disk bus / watchdog / CPU model, the memory and
/// CPU topology status, CPU and memory hotplug limits, the PCI topology annotation, the non-root
/// runtime user, the foreground-delete finalizer and the `Pending` phase.
///
/// An empty namespace becomes `default` first. In the cluster that is the API server's doing,
/// before the webhook runs; it is repeated here so that defaulting alone gives the stored shape.
pub fn apply_defaults(vmi: &mut VirtualMachineInstance, config: &ClusterConfig) {
    default_namespace(vmi);
    let spec = &mut vmi.spec;
    machine::set_architecture(spec, config);
    machine::set_machine_type(spec, config);
    cpu::set_cpu_request_from_limit(spec);
    cpu::set_cluster_cpu_request(spec, config);
    memory::set_guest_memory(spec);
    cpu::set_topology(spec);
    volumes::set_container_disk_pull_policies(spec);
    machine::set_eviction_strategy(spec);
    interfaces::set_default_pod_interface(spec, config);
    volumes::add_disks_for_bare_volumes(spec);
    if machine::is_s390x(spec) {
        features::set_s390x_acpi_off(spec);
    }
    // What KubeVirt's API package defaults on every VMI object.
    firmware::set_firmware(vmi);
    let spec = &mut vmi.spec;
    features::set_feature_states(spec);
    features::set_timer_states(spec);
    disks::set_disk_targets(spec);
    disks::set_inputs(spec);
    disks::set_gpu_display_states(spec);
    disks::set_probes(spec);
    features::set_hyperv_dependencies(spec);
    machine::set_arch_specific(spec);
    cpu::set_model(spec, config);
    metadata::set_status_from_spec(vmi);
    if !machine::is_arm64(&vmi.spec) && config.live_update {
        cpu::set_max_sockets(&mut vmi.spec, config);
        memory::set_max_guest(&mut vmi.spec, config);
    }
    metadata::set_webhook_metadata(vmi, config);
    memory::canonicalize_quantities(vmi);
}

/// Whether a boolean option is explicitly `true` (Go's `*bool` with a value of true).
pub(crate) fn is_true(v: Option<bool>) -> bool {
    v == Some(true)
}

#[cfg(test)]
mod tests;
