//! `<redirdev>`: USB redirection slots for client passthrough.

use super::{Configurator, util};
use crate::domain::{Domain, RedirectedDevice, RedirectedDeviceSource};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// KubeVirt offers this many USB redirection slots.
pub const USB_CLIENT_PASSTHROUGH_MAX: usize = 4;

/// Writes the USB redirection devices.
pub struct UsbRedirect;

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
