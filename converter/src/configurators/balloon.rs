//! `<memballoon>`: virtio balloon with statistics and free page reporting, or `none`.

use super::{Configurator, Env, util};
use crate::domain::{Domain, IommuOnly, MemBalloon, Stats};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Annotation that turns free page reporting off for one VMI.
pub(super) const FREE_PAGE_REPORTING_DISABLED: &str = "kubevirt.io/free-page-reporting-disabled";

/// Writes the balloon.
pub(super) struct Balloon<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

/// The launcher's rule for free page reporting with the cluster default (not disabled).
pub(super) fn free_page_reporting_rule(vmi: &VirtualMachineInstance) -> bool {
    !(vmi.spec.domain.devices.autoattach_mem_balloon == Some(false)
        || util::is_high_performance(vmi)
        || util::annotation(vmi, FREE_PAGE_REPORTING_DISABLED) == Some("true"))
}

impl Configurator for Balloon<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        if vmi.spec.domain.devices.autoattach_mem_balloon == Some(false) {
            domain.devices.memballoon = Some(MemBalloon {
                model: "none".into(),
                ..MemBalloon::default()
            });
            return Ok(());
        }
        let ctx = self.env.ctx;
        let fpr = ctx
            .free_page_reporting
            .unwrap_or_else(|| free_page_reporting_rule(vmi));
        let period = ctx.mem_balloon_stats_period;
        domain.devices.memballoon = Some(MemBalloon {
            model: self.env.virtio_model.into(),
            stats: (period != 0).then_some(Stats { period }),
            address: None,
            driver: (self.env.sev || self.env.pv).then(|| IommuOnly {
                iommu: Some("on".into()),
            }),
            free_page_reporting: Some(if fpr { "on" } else { "off" }.into()),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{annotated, node, run, vmi};
    use crate::context::{Arch, ConverterContext};
    use serde_json::{Value, json};

    fn balloon_of(vmi: &VirtualMachineInstance, ctx: &ConverterContext) -> MemBalloon {
        let env = Env::new(vmi, ctx);
        let domain = run(&Balloon { env: &env }, vmi).expect("configures");
        domain
            .devices
            .memballoon
            .expect("a balloon is always written")
    }

    fn balloon(spec: Value, ctx: &ConverterContext) -> MemBalloon {
        balloon_of(&vmi(spec), ctx)
    }

    fn ctx() -> ConverterContext {
        ConverterContext::default()
    }

    #[test]
    fn autoattach_false_writes_model_none_and_nothing_else() {
        let b = balloon(
            json!({"domain": {"devices": {"autoattachMemBalloon": false}}}),
            &ctx(),
        );
        assert_eq!(
            b,
            MemBalloon {
                model: "none".into(),
                ..MemBalloon::default()
            }
        );
    }

    #[test]
    fn default_balloon_is_virtio_with_stats_and_free_page_reporting() {
        let b = balloon(json!({"domain": {"devices": {}}}), &ctx());
        assert_eq!(b.model, "virtio-non-transitional");
        assert_eq!(b.stats, Some(Stats { period: 10 }));
        assert_eq!(b.driver, None);
        assert_eq!(b.free_page_reporting.as_deref(), Some("on"));
    }

    #[test]
    fn a_zero_stats_period_writes_no_stats() {
        let ctx = ConverterContext {
            mem_balloon_stats_period: 0,
            ..ctx()
        };
        assert_eq!(
            balloon(json!({"domain": {"devices": {}}}), &ctx).stats,
            None
        );
        let ctx = ConverterContext {
            mem_balloon_stats_period: 5,
            ..ctx
        };
        let b = balloon(json!({"domain": {"devices": {}}}), &ctx);
        assert_eq!(b.stats, Some(Stats { period: 5 }));
    }

    #[test]
    fn sev_and_secure_execution_put_the_balloon_behind_the_iommu() {
        let iommu = |spec, ctx: &ConverterContext| {
            balloon(spec, ctx)
                .driver
                .and_then(|d| d.iommu)
                .map(|s| s.to_string())
        };
        let sev = json!({"domain": {"devices": {}, "launchSecurity": {"sev": {}}}});
        assert_eq!(iommu(sev, &ctx()).as_deref(), Some("on"));
        let snp = json!({"domain": {"devices": {}, "launchSecurity": {"snp": {}}}});
        assert_eq!(iommu(snp, &ctx()).as_deref(), Some("on"));
        let pv = json!({"architecture": "s390x",
            "domain": {"devices": {}, "launchSecurity": {}}});
        assert_eq!(iommu(pv, &node(Arch::S390x)).as_deref(), Some("on"));
        assert_eq!(iommu(json!({"domain": {"devices": {}}}), &ctx()), None);
    }

    #[test]
    fn the_context_decides_free_page_reporting_when_it_says() {
        for (setting, written) in [(true, "on"), (false, "off")] {
            let ctx = ConverterContext {
                free_page_reporting: Some(setting),
                ..ctx()
            };
            let b = balloon(json!({"domain": {"devices": {}}}), &ctx);
            assert_eq!(b.free_page_reporting.as_deref(), Some(written));
        }
    }

    #[test]
    fn free_page_reporting_is_off_for_high_performance_vmis_and_by_annotation() {
        let fpr = |v: Value| {
            balloon(v, &ctx())
                .free_page_reporting
                .map(|s| s.to_string())
        };
        let dedicated = json!({"domain": {"devices": {}, "cpu": {"dedicatedCpuPlacement": true}}});
        assert_eq!(fpr(dedicated).as_deref(), Some("off"));
        let realtime = json!({"domain": {"devices": {}, "cpu": {"realtime": {}}}});
        assert_eq!(fpr(realtime).as_deref(), Some("off"));
        let hugepages =
            json!({"domain": {"devices": {}, "memory": {"hugepages": {"pageSize": "2Mi"}}}});
        assert_eq!(fpr(hugepages).as_deref(), Some("off"));
        let disabled = annotated(
            json!({FREE_PAGE_REPORTING_DISABLED: "true"}),
            json!({"domain": {"devices": {}}}),
        );
        let b = balloon_of(&disabled, &ctx());
        assert_eq!(b.free_page_reporting.as_deref(), Some("off"));
    }

    #[test]
    fn transitional_virtio_and_s390x_change_the_model() {
        let transitional = json!({"domain": {"devices": {"useVirtioTransitional": true}}});
        assert_eq!(balloon(transitional, &ctx()).model, "virtio-transitional");
        let s390x = json!({"architecture": "s390x", "domain": {"devices": {}}});
        assert_eq!(balloon(s390x, &node(Arch::S390x)).model, "virtio");
    }
}
