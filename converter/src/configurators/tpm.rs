//! `<tpm>`: an emulated TPM 2.0, CRB and persistent when the VMI asks for persistence.

use super::Configurator;
use crate::domain::{Domain, Few, Tpm as DomTpm, TpmBackend};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the TPM device.
pub(super) struct Tpm;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi};
    use serde_json::{Value, json};

    fn tpm(tpm: Value) -> Domain {
        run(&Tpm, &vmi(json!({"domain": {"devices": {"tpm": tpm}}}))).unwrap()
    }

    #[test]
    fn no_tpm_unless_the_vmi_has_an_enabled_one() {
        assert!(tpm(Value::Null).devices.tpms.is_empty());
        assert!(tpm(json!({"enabled": false})).devices.tpms.is_empty());
    }

    #[test]
    fn a_plain_tpm_is_an_emulated_tpm_2_on_the_tis_interface() {
        insta::assert_snapshot!(element(&tpm(json!({})), "tpm"), @r#"
        <tpm model="tpm-tis">
        	<backend type="emulator" version="2.0"/>
        </tpm>
        "#);
        let explicit = tpm(json!({"enabled": true, "persistent": false}));
        assert_eq!(explicit, tpm(json!({})));
    }

    #[test]
    fn a_persistent_tpm_uses_crb_and_keeps_its_state() {
        insta::assert_snapshot!(element(&tpm(json!({"persistent": true})), "tpm"), @r#"
        <tpm model="tpm-crb">
        	<backend type="emulator" version="2.0" persistent_state="yes"/>
        </tpm>
        "#);
    }
}
