//! The source half of a `<disk>`, by volume type.

use super::{DiskFacts, DiskPath};
use crate::configurators::{Env, util};
use crate::domain::{BackingStore, Disk, DiskDriver, DiskSource, Empty, FormatType};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::Volume;
use kvrs_api::names::path_component;

const PRIVATE: &str = "/var/run/kubevirt-private";
const CONTAINER_DISKS: &str = "/var/run/kubevirt/container-disks";
const HOTPLUG_DISKS: &str = "/var/run/kubevirt/hotplug-disks";
const EMPTY_DISKS: &str = "/var/run/libvirt/empty-disks";
const CLOUD_INIT_DIR: &str = "/var/run/libvirt/cloud-init-dir";

use crate::configurators::util::{cat, intern};

/// `/var/run/kubevirt-private/vmi-disks/<volume>/disk.img`.
pub(super) fn filesystem_path(volume: &str) -> String {
    cat([PRIVATE, "/vmi-disks/", volume, "/disk.img"])
}

/// `/dev/<volume>`.
pub(super) fn block_path(volume: &str) -> String {
    cat(["/dev/", volume])
}

fn driver(d: &mut Disk) -> &mut DiskDriver {
    d.driver.get_or_insert_with(|| DiskDriver {
        name: "qemu".into(),
        ..DiskDriver::default()
    })
}

/// KubeVirt's `setDiskDriver`: type, `stop` policy, and `unmap` when asked.
fn set_driver(d: &mut Disk, kind: &'static str, discard: bool) {
    let drv = driver(d);
    drv.kind = kind.into();
    drv.error_policy = Some("stop".into());
    if discard {
        drv.discard = Some("unmap".into());
    }
}

/// A cdrom without a volume: an empty block tray.
pub(super) fn missing_volume(d: &mut Disk) {
    d.kind = "block".into();
    let drv = driver(d);
    drv.kind = "raw".into();
    drv.discard = Some("unmap".into());
}

fn lun_incompatible(d: &Disk, name: &str, path: &DiskPath) -> Result<(), ConvertError> {
    if d.kind == "lun" {
        return Err(ConvertError::new(
            path.to_string(),
            format!("device {name} is of type lun. Not compatible with a file based disk"),
        ));
    }
    Ok(())
}

fn pvc_source(name: &str, is_block: bool, hotplug: bool, facts: DiskFacts, d: &mut Disk) {
    set_driver(d, "raw", !facts.discard_ignored);
    match (is_block, hotplug) {
        (true, false) => {
            d.kind = "block".into();
            d.source.name = Some(name.to_string().into());
            d.source.dev = Some(block_path(name).into());
        }
        (false, false) => {
            d.kind = "file".into();
            d.source.file = Some(filesystem_path(name).into());
        }
        (true, true) => {
            d.kind = "block".into();
            d.source.dev = Some(cat([HOTPLUG_DISKS, "/", name]).into());
        }
        (false, true) => {
            d.kind = "file".into();
            d.source.file = Some(cat([HOTPLUG_DISKS, "/", name, ".img"]).into());
        }
    }
}

/// Fills the disk's source from its volume.
pub(super) fn convert_volume(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    v: &Volume,
    index: usize,
    facts: DiskFacts,
    d: &mut Disk,
    path: &DiskPath,
) -> Result<(), ConvertError> {
    let ctx = env.ctx;
    // Every source below but the service account's and downward metrics' is a file or device
    // named after the volume.
    let name = path_component(format_args!("spec.volumes[{index}].name"), &v.name)?;
    if facts.hotplug {
        if v.host_disk.is_some() || v.persistent_volume_claim.is_some() {
            pvc_source(name, ctx.block_pvcs.contains(name), true, facts, d);
        } else if v.data_volume.is_some() {
            pvc_source(name, ctx.block_dvs.contains(name), true, facts, d);
        } else {
            return Err(ConvertError::new(
                path.to_string(),
                format!("hotplug disk {name} references an unsupported source"),
            ));
        }
        return Ok(());
    }
    if v.container_disk.is_some() {
        lun_incompatible(d, name, path)?;
        d.kind = "file".into();
        set_driver(d, "qcow2", true);
        d.source.file = Some(cat([&ctx.ephemeral_disk_dir, "/", name, "/disk.qcow2"]).into());
        let format = ctx
            .disk_formats
            .get(name)
            .unwrap_or(&ctx.default_container_disk_format);
        d.backing_store = Some(BackingStore {
            kind: Some("file".into()),
            format: Some(FormatType {
                kind: intern(format),
            }),
            source: Some(DiskSource {
                file: Some(
                    cat([
                        CONTAINER_DISKS,
                        "/disk_",
                        itoa::Buffer::new().format(index),
                        ".img",
                    ])
                    .into(),
                ),
                ..DiskSource::default()
            }),
        });
    } else if v.cloud_init_no_cloud.is_some() || v.cloud_init_config_drive.is_some() {
        lun_incompatible(d, name, path)?;
        let file = if v.cloud_init_no_cloud.is_some() {
            "noCloud.iso"
        } else {
            "configdrive.iso"
        };
        let ns = util::namespace_component(vmi)?;
        let vm = util::name_component(vmi)?;
        d.source.file = Some(cat([CLOUD_INIT_DIR, "/", ns, "/", vm, "/", file]).into());
        d.kind = "file".into();
        set_driver(d, "raw", false);
    } else if v.sysprep.is_some() {
        lun_incompatible(d, name, path)?;
        d.source.file = Some(cat([PRIVATE, "/sysprep-disks/", name, ".iso"]).into());
        d.kind = "file".into();
        driver(d).kind = "raw".into();
    } else if let Some(hd) = &v.host_disk {
        d.kind = "file".into();
        let base = hd
            .path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("");
        let base =
            util::file_name_component(format_args!("spec.volumes[{index}].hostDisk.path"), base)?;
        let drv = driver(d);
        drv.kind = "raw".into();
        drv.error_policy = Some("stop".into());
        d.source.file = Some(cat([PRIVATE, "/vmi-disks/", name, "/", base]).into());
    } else if v.persistent_volume_claim.is_some() {
        pvc_source(name, ctx.block_pvcs.contains(name), false, facts, d);
    } else if v.data_volume.is_some() {
        pvc_source(name, ctx.block_dvs.contains(name), false, facts, d);
    } else if v.ephemeral.is_some() {
        d.kind = "file".into();
        set_driver(d, "qcow2", true);
        d.source.file = Some(cat([&ctx.ephemeral_disk_dir, "/", name, "/disk.qcow2"]).into());
        let mut backing = Disk::default();
        if ctx.block_pvcs.contains(name) {
            pvc_source(name, true, false, facts, &mut backing);
        } else {
            backing.kind = "file".into();
            set_driver(&mut backing, "raw", false);
            backing.source.file = Some(filesystem_path(name).into());
        }
        d.backing_store = Some(BackingStore {
            kind: Some(backing.kind),
            format: Some(FormatType {
                kind: backing.driver.map(|d| d.kind).unwrap_or_default(),
            }),
            source: Some(backing.source),
        });
    } else if v.empty_disk.is_some() {
        lun_incompatible(d, name, path)?;
        d.kind = "file".into();
        d.source.file = Some(cat([EMPTY_DISKS, "/", name, ".qcow2"]).into());
        set_driver(d, "qcow2", true);
    } else if v.config_map.is_some() {
        config_disk(d, cat([PRIVATE, "/config-map-disks/", name, ".iso"]));
    } else if v.secret.is_some() {
        config_disk(d, cat([PRIVATE, "/secret-disks/", name, ".iso"]));
    } else if v.downward_api.is_some() {
        config_disk(d, cat([PRIVATE, "/downwardapi-disks/", name, ".iso"]));
    } else if v.service_account.is_some() {
        config_disk(
            d,
            format!("{PRIVATE}/service-account-disk/service-account.iso"),
        );
    } else if v.downward_metrics.is_some() {
        d.kind = "file".into();
        d.readonly = Some(Empty {});
        d.driver = Some(DiskDriver {
            kind: "raw".into(),
            name: "qemu".into(),
            ..DiskDriver::default()
        });
        d.model = Some(env.virtio_model.into());
        d.source = DiskSource {
            file: Some(format!("{PRIVATE}/downwardapi-disks/vhostmd0").into()),
            ..DiskSource::default()
        };
    } else {
        return Err(ConvertError::new(
            path.to_string(),
            format!("disk {name} references an unsupported source"),
        ));
    }
    Ok(())
}

fn config_disk(d: &mut Disk, file: String) {
    d.kind = "file".into();
    set_driver(d, "raw", false);
    d.source.file = Some(file.into());
}
