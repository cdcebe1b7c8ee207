//! `<qemu:commandline>`: Ignition config through fw_cfg. (The firmware debug log KubeVirt adds at
//! high launcher verbosity is the launcher's environment, not the converter's, and is left out.)

use super::{Configurator, util};
use crate::context::Arch;
use crate::domain::{Commandline, Domain, QemuArg};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Annotation carrying Ignition data.
pub const IGNITION_ANNOTATION: &str = "kubevirt.io/ignitiondata";
const IGNITION_DIR: &str = "/var/run/libvirt/ignition-dir";

/// Writes extra QEMU arguments.
pub struct QemuCmd {
    /// Effective architecture.
    pub arch: Arch,
}

impl Configurator for QemuCmd {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let Some(data) = util::annotation(vmi, IGNITION_ANNOTATION) else {
            return Ok(());
        };
        if data.is_empty() || !data.contains("ignition") {
            return Ok(());
        }
        let ns = util::namespace_component(vmi)?;
        let name = util::name_component(vmi)?;
        let cmd = domain
            .qemu_commandline
            .get_or_insert_with(Commandline::default);
        cmd.arg.push(QemuArg {
            value: "-fw_cfg".into(),
        });
        cmd.arg.push(QemuArg {
            value: format!("name=opt/com.coreos/config,file={IGNITION_DIR}/{ns}/{name}/data.ign"),
        });
        Ok(())
    }
}
