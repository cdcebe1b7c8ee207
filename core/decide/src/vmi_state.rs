//! Read helpers over a VMI's status: its phase and conditions.

use crate::api::{VirtualMachineInstance, VirtualMachineInstanceCondition};

/// VMI phases as KubeVirt spells them.
pub mod phase {
    /// Accepted, no launcher pod yet.
    pub const PENDING: &str = "Pending";
    /// Launcher pod created, waiting for it to be scheduled and ready.
    pub const SCHEDULING: &str = "Scheduling";
    /// Launcher pod ready on a node; virt-handler takes over.
    pub const SCHEDULED: &str = "Scheduled";
    /// The guest runs.
    pub const RUNNING: &str = "Running";
    /// The guest stopped on its own.
    pub const SUCCEEDED: &str = "Succeeded";
    /// The guest or its pod failed.
    pub const FAILED: &str = "Failed";
    /// A migration receiver waiting for the source.
    pub const WAITING_FOR_SYNC: &str = "WaitingForSync";
}

/// The phase, empty when unset.
pub fn phase_of(vmi: &VirtualMachineInstance) -> &str {
    vmi.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Succeeded or Failed: nothing will run in this VMI again.
pub fn is_final(vmi: &VirtualMachineInstance) -> bool {
    matches!(phase_of(vmi), phase::FAILED | phase::SUCCEEDED)
}

/// Pending or no phase yet: no launcher pod has been created.
pub fn is_unprocessed(vmi: &VirtualMachineInstance) -> bool {
    matches!(phase_of(vmi), "" | phase::PENDING)
}

/// Whether the VMI has a deletion timestamp.
pub fn is_deleting(vmi: &VirtualMachineInstance) -> bool {
    vmi.metadata.deletion_timestamp.is_some()
}

/// The condition of type `t`.
pub fn condition<'a>(
    vmi: &'a VirtualMachineInstance,
    t: &str,
) -> Option<&'a VirtualMachineInstanceCondition> {
    vmi.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.r#type == t)
}

/// Whether condition `t` has status `s`.
pub fn has_condition_status(vmi: &VirtualMachineInstance, t: &str, s: &str) -> bool {
    condition(vmi, t).is_some_and(|c| c.status == s)
}

/// Whether condition `t` has status `s` and reason `r`.
pub fn has_condition_status_reason(
    vmi: &VirtualMachineInstance,
    t: &str,
    s: &str,
    r: &str,
) -> bool {
    condition(vmi, t).is_some_and(|c| c.status == s && c.reason.as_deref() == Some(r))
}

/// Whether the VMI passed through phase Running at some point.
pub fn was_ever_running(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.phase_transition_timestamps.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.phase.as_deref() == Some(phase::RUNNING))
        })
}

/// Whether a migration of this VMI is in progress at `now` (started, not ended).
pub fn is_migrating(vmi: &VirtualMachineInstance, now: i64) -> bool {
    let Some(ms) = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref()) else {
        return false;
    };
    let started = ms
        .start_timestamp
        .as_ref()
        .is_some_and(|t| crate::meta::unix_of(t) <= now);
    let ended = ms
        .end_timestamp
        .as_ref()
        .is_some_and(|t| crate::meta::unix_of(t) <= now);
    started && !ended
}
