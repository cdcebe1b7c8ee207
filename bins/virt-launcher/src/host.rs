//! The converter's context from the real environment: container disk formats (`qemu-img info`),
//! block vs file volumes, whether `/dev/kvm` can be opened, and the handler's options.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::ConverterContext;
use kvrs_converter::context::SmBios;
use kvrs_ipc::VirtualMachineOptions;
use tokio::process::Command;

use crate::flags::Flags;
use crate::paths::check_name;

/// `/dev/kvm` is a character device this process can open read-write (what QEMU needs); an
/// empty file bound over it (a runtime's mask) is not.
pub fn kvm_usable() -> bool {
    use std::os::unix::fs::FileTypeExt;
    let is_device = std::fs::metadata("/dev/kvm").is_ok_and(|m| m.file_type().is_char_device());
    is_device
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok()
}

/// Where KubeVirt's container disk for volume index `index` appears in the pod.
pub fn container_disk_path(flags: &Flags, index: usize) -> PathBuf {
    flags.container_disk_dir.join(format!("disk_{index}.img"))
}

/// qcow2's magic (`QFI\xfb`).
const QCOW2_MAGIC: [u8; 4] = *b"QFI\xfb";

/// "qcow2" when the first eight bytes are qcow2's magic and a version QEMU opens (2 or 3): what
/// `qemu-img info` answers for such a file, read without starting it. Anything else is left to
/// `qemu-img` (`None`).
fn qcow2_from_header(header: &[u8]) -> Option<&'static str> {
    let magic = header.get(..4)?;
    let version = u32::from_be_bytes(header.get(4..8)?.try_into().ok()?);
    (magic == QCOW2_MAGIC && (version == 2 || version == 3)).then_some("qcow2")
}

/// The image format of `path`, as `qemu-img info` reads it.
///
/// A qcow2 image (what container disks usually hold) is recognised from its header; other files
/// go to `qemu-img info` (arguments passed directly, no shell). Starting `qemu-img` costs
/// 20-100 ms, and it sat on SyncVirtualMachine's path before the define.
pub async fn image_format(path: &Path) -> Result<String, String> {
    use std::io::Read;
    // Eight bytes of a local file: read in place (tokio's file IO would start a thread).
    let mut header = [0u8; 8];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut header));
    if read.is_ok()
        && let Some(format) = qcow2_from_header(&header)
    {
        return Ok(format.to_string());
    }
    qemu_img_format(path).await
}

/// `qemu-img info --output=json -U <path>`'s `format`.
async fn qemu_img_format(path: &Path) -> Result<String, String> {
    let out = Command::new("qemu-img")
        .args(["info", "--output=json", "-U"])
        .arg(path)
        .output()
        .await
        .map_err(|e| format!("run qemu-img info {}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "qemu-img info {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("qemu-img info {}: {e}", path.display()))?;
    info["format"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("qemu-img info {}: no format", path.display()))
}

fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false)
}

/// Builds the context for converting `vmi` on this node.
pub async fn converter_context(
    vmi: &VirtualMachineInstance,
    options: &VirtualMachineOptions,
    flags: &Flags,
) -> Result<ConverterContext, String> {
    let mut ctx = ConverterContext {
        allow_emulation: flags.allow_emulation,
        allow_cross_arch_emulation: flags.allow_cross_arch_emulation,
        hypervisor_device_available: kvm_usable(),
        hypervisor_name: flags.hypervisor.clone(),
        ovmf_dir: flags.ovmf_path.display().to_string(),
        ephemeral_disk_dir: flags
            .ephemeral_disk_dir
            .join("disk-data")
            .display()
            .to_string(),
        // The oracle's fake 16-CPU node must not leak into a real domain.
        topology: None,
        default_vsock_cid: None,
        ..ConverterContext::default()
    };
    ctx.efi = crate::efi::fallback_firmware(vmi, &flags.ovmf_path, |name| {
        flags.ovmf_path.join(name).is_file()
    });
    if !ctx.hypervisor_device_available && !ctx.allow_emulation {
        return Err(
            "/dev/kvm is not usable and software emulation is not allowed (--allow-emulation)"
                .into(),
        );
    }
    if let Some(s) = &options.virtual_machine_sm_bios {
        ctx.smbios = Some(SmBios {
            manufacturer: s.manufacturer.clone(),
            product: s.product.clone(),
            version: s.version.clone(),
            sku: s.sku.clone(),
            family: s.family.clone(),
        });
        ctx.mem_balloon_stats_period = options.mem_balloon_stats_period;
    }
    if let Some(c) = &options.cluster_config {
        ctx.free_page_reporting = Some(!c.free_page_reporting_disabled);
        ctx.serial_console_log = Some(!c.serial_console_log_disabled);
        ctx.bochs_for_efi_guests = c.bochs_display_for_efi_guests;
    }
    ctx.domain_attachment_by_interface_name = options
        .interface_domain_attachment
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ctx.volumes_discard_ignore = options.preallocated_volumes.clone();

    // KubeVirt's HotplugVolumes: every volume with a hotplug status gets its disk from the
    // pod's hotplug directory, and is a block volume when virt-handler put a device node there
    // (`isHotplugBlockDeviceVolume`) rather than under /dev.
    ctx.hotplug_volumes = crate::hotplug::hotplug_volumes(vmi);
    for (index, volume) in vmi.spec.volumes.iter().flatten().enumerate() {
        check_name("volume name", &volume.name)?;
        if volume.container_disk.is_some() {
            let path = container_disk_path(flags, index);
            if !path.exists() {
                return Err(format!(
                    "container disk of volume {} not found at {}",
                    volume.name,
                    path.display()
                ));
            }
            ctx.disk_formats
                .insert(volume.name.clone(), image_format(&path).await?);
        }
        let block = if ctx.hotplug_volumes.contains(&volume.name) {
            is_block_device(&flags.hotplug_disk_dir.join(&volume.name))
        } else {
            is_block_device(&Path::new("/dev").join(&volume.name))
        };
        if block && (volume.persistent_volume_claim.is_some() || volume.ephemeral.is_some()) {
            ctx.block_pvcs.insert(volume.name.clone());
        }
        if block && volume.data_volume.is_some() {
            ctx.block_dvs.insert(volume.name.clone());
        }
    }
    Ok(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qcow2_headers_are_recognised_and_the_rest_left_to_qemu_img() {
        let header = |magic: &[u8; 4], version: u32| {
            let mut h = magic.to_vec();
            h.extend_from_slice(&version.to_be_bytes());
            h
        };
        assert_eq!(qcow2_from_header(&header(&QCOW2_MAGIC, 3)), Some("qcow2"));
        assert_eq!(qcow2_from_header(&header(&QCOW2_MAGIC, 2)), Some("qcow2"));
        // qcow (version 1) and versions QEMU refuses: qemu-img decides.
        assert_eq!(qcow2_from_header(&header(&QCOW2_MAGIC, 1)), None);
        assert_eq!(qcow2_from_header(&header(&QCOW2_MAGIC, 4)), None);
        assert_eq!(qcow2_from_header(&header(b"LUKS", 3)), None);
        assert_eq!(qcow2_from_header(b"QFI"), None);
        assert_eq!(qcow2_from_header(&[0; 8]), None);
    }

    /// The header path and `qemu-img info` agree, on images `qemu-img` made (qcow2 v3 and v2,
    /// raw, and a qcow2 overlay as the launcher makes them).
    #[tokio::test(flavor = "current_thread")]
    async fn the_header_path_agrees_with_qemu_img() {
        let dir = tempfile::tempdir().unwrap();
        let make = |args: &[&str]| {
            let out = std::process::Command::new("qemu-img")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("this test needs qemu-img (scripts/install-test-deps.sh)");
            assert!(out.status.success(), "qemu-img {args:?}: {out:?}");
        };
        make(&["create", "-f", "qcow2", "base.qcow2", "1M"]);
        make(&[
            "create",
            "-f",
            "qcow2",
            "-o",
            "compat=0.10",
            "v2.qcow2",
            "1M",
        ]);
        make(&["create", "-f", "raw", "disk.raw", "1M"]);
        make(&[
            "create",
            "-f",
            "qcow2",
            "-b",
            "base.qcow2",
            "-F",
            "qcow2",
            "overlay.qcow2",
        ]);
        for (name, want) in [
            ("base.qcow2", "qcow2"),
            ("v2.qcow2", "qcow2"),
            ("disk.raw", "raw"),
            ("overlay.qcow2", "qcow2"),
        ] {
            let path = dir.path().join(name);
            assert_eq!(image_format(&path).await.unwrap(), want, "{name}");
            assert_eq!(qemu_img_format(&path).await.unwrap(), want, "{name}");
        }
    }
}
