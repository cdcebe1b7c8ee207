//! The device preferences (KubeVirt's `preference/apply` device, disk, interface, input and
//! panic-device parts): each fills a device field only where the VM leaves it unset, except
//! `preferredDisableHotplug`, which KubeVirt writes over the VM's value.

use kvrs_api::VirtualMachineInstanceSpec;
use kvrs_api::api::{DiskTarget, Interface, PanicDevice, VideoDevice};

use crate::types::{DevicePreferences, PreferenceSpec};

fn unset(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

fn fill(target: &mut Option<String>, preferred: &Option<String>) {
    if let Some(p) = preferred.as_ref().filter(|p| !p.is_empty())
        && unset(target)
    {
        *target = Some(p.clone());
    }
}

/// The auto-attach preferences alone: the VM controller applies them again before it adds its
/// own devices (input device, pod interface) to a new VMI.
pub fn apply_autoattach_preferences(
    preference: Option<&PreferenceSpec>,
    spec: &mut VirtualMachineInstanceSpec,
) {
    let Some(prefs) = preference.and_then(|p| p.devices.as_ref()) else {
        return;
    };
    let devices = &mut spec.domain.devices;
    let fields = [
        (
            prefs.preferred_autoattach_graphics_device,
            &mut devices.autoattach_graphics_device,
        ),
        (
            prefs.preferred_autoattach_mem_balloon,
            &mut devices.autoattach_mem_balloon,
        ),
        (
            prefs.preferred_autoattach_pod_interface,
            &mut devices.autoattach_pod_interface,
        ),
        (
            prefs.preferred_autoattach_serial_console,
            &mut devices.autoattach_serial_console,
        ),
        (
            prefs.preferred_autoattach_input_device,
            &mut devices.autoattach_input_device,
        ),
    ];
    for (preferred, field) in fields {
        if preferred.is_some() && field.is_none() {
            *field = preferred;
        }
    }
}

pub(crate) fn apply(preference: &PreferenceSpec, spec: &mut VirtualMachineInstanceSpec) {
    let Some(prefs) = &preference.devices else {
        return;
    };
    let devices = &mut spec.domain.devices;
    let flags = [
        (
            prefs.preferred_use_virtio_transitional,
            &mut devices.use_virtio_transitional,
        ),
        (
            prefs.preferred_block_multi_queue,
            &mut devices.block_multi_queue,
        ),
        (
            prefs.preferred_network_interface_multi_queue,
            &mut devices.network_interface_multiqueue,
        ),
    ];
    for (preferred, field) in flags {
        if preferred.is_some() && field.is_none() {
            *field = preferred;
        }
    }
    if let Some(disable) = prefs.preferred_disable_hotplug {
        // A Go value field, overwritten (false reads as unset).
        devices.disable_hotplug = disable.then_some(true);
    }
    if let Some(sound) = devices.sound.as_mut() {
        fill(&mut sound.model, &prefs.preferred_sound_model);
    }
    if prefs.preferred_rng.is_some() && devices.rng.is_none() {
        devices.rng = prefs.preferred_rng.clone();
    }
    if prefs.preferred_tpm.is_some() && devices.tpm.is_none() {
        devices.tpm = prefs.preferred_tpm.clone();
    }
    if let Some(video_type) = &prefs.preferred_video_type {
        let video = devices.video.get_or_insert_with(VideoDevice::default);
        if unset(&video.r#type) && !video_type.is_empty() {
            video.r#type = Some(video_type.clone());
        }
    }
    apply_autoattach_preferences(Some(preference), spec);
    disks(prefs, spec);
    interfaces(prefs, spec);
    inputs(prefs, spec);
    panic_devices(prefs, spec);
}

fn disks(prefs: &DevicePreferences, spec: &mut VirtualMachineInstanceSpec) {
    for disk in spec.domain.devices.disks.iter_mut().flatten() {
        if disk.disk.is_none() && disk.cdrom.is_none() && disk.lun.is_none() {
            disk.disk = Some(DiskTarget::default());
        }
        if let Some(target) = disk.disk.as_mut() {
            fill(&mut target.bus, &prefs.preferred_disk_bus);
            if prefs.preferred_disk_block_size.is_some() && disk.block_size.is_none() {
                disk.block_size = prefs.preferred_disk_block_size.clone();
            }
            fill(&mut disk.cache, &prefs.preferred_disk_cache);
            fill(&mut disk.io, &prefs.preferred_disk_io);
            if prefs.preferred_disk_dedicated_io_thread.is_some()
                && disk.dedicated_io_thread.is_none()
                && target.bus.as_deref() == Some("virtio")
            {
                disk.dedicated_io_thread = prefs.preferred_disk_dedicated_io_thread;
            }
        } else if let Some(cdrom) = disk.cdrom.as_mut() {
            fill(&mut cdrom.bus, &prefs.preferred_cdrom_bus);
        } else if let Some(lun) = disk.lun.as_mut() {
            fill(&mut lun.bus, &prefs.preferred_lun_bus);
        }
    }
}

/// No binding method and no plugin binding: the interface takes the preferred masquerade.
fn binding_unset(iface: &Interface) -> bool {
    iface.bridge.is_none()
        && iface.slirp.is_none()
        && iface.masquerade.is_none()
        && iface.sriov.is_none()
        && iface.macvtap.is_none()
        && iface.passt.is_none()
        && iface.passt_binding.is_none()
        && iface.binding.is_none()
}

fn interfaces(prefs: &DevicePreferences, spec: &mut VirtualMachineInstanceSpec) {
    // The first network of the interface's name decides whether it is on the pod network.
    let on_pod_network = |name: &str, spec: &VirtualMachineInstanceSpec| {
        spec.networks
            .iter()
            .flatten()
            .find(|n| n.name == name)
            .is_some_and(|n| n.pod.is_some())
    };
    let Some(count) = spec.domain.devices.interfaces.as_ref().map(Vec::len) else {
        return;
    };
    for i in 0..count {
        let masquerade = prefs.preferred_interface_masquerade.is_some() && {
            let iface = &spec.domain.devices.interfaces.as_ref().map(|v| &v[i]);
            iface.is_some_and(|iface| binding_unset(iface) && on_pod_network(&iface.name, spec))
        };
        let Some(iface) = spec.domain.devices.interfaces.as_mut().map(|v| &mut v[i]) else {
            return;
        };
        fill(&mut iface.model, &prefs.preferred_interface_model);
        if masquerade {
            iface.masquerade = prefs.preferred_interface_masquerade.clone();
        }
    }
}

fn inputs(prefs: &DevicePreferences, spec: &mut VirtualMachineInstanceSpec) {
    for input in spec.domain.devices.inputs.iter_mut().flatten() {
        fill(&mut input.bus, &prefs.preferred_input_bus);
        if let Some(t) = prefs
            .preferred_input_type
            .as_ref()
            .filter(|t| !t.is_empty())
            && input.r#type.is_empty()
        {
            input.r#type = t.clone();
        }
    }
}

fn panic_devices(prefs: &DevicePreferences, spec: &mut VirtualMachineInstanceSpec) {
    let Some(model) = &prefs.preferred_panic_device_model else {
        return;
    };
    let devices = spec
        .domain
        .devices
        .panic_devices
        .get_or_insert_with(Vec::new);
    if devices.is_empty() {
        devices.push(PanicDevice {
            model: Some(model.clone()),
            ..Default::default()
        });
        return;
    }
    for device in devices.iter_mut().filter(|d| d.model.is_none()) {
        device.model = Some(model.clone());
    }
}
