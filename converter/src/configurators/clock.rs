//! `<clock>`: UTC offset or timezone, and the timers.

use super::{
    Configurator,
    util::{intern, yes_no},
};
use crate::domain::{Clock as DomClock, Domain, Timer};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the clock (and the TSC frequency timer when the VMI needs it pinned).
pub struct Clock;

impl Configurator for Clock {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        if let Some(src) = &vmi.spec.domain.clock {
            let mut c = DomClock::default();
            if let Some(utc) = &src.utc {
                c.offset = Some("utc".into());
                c.adjustment = Some(match utc.offset_seconds {
                    Some(s) => s.to_string().into(),
                    None => "reset".into(),
                });
            } else if let Some(tz) = &src.timezone {
                c.offset = Some("timezone".into());
                c.timezone = Some(tz.clone().into());
            }
            if let Some(t) = &src.timer {
                // Interned: the few values KubeVirt knows (`catchup`, `delay`, ...) are borrowed.
                let s = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(intern);
                // Sized once: the list keeps one timer inline and would grow twice for four.
                let kinds = [
                    t.rtc.is_some(),
                    t.pit.is_some(),
                    t.kvm.is_some(),
                    t.hpet.is_some(),
                    t.hyperv.is_some(),
                ];
                c.timers.reserve_exact(kinds.iter().filter(|&&k| k).count());
                if let Some(rtc) = &t.rtc {
                    c.timers.push(Timer {
                        name: "rtc".into(),
                        track: s(&rtc.track),
                        tickpolicy: s(&rtc.tick_policy),
                        present: Some(yes_no(rtc.present, true)),
                        ..Timer::default()
                    });
                }
                if let Some(pit) = &t.pit {
                    c.timers.push(Timer {
                        name: "pit".into(),
                        present: Some(yes_no(pit.present, true)),
                        tickpolicy: s(&pit.tick_policy),
                        ..Timer::default()
                    });
                }
                if let Some(kvm) = &t.kvm {
                    c.timers.push(Timer {
                        name: "kvmclock".into(),
                        present: Some(yes_no(kvm.present, true)),
                        ..Timer::default()
                    });
                }
                if let Some(hpet) = &t.hpet {
                    c.timers.push(Timer {
                        name: "hpet".into(),
                        present: Some(yes_no(hpet.present, true)),
                        tickpolicy: s(&hpet.tick_policy),
                        ..Timer::default()
                    });
                }
                if let Some(hv) = &t.hyperv {
                    c.timers.push(Timer {
                        name: "hypervclock".into(),
                        present: Some(yes_no(hv.present, true)),
                        ..Timer::default()
                    });
                }
            }
            domain.clock = Some(c);
        }
        if let Some(freq) = tsc_frequency(vmi) {
            let c = domain.clock.get_or_insert_with(DomClock::default);
            c.timers.push(Timer {
                name: "tsc".into(),
                frequency: Some(freq.to_string().into()),
                ..Timer::default()
            });
        }
        Ok(())
    }
}

/// The TSC frequency to pin: only when the VMI is migratable-sensitive (invtsc required or
/// Hyper-V reenlightenment on) and the controller recorded a frequency in the topology hints.
fn tsc_frequency(vmi: &VirtualMachineInstance) -> Option<i64> {
    let freq = vmi
        .status
        .as_ref()?
        .topology_hints
        .as_ref()?
        .tsc_frequency?;
    let invtsc = vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.features.as_ref())
        .is_some_and(|fs| {
            fs.iter().any(|f| {
                f.name == "invtsc" && f.policy.as_deref().unwrap_or("require") == "require"
            })
        });
    let reenlightenment = vmi
        .spec
        .domain
        .features
        .as_ref()
        .and_then(|f| f.hyperv.as_ref())
        .and_then(|h| h.reenlightenment.as_ref())
        .is_some_and(|r| r.enabled.unwrap_or(true));
    (invtsc || reenlightenment).then_some(freq)
}
