//! `<on_reboot>`: destroy for `Terminate`, restart for `Reboot`.

use super::Configurator;
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the reboot action.
pub(super) struct RebootPolicy;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::{Value, json};

    fn on_reboot(policy: Value) -> Option<String> {
        let vmi = vmi(json!({"domain": {"devices": {}, "rebootPolicy": policy}}));
        run(&RebootPolicy, &vmi).unwrap().on_reboot
    }

    #[test]
    fn terminate_destroys_and_reboot_restarts() {
        assert_eq!(on_reboot(json!("Terminate")).as_deref(), Some("destroy"));
        assert_eq!(on_reboot(json!("Reboot")).as_deref(), Some("restart"));
    }

    #[test]
    fn no_policy_leaves_libvirts_default() {
        assert_eq!(on_reboot(Value::Null), None);
    }
}
