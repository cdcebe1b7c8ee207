//! `<hostdev>`: the generic, GPU and SR-IOV devices the launcher prepared (from the context).

use super::Configurator;
use crate::context::ConverterContext;
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Appends the prepared host devices: generic, then GPUs, then SR-IOV.
pub(super) struct HostDevices<'a> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use crate::domain::{Alias, HostDevice};
    use serde_json::json;

    fn device(name: &str) -> HostDevice {
        HostDevice {
            alias: Some(Alias::plain(name)),
            ..HostDevice::default()
        }
    }

    fn names(d: &Domain) -> Vec<String> {
        let hostdevs = &d.devices.hostdevs;
        hostdevs
            .iter()
            .map(|h| h.alias.as_ref().map(|a| a.name.clone()).unwrap_or_default())
            .collect()
    }

    #[test]
    fn no_prepared_devices_means_no_hostdevs() {
        let ctx = ConverterContext::default();
        let d = run(
            &HostDevices { ctx: &ctx },
            &vmi(json!({"domain": {"devices": {}}})),
        )
        .unwrap();
        assert!(d.devices.hostdevs.is_empty());
    }

    #[test]
    fn generic_then_gpu_then_sriov_each_in_its_own_order_after_what_is_there() {
        let ctx = ConverterContext {
            sriov_devices: vec![device("sriov-a"), device("sriov-b")],
            generic_host_devices: vec![device("generic-a"), device("generic-b")],
            gpu_host_devices: vec![device("gpu-a")],
            ..ConverterContext::default()
        };
        let vmi = vmi(json!({"domain": {"devices": {}}}));
        let mut d = Domain::default();
        d.devices.hostdevs.push(device("existing"));
        HostDevices { ctx: &ctx }.configure(&vmi, &mut d).unwrap();
        assert_eq!(
            names(&d),
            [
                "existing",
                "generic-a",
                "generic-b",
                "gpu-a",
                "sriov-a",
                "sriov-b"
            ]
        );
    }
}
