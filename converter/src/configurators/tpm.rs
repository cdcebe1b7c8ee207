//! `<tpm>`: an emulated TPM 2.0, CRB and persistent when the VMI asks for persistence.

use super::Configurator;
use crate::domain::{Domain, Few, Tpm as DomTpm, TpmBackend};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the TPM device.
pub struct Tpm;

impl Configurator for Tpm {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let Some(tpm) = &vmi.spec.domain.devices.tpm else {
            return Ok(());
        };
        if tpm.enabled == Some(false) {
            return Ok(());
        }
        let persistent = tpm.persistent.unwrap_or(false);
        domain.devices.tpms = Few::from([DomTpm {
            model: if persistent { "tpm-crb" } else { "tpm-tis" }.into(),
            backend: TpmBackend {
                kind: "emulator".into(),
                version: "2.0".into(),
                persistent_state: persistent.then(|| "yes".into()),
            },
        }]);
        Ok(())
    }
}
