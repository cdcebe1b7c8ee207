//! `<clock>`: UTC offset or timezone, and the timers.

use super::{
    Configurator,
    util::{intern, yes_no},
};
use crate::domain::{Clock as DomClock, Domain, Timer};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the clock (and the TSC frequency timer when the VMI needs it pinned).
pub(super) struct Clock;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi, vmi_from};
    use serde_json::{Value, json};

    fn clock(domain_spec: Value) -> Option<DomClock> {
        let vmi = vmi(json!({"domain": domain_spec}));
        run(&Clock, &vmi).unwrap().clock
    }

    #[test]
    fn no_clock_in_the_vmi_writes_none() {
        assert_eq!(clock(json!({"devices": {}})), None);
    }

    #[test]
    fn utc_writes_its_offset_or_a_reset() {
        let c = clock(json!({"devices": {}, "clock": {"utc": {"offsetSeconds": 30}}})).unwrap();
        assert_eq!(c.offset.as_deref(), Some("utc"));
        assert_eq!(c.adjustment.as_deref(), Some("30"));
        let c = clock(json!({"devices": {}, "clock": {"utc": {}}})).unwrap();
        assert_eq!(c.adjustment.as_deref(), Some("reset"));
    }

    #[test]
    fn a_timezone_is_written_as_the_offset_kind() {
        let c = clock(json!({"devices": {}, "clock": {"timezone": "Europe/Paris"}})).unwrap();
        assert_eq!(c.offset.as_deref(), Some("timezone"));
        assert_eq!(c.timezone.as_deref(), Some("Europe/Paris"));
        assert_eq!(c.adjustment, None);
    }

    #[test]
    fn timers_are_written_in_kubevirts_order_present_unless_said_otherwise() {
        let vmi = vmi(
            json!({"domain": {"devices": {}, "clock": {"utc": {}, "timer": {
                "hyperv": {}, "hpet": {"present": false, "tickPolicy": "delay"}, "kvm": {},
                "pit": {"tickPolicy": "discard"}, "rtc": {"tickPolicy": "catchup", "track": "guest"}
            }}}}),
        );
        let d = run(&Clock, &vmi).unwrap();
        insta::assert_snapshot!(element(&d, "clock"), @r#"
        <clock offset="utc" adjustment="reset">
        	<timer name="rtc" tickpolicy="catchup" present="yes" track="guest"/>
        	<timer name="pit" tickpolicy="discard" present="yes"/>
        	<timer name="kvmclock" present="yes"/>
        	<timer name="hpet" tickpolicy="delay" present="no"/>
        	<timer name="hypervclock" present="yes"/>
        </clock>
        "#);
    }

    /// A VMI with a TSC frequency in its topology hints and `cpu`/`features` as given.
    fn with_tsc(domain: Value) -> VirtualMachineInstance {
        vmi_from(json!({
            "metadata": {"name": "vm", "namespace": "demo"},
            "spec": {"domain": domain},
            "status": {"topologyHints": {"tscFrequency": 2_000_000_000_i64}},
        }))
    }

    fn tsc_timer(vmi: &VirtualMachineInstance) -> Option<String> {
        let clock = run(&Clock, vmi).unwrap().clock?;
        let tsc = clock.timers.iter().find(|t| t.name == "tsc")?;
        tsc.frequency.as_deref().map(str::to_string)
    }

    #[test]
    fn the_tsc_frequency_is_pinned_when_invtsc_is_required() {
        let invtsc = |policy: Value| {
            with_tsc(
                json!({"devices": {}, "cpu": {"features": [{"name": "invtsc", "policy": policy}]}}),
            )
        };
        assert_eq!(
            tsc_timer(&invtsc(json!("require"))).as_deref(),
            Some("2000000000")
        );
        // No policy means `require`.
        assert_eq!(
            tsc_timer(&invtsc(Value::Null)).as_deref(),
            Some("2000000000")
        );
        assert_eq!(tsc_timer(&invtsc(json!("optional"))), None);
    }

    #[test]
    fn the_tsc_frequency_is_pinned_for_hyperv_reenlightenment() {
        let vmi = with_tsc(json!({"devices": {}, "features": {"hyperv": {"reenlightenment": {}}}}));
        assert_eq!(tsc_timer(&vmi).as_deref(), Some("2000000000"));
        let off = with_tsc(
            json!({"devices": {}, "features": {"hyperv": {"reenlightenment": {"enabled": false}}}}),
        );
        assert_eq!(tsc_timer(&off), None);
    }

    #[test]
    fn without_a_recorded_frequency_no_tsc_timer_is_written() {
        let vmi = vmi(json!({"domain": {"devices": {},
            "cpu": {"features": [{"name": "invtsc", "policy": "require"}]}}}));
        assert_eq!(run(&Clock, &vmi).unwrap().clock, None);
    }
}
