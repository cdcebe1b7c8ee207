//! Which OVMF files an EFI VMI boots from, by what the launcher's firmware directory holds:
//! KubeVirt's `DetectEFIEnvironment`. The converter's own rule assumes KubeVirt's launcher image
//! (every file present); a directory without the secure-boot build (`OVMF_CODE.secboot.fd`)
//! still boots EFI without secure boot from the plain build `OVMF_CODE.fd`, as KubeVirt's
//! launcher does.
//!
//! The decision is a plain function of the VMI and the set of file names present; the launcher
//! lists the directory.

use std::path::Path;

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::context::EfiConfiguration;

const CODE_SECURE_BOOT: &str = "OVMF_CODE.secboot.fd";
const CODE: &str = "OVMF_CODE.fd";
const VARS: &str = "OVMF_VARS.fd";

/// The firmware for `vmi` when the converter's rule would name a file `dir` lacks: an amd64
/// EFI VMI without secure boot and without SEV, SNP or TDX, in a directory with the plain
/// `OVMF_CODE.fd` but no `OVMF_CODE.secboot.fd`. `None` leaves the converter's rule, which is
/// KubeVirt's whenever the secure-boot build is there.
pub fn fallback_firmware(
    vmi: &VirtualMachineInstance,
    dir: &Path,
    present: impl Fn(&str) -> bool,
) -> Option<EfiConfiguration> {
    let efi = vmi
        .spec
        .domain
        .firmware
        .as_ref()?
        .bootloader
        .as_ref()?
        .efi
        .as_ref()?;
    let secure_boot = efi.secure_boot.unwrap_or(true);
    let arch = vmi.spec.architecture.as_deref().unwrap_or("amd64");
    let confidential = vmi.spec.domain.launch_security.is_some();
    if secure_boot || arch != "amd64" || confidential || present(CODE_SECURE_BOOT) || !present(CODE)
    {
        return None;
    }
    Some(EfiConfiguration {
        code: dir.join(CODE).display().to_string(),
        vars: dir.join(VARS).display().to_string(),
        secure_loader: false,
        uses_firmware_auto_selection: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(efi: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(serde_json::json!({
            "spec": {"domain": {"devices": {}, "firmware": {"bootloader": {"efi": efi}}}}
        }))
        .unwrap()
    }

    fn with(files: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |f| files.contains(&f)
    }

    #[test]
    fn the_plain_build_boots_efi_without_secure_boot_when_the_secure_one_is_missing() {
        let dir = Path::new("/usr/share/OVMF");
        let got = fallback_firmware(
            &vmi(serde_json::json!({"secureBoot": false})),
            dir,
            with(&[CODE, VARS]),
        )
        .expect("the plain build");
        assert_eq!(got.code, "/usr/share/OVMF/OVMF_CODE.fd");
        assert_eq!(got.vars, "/usr/share/OVMF/OVMF_VARS.fd");
        assert!(!got.secure_loader && !got.uses_firmware_auto_selection);
    }

    #[test]
    fn the_converters_rule_stands_otherwise() {
        let dir = Path::new("/d");
        let insecure = vmi(serde_json::json!({"secureBoot": false}));
        // The secure-boot build is there: KubeVirt prefers it even without secure boot.
        assert!(fallback_firmware(&insecure, dir, with(&[CODE_SECURE_BOOT, CODE, VARS])).is_none());
        // Neither build: nothing to fall back to (the converter names the missing file).
        assert!(fallback_firmware(&insecure, dir, with(&[VARS])).is_none());
        // Secure boot (the default) needs the secure-boot build.
        assert!(fallback_firmware(&vmi(serde_json::json!({})), dir, with(&[CODE, VARS])).is_none());
        // Not EFI.
        let bios: VirtualMachineInstance =
            serde_json::from_value(serde_json::json!({"spec": {"domain": {"devices": {}}}}))
                .unwrap();
        assert!(fallback_firmware(&bios, dir, with(&[CODE, VARS])).is_none());
        // Confidential guests have their own builds.
        let mut sev = insecure.clone();
        sev.spec.domain.launch_security =
            serde_json::from_value(serde_json::json!({"sev": {}})).unwrap();
        assert!(fallback_firmware(&sev, dir, with(&[CODE, VARS])).is_none());
    }
}
