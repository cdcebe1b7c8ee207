//! `<serial>` on a unix socket (optionally logged) and the `<console>` on top of it.

use super::{Configurator, util};
use crate::context::ConverterContext;
use crate::domain::{
    CharSource, Console as DomConsole, ConsoleTarget, Domain, Few, Serial, SerialLog, SerialTarget,
};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the serial console.
pub struct Console<'a> {
    /// The context (serial console log setting).
    pub ctx: &'a ConverterContext,
}

/// The launcher's rule for logging the serial console with cluster defaults (not disabled).
pub fn serial_console_log_rule(vmi: &VirtualMachineInstance) -> bool {
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
