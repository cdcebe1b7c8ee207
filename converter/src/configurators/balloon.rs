//! `<memballoon>`: virtio balloon with statistics and free page reporting, or `none`.

use super::{Configurator, Env, util};
use crate::domain::{Domain, IommuOnly, MemBalloon, Stats};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Annotation that turns free page reporting off for one VMI.
pub const FREE_PAGE_REPORTING_DISABLED: &str = "kubevirt.io/free-page-reporting-disabled";

/// Writes the balloon.
pub struct Balloon<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

/// The launcher's rule for free page reporting with the cluster default (not disabled).
pub fn free_page_reporting_rule(vmi: &VirtualMachineInstance) -> bool {
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
