//! The VMI phase implied by the domain (KubeVirt's `calculateVmPhaseForStatusReason`).

use super::HandlerWorld;
use super::ctx::Ctx;
use super::domain::Domain;
use super::view::{self, phases};
use crate::api::VirtualMachineInstance;

/// Whether ACPI shutdown was possible, so a `Destroyed` domain means the grace period ran out.
fn acpi_enabled(vmi: &VirtualMachineInstance, d: &Domain) -> bool {
    let vmi_grace = vmi.spec.termination_grace_period_seconds;
    let has_grace = vmi_grace != Some(0) || (vmi_grace.is_none() && d.grace_period_seconds() != 0);
    has_grace && d.spec.features.as_ref().is_some_and(|f| f.acpi.is_some())
}

/// The phase the VMI should be in. With no domain it asks the launcher manager whether the launcher
/// still answers (which may requeue the key after 1 s while the launcher initialises).
pub(super) fn calculate(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    domain: Option<&Domain>,
    vmi: &VirtualMachineInstance,
) -> Result<String, String> {
    let current = view::phase(vmi).to_string();
    let target = view::is_migration_target(vmi);
    let Some(d) = domain else {
        let migration_failed = view::migration_state(vmi)
            .and_then(|m| m.failed)
            .unwrap_or(false);
        if target && migration_failed {
            return Ok(current);
        }
        if view::is_scheduled(vmi) {
            let l = &w.facts.launcher;
            if let Some(e) = &l.unresponsive_error {
                return Err(e.clone());
            }
            if l.not_initialized {
                cx.add_after(1);
                return Ok(current);
            }
            if l.unresponsive || l.gone {
                // The launcher died before the domain ever started.
                return Ok(if target {
                    phases::WAITING_FOR_SYNC
                } else {
                    phases::FAILED
                }
                .into());
            }
            return Ok(phases::SCHEDULED.into());
        }
        if !view::is_running(vmi) && !view::is_final(vmi) {
            return Ok(phases::SCHEDULED.into());
        }
        if !view::is_final(vmi) {
            // Running without a domain: someone removed it behind KubeVirt's back.
            return Ok(if target {
                phases::WAITING_FOR_SYNC
            } else {
                phases::FAILED
            }
            .into());
        }
        return Ok(current);
    };

    let phase = match (d.status.status.as_str(), d.status.reason.as_str()) {
        ("Shutoff" | "Crashed", "Crashed" | "Panicked") => phases::FAILED,
        ("Shutoff" | "Crashed", "Destroyed") => {
            let post_copy_failed = view::migration_state(vmi)
                .is_some_and(|m| m.failed == Some(true) && m.mode.as_deref() == Some("PostCopy"));
            if acpi_enabled(vmi, d) || post_copy_failed {
                phases::FAILED
            } else {
                phases::SUCCEEDED
            }
        }
        ("Shutoff" | "Crashed", "Shutdown" | "Saved" | "FromSnapshot") => phases::SUCCEEDED,
        ("Paused", "PostcopyFailed") => phases::FAILED,
        ("Paused", _) | ("Running" | "Blocked" | "PMSuspended", _) => phases::RUNNING,
        _ => return Ok(current),
    };
    Ok(phase.into())
}
