//! `<iommufd>`: when the device plugin handed the launcher an IOMMUFD descriptor.

use super::Configurator;
use crate::domain::{Domain, Iommufd as DomIommufd};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the IOMMUFD element.
pub struct Iommufd {
    /// An IOMMUFD descriptor is available.
    pub enabled: bool,
}

impl Configurator for Iommufd {
    fn configure(
        &self,
        _vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        if self.enabled {
            domain.iommufd = Some(DomIommufd {
                enabled: "yes".into(),
                fdgroup: Some("iommu".into()),
            });
        }
        Ok(())
    }
}
