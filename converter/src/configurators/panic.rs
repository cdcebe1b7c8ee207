//! `<panic>`: one per VMI panic device.

use super::Configurator;
use crate::domain::{Domain, PanicDevice};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes panic devices.
pub struct PanicDevices;

impl Configurator for PanicDevices {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        for p in vmi.spec.domain.devices.panic_devices.iter().flatten() {
            domain.devices.panics.push(PanicDevice {
                model: p.model.clone().map(Into::into),
            });
        }
        Ok(())
    }
}
