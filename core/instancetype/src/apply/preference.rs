//! The preference half of the application (KubeVirt's `pkg/instancetype/preference/apply`), in
//! KubeVirt's order: CPU features, devices, features, firmware, machine, clock, subdomain,
//! termination grace period, architecture, annotations, launch security. A preference never
//! conflicts: it fills what the VM leaves unset (ACPI and `preferredDisableHotplug` excepted,
//! which KubeVirt writes over the VM's value).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::VirtualMachineInstanceSpec;
use kvrs_api::api::{BIOS, Bootloader, Clock, EFI, FeatureHyperv, Features, Firmware, Machine};

use super::devices;
use crate::types::PreferenceSpec;

/// Applies `preference` to `spec` and `metadata` (see the module documentation).
pub fn apply_preference(
    preference: &PreferenceSpec,
    spec: &mut VirtualMachineInstanceSpec,
    metadata: &mut ObjectMeta,
) {
    cpu_features(preference, spec);
    devices::apply(preference, spec);
    features(preference, spec);
    firmware(preference, spec);
    machine(preference, spec);
    clock(preference, spec);
    if spec.subdomain.as_deref().is_none_or(str::is_empty)
        && preference.preferred_subdomain.is_some()
    {
        spec.subdomain = preference.preferred_subdomain.clone();
    }
    if preference
        .preferred_termination_grace_period_seconds
        .is_some()
        && spec.termination_grace_period_seconds.is_none()
    {
        spec.termination_grace_period_seconds =
            preference.preferred_termination_grace_period_seconds;
    }
    apply_architecture(Some(preference), spec);
    for (key, value) in preference.annotations.iter().flatten() {
        let target = metadata.annotations.get_or_insert_with(Default::default);
        target.entry(key.clone()).or_insert_with(|| value.clone());
    }
    if preference.preferred_launch_security.is_some() && spec.domain.launch_security.is_none() {
        spec.domain.launch_security = preference.preferred_launch_security.clone().map(Box::new);
    }
}

/// The preferred architecture, where the VM names none (the VM mutating webhook applies this
/// alone, before defaulting).
pub fn apply_architecture(
    preference: Option<&PreferenceSpec>,
    spec: &mut VirtualMachineInstanceSpec,
) {
    let Some(arch) = preference
        .and_then(|p| p.preferred_architecture.as_ref())
        .filter(|a| !a.is_empty())
    else {
        return;
    };
    if spec.architecture.as_deref().is_none_or(str::is_empty) {
        spec.architecture = Some(arch.clone());
    }
}

/// Preferred CPU features the VM does not name are appended. KubeVirt reads the VM's CPU
/// without checking it is there (a VM with neither an instancetype nor `domain.cpu` panics its
/// code); kvrs starts from an empty CPU instead.
fn cpu_features(preference: &PreferenceSpec, spec: &mut VirtualMachineInstanceSpec) {
    let Some(preferred) = preference
        .cpu
        .as_ref()
        .and_then(|c| c.preferred_cpu_features.as_ref())
        .filter(|f| !f.is_empty())
    else {
        return;
    };
    let cpu = spec.domain.cpu.get_or_insert_with(Default::default);
    let known: std::collections::BTreeSet<String> = cpu
        .features
        .iter()
        .flatten()
        .map(|f| f.name.clone())
        .collect();
    for feature in preferred {
        if !known.contains(&feature.name) {
            cpu.features
                .get_or_insert_with(Vec::new)
                .push(feature.clone());
        }
    }
}

fn features(preference: &PreferenceSpec, spec: &mut VirtualMachineInstanceSpec) {
    let Some(prefs) = &preference.features else {
        return;
    };
    let features = spec.domain.features.get_or_insert_with(Features::default);
    if let Some(acpi) = &prefs.preferred_acpi {
        features.acpi = Some(acpi.clone());
    }
    if prefs.preferred_apic.is_some() && features.apic.is_none() {
        features.apic = prefs.preferred_apic.clone();
    }
    if let Some(hyperv) = &prefs.preferred_hyperv {
        hyperv_features(hyperv, features.hyperv.get_or_insert_with(Default::default));
    }
    if prefs.preferred_kvm.is_some() && features.kvm.is_none() {
        features.kvm = prefs.preferred_kvm.clone();
    }
    if prefs.preferred_pvspinlock.is_some() && features.pvspinlock.is_none() {
        features.pvspinlock = prefs.preferred_pvspinlock.clone();
    }
    if prefs.preferred_smm.is_some() && features.smm.is_none() {
        features.smm = prefs.preferred_smm.clone();
    }
}

fn hyperv_features(preferred: &FeatureHyperv, vm: &mut FeatureHyperv) {
    fn fill<T: Clone>(vm: &mut Option<T>, preferred: &Option<T>) {
        if preferred.is_some() && vm.is_none() {
            vm.clone_from(preferred);
        }
    }
    fill(&mut vm.evmcs, &preferred.evmcs);
    fill(&mut vm.frequencies, &preferred.frequencies);
    fill(&mut vm.ipi, &preferred.ipi);
    fill(&mut vm.reenlightenment, &preferred.reenlightenment);
    fill(&mut vm.relaxed, &preferred.relaxed);
    fill(&mut vm.reset, &preferred.reset);
    fill(&mut vm.runtime, &preferred.runtime);
    fill(&mut vm.spinlocks, &preferred.spinlocks);
    fill(&mut vm.synic, &preferred.synic);
    fill(&mut vm.synictimer, &preferred.synictimer);
    fill(&mut vm.tlbflush, &preferred.tlbflush);
    fill(&mut vm.vapic, &preferred.vapic);
    fill(&mut vm.vpindex, &preferred.vpindex);
    fill(&mut vm.vendorid, &preferred.vendorid);
}

/// Firmware: KubeVirt creates the firmware and its bootloader whenever the preference has a
/// firmware section, then BIOS (`preferredUseBios`), its serial, EFI (`preferredEfi`, which ends
/// the step), and the deprecated `preferredUseEfi` / `preferredUseSecureBoot`.
fn firmware(preference: &PreferenceSpec, spec: &mut VirtualMachineInstanceSpec) {
    let Some(prefs) = &preference.firmware else {
        return;
    };
    let firmware = spec.domain.firmware.get_or_insert_with(Firmware::default);
    let boot = firmware.bootloader.get_or_insert_with(Bootloader::default);
    if prefs.preferred_use_bios == Some(true) && boot.bios.is_none() && boot.efi.is_none() {
        boot.bios = Some(BIOS::default());
    }
    if let (Some(serial), Some(bios)) = (prefs.preferred_use_bios_serial, boot.bios.as_mut())
        && bios.use_serial.is_none()
    {
        bios.use_serial = Some(serial);
    }
    if boot.efi.is_none()
        && boot.bios.is_none()
        && let Some(efi) = &prefs.preferred_efi
    {
        boot.efi = Some(efi.clone());
        return;
    }
    if prefs.preferred_use_efi == Some(true) && boot.efi.is_none() && boot.bios.is_none() {
        boot.efi = Some(EFI::default());
    }
    if let (Some(secure), Some(efi)) = (prefs.preferred_use_secure_boot, boot.efi.as_mut())
        && efi.secure_boot.is_none()
    {
        efi.secure_boot = Some(secure);
    }
}

/// The preferred machine type, where the VM names none.
pub fn apply_machine_type(
    preference: Option<&PreferenceSpec>,
    spec: &mut VirtualMachineInstanceSpec,
) {
    let Some(preferred) = preference
        .and_then(|p| p.machine.as_ref())
        .and_then(|m| m.preferred_machine_type.as_ref())
        .filter(|t| !t.is_empty())
    else {
        return;
    };
    let machine = spec.domain.machine.get_or_insert_with(Machine::default);
    if machine.r#type.as_deref().is_none_or(str::is_empty) {
        machine.r#type = Some(preferred.clone());
    }
}

fn machine(preference: &PreferenceSpec, spec: &mut VirtualMachineInstanceSpec) {
    apply_machine_type(Some(preference), spec);
}

fn clock(preference: &PreferenceSpec, spec: &mut VirtualMachineInstanceSpec) {
    let Some(prefs) = &preference.clock else {
        return;
    };
    let clock = spec.domain.clock.get_or_insert_with(Clock::default);
    if let Some(offset) = &prefs.preferred_clock_offset
        && clock.utc.is_none()
        && clock.timezone.is_none()
    {
        clock.utc = offset.utc.clone();
        clock.timezone = offset.timezone.clone();
    }
    if prefs.preferred_timer.is_some() && clock.timer.is_none() {
        clock.timer = prefs.preferred_timer.clone().map(Box::new);
    }
}
