//! Disks (names, targets, buses, caches, boot order), inputs, sound, video, panic devices, I/O
//! threads and the spec-wide enumerations (start/eviction strategy, DNS policy, hostname).

use std::collections::{BTreeMap, BTreeSet};

use super::CauseKind;
use super::causes::Causes;
use crate::api::{Disk, VirtualMachineInstanceSpec};

const DISKS: &str = "spec.domain.devices.disks";
const SUPPORTED_BUSES: &str = "[virtio scsi sata usb]";

/// `dddd:bb:ss.f` in hex, function 0-7.
pub(crate) fn valid_pci_address(addr: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let Some((dom, rest)) = addr.split_once(':') else {
        return false;
    };
    let Some((bus, rest)) = rest.split_once(':') else {
        return false;
    };
    let Some((slot, func)) = rest.split_once('.') else {
        return false;
    };
    hex(dom, 4)
        && hex(bus, 2)
        && hex(slot, 2)
        && matches!(func, "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7")
}

/// Kubernetes' DNS-1123 label: lower-case alphanumerics and '-', alphanumeric at both ends,
/// at most 63 characters. Returns the complaint, if any.
pub(crate) fn dns1123_label_error(s: &str) -> Option<String> {
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let ok_ends = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if s.len() > 63 {
        return Some("must be no more than 63 characters".to_string());
    }
    if !ok_chars || !ok_ends {
        return Some(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
             '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .to_string(),
        );
    }
    None
}

fn target(disk: &Disk) -> (&'static str, &str) {
    if let Some(t) = &disk.disk {
        ("disk", t.bus.as_deref().unwrap_or(""))
    } else if let Some(t) = &disk.lun {
        ("lun", t.bus.as_deref().unwrap_or(""))
    } else if let Some(t) = &disk.cdrom {
        ("cdrom", t.bus.as_deref().unwrap_or(""))
    } else {
        ("", "")
    }
}

pub(super) fn check(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let disks: &[Disk] = spec.domain.devices.disks.as_deref().unwrap_or(&[]);
    let mut boot_orders = BTreeSet::new();
    let volumes: BTreeMap<&str, &crate::api::Volume> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), v))
        .collect();
    for (idx, disk) in disks.iter().enumerate() {
        let path = format!("{DISKS}[{idx}]");
        check_disk(idx, disk, disks, causes);
        match volumes.get(disk.name.as_str()) {
            None if disk.cdrom.is_none() => causes.invalid(
                format!("{path}.name"),
                format!("{path}.Name '{}' not found.", disk.name),
            ),
            None => {}
            Some(vol) => {
                if disk.lun.is_some()
                    && vol.persistent_volume_claim.is_none()
                    && vol.data_volume.is_none()
                {
                    causes.invalid(
                        format!("{path}.lun"),
                        format!(
                            "{path}.lun can only be mapped to a DataVolume or PersistentVolumeClaim volume."
                        ),
                    );
                }
                if vol.downward_metrics.is_some() {
                    match &disk.disk {
                        None => causes.required(
                            format!("{path}.disk"),
                            format!(
                                "DownwardMetrics volume must be mapped to a disk, but disk is not set on {path}.disk."
                            ),
                        ),
                        Some(t) if !matches!(t.bus.as_deref(), None | Some("" | "virtio")) => causes
                            .invalid(
                                format!("{path}.disk.bus"),
                                format!(
                                    "DownwardMetrics volume must be mapped to virtio bus, but {path}.disk.bus is set to {}",
                                    t.bus.as_deref().unwrap_or("")
                                ),
                            ),
                        Some(_) => {}
                    }
                }
            }
        }
        if let Some(order) = disk.boot_order
            && order >= 1
            && !boot_orders.insert(order)
        {
            causes.invalid(
                format!("{path}.bootOrder"),
                format!("Boot order for {path}.bootOrder already set for a different device."),
            );
        }
    }
    for (idx, iface) in spec.domain.devices.interfaces.iter().flatten().enumerate() {
        let path = format!("spec.domain.devices.interfaces[{idx}].bootOrder");
        match iface.boot_order {
            Some(o) if o < 1 => causes.invalid(
                path.clone(),
                format!(
                    "spec.domain.devices.interfaces[{idx}] must have a boot order > 0, if supplied"
                ),
            ),
            Some(o) if !boot_orders.insert(o) => causes.invalid(
                path.clone(),
                format!("Boot order for {path} already set for a different device."),
            ),
            _ => {}
        }
    }
    check_other_devices(spec, causes);
    super::firmware::check(spec, causes);
    check_enumerations(spec, causes);
}

fn check_disk(idx: usize, disk: &Disk, disks: &[Disk], causes: &mut Causes) {
    let path = format!("{DISKS}[{idx}]");
    if let Some(other) = disks[..idx].iter().position(|d| d.name == disk.name) {
        causes.invalid(
            format!("{path}.name"),
            format!("{path} and {DISKS}[{other}] must not have the same Name."),
        );
    }
    let targets = [
        disk.disk.is_some(),
        disk.lun.is_some(),
        disk.cdrom.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if targets > 1 {
        causes.invalid(
            path.clone(),
            format!("{path} can only have a single target type defined"),
        );
    }
    if let Some(t) = &disk.disk
        && let Some(pci) = t.pci_address.as_deref().filter(|p| !p.is_empty())
    {
        if t.bus.as_deref() != Some("virtio") {
            causes.invalid(
                format!("{path}.disk.pciAddress"),
                format!("disk {path}.name - setting a PCI address is only possible with bus type virtio."),
            );
        }
        if !valid_pci_address(pci) {
            causes.invalid(
                format!("{path}.disk.pciAddress"),
                format!("disk {path}.name has malformed PCI address ({pci})."),
            );
        }
    }
    if disk.boot_order.is_some_and(|o| o < 1) {
        causes.invalid(
            format!("{path}.bootOrder"),
            format!("{path} must have a boot order > 0, if supplied"),
        );
    }
    let (kind, bus) = target(disk);
    if !bus.is_empty() {
        match bus {
            "ide" => causes.invalid(format!("{path}.{kind}.bus"), "IDE bus is not supported"),
            "virtio" if kind == "cdrom" => causes.invalid(
                format!("{path}.cdrom.bus"),
                format!("Bus type {bus} is invalid for CD-ROM device"),
            ),
            "sata" if disk.disk.as_ref().is_some_and(|d| d.readonly == Some(true)) => causes
                .invalid(
                    format!("{path}.disk.bus"),
                    format!("{bus} hard-disks do not support read-only."),
                ),
            "virtio" | "sata" | "scsi" | "usb" => {}
            other => causes.invalid(
                format!("{path}.{kind}.bus"),
                format!("{path} is set with an unrecognized bus {other}, must be one of: {SUPPORTED_BUSES}"),
            ),
        }
        if disk.dedicated_io_thread == Some(true) && bus != "virtio" {
            causes.push(
                CauseKind::NotSupported,
                path.clone(),
                format!("IOThreads are not supported for disks on a {bus} bus"),
            );
        }
    }
    if let Some(serial) = disk.serial.as_deref().filter(|s| !s.is_empty()) {
        if !serial
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '+' | '-'))
        {
            causes.invalid(
                format!("{path}.serial"),
                format!("{path} must be made up of the following characters [A-Za-z0-9_.+-], if specified"),
            );
        }
        if serial.chars().count() > 256 {
            causes.invalid(
                format!("{path}.serial"),
                format!("{path} must be less than or equal to 256 in length, if specified"),
            );
        }
    }
    if let Some(cache) = disk.cache.as_deref().filter(|c| !c.is_empty())
        && !matches!(cache, "none" | "writethrough" | "writeback")
    {
        causes.invalid(
            format!("{path}.cache"),
            format!("{path}.cache has invalid value {cache}"),
        );
    }
    if let Some(io) = disk.io.as_deref().filter(|c| !c.is_empty())
        && !matches!(io, "native" | "threads")
    {
        causes.push(
            CauseKind::NotSupported,
            format!("{path}.io"),
            format!(
                "Disk IO mode for {DISKS} is not supported. Supported modes are: native, threads."
            ),
        );
    }
    if let Some(policy) = disk.error_policy.as_deref()
        && !matches!(policy, "stop" | "ignore" | "report" | "enospace")
    {
        causes.invalid(
            format!("{path}.errorPolicy"),
            format!("{path}.errorPolicy has invalid value \"{policy}\""),
        );
    }
    if let Some(err) = dns1123_label_error(&disk.name) {
        causes.invalid(format!("{path}.name"), err);
    }
    check_block_size(&path, disk, bus, causes);
}

fn check_block_size(path: &str, disk: &Disk, bus: &str, causes: &mut Causes) {
    let Some(bs) = &disk.block_size else { return };
    let Some(custom) = &bs.custom else { return };
    if bs
        .match_volume
        .as_ref()
        .is_some_and(|m| m.enabled != Some(false))
    {
        causes.invalid(
            format!("{path}.blockSize"),
            "Block size matching can't be enabled together with a custom value",
        );
        return;
    }
    let logical = i64::from(custom.logical.unwrap_or(0));
    let physical = i64::from(custom.physical.unwrap_or(0));
    let cpath = format!("{path}.blockSize.custom");
    if logical > physical {
        causes.invalid(
            format!("{cpath}.logical"),
            format!("Logical size {logical} must be the same or less than the physical size of {physical}"),
        );
    } else if bus == "sata" && logical != 512 {
        causes.invalid(
            format!("{cpath}.logical"),
            format!("Logical size {logical} must be 512 for SATA devices"),
        );
    } else if let Some(g) = custom.discard_granularity.map(i64::from)
        && logical != 0
        && g % logical != 0
    {
        causes.invalid(
            format!("{cpath}.discardGranularity"),
            format!("Discard granularity {g} must be multiples of logical size {logical}"),
        );
    } else {
        for (name, size) in [("logical", logical), ("physical", physical)] {
            let msg = if size < 512 {
                format!("Provided size of {size} is less than the supported minimum size of 512")
            } else if size > 2_097_152 {
                format!(
                    "Provided size of {size} is greater than the supported maximum size of 2097152"
                )
            } else if size & (size - 1) != 0 {
                format!("Provided size of {size} is not a power of 2")
            } else {
                continue;
            };
            causes.invalid(format!("{cpath}.{name}"), msg);
        }
    }
}

fn check_other_devices(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let devices = &spec.domain.devices;
    for (idx, input) in devices.inputs.iter().flatten().enumerate() {
        let path = format!("spec.domain.devices.inputs[{idx}]");
        if !matches!(input.bus.as_deref(), None | Some("" | "virtio" | "usb")) {
            causes.invalid(
                format!("{path}.bus"),
                "Input device can have only virtio or usb bus.",
            );
        }
        if input.r#type != "tablet" {
            causes.invalid(
                format!("{path}.type"),
                "Input device can have only tablet type.",
            );
        }
    }
    if let Some(sound) = &devices.sound {
        if !matches!(sound.model.as_deref(), None | Some("" | "ich9" | "ac97")) {
            causes.invalid(
                "spec.domain.devices.sound.model",
                "Sound device type is not supported. Options: 'ich9' or 'ac97'",
            );
        }
        if sound.name.is_empty() {
            causes.invalid(
                "spec.domain.devices.sound.name",
                "Sound device requires a name field.",
            );
        }
    }
    if devices.video.is_some() && devices.autoattach_graphics_device == Some(false) {
        causes.invalid(
            "spec.video",
            "Video configuration is not allowed when autoattachGraphicsDevice is set to false",
        );
    }
    let arch = spec.architecture.as_deref().unwrap_or("amd64");
    if let Some(panics) = devices.panic_devices.as_ref().filter(|p| !p.is_empty()) {
        if arch == "s390x" {
            causes.invalid(
                "spec.domain.devices.panicDevices",
                "custom panic devices are not supported on s390x architecture",
            );
        }
        for (idx, p) in panics.iter().enumerate() {
            if let Some(model) = p.model.as_deref()
                && !matches!(model, "hyperv" | "isa" | "pvpanic")
            {
                causes.invalid(
                    format!("spec.domain.devices.panicDevices[{idx}].model"),
                    format!("invalid PanicDeviceModel({model})"),
                );
            }
        }
    }
    if let Some(policy) = spec.domain.io_threads_policy.as_deref() {
        if !matches!(policy, "shared" | "auto" | "supplementalPool") {
            causes.invalid(
                "spec.domain.ioThreadsPolicy",
                format!("Invalid IOThreadsPolicy ({policy})"),
            );
        }
        let count = spec
            .domain
            .io_threads
            .as_ref()
            .and_then(|t| t.supplemental_pool_thread_count)
            .unwrap_or(0);
        if policy == "supplementalPool" && count < 1 {
            causes.invalid(
                "spec.domain.ioThreads.count",
                "the number of iothreads needs to be set and positive for the dedicated policy",
            );
        }
    }
}

fn check_enumerations(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    if let Some(strategy) = spec.start_strategy.as_deref() {
        if strategy != "Paused" {
            causes.invalid(
                "spec.startStrategy",
                format!("spec.startStrategy is set with an unrecognized option: {strategy}"),
            );
        } else if spec.liveness_probe.is_some() {
            causes.invalid(
                "spec.startStrategy",
                "either spec.startStrategy or spec.livenessProbe should be provided.Pausing VMI with LivenessProbe is not supported",
            );
        }
    }
    if let Some(e) = spec.eviction_strategy.as_deref()
        && !matches!(
            e,
            "LiveMigrate" | "LiveMigrateIfPossible" | "None" | "External"
        )
    {
        causes.invalid(
            "spec.evictionStrategy",
            format!("spec.evictionStrategy is set with an unrecognized option: {e}"),
        );
    }
    if let Some(p) = spec.dns_policy.as_deref()
        && !matches!(
            p,
            "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" | ""
        )
    {
        causes.push(
            CauseKind::NotSupported,
            "spec.dnsPolicy",
            format!(
                "DNSPolicy: {p} is not supported, valid values: [ClusterFirstWithHostNet ClusterFirst Default None ]"
            ),
        );
    }
    if spec.dns_policy.as_deref() == Some("None")
        && spec
            .dns_config
            .as_ref()
            .is_none_or(|c| c.nameservers.as_ref().is_none_or(|n| n.is_empty()))
    {
        causes.required(
            "spec.dnsConfig",
            "must provide at least one DNS nameserver when `dnsPolicy` is None",
        );
    }
    if let Some(h) = spec.hostname.as_deref().filter(|h| !h.is_empty())
        && let Some(err) = dns1123_label_error(h)
    {
        causes.invalid(
            "spec.hostname",
            format!("spec.hostname does not conform to the kubernetes DNS_LABEL rules : {err}"),
        );
    }
}
