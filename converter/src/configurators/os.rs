//! `<os>`: firmware (EFI loader and NVRAM, BIOS serial, kernel boot, ACPI tables), SMBIOS mode,
//! machine type and the boot menu of paused starts.

use super::{Configurator, Env, util};
use crate::context::{Arch, launcher_ovmf_dir};
use crate::domain::{
    AcpiTable, Bios, BootMenu, Domain, FirmwareFeature, FirmwareInfo, Loader, NvRam, OsAcpi,
    SmBios, Str,
};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::names::path_component;

/// Where the launcher keeps NVRAM files of non-root VMIs.
const NVRAM_DIR_NONROOT: &str = "/var/run/kubevirt-private/libvirt/qemu/nvram";
/// Where root VMIs keep NVRAM files.
const NVRAM_DIR_ROOT: &str = "/var/lib/libvirt/qemu/nvram";
/// Kernel boot artifacts as the launcher sees them.
const KERNEL_BOOT_DIR: &str = "/var/run/kubevirt/container-disks/kernel-boot";
/// Secrets mounted into the launcher.
pub(crate) const SECRET_SOURCE_DIR: &str = "/var/run/kubevirt-private/secret";

/// Writes the OS section.
pub struct Os<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

/// The firmware files an EFI VMI boots from: the OVMF code and variables template (as paths;
/// empty when there is none) and whether the loader is the secure one.
struct EfiFiles {
    code: Str,
    vars: Str,
    secure_loader: bool,
    /// Let libvirt pick the firmware (only a context's explicit choice asks for it).
    auto_selection: bool,
}

/// `dir/name` (empty when `name` is): the launcher image's own firmware files in its own
/// directory are constants, borrowed; any other directory is joined (one allocation each, two
/// per EFI conversion before).
fn firmware_path(dir: &str, name: &'static str) -> Str {
    macro_rules! in_launcher_dir {
        ($($file:literal),* $(,)?) => {
            match name {
                $($file => Some(concat!(launcher_ovmf_dir!(), "/", $file)),)*
                _ => None,
            }
        };
    }
    if name.is_empty() {
        return Str::Borrowed("");
    }
    if dir == launcher_ovmf_dir!()
        && let Some(path) = in_launcher_dir!(
            "OVMF_CODE.secboot.fd",
            "OVMF_VARS.secboot.fd",
            "OVMF_VARS.fd",
            "OVMF_CODE.cc.fd",
            "OVMF.amdsev.fd",
            "OVMF.inteltdx.fd",
            "OVMF.inteltdx.secboot.fd",
            "AAVMF_CODE.fd",
            "AAVMF_VARS.fd",
        )
    {
        return Str::Borrowed(path);
    }
    Str::Owned(util::cat([dir, "/", name]))
}

/// The launcher's firmware choice for an EFI VMI, given the OVMF directory.
fn efi_files(vmi: &VirtualMachineInstance, env: &Env<'_>) -> EfiFiles {
    let secure = vmi
        .spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.bootloader.as_ref())
        .and_then(|b| b.efi.as_ref())
        .and_then(|e| e.secure_boot)
        .unwrap_or(true);
    let dir = env.ctx.ovmf_dir.as_str();
    if env.arch == Arch::Arm64 {
        return EfiFiles {
            code: firmware_path(dir, "AAVMF_CODE.fd"),
            vars: firmware_path(dir, "AAVMF_VARS.fd"),
            // KubeVirt's Arm64 rule leaves the loader's `secure` off.
            secure_loader: false,
            auto_selection: false,
        };
    }
    let ls = vmi.spec.domain.launch_security.as_ref();
    let snp = ls.is_some_and(|l| l.snp.is_some() && l.sev.is_none());
    let sev = ls.is_some_and(|l| l.sev.is_some());
    let tdx = env.tdx;
    let (code, vars) = if snp {
        (if secure { "" } else { "OVMF.amdsev.fd" }, "")
    } else if sev {
        if secure {
            ("", "")
        } else {
            ("OVMF_CODE.cc.fd", "OVMF_VARS.fd")
        }
    } else if tdx {
        (
            if secure {
                "OVMF.inteltdx.secboot.fd"
            } else {
                "OVMF.inteltdx.fd"
            },
            "",
        )
    } else if secure {
        ("OVMF_CODE.secboot.fd", "OVMF_VARS.secboot.fd")
    } else {
        ("OVMF_CODE.secboot.fd", "OVMF_VARS.fd")
    };
    EfiFiles {
        code: firmware_path(dir, code),
        vars: firmware_path(dir, vars),
        secure_loader: secure && !tdx,
        auto_selection: false,
    }
}

fn nvram_path(vmi: &VirtualMachineInstance) -> Result<String, ConvertError> {
    let non_root = vmi
        .status
        .as_ref()
        .and_then(|s| s.runtime_user)
        .is_some_and(|u| u != 0);
    let dir = if non_root {
        NVRAM_DIR_NONROOT
    } else {
        NVRAM_DIR_ROOT
    };
    // Joined by `cat`: one exactly-sized allocation (format! grew its buffer once here).
    Ok(util::cat([
        dir,
        "/",
        util::name_component(vmi)?,
        "_VARS.fd",
    ]))
}

fn base_name(p: &str) -> &str {
    p.trim_end_matches('/').rsplit('/').next().unwrap_or(p)
}

impl Configurator for Os<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let spec = &vmi.spec.domain;
        if let Some(fw) = &spec.firmware {
            if util::is_efi(vmi) {
                // Derived per conversion unless the context has it (then its paths are
                // copied); derived paths are the launcher image's constants, borrowed.
                let files = match &self.env.ctx.efi {
                    Some(e) => EfiFiles {
                        code: Str::Owned(e.code.clone()),
                        vars: Str::Owned(e.vars.clone()),
                        secure_loader: e.secure_loader,
                        auto_selection: e.uses_firmware_auto_selection,
                    },
                    None => efi_files(vmi, self.env),
                };
                if files.auto_selection {
                    domain.os.firmware = Some("efi".into());
                    domain.os.firmware_info = Some(FirmwareInfo {
                        features: vec![
                            FirmwareFeature {
                                enabled: "yes".into(),
                                name: "secure-boot".into(),
                            },
                            FirmwareFeature {
                                enabled: "yes".into(),
                                name: "enrolled-keys".into(),
                            },
                        ],
                    });
                    domain.os.loader = None;
                    if vmi.spec.architecture.as_deref() != Some("arm64") {
                        domain.os.nvram = Some(NvRam {
                            format: Some("raw".into()),
                            path: nvram_path(vmi)?.into(),
                            template: None,
                        });
                    }
                } else {
                    let snp_or_tdx = self.env.tdx
                        || vmi
                            .spec
                            .domain
                            .launch_security
                            .as_ref()
                            .is_some_and(|l| l.snp.is_some());
                    domain.os.loader = Some(Loader {
                        path: files.code,
                        readonly: Some("yes".into()),
                        secure: Some(if files.secure_loader { "yes" } else { "no" }.into()),
                        kind: Some(if snp_or_tdx { "rom" } else { "pflash" }.into()),
                    });
                    domain.os.nvram = if snp_or_tdx {
                        None
                    } else {
                        Some(NvRam {
                            template: (!files.vars.is_empty()).then_some(files.vars),
                            format: None,
                            path: nvram_path(vmi)?.into(),
                        })
                    };
                }
            }
            if let Some(bios) = fw.bootloader.as_ref().and_then(|b| b.bios.as_ref())
                && bios.use_serial == Some(true)
            {
                domain.os.bios = Some(Bios {
                    useserial: Some("yes".into()),
                });
            }
            if let Some(kb) = &fw.kernel_boot {
                if let Some(c) = &kb.container {
                    const FIELD: &str = "spec.domain.firmware.kernelBoot.container";
                    if let Some(k) = c.kernel_path.as_deref().filter(|s| !s.is_empty()) {
                        let base = util::file_name_component(
                            format_args!("{FIELD}.kernelPath"),
                            base_name(k),
                        )?;
                        domain.os.kernel = Some(format!("{KERNEL_BOOT_DIR}/{base}").into());
                    }
                    if let Some(i) = c.initrd_path.as_deref().filter(|s| !s.is_empty()) {
                        let base = util::file_name_component(
                            format_args!("{FIELD}.initrdPath"),
                            base_name(i),
                        )?;
                        domain.os.initrd = Some(format!("{KERNEL_BOOT_DIR}/{base}").into());
                    }
                }
                domain.os.cmdline = kb
                    .kernel_args
                    .clone()
                    .filter(|s| !s.is_empty())
                    .map(Into::into);
            }
            if let Some(acpi) = &fw.acpi {
                let slic = acpi.slic_name_ref.as_deref().unwrap_or("");
                let msdm = acpi.msdm_name_ref.as_deref().unwrap_or("");
                if slic.is_empty() && msdm.is_empty() {
                    return Err(ConvertError::new(
                        "spec.domain.firmware.acpi",
                        "No ACPI tables were set. Expecting at least one.",
                    ));
                }
                let mut tables: OsAcpi = domain.os.acpi.take().unwrap_or_default();
                for (kind, vol) in [("slic", slic), ("msdm", msdm)] {
                    if vol.is_empty() {
                        continue;
                    }
                    path_component(format_args!("spec.domain.firmware.acpi.{kind}NameRef"), vol)?;
                    let v = vmi
                        .spec
                        .volumes
                        .iter()
                        .flatten()
                        .find(|v| v.name == vol)
                        .ok_or_else(|| {
                            ConvertError::new(
                                "spec.domain.firmware.acpi",
                                format!("Firmware's volume for {kind} was not found"),
                            )
                        })?;
                    if v.secret.is_none() {
                        return Err(ConvertError::new(
                            "spec.domain.firmware.acpi",
                            format!("Firmware's volume type is unsupported for {kind}"),
                        ));
                    }
                    tables.tables.push(AcpiTable {
                        path: format!("{SECRET_SOURCE_DIR}/{vol}/{kind}.bin").into(),
                        kind: Some(kind.into()),
                    });
                }
                domain.os.acpi = Some(tables);
            }
        }
        if smbios_needed(self.env.arch) {
            domain.os.smbios = Some(SmBios {
                mode: "sysinfo".into(),
            });
        }
        if let Some(m) = spec.machine.as_ref().and_then(|m| m.r#type.as_ref()) {
            domain.os.kind.machine = Some(m).filter(|s| !s.is_empty()).map(|m| util::intern(m));
        }
        if vmi.spec.start_strategy.as_deref() == Some("Paused") {
            domain.os.bootmenu = Some(BootMenu {
                enable: "yes".into(),
                timeout: Some(10000),
            });
        }
        Ok(())
    }
}

fn smbios_needed(arch: Arch) -> bool {
    matches!(arch, Arch::Amd64 | Arch::Arm64)
}
