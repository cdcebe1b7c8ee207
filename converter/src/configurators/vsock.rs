//! `<vsock>` with the CID the controller allocated.

use super::Configurator;
use crate::domain::{Cid, Domain, Vsock as DomVsock};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the VSOCK device. `default_cid` stands in for the controller's allocation when the
/// VMI asks for VSOCK (`autoattachVSOCK`) but `status.VSOCKCID` is still unset.
pub(super) struct Vsock {
    /// CID used when the status has none.
    pub default_cid: Option<u32>,
}

impl Configurator for Vsock {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let status_cid = vmi.status.as_ref().and_then(|s| s.vsockcid);
        let cid = match status_cid {
            Some(c) => Some(u32::try_from(c).map_err(|_| {
                ConvertError::new("status.vsockCID", format!("{c} is not a valid CID"))
            })?),
            None if vmi.spec.domain.devices.autoattach_vsock == Some(true) => self.default_cid,
            None => None,
        };
        let Some(cid) = cid else { return Ok(()) };
        domain.devices.vsock = Some(DomVsock {
            model: Some("virtio-non-transitional".into()),
            cid: Cid {
                auto: "no".into(),
                address: (cid != 0).then_some(cid),
            },
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi_from};
    use serde_json::{Value, json};

    fn vsock(
        devices: Value,
        status: Value,
        default_cid: Option<u32>,
    ) -> Result<Domain, ConvertError> {
        let vmi = vmi_from(json!({"metadata": {"name": "vm"},
            "spec": {"domain": {"devices": devices}}, "status": status}));
        run(&Vsock { default_cid }, &vmi)
    }

    #[test]
    fn no_vsock_without_a_cid_in_the_status_or_autoattach() {
        let d = vsock(json!({}), json!({}), Some(3)).unwrap();
        assert_eq!(d.devices.vsock, None);
    }

    #[test]
    fn the_cid_the_controller_allocated_is_written() {
        let d = vsock(json!({}), json!({"VSOCKCID": 1234}), Some(3)).unwrap();
        insta::assert_snapshot!(element(&d, "vsock"), @r#"
        <vsock model="virtio-non-transitional">
        	<cid auto="no" address="1234"/>
        </vsock>
        "#);
    }

    #[test]
    fn autoattach_without_a_status_cid_takes_the_contexts_default() {
        let d = vsock(json!({"autoattachVSOCK": true}), json!({}), Some(3)).unwrap();
        assert_eq!(d.devices.vsock.map(|v| v.cid.address), Some(Some(3)));
        let d = vsock(json!({"autoattachVSOCK": true}), json!({}), None).unwrap();
        assert_eq!(d.devices.vsock, None);
    }

    #[test]
    fn a_cid_that_is_not_32_bits_is_refused() {
        for cid in [json!(-1), json!(1_i64 << 32)] {
            let err = vsock(json!({}), json!({"VSOCKCID": cid}), None).unwrap_err();
            assert_eq!(err.reason, format!("{cid} is not a valid CID"));
        }
    }
}
