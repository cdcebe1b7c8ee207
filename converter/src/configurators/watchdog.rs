//! `<watchdog>`: i6300esb on amd64, diag288 on s390x, none on arm64.

use super::Configurator;
use crate::context::Arch;
use crate::domain::{Alias, Domain, Watchdog as DomWatchdog};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the watchdog.
pub struct Watchdog {
    /// Effective architecture.
    pub arch: Arch,
}

impl Configurator for Watchdog {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let Some(w) = &vmi.spec.domain.devices.watchdog else {
            return Ok(());
        };
        let path = "spec.domain.devices.watchdog";
        let missing = || {
            ConvertError::new(
                path,
                format!(
                    "watchdog {} can't be mapped, no watchdog type specified",
                    w.name
                ),
            )
        };
        let (model, action) = match self.arch {
            Arch::Amd64 => (
                "i6300esb",
                w.i6300esb.as_ref().ok_or_else(missing)?.action.clone(),
            ),
            Arch::S390x => (
                "diag288",
                w.diag288.as_ref().ok_or_else(missing)?.action.clone(),
            ),
            Arch::Arm64 => {
                return Err(ConvertError::new(
                    path,
                    "watchdog is not supported on architecture ARM64",
                ));
            }
        };
        domain.devices.watchdogs.push(DomWatchdog {
            model: model.into(),
            action: action.unwrap_or_default().into(),
            alias: Some(Alias::user(&w.name)),
            address: None,
        });
        Ok(())
    }
}
