//! Feature and timer states: a feature or timer that is named is on unless said otherwise, and
//! Hyper-V enlightenments pull in the ones they need.

use crate::api::{CPUFeature, FeatureState, Features, VirtualMachineInstanceSpec};

fn enable_if_unset(v: &mut Option<bool>) {
    if v.is_none() {
        *v = Some(true);
    }
}

fn state(s: &mut Option<FeatureState>) {
    if let Some(s) = s.as_mut() {
        enable_if_unset(&mut s.enabled);
    }
}

/// s390x has no ACPI: unless the user says otherwise it is off there.
pub(super) fn set_s390x_acpi_off(spec: &mut VirtualMachineInstanceSpec) {
    let features = spec.domain.features.get_or_insert_with(Features::default);
    let acpi = features.acpi.get_or_insert_with(FeatureState::default);
    if acpi.enabled.is_none() {
        acpi.enabled = Some(false);
    }
}

/// `spec.domain.features` always exists afterwards, with ACPI on; every named feature without
/// an explicit `enabled` is enabled, and an enabled spinlocks gets KubeVirt's 4096 retries.
pub(super) fn set_feature_states(spec: &mut VirtualMachineInstanceSpec) {
    let features = spec.domain.features.get_or_insert_with(Features::default);
    enable_if_unset(
        &mut features
            .acpi
            .get_or_insert_with(FeatureState::default)
            .enabled,
    );
    if let Some(apic) = features.apic.as_mut() {
        enable_if_unset(&mut apic.enabled);
    }
    if let Some(h) = features.hyperv.as_mut() {
        for s in [
            &mut h.relaxed,
            &mut h.vapic,
            &mut h.vpindex,
            &mut h.runtime,
            &mut h.synic,
            &mut h.reset,
            &mut h.frequencies,
            &mut h.reenlightenment,
            &mut h.ipi,
            &mut h.evmcs,
        ] {
            state(s);
        }
        if let Some(spin) = h.spinlocks.as_mut() {
            enable_if_unset(&mut spin.enabled);
            if spin.enabled == Some(true) && spin.spinlocks.is_none() {
                spin.spinlocks = Some(4096);
            }
        }
        if let Some(timer) = h.synictimer.as_mut() {
            enable_if_unset(&mut timer.enabled);
            state(&mut timer.direct);
        }
        if let Some(vendor) = h.vendorid.as_mut() {
            enable_if_unset(&mut vendor.enabled);
        }
        if let Some(tlb) = h.tlbflush.as_mut() {
            enable_if_unset(&mut tlb.enabled);
            state(&mut tlb.direct);
            state(&mut tlb.extended);
        }
    }
    state(&mut features.smm);
    state(&mut features.pvspinlock);
}

/// Every timer that is named is present unless said otherwise.
pub(super) fn set_timer_states(spec: &mut VirtualMachineInstanceSpec) {
    let Some(timer) = spec.domain.clock.as_mut().and_then(|c| c.timer.as_mut()) else {
        return;
    };
    if let Some(t) = timer.hpet.as_mut() {
        enable_if_unset(&mut t.present);
    }
    if let Some(t) = timer.kvm.as_mut() {
        enable_if_unset(&mut t.present);
    }
    if let Some(t) = timer.pit.as_mut() {
        enable_if_unset(&mut t.present);
    }
    if let Some(t) = timer.rtc.as_mut() {
        enable_if_unset(&mut t.present);
    }
    if let Some(t) = timer.hyperv.as_mut() {
        enable_if_unset(&mut t.present);
    }
}

/// Hyper-V enlightenments that QEMU refuses without another one: synic and its timer need
/// vpindex, ipi and tlbflush need vpindex, evmcs needs vapic. When the needed one is not
/// mentioned it is switched on; when the user switched it off, nothing changes here and
/// validation reports the conflict. Enlightened VMCS also needs the `vmx` CPU feature.
pub(super) fn set_hyperv_dependencies(spec: &mut VirtualMachineInstanceSpec) {
    let Some(h) = spec
        .domain
        .features
        .as_mut()
        .and_then(|f| f.hyperv.as_mut())
    else {
        return;
    };
    let on = |s: &Option<FeatureState>| s.as_ref().and_then(|s| s.enabled) == Some(true);
    let unset = |s: &Option<FeatureState>| s.as_ref().and_then(|s| s.enabled).is_none();
    // Leaves first, as KubeVirt walks them; a conflict stops the walk.
    let require = |needed: &mut Option<FeatureState>, wanted: bool| -> bool {
        if !wanted || on(needed) {
            return true;
        }
        if unset(needed) {
            needed.get_or_insert_with(FeatureState::default).enabled = Some(true);
            return true;
        }
        false
    };
    let evmcs_on = on(&h.evmcs);
    let ok = require(&mut h.vapic, evmcs_on)
        && require(&mut h.vpindex, on(&h.ipi))
        && require(
            &mut h.vpindex,
            h.tlbflush.as_ref().and_then(|t| t.enabled) == Some(true),
        )
        && require(
            &mut h.synic,
            h.synictimer.as_ref().and_then(|t| t.enabled) == Some(true),
        );
    let ok = ok && {
        let synic_on = on(&h.synic);
        require(&mut h.vpindex, synic_on)
    };
    let evmcs_wanted = h
        .evmcs
        .as_ref()
        .is_some_and(|e| e.enabled.is_none_or(|v| v));
    if ok && evmcs_wanted {
        require_vmx(spec);
    }
}

fn require_vmx(spec: &mut VirtualMachineInstanceSpec) {
    let cpu = spec.domain.cpu.get_or_insert_with(Default::default);
    let features = cpu.features.get_or_insert_with(Vec::new);
    match features.iter_mut().find(|f| f.name == "vmx") {
        Some(f) => f.policy = Some("require".to_string()),
        None => features.push(CPUFeature {
            name: "vmx".to_string(),
            policy: Some("require".to_string()),
            ..Default::default()
        }),
    }
}
