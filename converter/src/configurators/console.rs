//! `<serial>` on a unix socket (optionally logged) and the `<console>` on top of it.

use super::{Configurator, util};
use crate::context::ConverterContext;
use crate::domain::{
    CharSource, Console as DomConsole, ConsoleTarget, Domain, Few, Serial, SerialLog, SerialTarget,
};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the serial console.
pub(super) struct Console<'a> {
    /// The context (serial console log setting).
    pub ctx: &'a ConverterContext,
}

/// The launcher's rule for logging the serial console with cluster defaults (not disabled).
pub(super) fn serial_console_log_rule(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec.domain.devices.log_serial_console.unwrap_or(true)
}

impl Configurator for Console<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        if vmi.spec.domain.devices.autoattach_serial_console == Some(false) {
            return Ok(());
        }
        domain.devices.consoles = Few::from([DomConsole {
            kind: "pty".into(),
            target: Some(ConsoleTarget {
                kind: Some("serial".into()),
                port: Some(0),
            }),
            source: None,
            alias: None,
        }]);
        let uid = util::uid_component(vmi)?;
        let socket = util::cat([util::VIRT_PRIVATE_DIR, "/", uid, "/virt-serial0"]);
        let log = self
            .ctx
            .serial_console_log
            .unwrap_or_else(|| serial_console_log_rule(vmi));
        domain.devices.serials = Few::from([Serial {
            kind: "unix".into(),
            target: Some(SerialTarget { port: Some(0) }),
            log: log.then(|| SerialLog {
                file: Some(util::cat([&socket, "-log"]).into()),
                append: Some("on".into()),
            }),
            source: Some(CharSource {
                mode: Some("bind".into()),
                path: Some(socket.into()),
            }),
            alias: None,
        }]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi};
    use serde_json::{Value, json};

    fn console(devices: Value, ctx: &ConverterContext) -> Domain {
        let vmi = vmi(json!({"domain": {"devices": devices}}));
        run(&Console { ctx }, &vmi).unwrap()
    }

    #[test]
    fn the_serial_console_is_attached_unless_switched_off() {
        let ctx = ConverterContext::default();
        for devices in [json!({}), json!({"autoattachSerialConsole": true})] {
            let d = console(devices, &ctx);
            assert_eq!(d.devices.consoles.len(), 1);
            assert_eq!(d.devices.serials.len(), 1);
        }
        let d = console(json!({"autoattachSerialConsole": false}), &ctx);
        assert!(d.devices.consoles.is_empty() && d.devices.serials.is_empty());
    }

    #[test]
    fn the_serial_port_is_a_socket_under_the_vmis_private_directory_and_logged() {
        let d = console(json!({}), &ConverterContext::default());
        insta::assert_snapshot!(element(&d, "serial"), @r#"
        <serial type="unix">
        	<target port="0"/>
        	<source mode="bind" path="/var/run/kubevirt-private/u1/virt-serial0"/>
        	<log file="/var/run/kubevirt-private/u1/virt-serial0-log" append="on"/>
        </serial>
        "#);
        insta::assert_snapshot!(element(&d, "console"), @r#"
        <console type="pty">
        	<target type="serial" port="0"/>
        </console>
        "#);
    }

    #[test]
    fn the_log_follows_the_vmi_unless_the_context_decides() {
        let logged = |devices, ctx: &ConverterContext| {
            console(devices, ctx).devices.serials[0].log.is_some()
        };
        let defaults = ConverterContext::default();
        assert!(!logged(json!({"logSerialConsole": false}), &defaults));
        let off = ConverterContext {
            serial_console_log: Some(false),
            ..ConverterContext::default()
        };
        assert!(!logged(json!({"logSerialConsole": true}), &off));
        let on = ConverterContext {
            serial_console_log: Some(true),
            ..ConverterContext::default()
        };
        assert!(logged(json!({"logSerialConsole": false}), &on));
    }
}
