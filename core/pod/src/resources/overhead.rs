//! A VMI's memory overhead: which of KubeVirt's overhead terms apply to it.

use kvrs_overhead::OverheadInputs;

use super::qty::GoQty;
use super::{ResourceError, is_cpu_dedicated, resource_milli, vcpus, wants_qos_guaranteed};
use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;
use crate::quantity::Quantity;

/// The overhead virt-controller adds on top of the guest memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryOverhead {
    /// Exact bytes (the `kubevirt.io/memory-overhead-bytes` annotation).
    pub bytes: i64,
    /// The quantity as KubeVirt prints it (`268Mi`, or `283115520` when the sum is decimal).
    pub quantity: Quantity,
}

/// Maps a VMI onto the plain inputs of the overhead estimate.
pub fn overhead_inputs(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<OverheadInputs, ResourceError> {
    let spec = &vmi.spec;
    let domain = &spec.domain;
    let devices = &domain.devices;

    let memory_request = match domain
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("memory"))
    {
        None => None,
        Some(q) => Some(GoQty::parse(q, "spec.domain.resources.requests.memory")?.value()),
    };

    // Without a topology (only possible for VMIs that skipped defaulting) KubeVirt counts the
    // CPU limit, then the CPU request, in whole cores.
    let vcpus = match &domain.cpu {
        Some(cpu) => vcpus(cpu),
        None => {
            let limit = resource_milli(vmi, true, "cpu")?;
            let request = resource_milli(vmi, false, "cpu")?;
            let milli = if limit != 0 { limit } else { request };
            milli.div_euclid(1000) + i64::from(milli.rem_euclid(1000) != 0)
        }
    };

    let arch = spec
        .architecture
        .as_deref()
        .filter(|a| !a.is_empty())
        .unwrap_or(&config.architecture);

    let has_sriov = devices
        .interfaces
        .iter()
        .flatten()
        .any(|i| i.sriov.is_some());
    let vfio = devices.host_devices.as_ref().is_some_and(|d| !d.is_empty())
        || devices.gpus.as_ref().is_some_and(|d| !d.is_empty())
        || has_sriov;

    let exec = |p: &Option<Box<crate::api::Probe>>| p.as_ref().is_some_and(|p| p.exec.is_some());

    let sev = domain
        .launch_security
        .as_ref()
        .is_some_and(|l| l.sev.is_some() || l.snp.is_some());

    let tpm = devices
        .tpm
        .as_ref()
        .is_some_and(|t| t.enabled.unwrap_or(true));

    let reserved_overhead = match domain
        .memory
        .as_ref()
        .and_then(|m| m.reserved_overhead.as_ref())
        .and_then(|r| r.added_overhead.as_ref())
    {
        None => None,
        Some(q) => {
            Some(GoQty::parse(q, "spec.domain.memory.reservedOverhead.addedOverhead")?.to_amount())
        }
    };

    // KubeVirt's webhook validates the ratio; a value that still does not parse is ignored
    // (the overhead is used unscaled), as virt-controller does.
    let ratio = config
        .additional_guest_memory_overhead_ratio
        .as_deref()
        .filter(|r| !r.is_empty())
        .and_then(|r| r.trim().parse::<f64>().ok());

    Ok(OverheadInputs {
        memory_request,
        vcpus,
        graphics: devices.autoattach_graphics_device.unwrap_or(true),
        arm64: arch == "arm64",
        vfio,
        downward_metrics_disk: spec
            .volumes
            .iter()
            .flatten()
            .any(|v| v.downward_metrics.is_some()),
        exec_liveness_probe: exec(&spec.liveness_probe),
        exec_readiness_probe: exec(&spec.readiness_probe),
        sev,
        tpm,
        dedicated_or_guaranteed: is_cpu_dedicated(vmi) || wants_qos_guaranteed(vmi)?,
        reserved_overhead,
        network_binding_overhead: devices
            .interfaces
            .iter()
            .flatten()
            .any(|i| i.passt_binding.is_some())
            .then(|| kvrs_overhead::Amount::binary(kvrs_overhead::PASST_BINDING)),
        additional_overhead_ratio: ratio,
    })
}

/// The memory overhead of a VMI's launcher pod.
pub fn memory_overhead(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<MemoryOverhead, ResourceError> {
    let amount = kvrs_overhead::memory_overhead(&overhead_inputs(vmi, config)?);
    Ok(MemoryOverhead {
        bytes: amount.bytes,
        quantity: GoQty::from_amount(amount).to_quantity(),
    })
}
