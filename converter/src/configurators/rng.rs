//! `<rng>`: virtio entropy from the host's `/dev/urandom`.

use super::{Configurator, Env};
use crate::domain::{Domain, IommuOnly, Rng as DomRng, RngBackend};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the RNG device.
pub(super) struct Rng<'a> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, node, run, vmi};
    use crate::context::{Arch, ConverterContext};
    use serde_json::{Value, json};

    fn rng_of(spec: Value, ctx: &ConverterContext) -> Domain {
        let vmi = vmi(spec);
        let env = Env::new(&vmi, ctx);
        run(&Rng { env: &env }, &vmi).unwrap()
    }

    #[test]
    fn no_rng_unless_the_vmi_asks() {
        let d = rng_of(
            json!({"domain": {"devices": {}}}),
            &ConverterContext::default(),
        );
        assert_eq!(d.devices.rng, None);
    }

    #[test]
    fn the_rng_reads_the_hosts_urandom() {
        let d = rng_of(
            json!({"domain": {"devices": {"rng": {}}}}),
            &ConverterContext::default(),
        );
        insta::assert_snapshot!(element(&d, "rng"), @r#"
        <rng model="virtio-non-transitional">
        	<backend model="random">/dev/urandom</backend>
        </rng>
        "#);
    }

    #[test]
    fn sev_and_secure_execution_put_the_rng_behind_the_iommu() {
        let iommu = |d: Domain| d.devices.rng.and_then(|r| r.driver).and_then(|d| d.iommu);
        let sev = json!({"domain": {"devices": {"rng": {}}, "launchSecurity": {"sev": {}}}});
        assert_eq!(
            iommu(rng_of(sev, &ConverterContext::default())).as_deref(),
            Some("on")
        );
        let pv = json!({"architecture": "s390x",
            "domain": {"devices": {"rng": {}}, "launchSecurity": {}}});
        let d = rng_of(pv, &node(Arch::S390x));
        assert_eq!(
            d.devices.rng.as_ref().map(|r| r.model.as_ref()),
            Some("virtio")
        );
        assert_eq!(iommu(d).as_deref(), Some("on"));
    }
}
