//! How a soft reboot asks the guest (KubeVirt v1.9.0's `SoftRebootVMI`): through the guest
//! agent when the VMI says the agent is connected, else by the ACPI power button — unless the
//! VMI turned ACPI off, when nothing can ask the guest and the request fails.
//!
//! Why the VMI's condition and not a live agent probe: the handler's view decides, as in
//! KubeVirt, so the same VMI always gets the same answer; a stale condition only costs an
//! agent error, which KubeVirt (and kvrs) ignore when the agent is unresponsive.

use kvrs_api::VirtualMachineInstance;

/// libvirt's `VIR_DOMAIN_REBOOT_ACPI_POWER_BTN`.
const REBOOT_ACPI_POWER_BTN: u32 = 1 << 0;
/// libvirt's `VIR_DOMAIN_REBOOT_GUEST_AGENT`.
const REBOOT_GUEST_AGENT: u32 = 1 << 1;
/// libvirt's `VIR_ERR_AGENT_UNRESPONSIVE`: the agent took the request and went away (it is
/// rebooting), not a failure.
pub(crate) const ERR_AGENT_UNRESPONSIVE: i32 = 86;

/// The way a soft reboot reaches the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RebootMethod {
    /// `guest-shutdown` with mode `reboot` through qemu-ga.
    GuestAgent,
    /// The ACPI power button (the guest decides what it means).
    AcpiPowerButton,
}

impl RebootMethod {
    /// The `virDomainReboot` flags.
    pub(crate) fn flags(self) -> u32 {
        match self {
            RebootMethod::GuestAgent => REBOOT_GUEST_AGENT,
            RebootMethod::AcpiPowerButton => REBOOT_ACPI_POWER_BTN,
        }
    }
}

/// Neither the agent nor ACPI can ask this guest to reboot (KubeVirt's message).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("VMI neither have the agent connected nor the ACPI feature enabled")]
pub(crate) struct NoRebootMethod;

/// The method for `vmi`, as KubeVirt chooses it.
pub(crate) fn reboot_method(vmi: &VirtualMachineInstance) -> Result<RebootMethod, NoRebootMethod> {
    let agent_connected = vmi
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.r#type == "AgentConnected" && c.status == "True")
        });
    if agent_connected {
        return Ok(RebootMethod::GuestAgent);
    }
    let acpi_off = vmi
        .spec
        .domain
        .features
        .as_ref()
        .and_then(|f| f.acpi.as_ref())
        .and_then(|a| a.enabled)
        == Some(false);
    if acpi_off {
        Err(NoRebootMethod)
    } else {
        Ok(RebootMethod::AcpiPowerButton)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(v: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(v).expect("a VMI")
    }

    #[test]
    fn a_connected_agent_is_asked_even_without_acpi() {
        let v = vmi(json!({
            "spec": {"domain": {"devices": {}, "features": {"acpi": {"enabled": false}}}},
            "status": {"conditions": [{"type": "AgentConnected", "status": "True"}]}
        }));
        assert_eq!(reboot_method(&v), Ok(RebootMethod::GuestAgent));
        assert_eq!(RebootMethod::GuestAgent.flags(), 2);
    }

    #[test]
    fn without_the_agent_the_power_button_is_pressed() {
        for status in [
            json!({}),
            json!({"conditions": [{"type": "AgentConnected", "status": "False"}]}),
        ] {
            let v = vmi(json!({"spec": {"domain": {"devices": {}}}, "status": status}));
            assert_eq!(reboot_method(&v), Ok(RebootMethod::AcpiPowerButton));
        }
        let explicit_on = vmi(json!({
            "spec": {"domain": {"devices": {}, "features": {"acpi": {"enabled": true}}}}
        }));
        assert_eq!(
            reboot_method(&explicit_on),
            Ok(RebootMethod::AcpiPowerButton)
        );
        assert_eq!(RebootMethod::AcpiPowerButton.flags(), 1);
    }

    #[test]
    fn no_agent_and_acpi_off_is_refused_with_kubevirts_message() {
        let v = vmi(json!({
            "spec": {"domain": {"devices": {}, "features": {"acpi": {"enabled": false}}}}
        }));
        let err = reboot_method(&v).unwrap_err();
        assert_eq!(
            err.to_string(),
            "VMI neither have the agent connected nor the ACPI feature enabled"
        );
    }
}
