//! `<qemu:commandline>`: Ignition config through fw_cfg. (The firmware debug log KubeVirt adds at
//! high launcher verbosity is the launcher's environment, not the converter's, and is left out.)

use super::{Configurator, util};
use crate::domain::{Commandline, Domain, QemuArg};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Annotation carrying Ignition data.
pub(super) const IGNITION_ANNOTATION: &str = "kubevirt.io/ignitiondata";
const IGNITION_DIR: &str = "/var/run/libvirt/ignition-dir";

/// Writes extra QEMU arguments.
pub(super) struct QemuCmd;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{annotated, element, run, vmi};
    use serde_json::json;

    fn with_ignition(data: &str) -> Domain {
        let vmi = annotated(
            json!({IGNITION_ANNOTATION: data}),
            json!({"domain": {"devices": {}}}),
        );
        run(&QemuCmd, &vmi).unwrap()
    }

    #[test]
    fn ignition_data_is_handed_to_the_guest_through_fw_cfg() {
        let d = with_ignition(r#"{"ignition":{"version":"3.2.0"}}"#);
        insta::assert_snapshot!(element(&d, "qemu:commandline"), @r#"
        <qemu:commandline>
        	<qemu:arg value="-fw_cfg"/>
        	<qemu:arg value="name=opt/com.coreos/config,file=/var/run/libvirt/ignition-dir/demo/vm/data.ign"/>
        </qemu:commandline>
        "#);
    }

    #[test]
    fn no_command_line_without_ignition_data() {
        let plain = run(&QemuCmd, &vmi(json!({"domain": {"devices": {}}}))).unwrap();
        assert_eq!(plain.qemu_commandline, None);
        assert_eq!(with_ignition("").qemu_commandline, None);
        assert_eq!(with_ignition(r#"{"other": 1}"#).qemu_commandline, None);
    }
}
