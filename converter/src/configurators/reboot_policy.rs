//! `<on_reboot>`: destroy for `Terminate`, restart for `Reboot`.

use super::Configurator;
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the reboot action.
pub struct RebootPolicy;

impl Configurator for RebootPolicy {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        match vmi.spec.domain.reboot_policy.as_deref() {
            Some("Terminate") => domain.on_reboot = Some("destroy".into()),
            Some("Reboot") => domain.on_reboot = Some("restart".into()),
            _ => {}
        }
        Ok(())
    }
}
