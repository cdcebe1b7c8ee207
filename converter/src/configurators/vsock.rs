//! `<vsock>` with the CID the controller allocated.

use super::Configurator;
use crate::domain::{Cid, Domain, Vsock as DomVsock};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the VSOCK device. `default_cid` stands in for the controller's allocation when the
/// VMI asks for VSOCK (`autoattachVSOCK`) but `status.VSOCKCID` is still unset.
pub struct Vsock {
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
