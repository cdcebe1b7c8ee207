//! `<features>`: ACPI, SMM, APIC, Hyper-V, KVM hidden, pvspinlock, PMU, vmport.

use super::{Configurator, Env, util::on_off};
use crate::context::Arch;
use crate::domain::{
    Domain, Empty, FeatureHyperv, FeatureKvm, FeatureSpinlocks, FeatureState, FeatureVendorId,
    Features, SynicTimer, TlbFlush,
};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api;

/// Writes the hypervisor features.
pub(super) struct HypervisorFeatures<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

fn state(s: &Option<api::FeatureState>) -> Option<FeatureState> {
    s.as_ref().map(|f| FeatureState {
        state: Some(on_off(f.enabled, true)),
    })
}

impl Configurator for HypervisorFeatures<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let mut out = Features::default();
        let Some(src) = &vmi.spec.domain.features else {
            domain.features = Some(out);
            return Ok(());
        };
        if src.acpi.as_ref().and_then(|a| a.enabled).unwrap_or(true) {
            out.acpi = Some(Empty {});
        }
        if let Some(smm) = &src.smm
            && smm.enabled.unwrap_or(true)
        {
            out.smm = Some(Empty {});
        }
        if let Some(apic) = &src.apic
            && apic.enabled.unwrap_or(true)
        {
            out.apic = Some(Empty {});
        }
        if let Some(h) = &src.hyperv {
            out.hyperv = Some(FeatureHyperv {
                mode: None,
                spinlocks: h.spinlocks.as_ref().map(|s| FeatureSpinlocks {
                    state: Some(on_off(s.enabled, true)),
                    retries: s.spinlocks.and_then(|r| u32::try_from(r).ok()),
                }),
                vendor_id: h.vendorid.as_ref().map(|v| FeatureVendorId {
                    state: Some(on_off(v.enabled, true)),
                    value: v.vendorid.clone().filter(|s| !s.is_empty()).map(Into::into),
                }),
                relaxed: state(&h.relaxed),
                reset: state(&h.reset),
                runtime: state(&h.runtime),
                synic: state(&h.synic),
                stimer: h.synictimer.as_ref().map(|t| SynicTimer {
                    state: Some(on_off(t.enabled, true)),
                    direct: state(&t.direct),
                }),
                vapic: state(&h.vapic),
                vpindex: state(&h.vpindex),
                frequencies: state(&h.frequencies),
                reenlightenment: state(&h.reenlightenment),
                tlbflush: h.tlbflush.as_ref().map(|t| TlbFlush {
                    state: Some(on_off(t.enabled, true)),
                    direct: state(&t.direct),
                    extended: state(&t.extended),
                }),
                ipi: state(&h.ipi),
                evmcs: state(&h.evmcs),
            });
        } else if src.hyperv_passthrough.as_ref().and_then(|p| p.enabled) == Some(true) {
            out.hyperv = Some(FeatureHyperv {
                mode: Some("passthrough".into()),
                ..FeatureHyperv::default()
            });
        }
        if let Some(kvm) = &src.kvm {
            out.kvm = Some(FeatureKvm {
                hidden: Some(FeatureState {
                    state: Some(on_off(kvm.hidden, false)),
                }),
                hint_dedicated: None,
            });
        }
        if let Some(p) = &src.pvspinlock {
            out.pvspinlock = Some(FeatureState {
                state: Some(on_off(p.enabled, true)),
            });
        }
        if self.env.tdx {
            out.pmu = Some(FeatureState {
                state: Some("off".into()),
            });
        }
        if self.env.arch == Arch::Amd64 {
            out.vmport = Some(FeatureState {
                state: Some("off".into()),
            });
        }
        domain.features = Some(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, node, run, vmi};
    use crate::context::ConverterContext;
    use serde_json::{Value, json};

    fn features_of(domain_spec: Value, ctx: &ConverterContext) -> Domain {
        let vmi = vmi(json!({"domain": domain_spec}));
        let env = Env::new(&vmi, ctx);
        run(&HypervisorFeatures { env: &env }, &vmi).expect("configures")
    }

    fn features(domain_spec: Value) -> Features {
        let d = features_of(domain_spec, &ConverterContext::default());
        d.features.expect("features are always written")
    }

    #[test]
    fn no_features_in_the_vmi_write_an_empty_features_element() {
        // Not even vmport: KubeVirt returns before it when the VMI has no features.
        assert_eq!(features(json!({"devices": {}})), Features::default());
    }

    #[test]
    fn acpi_is_on_unless_disabled_and_smm_apic_when_present_and_enabled() {
        let f = features(json!({"devices": {}, "features": {}}));
        assert!(f.acpi.is_some() && f.smm.is_none() && f.apic.is_none());
        let f = features(
            json!({"devices": {}, "features": {"acpi": {"enabled": false},
            "smm": {}, "apic": {"enabled": true}}}),
        );
        assert!(f.acpi.is_none() && f.smm.is_some() && f.apic.is_some());
        let f = features(
            json!({"devices": {}, "features": {"smm": {"enabled": false},
            "apic": {"enabled": false}}}),
        );
        assert!(f.smm.is_none() && f.apic.is_none());
    }

    #[test]
    fn vmport_is_off_on_amd64_only() {
        let spec = json!({"devices": {}, "features": {}});
        let amd64 = features_of(spec.clone(), &ConverterContext::default());
        let state = |d: &Domain| {
            let vmport = d.features.as_ref()?.vmport.as_ref()?;
            vmport.state.as_deref().map(str::to_string)
        };
        assert_eq!(state(&amd64).as_deref(), Some("off"));
        assert_eq!(state(&features_of(spec.clone(), &node(Arch::Arm64))), None);
        assert_eq!(state(&features_of(spec, &node(Arch::S390x))), None);
    }

    #[test]
    fn hyperv_enlightenments_are_on_unless_disabled() {
        let vmi = vmi(json!({"domain": {"devices": {}, "features": {"hyperv": {
            "relaxed": {}, "vapic": {"enabled": false}, "spinlocks": {"spinlocks": 8191},
            "vendorid": {"vendorid": "KVMKVMKVM"}, "synictimer": {"direct": {}},
            "tlbflush": {"direct": {}, "extended": {"enabled": false}}, "ipi": {}
        }}}}));
        let ctx = ConverterContext::default();
        let env = Env::new(&vmi, &ctx);
        let d = run(&HypervisorFeatures { env: &env }, &vmi).unwrap();
        insta::assert_snapshot!(element(&d, "hyperv"), @r#"
        <hyperv>
        	<relaxed state="on"/>
        	<vapic state="off"/>
        	<spinlocks state="on" retries="8191"/>
        	<stimer state="on">
        		<direct state="on"/>
        	</stimer>
        	<vendor_id state="on" value="KVMKVMKVM"/>
        	<tlbflush state="on">
        		<direct state="on"/>
        		<extended state="off"/>
        	</tlbflush>
        	<ipi state="on"/>
        </hyperv>
        "#);
    }

    #[test]
    fn hyperv_passthrough_applies_only_without_explicit_enlightenments() {
        let mode = |spec: Value| {
            let f = features(json!({"devices": {}, "features": spec}));
            f.hyperv.and_then(|h| h.mode).map(|m| m.to_string())
        };
        assert_eq!(
            mode(json!({"hypervPassthrough": {"enabled": true}})).as_deref(),
            Some("passthrough")
        );
        assert_eq!(mode(json!({"hypervPassthrough": {"enabled": false}})), None);
        let both = json!({"hypervPassthrough": {"enabled": true}, "hyperv": {"relaxed": {}}});
        assert_eq!(mode(both), None);
    }

    #[test]
    fn kvm_hidden_and_pvspinlock_write_their_state() {
        let f = features(json!({"devices": {}, "features": {"kvm": {}, "pvspinlock": {}}}));
        let hidden = f.kvm.and_then(|k| k.hidden).and_then(|h| h.state);
        assert_eq!(hidden.as_deref(), Some("off"), "hidden defaults to false");
        assert_eq!(f.pvspinlock.and_then(|p| p.state).as_deref(), Some("on"));
        let f = features(json!({"devices": {}, "features": {"kvm": {"hidden": true},
            "pvspinlock": {"enabled": false}}}));
        assert_eq!(
            f.kvm
                .and_then(|k| k.hidden)
                .and_then(|h| h.state)
                .as_deref(),
            Some("on")
        );
        assert_eq!(f.pvspinlock.and_then(|p| p.state).as_deref(), Some("off"));
    }

    #[test]
    fn tdx_turns_the_pmu_off() {
        let tdx = features(json!({"devices": {}, "features": {}, "launchSecurity": {"tdx": {}}}));
        assert_eq!(tdx.pmu.and_then(|p| p.state).as_deref(), Some("off"));
        assert_eq!(features(json!({"devices": {}, "features": {}})).pmu, None);
    }
}
