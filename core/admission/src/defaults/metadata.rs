//! Metadata and status the mutating webhook writes on CREATE.

use crate::api::{CPUTopology, MemoryStatus, VirtualMachineInstance, VirtualMachineInstanceStatus};
use crate::config::ClusterConfig;

/// The namespace of an object that names none (the API server's choice).
pub const DEFAULT_NAMESPACE: &str = "default";
/// Annotation telling the launcher which PCI topology (root ports for hotplug) the VMI uses.
pub const PCI_TOPOLOGY_ANNOTATION: &str = "kubevirt.io/pci-topology-version";
/// The PCI topology version KubeVirt v1.9.0 gives new VMIs.
pub const PCI_TOPOLOGY_VERSION: &str = "v3";
/// Finalizer that keeps a VMI until its pod and domain are gone.
pub const VMI_FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
/// The user QEMU runs as when the cluster does not enable the `Root` feature gate.
pub const RUNTIME_USER_NON_ROOT: i64 = 107;

/// An empty or missing namespace becomes `default`, as the API server does for namespaced
/// objects created without one.
pub fn default_namespace(vmi: &mut VirtualMachineInstance) {
    if vmi.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        vmi.metadata.namespace = Some(DEFAULT_NAMESPACE.to_string());
    }
}

/// The memory the guest boots with and the CPU topology it starts with, recorded in the status
/// so that later hotplug can tell what changed.
pub(super) fn set_status_from_spec(vmi: &mut VirtualMachineInstance) {
    let guest = vmi
        .spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.clone());
    let topology = vmi.spec.domain.cpu.as_ref().map(|cpu| {
        let nonzero = |v: Option<i64>| v.filter(|v| *v != 0);
        CPUTopology {
            cores: nonzero(cpu.cores),
            sockets: nonzero(cpu.sockets),
            threads: nonzero(cpu.threads),
            ..Default::default()
        }
    });
    let status = vmi
        .status
        .get_or_insert_with(VirtualMachineInstanceStatus::default);
    if let Some(guest) = guest {
        status.memory = Some(MemoryStatus {
            guest_at_boot: Some(guest.clone()),
            guest_current: Some(guest.clone()),
            guest_requested: Some(guest),
            ..Default::default()
        });
    }
    if status.current_cpu_topology.is_none() {
        status.current_cpu_topology = topology;
    }
}

/// The PCI topology annotation, the non-root runtime user, the foreground-delete finalizer
/// (once) and the `Pending` phase.
pub(super) fn set_webhook_metadata(vmi: &mut VirtualMachineInstance, config: &ClusterConfig) {
    if super::machine::supports_pcie_hotplug(&vmi.spec) {
        vmi.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .entry(PCI_TOPOLOGY_ANNOTATION.to_string())
            .or_insert_with(|| PCI_TOPOLOGY_VERSION.to_string());
    }
    let finalizers = vmi.metadata.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == VMI_FINALIZER) {
        finalizers.push(VMI_FINALIZER.to_string());
    }
    let status = vmi
        .status
        .get_or_insert_with(VirtualMachineInstanceStatus::default);
    if !config.gate("Root") {
        status.runtime_user = Some(RUNTIME_USER_NON_ROOT);
    }
    status.phase = Some("Pending".to_string());
    status.guest_os_info.get_or_insert_with(Default::default);
}
