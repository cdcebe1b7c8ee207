//! Per-architecture rules: what each guest architecture can emulate (video models, watchdogs,
//! disk buses, boot firmware, CPU models, sound).

use super::CauseKind;
use super::causes::Causes;
use crate::api::VirtualMachineInstanceSpec;

const VIDEO_TYPE: &str = "spec.domain.devices.video.type";
const WATCHDOG: &str = "spec.domain.devices.watchdog";

pub(super) fn check(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let devices = &spec.domain.devices;
    let arch = spec.architecture.as_deref().unwrap_or("");
    let video = devices
        .video
        .as_ref()
        .map(|v| v.r#type.as_deref().unwrap_or(""));
    let not_supported = |causes: &mut Causes, field: String, msg: String| {
        causes.push(CauseKind::NotSupported, field, msg);
    };
    match arch {
        "amd64" => {
            if let Some(t) = video
                && !matches!(t, "vga" | "cirrus" | "virtio" | "ramfb" | "bochs")
            {
                not_supported(
                    causes,
                    VIDEO_TYPE.into(),
                    format!("video model '{t}' is not supported on amd64 architecture"),
                );
            }
            if let Some(wd) = &devices.watchdog
                && (wd.i6300esb.is_none() || wd.diag288.is_some())
            {
                not_supported(
                    causes,
                    WATCHDOG.into(),
                    "amd64 only supports I6300ESB watchdog device".into(),
                );
            }
        }
        "arm64" => check_arm64(spec, video, causes),
        "s390x" => {
            if let Some(t) = video
                && t != "virtio"
            {
                not_supported(
                    causes,
                    VIDEO_TYPE.into(),
                    format!("video model '{t}' is not supported on s390x architecture"),
                );
            }
            if let Some(wd) = &devices.watchdog
                && (wd.diag288.is_none() || wd.i6300esb.is_some())
            {
                not_supported(
                    causes,
                    WATCHDOG.into(),
                    "s390x only supports Diag288 watchdog device".into(),
                );
            }
        }
        other => causes.invalid(
            "spec.architecture",
            format!("unsupported architecture: {other}"),
        ),
    }
}

/// arm64 boots UEFI only, passes the host CPU through, and has no IDE/SATA/USB disks, no
/// watchdog and no sound card.
fn check_arm64(spec: &VirtualMachineInstanceSpec, video: Option<&str>, causes: &mut Causes) {
    let mut no = |field: String, msg: &str| causes.push(CauseKind::NotSupported, field, msg);
    let domain = &spec.domain;
    if domain
        .firmware
        .as_ref()
        .and_then(|f| f.bootloader.as_ref())
        .is_some_and(|b| b.bios.is_some())
    {
        no(
            "spec.domain.firmware.bootloader.bios".into(),
            "Arm64 does not support bios boot, please change to uefi boot",
        );
    }
    if let Some(model) = domain.cpu.as_ref().and_then(|c| c.model.as_deref())
        && !model.is_empty()
        && model != "host-passthrough"
    {
        no(
            "spec.domain.cpu.model".into(),
            "currently, host-passthrough is the only model supported on Arm64",
        );
    }
    let ok_bus = |b: &Option<String>| matches!(b.as_deref(), None | Some("" | "virtio" | "scsi"));
    for (i, disk) in domain.devices.disks.iter().flatten().enumerate() {
        let targets = [
            ("disk", disk.disk.as_ref().map(|t| &t.bus)),
            ("cdrom", disk.cdrom.as_ref().map(|t| &t.bus)),
            ("lun", disk.lun.as_ref().map(|t| &t.bus)),
        ];
        for (kind, bus) in targets {
            if let Some(bus) = bus
                && !ok_bus(bus)
            {
                no(
                    format!("spec.domain.devices.disks[{i}].{kind}.bus"),
                    "Arm64 not support this disk bus type, please use virtio or scsi",
                );
            }
        }
    }
    if domain.devices.watchdog.is_some() {
        no(WATCHDOG.into(), "Arm64 not support Watchdog device");
    }
    if domain.devices.sound.is_some() {
        no(
            "spec.domain.devices.sound".into(),
            "Arm64 not support sound device",
        );
    }
    if let Some(t) = video
        && !matches!(t, "virtio" | "ramfb")
    {
        no(
            VIDEO_TYPE.into(),
            &format!("video model '{t}' is not supported on arm64 architecture"),
        );
    }
}
