//! `<iommufd>`: when the device plugin handed the launcher an IOMMUFD descriptor.

use super::Configurator;
use crate::domain::{Domain, Iommufd as DomIommufd};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the IOMMUFD element.
pub(super) struct Iommufd {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi};
    use serde_json::json;

    #[test]
    fn a_received_descriptor_writes_the_iommufd_element() {
        let vmi = vmi(json!({"domain": {"devices": {}}}));
        let d = run(&Iommufd { enabled: true }, &vmi).unwrap();
        insta::assert_snapshot!(element(&d, "iommufd"), @r#"<iommufd enabled="yes" fdgroup="iommu"/>"#);
        assert_eq!(
            run(&Iommufd { enabled: false }, &vmi).unwrap().iommufd,
            None
        );
    }

    #[test]
    fn the_pipeline_takes_it_from_the_context() {
        use crate::configurators::{Env, PIPELINE};
        let step = PIPELINE.iter().find(|s| s.name == "iommufd").unwrap();
        let vmi = vmi(json!({"domain": {"devices": {}}}));
        for enabled in [true, false] {
            let ctx = crate::context::ConverterContext {
                iommufd_enabled: enabled,
                ..Default::default()
            };
            let mut d = Domain::default();
            (step.run)(&Env::new(&vmi, &ctx), &vmi, &mut d).unwrap();
            assert_eq!(d.iommufd.is_some(), enabled);
        }
    }
}
