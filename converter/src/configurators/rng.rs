//! `<rng>`: virtio entropy from the host's `/dev/urandom`.

use super::{Configurator, Env};
use crate::domain::{Domain, IommuOnly, Rng as DomRng, RngBackend};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the RNG device.
pub struct Rng<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

impl Configurator for Rng<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        if vmi.spec.domain.devices.rng.is_none() {
            return Ok(());
        }
        domain.devices.rng = Some(DomRng {
            model: self.env.virtio_model.into(),
            backend: Some(RngBackend {
                model: "random".into(),
                source: "/dev/urandom".into(),
            }),
            address: None,
            driver: (self.env.sev || self.env.pv).then(|| IommuOnly {
                iommu: Some("on".into()),
            }),
        });
        Ok(())
    }
}
