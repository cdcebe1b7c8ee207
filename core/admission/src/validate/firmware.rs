//! Firmware (bootloader, secure boot and SMM, kernel boot, ACPI tables) and Hyper-V
//! enlightenments.

use super::causes::Causes;
use crate::api::VirtualMachineInstanceSpec;

pub(super) fn check(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let firmware = spec.domain.firmware.as_ref();
    let bootloader = firmware.and_then(|f| f.bootloader.as_ref());
    if bootloader.is_some_and(|b| b.efi.is_some() && b.bios.is_some()) {
        causes.invalid(
            "spec.domain.firmware.bootloader",
            "spec.domain.firmware.bootloader has both EFI and BIOS configured, but they are mutually exclusive.",
        );
    }
    let secure_boot = bootloader
        .and_then(|b| b.efi.as_ref())
        .is_some_and(|e| e.secure_boot != Some(false));
    let smm = spec
        .domain
        .features
        .as_ref()
        .and_then(|f| f.smm.as_ref())
        .is_some_and(|s| s.enabled != Some(false));
    let tdx = spec
        .domain
        .launch_security
        .as_ref()
        .is_some_and(|l| l.tdx.is_some());
    if secure_boot && !smm && !tdx {
        causes.invalid(
            "spec.domain",
            "spec.domain has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled.",
        );
    }
    if let Some(kb) = firmware.and_then(|f| f.kernel_boot.as_ref()) {
        const KB: &str = "spec.domain.firmware.kernelBoot";
        match &kb.container {
            None => {
                if kb.kernel_args.as_deref().is_some_and(|a| !a.is_empty()) {
                    causes.invalid(
                        format!("{KB}.kernelArgs"),
                        "kernel arguments cannot be provided without an external kernel",
                    );
                }
            }
            Some(c) => {
                if c.image.is_empty() {
                    causes.required(
                        format!("{KB}.container.image"),
                        format!("{KB}.container must be defined with an image"),
                    );
                }
                let kernel = c.kernel_path.as_deref().unwrap_or("");
                let initrd = c.initrd_path.as_deref().unwrap_or("");
                if kernel.is_empty() && initrd.is_empty() {
                    causes.required(
                        format!("{KB}.container"),
                        format!(
                            "{KB}.container must be defined with at least one of the following: kernelPath, initrdPath"
                        ),
                    );
                }
                for (name, p) in [("kernelPath", kernel), ("initrdPath", initrd)] {
                    if !p.is_empty() {
                        super::volumes::check_path(&format!("{KB}.container.{name}"), p, causes);
                    }
                }
            }
        }
    }
    if let Some(acpi) = firmware.and_then(|f| f.acpi.as_ref()) {
        const ACPI: &str = "spec.domain.firmware.acpi";
        let slic = acpi.slic_name_ref.as_deref().unwrap_or("");
        let msdm = acpi.msdm_name_ref.as_deref().unwrap_or("");
        if slic.is_empty() && msdm.is_empty() {
            causes.invalid(
                ACPI,
                "ACPI was set but no SLIC nor MSDM volume reference was set",
            );
        }
        for (field, name) in [("slicNameRef", slic), ("msdmNameRef", msdm)] {
            if name.is_empty() {
                continue;
            }
            match spec.volumes.iter().flatten().find(|v| v.name == name) {
                Some(v) if v.secret.is_some() => {}
                Some(_) => causes.invalid(
                    format!("{ACPI}.{field}"),
                    format!("{ACPI} refers to Volume of unsupported type."),
                ),
                None => causes.invalid(
                    format!("{ACPI}.{field}"),
                    format!("{ACPI} does not have a matching Volume."),
                ),
            }
        }
    }
    check_hyperv(spec, causes);
}

/// Hyper-V enlightenments whose prerequisite the user switched off, and the Hyper-V
/// passthrough mode that excludes naming enlightenments one by one.
fn check_hyperv(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let Some(features) = &spec.domain.features else {
        return;
    };
    const HV: &str = "spec.domain.features.hyperv";
    if features.hyperv.is_some() && features.hyperv_passthrough.is_some() {
        causes.invalid(
            HV,
            "Cannot explicitly set hyperV features if HypervPassthrough is being used. Please use either HyperV or HypervPassthrough.",
        );
    }
    let Some(h) = &features.hyperv else { return };
    let on = |v: Option<bool>| v == Some(true);
    let state = |s: &Option<crate::api::FeatureState>| s.as_ref().and_then(|s| s.enabled);
    let pairs = [
        ("evmcs", on(state(&h.evmcs)), "vapic", on(state(&h.vapic))),
        ("ipi", on(state(&h.ipi)), "vpindex", on(state(&h.vpindex))),
        (
            "tlbflush",
            on(h.tlbflush.as_ref().and_then(|t| t.enabled)),
            "vpindex",
            on(state(&h.vpindex)),
        ),
        (
            "synictimer",
            on(h.synictimer.as_ref().and_then(|t| t.enabled)),
            "synic",
            on(state(&h.synic)),
        ),
        (
            "synic",
            on(state(&h.synic)),
            "vpindex",
            on(state(&h.vpindex)),
        ),
    ];
    for (feature, enabled, needs, needed_on) in pairs {
        if enabled && !needed_on {
            causes.invalid(
                format!("{HV}.{feature}"),
                format!("'{HV}.{feature}' requires '{HV}.{needs}', which was disabled."),
            );
        }
    }
    let evmcs = h.evmcs.as_ref().is_some_and(|e| e.enabled != Some(false));
    if evmcs {
        let features = spec.domain.cpu.as_ref().and_then(|c| c.features.as_ref());
        match features.filter(|f| !f.is_empty()) {
            None => causes.required(
                "spec.domain.cpu.features",
                "vmx cpu feature is required when evmcs is set",
            ),
            Some(list) => {
                for (i, f) in list.iter().enumerate() {
                    if f.name == "vmx" && f.policy.as_deref() != Some("require") {
                        causes.invalid(
                            format!("spec.domain.cpu.features[{i}].policy"),
                            "vmx cpu feature has to be set to require policy",
                        );
                    }
                }
            }
        }
    }
}
