//! The backend-storage PVC: persistent TPM state and EFI variables survive restarts and
//! migrations on a per-VM PVC, mounted into the compute container at the paths swtpm and libvirt
//! use (under the private directory for non-root launchers).

use super::volumes::{RenderedVolumes, empty_dir, mount, pvc_volume, sub_path};
use super::{PodInputs, VIRT_PRIVATE_DIR};
use crate::api::VirtualMachineInstance;

/// Whether the VMI keeps state (persistent TPM or EFI variables) on a backend-storage PVC.
pub fn needs_backend_storage(vmi: &VirtualMachineInstance) -> bool {
    let devices = &vmi.spec.domain.devices;
    let tpm = devices
        .tpm
        .as_ref()
        .is_some_and(|t| t.enabled.unwrap_or(true) && t.persistent.unwrap_or(false));
    tpm || persistent_efi(vmi)
}

fn persistent_efi(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.bootloader.as_ref())
        .and_then(|b| b.efi.as_ref())
        .and_then(|e| e.persistent)
        .unwrap_or(false)
}

pub(super) fn render(
    vmi: &VirtualMachineInstance,
    inputs: &PodInputs,
    non_root: bool,
    r: &mut RenderedVolumes,
) {
    if !needs_backend_storage(vmi) {
        return;
    }
    let claim = inputs.backend_storage_pvc.clone().unwrap_or_else(|| {
        format!(
            "persistent-state-for-{}",
            vmi.metadata.name.as_deref().unwrap_or_default()
        )
    });
    const STATE: &str = "vm-state";
    r.volumes.push(pvc_volume(STATE, &claim, None));
    r.mounts.push(sub_path(
        STATE,
        "/run/kubevirt-private/backend-storage-meta",
        "meta",
        false,
    ));
    if non_root {
        r.volumes.push(empty_dir("private-libvirt"));
        r.volumes.push(empty_dir("private-libvirt-qemu"));
        r.mounts.push(mount(
            "private-libvirt",
            &format!("{VIRT_PRIVATE_DIR}/libvirt"),
        ));
        r.mounts.push(mount(
            "private-libvirt-qemu",
            &format!("{VIRT_PRIVATE_DIR}/libvirt/qemu"),
        ));
    }
    let tpm_persistent = vmi
        .spec
        .domain
        .devices
        .tpm
        .as_ref()
        .is_some_and(|t| t.enabled.unwrap_or(true) && t.persistent.unwrap_or(false));
    if tpm_persistent {
        let (swtpm, localca) = if non_root {
            (
                format!("{VIRT_PRIVATE_DIR}/libvirt/qemu/swtpm"),
                format!("{VIRT_PRIVATE_DIR}/var/lib/swtpm-localca"),
            )
        } else {
            (
                "/var/lib/libvirt/swtpm".to_string(),
                "/var/lib/swtpm-localca".to_string(),
            )
        };
        r.mounts.push(sub_path(STATE, &swtpm, "swtpm", false));
        r.mounts
            .push(sub_path(STATE, &localca, "swtpm-localca", false));
    }
    if persistent_efi(vmi) {
        let nvram = if non_root {
            format!("{VIRT_PRIVATE_DIR}/libvirt/qemu/nvram")
        } else {
            "/var/lib/libvirt/qemu/nvram".to_string()
        };
        r.mounts.push(sub_path(STATE, &nvram, "nvram", false));
    }
}
