//! `<panic>`: one per VMI panic device.

use super::Configurator;
use crate::domain::{Domain, PanicDevice};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes panic devices.
pub(super) struct PanicDevices;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::json;

    #[test]
    fn one_panic_device_per_vmi_panic_device_with_its_model() {
        let none = run(&PanicDevices, &vmi(json!({"domain": {"devices": {}}}))).unwrap();
        assert!(none.devices.panics.is_empty());
        let vmi = vmi(json!({"domain": {"devices": {"panicDevices": [
            {"model": "hyperv"}, {"model": "isa"}, {}
        ]}}}));
        let d = run(&PanicDevices, &vmi).unwrap();
        let models: Vec<_> = d
            .devices
            .panics
            .iter()
            .map(|p| p.model.as_deref())
            .collect();
        assert_eq!(models, [Some("hyperv"), Some("isa"), None]);
    }
}
