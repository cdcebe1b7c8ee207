//! Device-level defaults KubeVirt's API applies to every VMI: disk targets, CD-ROMs, input
//! devices, vGPU displays and probes.

use crate::api::{DiskTarget, Probe, VirtualMachineInstanceSpec};

/// A disk with no target kind is a plain disk; a CD-ROM is read-only with its tray closed.
pub(super) fn set_disk_targets(spec: &mut VirtualMachineInstanceSpec) {
    for disk in spec.domain.devices.disks.iter_mut().flatten() {
        if disk.disk.is_none() && disk.cdrom.is_none() && disk.lun.is_none() {
            disk.disk = Some(DiskTarget::default());
        }
        if let Some(cdrom) = disk.cdrom.as_mut() {
            if cdrom.readonly.is_none() {
                cdrom.readonly = Some(true);
            }
            if cdrom.tray.as_deref().unwrap_or("").is_empty() {
                cdrom.tray = Some("closed".to_string());
            }
        }
        if let Some(mv) = disk
            .block_size
            .as_mut()
            .and_then(|b| b.match_volume.as_mut())
            && mv.enabled.is_none()
        {
            mv.enabled = Some(true);
        }
    }
}

/// Input devices default to a USB tablet.
pub(super) fn set_inputs(spec: &mut VirtualMachineInstanceSpec) {
    for input in spec.domain.devices.inputs.iter_mut().flatten() {
        if input.bus.as_deref().unwrap_or("").is_empty() {
            input.bus = Some("usb".to_string());
        }
        if input.r#type.is_empty() {
            input.r#type = "tablet".to_string();
        }
    }
}

/// A vGPU display's ramfb is on once named.
pub(super) fn set_gpu_display_states(spec: &mut VirtualMachineInstanceSpec) {
    for gpu in spec.domain.devices.gpus.iter_mut().flatten() {
        if let Some(ramfb) = gpu
            .virtual_gpu_options
            .as_mut()
            .and_then(|o| o.display.as_mut())
            .and_then(|d| d.ram_fb.as_mut())
            && ramfb.enabled.is_none()
        {
            ramfb.enabled = Some(true);
        }
    }
}

/// Probes get Kubernetes' usual timing: 1 s timeout, every 10 s, one success, three failures.
pub(super) fn set_probes(spec: &mut VirtualMachineInstanceSpec) {
    for probe in [spec.readiness_probe.as_mut(), spec.liveness_probe.as_mut()]
        .into_iter()
        .flatten()
    {
        set_probe(probe);
    }
}

fn set_probe(probe: &mut Probe) {
    let at_least = |v: &mut Option<i32>, default: i32| {
        if v.unwrap_or(0) < 1 {
            *v = Some(default);
        }
    };
    at_least(&mut probe.timeout_seconds, 1);
    at_least(&mut probe.period_seconds, 10);
    at_least(&mut probe.success_threshold, 1);
    at_least(&mut probe.failure_threshold, 3);
}
