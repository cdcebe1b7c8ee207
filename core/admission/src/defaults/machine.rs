//! Architecture, machine type, eviction strategy and the per-architecture device defaults.

use crate::api::{Diag288Watchdog, I6300ESBWatchdog, Machine, VirtualMachineInstanceSpec};
use crate::config::ClusterConfig;

/// Machine type of arm64 guests (KubeVirt's `virt`).
pub(crate) const ARM64_MACHINE_TYPE: &str = "virt";
/// Machine type of s390x guests.
pub(crate) const S390X_MACHINE_TYPE: &str = "s390-ccw-virtio";
/// Eviction strategy of a cluster whose configuration names none.
pub(crate) const DEFAULT_EVICTION_STRATEGY: &str = "None";
/// What a watchdog does when it fires, unless told otherwise.
const DEFAULT_WATCHDOG_ACTION: &str = "reset";

pub(super) fn set_architecture(spec: &mut VirtualMachineInstanceSpec, config: &ClusterConfig) {
    if spec.architecture.as_deref().unwrap_or("").is_empty() {
        spec.architecture = Some(config.architecture.clone());
    }
}

/// The machine type the cluster gives a guest of `arch`.
pub fn machine_type_for(arch: &str, config: &ClusterConfig) -> String {
    match arch {
        "arm64" => ARM64_MACHINE_TYPE.to_string(),
        "s390x" => S390X_MACHINE_TYPE.to_string(),
        _ => config.machine_type.clone(),
    }
}

pub(super) fn set_machine_type(spec: &mut VirtualMachineInstanceSpec, config: &ClusterConfig) {
    let default = machine_type_for(spec.architecture.as_deref().unwrap_or(""), config);
    let machine = spec.domain.machine.get_or_insert_with(Machine::default);
    if machine.r#type.as_deref().unwrap_or("").is_empty() {
        machine.r#type = Some(default);
    }
}

pub(super) fn set_eviction_strategy(spec: &mut VirtualMachineInstanceSpec) {
    if spec.eviction_strategy.is_none() {
        spec.eviction_strategy = Some(DEFAULT_EVICTION_STRATEGY.to_string());
    }
}

pub(super) fn is_arm64(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.architecture.as_deref() == Some("arm64")
}

pub(super) fn is_s390x(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.architecture.as_deref() == Some("s390x")
}

/// Whether the guest has a PCIe topology with root ports for hotplug: amd64 or arm64 (or no
/// architecture yet) on a q35 or `virt` machine. Such VMIs get the PCI topology annotation.
pub fn supports_pcie_hotplug(spec: &VirtualMachineInstanceSpec) -> bool {
    if !matches!(
        spec.architecture.as_deref(),
        None | Some("" | "amd64" | "arm64")
    ) {
        return false;
    }
    match &spec.domain.machine {
        Some(machine) => {
            let t = machine.r#type.as_deref().unwrap_or("");
            t.contains("q35") || t.starts_with("virt")
        }
        None => true,
    }
}

/// Disk bus, watchdog and firmware defaults that depend on the architecture. amd64 guests get
/// SATA (q35 has no IDE and every OS drives SATA without extra drivers); arm64 and s390x get
/// virtio. arm64 also boots through EFI without secure boot and uses `host-passthrough` CPUs.
pub(super) fn set_arch_specific(spec: &mut VirtualMachineInstanceSpec) {
    if is_arm64(spec) {
        let cpu = spec.domain.cpu.get_or_insert_with(Default::default);
        if cpu.model.as_deref().unwrap_or("").is_empty() {
            cpu.model = Some("host-passthrough".to_string());
        }
        set_arm64_bootloader(spec);
        set_disk_bus(spec, "virtio");
    } else if is_s390x(spec) {
        set_disk_bus(spec, "virtio");
        if let Some(watchdog) = spec.domain.devices.watchdog.as_mut() {
            let diag = watchdog
                .diag288
                .get_or_insert_with(Diag288Watchdog::default);
            if diag.action.as_deref().unwrap_or("").is_empty() {
                diag.action = Some(DEFAULT_WATCHDOG_ACTION.to_string());
            }
        }
    } else {
        set_disk_bus(spec, "sata");
        if let Some(watchdog) = spec.domain.devices.watchdog.as_mut() {
            let esb = watchdog
                .i6300esb
                .get_or_insert_with(I6300ESBWatchdog::default);
            if esb.action.as_deref().unwrap_or("").is_empty() {
                esb.action = Some(DEFAULT_WATCHDOG_ACTION.to_string());
            }
        }
    }
}

fn set_arm64_bootloader(spec: &mut VirtualMachineInstanceSpec) {
    let firmware = spec.domain.firmware.get_or_insert_with(Default::default);
    if firmware.bootloader.is_none() {
        firmware.bootloader = Some(crate::api::Bootloader {
            efi: Some(Default::default()),
            ..Default::default()
        });
    }
    if let Some(efi) = firmware.bootloader.as_mut().and_then(|b| b.efi.as_mut())
        && efi.secure_boot.is_none()
    {
        efi.secure_boot = Some(false);
    }
}

fn set_disk_bus(spec: &mut VirtualMachineInstanceSpec, bus: &str) {
    let Some(disks) = spec.domain.devices.disks.as_mut() else {
        return;
    };
    let fill = |b: &mut Option<String>| {
        if b.as_deref().unwrap_or("").is_empty() {
            *b = Some(bus.to_string());
        }
    };
    for disk in disks {
        if let Some(t) = disk.disk.as_mut() {
            fill(&mut t.bus);
        }
        if let Some(t) = disk.cdrom.as_mut() {
            fill(&mut t.bus);
        }
        if let Some(t) = disk.lun.as_mut() {
            fill(&mut t.bus);
        }
    }
}
