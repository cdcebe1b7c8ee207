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
pub struct HypervisorFeatures<'a> {
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
