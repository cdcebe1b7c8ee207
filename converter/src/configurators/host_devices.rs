//! `<hostdev>`: the generic, GPU and SR-IOV devices the launcher prepared (from the context).

use super::Configurator;
use crate::context::ConverterContext;
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Appends the prepared host devices: generic, then GPUs, then SR-IOV.
pub struct HostDevices<'a> {
    /// The context holding the devices.
    pub ctx: &'a ConverterContext,
}

impl Configurator for HostDevices<'_> {
    fn configure(
        &self,
        _vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let c = self.ctx;
        for list in [
            &c.generic_host_devices,
            &c.gpu_host_devices,
            &c.sriov_devices,
        ] {
            domain.devices.hostdevs.extend(list.iter().cloned());
        }
        Ok(())
    }
}
