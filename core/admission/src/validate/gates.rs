//! Feature gates: which VMI features need a gate, and which gates are on without being named.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::causes::Causes;
use crate::api::VirtualMachineInstanceSpec;
use crate::config::ClusterConfig;

/// Gates that are beta or GA in KubeVirt v1.9.0 and so on unless the cluster turns them off,
/// limited to the ones VMI validation consults.
pub const DEFAULT_ON_FEATURE_GATES: &[&str] = &[
    "ImageVolume",
    "PasstBinding",
    "RebootPolicy",
    "GPUsWithDRA",
    "HostDevicesWithDRA",
    "DeclarativeHotplugVolumes",
    "WorkloadEncryptionSEV",
    "NUMA",
    "GPU",
    "PersistentReservation",
    "PanicDevices",
    "VideoConfig",
    "VMPersistentState",
];

/// Annotation that lists hook sidecars (needs the `Sidecar` gate).
pub(crate) const SIDECAR_ANNOTATION: &str = "hooks.kubevirt.io/hookSidecars";
/// Annotation carrying Ignition data (needs `ExperimentalIgnitionSupport`).
pub(crate) const IGNITION_ANNOTATION: &str = "kubevirt.io/ignitiondata";

/// Whether a gate is on: named in the cluster configuration or on by default.
pub fn gate_enabled(config: &ClusterConfig, gate: &str) -> bool {
    config.gate(gate) || DEFAULT_ON_FEATURE_GATES.contains(&gate)
}

/// Features of the VMI spec and metadata that are refused unless their gate is on. Volume-level
/// gates (HostDisk, DownwardMetrics volumes) are checked with the volumes.
pub(super) fn check(
    spec: &VirtualMachineInstanceSpec,
    meta: &ObjectMeta,
    config: &ClusterConfig,
    causes: &mut Causes,
) {
    let on = |g: &str| gate_enabled(config, g);
    let devices = &spec.domain.devices;
    let annotation = |key: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .is_some_and(|v| !v.is_empty())
    };
    if annotation(SIDECAR_ANNOTATION) && !on("Sidecar") {
        causes.invalid(
            "metadata.annotations",
            format!(
                "sidecar feature gate (Sidecar) is not enabled in kubevirt-config, invalid entry \
                 metadata.annotations[{SIDECAR_ANNOTATION}]"
            ),
        );
    }
    if annotation(IGNITION_ANNOTATION) && !on("ExperimentalIgnitionSupport") {
        causes.invalid(
            "metadata.annotations",
            format!(
                "ExperimentalIgnitionSupport feature gate is not enabled in kubevirt-config, \
                 invalid entry metadata.annotations[{IGNITION_ANNOTATION}]"
            ),
        );
    }
    if devices.host_devices.is_some() && !on("HostDevices") {
        causes.invalid(
            "spec.domain.devices.hostDevices",
            "Host Devices feature gate (HostDevices) is not enabled in kubevirt-config",
        );
    }
    if devices.downward_metrics.is_some() && !on("DownwardMetrics") {
        causes.invalid(
            "spec.domain.devices.downwardMetrics",
            "downwardMetrics virtio serial is not allowed: DownwardMetrics feature gate is not enabled",
        );
    }
    if devices.autoattach_vsock == Some(true) && !on("VSOCK") {
        causes.invalid(
            "spec.domain.devices.autoattachVSOCK",
            "VSOCK feature gate is not enabled in kubevirt-config",
        );
    }
    if let Some(filesystems) = &devices.filesystems {
        let storage_volume = |name: &str| {
            spec.volumes.iter().flatten().any(|v| {
                v.name == name && (v.persistent_volume_claim.is_some() || v.data_volume.is_some())
            })
        };
        for fs in filesystems {
            if storage_volume(&fs.name) && !on("EnableVirtioFsStorageVolumes") {
                causes.invalid(
                    "spec.domain.devices.filesystems",
                    "virtiofs is not allowed: virtiofs feature gate (EnableVirtioFsStorageVolumes) is not enabled for PVC",
                );
            }
        }
    }
    // PersistentReservation is GA, but KubeVirt enables the pr-helper only when the gate is
    // named in the configuration (or persistentReservationConfiguration.enabled is set, which
    // ClusterConfig does not read yet): default-on does not count here.
    let reservation = devices.disks.iter().flatten().any(|d| {
        d.lun
            .as_ref()
            .is_some_and(|l| l.reservation.unwrap_or(false))
    });
    if reservation && !config.gate("PersistentReservation") {
        causes.invalid(
            "spec.domain.devices.disks.luns.reservation",
            "persistent reservation is not enabled in kubevirt config",
        );
    }
    if spec.domain.reboot_policy.is_some() && !on("RebootPolicy") {
        causes.invalid(
            "spec.domain.rebootPolicy",
            "RebootPolicy is specified but the RebootPolicy feature gate is not enabled",
        );
    }
    if spec
        .domain
        .memory
        .as_ref()
        .is_some_and(|m| m.reserved_overhead.is_some())
        && !on("ReservedOverheadMemlock")
    {
        causes.invalid(
            "spec.domain.memory.reservedOverhead",
            "Reserved overhead memlock feature gate (ReservedOverheadMemlock) is not enabled in kubevirt-config",
        );
    }
    if spec.utility_volumes.as_ref().is_some_and(|u| !u.is_empty()) && !on("UtilityVolumes") {
        causes.invalid(
            "spec.utilityVolumes",
            "UtilityVolumes feature gate is not enabled",
        );
    }
    if let Some(ls) = &spec.domain.launch_security {
        let (sev, tdx) = (ls.sev.is_some() || ls.snp.is_some(), ls.tdx.is_some());
        if sev && !tdx && !on("WorkloadEncryptionSEV") {
            causes.invalid(
                "spec.domain.launchSecurity",
                "WorkloadEncryptionSEV feature gate is not enabled in kubevirt-config",
            );
        }
        if tdx && !sev && !on("WorkloadEncryptionTDX") {
            causes.invalid(
                "spec.domain.launchSecurity",
                "WorkloadEncryptionTDX feature gate is not enabled in kubevirt-config",
            );
        }
    }
    for (idx, iface) in devices.interfaces.iter().flatten().enumerate() {
        let path = format!("spec.domain.devices.interfaces[{idx}]");
        if iface.port_ranges.is_some() && !on("PortRangesSpec") {
            causes.invalid(
                format!("{path}.portRanges"),
                "portRanges is specified on interface but the PortRangesSpec feature gate is not enabled",
            );
        }
        if iface.passt_binding.is_some() && !on("PasstBinding") {
            causes.invalid(
                format!("{path}.name"),
                "PasstBinding feature gate is not enabled",
            );
        }
    }
    if spec
        .networks
        .iter()
        .flatten()
        .any(|n| n.resource_claim.is_some())
        && !on("NetworkDevicesWithDRA")
    {
        causes.invalid(
            "spec.networks",
            "vmi.spec.networks contains DRA networks but NetworkDevicesWithDRA feature gate is not enabled",
        );
    }
}
