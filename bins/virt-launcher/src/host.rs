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

/// The image format `qemu-img` reads from `path` (arguments passed directly, no shell).
pub async fn image_format(path: &Path) -> Result<String, String> {
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
        let block = is_block_device(&Path::new("/dev").join(&volume.name));
        if block && (volume.persistent_volume_claim.is_some() || volume.ephemeral.is_some()) {
            ctx.block_pvcs.insert(volume.name.clone());
        }
        if block && volume.data_volume.is_some() {
            ctx.block_dvs.insert(volume.name.clone());
        }
    }
    Ok(ctx)
}
