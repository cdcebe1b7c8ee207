//! `<watchdog>`: i6300esb on amd64, diag288 on s390x, none on arm64.

use super::Configurator;
use crate::context::Arch;
use crate::domain::{Alias, Domain, Watchdog as DomWatchdog};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the watchdog.
pub(super) struct Watchdog {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::{Value, json};

    fn watchdog_on(arch: Arch, watchdog: Value) -> Result<Domain, ConvertError> {
        run(
            &Watchdog { arch },
            &vmi(json!({"domain": {"devices": {"watchdog": watchdog}}})),
        )
    }

    #[test]
    fn no_watchdog_unless_the_vmi_has_one() {
        for arch in [Arch::Amd64, Arch::Arm64, Arch::S390x] {
            assert!(
                watchdog_on(arch, Value::Null)
                    .unwrap()
                    .devices
                    .watchdogs
                    .is_empty()
            );
        }
    }

    #[test]
    fn amd64_writes_i6300esb_and_s390x_diag288_with_the_action() {
        let amd64 = watchdog_on(
            Arch::Amd64,
            json!({"name": "wd", "i6300esb": {"action": "poweroff"}}),
        );
        let s390x = watchdog_on(
            Arch::S390x,
            json!({"name": "wd", "diag288": {"action": "reset"}}),
        );
        for (d, model, action) in [(amd64, "i6300esb", "poweroff"), (s390x, "diag288", "reset")] {
            assert_eq!(
                d.unwrap().devices.watchdogs,
                [DomWatchdog {
                    model: model.into(),
                    action: action.into(),
                    alias: Some(Alias::user("wd")),
                    address: None,
                }]
            );
        }
    }

    #[test]
    fn arm64_and_a_watchdog_without_the_archs_type_are_refused() {
        let err = watchdog_on(Arch::Arm64, json!({"name": "wd", "i6300esb": {}})).unwrap_err();
        assert_eq!(err.path, "spec.domain.devices.watchdog");
        assert_eq!(
            err.reason,
            "watchdog is not supported on architecture ARM64"
        );
        for arch in [Arch::Amd64, Arch::S390x] {
            let err = watchdog_on(arch, json!({"name": "wd"})).unwrap_err();
            assert_eq!(
                err.reason,
                "watchdog wd can't be mapped, no watchdog type specified"
            );
        }
        // The other architecture's type does not count.
        assert!(watchdog_on(Arch::S390x, json!({"name": "wd", "i6300esb": {}})).is_err());
    }
}
