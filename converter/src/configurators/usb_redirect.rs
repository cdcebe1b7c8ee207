//! `<redirdev>`: USB redirection slots for client passthrough.

use super::{Configurator, util};
use crate::domain::{Domain, RedirectedDevice, RedirectedDeviceSource};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// KubeVirt offers this many USB redirection slots.
pub(super) const USB_CLIENT_PASSTHROUGH_MAX: usize = 4;

/// Writes the USB redirection devices.
pub(super) struct UsbRedirect;

impl Configurator for UsbRedirect {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        if vmi.spec.domain.devices.client_passthrough.is_none() {
            return Ok(());
        }
        let uid = util::uid_component(vmi)?;
        domain.devices.redirdevs = (0..USB_CLIENT_PASSTHROUGH_MAX)
            .map(|i| RedirectedDevice {
                kind: "unix".into(),
                bus: "usb".into(),
                source: RedirectedDeviceSource {
                    mode: "bind".into(),
                    path: format!("{}/{uid}/virt-usbredir-{i}", util::VIRT_PRIVATE_DIR).into(),
                },
            })
            .collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::json;

    #[test]
    fn no_redirection_without_client_passthrough() {
        let d = run(&UsbRedirect, &vmi(json!({"domain": {"devices": {}}}))).unwrap();
        assert!(d.devices.redirdevs.is_empty());
    }

    #[test]
    fn client_passthrough_offers_four_usb_slots_on_sockets() {
        let vmi = vmi(json!({"domain": {"devices": {"clientPassthrough": {}}}}));
        let d = run(&UsbRedirect, &vmi).unwrap();
        let redirdevs = &d.devices.redirdevs;
        for r in redirdevs {
            assert_eq!(
                (r.kind.as_ref(), r.bus.as_ref(), r.source.mode.as_ref()),
                ("unix", "usb", "bind")
            );
        }
        let paths: Vec<String> = redirdevs
            .iter()
            .map(|r| r.source.path.to_string())
            .collect();
        let expected: Vec<String> = (0..USB_CLIENT_PASSTHROUGH_MAX)
            .map(|i| format!("/var/run/kubevirt-private/u1/virt-usbredir-{i}"))
            .collect();
        assert_eq!(paths, expected);
    }
}
