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
pub(super) struct Os<'a> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, node, run, vmi, vmi_from};
    use crate::context::{ConverterContext, EfiConfiguration};
    use serde_json::{Value, json};

    fn os_of(vmi: &VirtualMachineInstance, ctx: &ConverterContext) -> Result<Domain, ConvertError> {
        let env = Env::new(vmi, ctx);
        run(&Os { env: &env }, vmi)
    }

    fn os(spec: Value) -> Result<Domain, ConvertError> {
        os_of(&vmi(spec), &ConverterContext::default())
    }

    fn efi(efi: Value, launch_security: Option<Value>) -> Value {
        let mut domain = json!({"devices": {}, "firmware": {"bootloader": {"efi": efi}}});
        if let Some(ls) = launch_security {
            domain["launchSecurity"] = ls;
        }
        json!({"domain": domain})
    }

    #[test]
    fn smbios_comes_from_sysinfo_on_amd64_and_arm64_only() {
        let spec = json!({"domain": {"devices": {}}});
        for (arch, smbios) in [
            (Arch::Amd64, true),
            (Arch::Arm64, true),
            (Arch::S390x, false),
        ] {
            let d = os_of(&vmi(spec.clone()), &node(arch)).unwrap();
            assert_eq!(d.os.smbios.is_some(), smbios, "{arch:?}");
        }
    }

    #[test]
    fn the_machine_type_of_the_vmi_is_kept() {
        let d = os(json!({"domain": {"devices": {}, "machine": {"type": "pc-q35-rhel9.6.0"}}}))
            .unwrap();
        assert_eq!(d.os.kind.machine.as_deref(), Some("pc-q35-rhel9.6.0"));
        let d = os(json!({"domain": {"devices": {}, "machine": {"type": ""}}})).unwrap();
        assert_eq!(d.os.kind.machine, None, "left to the libvirt defaults");
    }

    #[test]
    fn a_paused_start_opens_the_boot_menu() {
        let d = os(json!({"startStrategy": "Paused", "domain": {"devices": {}}})).unwrap();
        insta::assert_snapshot!(element(&d, "bootmenu"), @r#"<bootmenu enable="yes" timeout="10000"/>"#);
        assert_eq!(
            os(json!({"domain": {"devices": {}}})).unwrap().os.bootmenu,
            None
        );
    }

    #[test]
    fn bios_use_serial_is_written_only_when_asked() {
        let bios = |use_serial: bool| {
            let spec = json!({"domain": {"devices": {},
                "firmware": {"bootloader": {"bios": {"useSerial": use_serial}}}}});
            os(spec).unwrap().os.bios
        };
        assert_eq!(bios(true).and_then(|b| b.useserial).as_deref(), Some("yes"));
        assert_eq!(bios(false), None);
    }

    #[test]
    fn kernel_boot_uses_the_container_files_by_name_and_the_arguments() {
        let d = os(json!({"domain": {"devices": {}, "firmware": {"kernelBoot": {
            "kernelArgs": "console=ttyS0",
            "container": {"image": "k", "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initrd.img"}
        }}}}))
        .unwrap();
        assert_eq!(
            d.os.kernel.as_deref(),
            Some("/var/run/kubevirt/container-disks/kernel-boot/vmlinuz")
        );
        assert_eq!(
            d.os.initrd.as_deref(),
            Some("/var/run/kubevirt/container-disks/kernel-boot/initrd.img")
        );
        assert_eq!(d.os.cmdline.as_deref(), Some("console=ttyS0"));
        let no_args = os(json!({"domain": {"devices": {}, "firmware": {}}})).unwrap();
        assert_eq!(no_args.os.cmdline, None);
    }

    #[test]
    fn efi_boots_from_pflash_with_the_secure_loader_unless_secure_boot_is_off() {
        let d = os(efi(json!({}), None)).unwrap();
        insta::assert_snapshot!(element(&d, "loader"), @r#"<loader readonly="yes" secure="yes" type="pflash">/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd</loader>"#);
        insta::assert_snapshot!(element(&d, "nvram"), @r#"<nvram template="/usr/share/edk2/ovmf/OVMF_VARS.secboot.fd">/var/lib/libvirt/qemu/nvram/vm_VARS.fd</nvram>"#);
        let d = os(efi(json!({"secureBoot": false}), None)).unwrap();
        let loader = d.os.loader.unwrap();
        assert_eq!(
            (loader.path.as_ref(), loader.secure.as_deref()),
            ("/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd", Some("no"))
        );
        let template = d.os.nvram.and_then(|n| n.template);
        assert_eq!(
            template.as_deref(),
            Some("/usr/share/edk2/ovmf/OVMF_VARS.fd")
        );
    }

    #[test]
    fn a_non_root_vmi_keeps_its_nvram_in_the_private_directory() {
        let mut spec = efi(json!({}), None);
        spec["domain"]["devices"] = json!({});
        let vmi = vmi_from(
            json!({"metadata": {"name": "vm", "namespace": "demo"}, "spec": spec,
            "status": {"runtimeUser": 107}}),
        );
        let d = os_of(&vmi, &ConverterContext::default()).unwrap();
        let path = d.os.nvram.map(|n| n.path.to_string());
        assert_eq!(
            path.as_deref(),
            Some("/var/run/kubevirt-private/libvirt/qemu/nvram/vm_VARS.fd")
        );
    }

    #[test]
    fn snp_and_tdx_boot_from_a_rom_without_nvram() {
        for (ls, code) in [
            (json!({"snp": {}}), ""),
            (
                json!({"tdx": {}}),
                "/usr/share/edk2/ovmf/OVMF.inteltdx.secboot.fd",
            ),
        ] {
            let d = os(efi(json!({}), Some(ls.clone()))).unwrap();
            let loader = d.os.loader.expect("a loader");
            assert_eq!(loader.kind.as_deref(), Some("rom"), "{ls}");
            assert_eq!(loader.path, code, "{ls}");
            assert_eq!(d.os.nvram, None, "{ls}");
        }
        let d = os(efi(json!({"secureBoot": false}), Some(json!({"snp": {}})))).unwrap();
        assert_eq!(
            d.os.loader.unwrap().path,
            "/usr/share/edk2/ovmf/OVMF.amdsev.fd"
        );
    }

    #[test]
    fn sev_without_secure_boot_uses_the_confidential_computing_firmware() {
        let d = os(efi(json!({"secureBoot": false}), Some(json!({"sev": {}})))).unwrap();
        let loader = d.os.loader.unwrap();
        assert_eq!(
            (loader.path.as_ref(), loader.kind.as_deref()),
            ("/usr/share/edk2/ovmf/OVMF_CODE.cc.fd", Some("pflash"))
        );
        let template = d.os.nvram.and_then(|n| n.template);
        assert_eq!(
            template.as_deref(),
            Some("/usr/share/edk2/ovmf/OVMF_VARS.fd")
        );
    }

    #[test]
    fn arm64_boots_aavmf_without_the_secure_flag() {
        let d = os_of(&vmi(efi(json!({}), None)), &node(Arch::Arm64)).unwrap();
        let loader = d.os.loader.unwrap();
        assert_eq!(
            (loader.path.as_ref(), loader.secure.as_deref()),
            ("/usr/share/edk2/ovmf/AAVMF_CODE.fd", Some("no"))
        );
    }

    fn auto_selection() -> ConverterContext {
        ConverterContext {
            efi: Some(EfiConfiguration {
                uses_firmware_auto_selection: true,
                ..EfiConfiguration::default()
            }),
            ..ConverterContext::default()
        }
    }

    #[test]
    fn firmware_auto_selection_lets_libvirt_pick_a_secure_boot_firmware() {
        let d = os_of(&vmi(efi(json!({}), None)), &auto_selection()).unwrap();
        assert_eq!(d.os.firmware.as_deref(), Some("efi"));
        assert_eq!(d.os.loader, None);
        insta::assert_snapshot!(element(&d, "firmware"), @r#"
        <firmware>
        	<feature enabled="yes" name="secure-boot"/>
        	<feature enabled="yes" name="enrolled-keys"/>
        </firmware>
        "#);
        let nvram = d.os.nvram.expect("an NVRAM file");
        assert_eq!(nvram.format.as_deref(), Some("raw"));
        assert_eq!(
            (nvram.path.as_ref(), nvram.template),
            ("/var/lib/libvirt/qemu/nvram/vm_VARS.fd", None)
        );
    }

    #[test]
    fn firmware_auto_selection_on_arm64_has_no_nvram() {
        let mut spec = efi(json!({}), None);
        spec["architecture"] = json!("arm64");
        let d = os_of(&vmi(spec), &auto_selection()).unwrap();
        assert_eq!(d.os.firmware.as_deref(), Some("efi"));
        assert_eq!(d.os.nvram, None);
    }

    /// The EFI firmware paths follow the context's OVMF directory: the launcher image's own
    /// directory (whose paths the converter keeps as constants) and any other one give the same
    /// `dir/file` text, for the loader and the NVRAM template alike.
    #[test]
    fn efi_firmware_paths_follow_the_ovmf_dir() {
        let vmi = vmi(efi(json!({"secureBoot": false}), None));
        for dir in [
            "/usr/share/edk2/ovmf",
            "/opt/firmware",
            "/usr/share/edk2/ovmf/",
        ] {
            let ctx = ConverterContext {
                ovmf_dir: dir.to_string(),
                ..ConverterContext::default()
            };
            let d = os_of(&vmi, &ctx).expect("configures");
            let loader = d.os.loader.as_ref().expect("an EFI VMI has a loader");
            assert_eq!(loader.path, format!("{dir}/OVMF_CODE.secboot.fd"));
            assert_eq!(loader.secure.as_deref(), Some("no"));
            let template = d.os.nvram.as_ref().and_then(|n| n.template.as_deref());
            assert_eq!(template, Some(format!("{dir}/OVMF_VARS.fd").as_str()));
        }
    }

    /// A VMI with ACPI tables from these volume names and these volumes.
    fn acpi(tables: Value, volumes: Value) -> Result<Domain, ConvertError> {
        os(json!({"domain": {"devices": {}, "firmware": {"acpi": tables}}, "volumes": volumes}))
    }

    fn secret(name: &str) -> Value {
        json!({"name": name, "secret": {"secretName": name}})
    }

    #[test]
    fn acpi_tables_come_from_secret_volumes() {
        let d = acpi(
            json!({"slicNameRef": "slic", "msdmNameRef": "msdm"}),
            json!([secret("slic"), secret("msdm")]),
        )
        .unwrap();
        insta::assert_snapshot!(element(&d, "acpi"), @r#"
        <acpi>
        	<table type="slic">/var/run/kubevirt-private/secret/slic/slic.bin</table>
        	<table type="msdm">/var/run/kubevirt-private/secret/msdm/msdm.bin</table>
        </acpi>
        "#);
        for (tables, kind) in [
            (json!({"slicNameRef": "t"}), "slic"),
            (json!({"msdmNameRef": "t"}), "msdm"),
        ] {
            let d = acpi(tables, json!([secret("t")])).unwrap();
            let kinds: Vec<_> =
                d.os.acpi
                    .unwrap()
                    .tables
                    .iter()
                    .map(|t| t.kind.clone())
                    .collect();
            assert_eq!(kinds, [Some(kind.into())]);
        }
    }

    #[test]
    fn acpi_without_a_table_a_volume_or_a_secret_is_refused() {
        let reason = |tables, volumes| {
            let err = acpi(tables, volumes).unwrap_err();
            assert_eq!(err.path, "spec.domain.firmware.acpi");
            err.reason
        };
        assert_eq!(
            reason(json!({}), json!([])),
            "No ACPI tables were set. Expecting at least one."
        );
        assert_eq!(
            reason(json!({"slicNameRef": "t"}), json!([])),
            "Firmware's volume for slic was not found"
        );
        assert_eq!(
            reason(
                json!({"msdmNameRef": "t"}),
                json!([{"name": "t", "emptyDisk": {"capacity": "1Mi"}}])
            ),
            "Firmware's volume type is unsupported for msdm"
        );
    }
}
