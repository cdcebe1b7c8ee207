//! Read-only questions about a VMI that KubeVirt asks through methods on its Go type.

use k8s_openapi::jiff::Timestamp;

use crate::api::{
    VirtualMachineInstance, VirtualMachineInstanceMigrationState, VirtualMachineInstanceStatus,
};
use kvrs_api::time::parse_time;

/// Phase names.
pub(super) mod phases {
    pub(crate) const SCHEDULED: &str = "Scheduled";
    pub(crate) const RUNNING: &str = "Running";
    pub(crate) const SUCCEEDED: &str = "Succeeded";
    pub(crate) const FAILED: &str = "Failed";
    pub(crate) const WAITING_FOR_SYNC: &str = "WaitingForSync";
}

pub(super) fn phase(vmi: &VirtualMachineInstance) -> &str {
    status_phase(vmi.status.as_ref())
}

pub(super) fn status_phase(status: Option<&VirtualMachineInstanceStatus>) -> &str {
    status.and_then(|s| s.phase.as_deref()).unwrap_or("")
}

pub(super) fn is_final(vmi: &VirtualMachineInstance) -> bool {
    matches!(phase(vmi), phases::SUCCEEDED | phases::FAILED)
}

pub(super) fn is_running(vmi: &VirtualMachineInstance) -> bool {
    phase(vmi) == phases::RUNNING
}

pub(super) fn is_scheduled(vmi: &VirtualMachineInstance) -> bool {
    phase(vmi) == phases::SCHEDULED
}

pub(super) fn uid(vmi: &VirtualMachineInstance) -> &str {
    vmi.metadata.uid.as_deref().unwrap_or("")
}

pub(super) fn is_deleting(vmi: &VirtualMachineInstance) -> bool {
    vmi.metadata.deletion_timestamp.is_some()
}

pub(super) fn migration_state(
    vmi: &VirtualMachineInstance,
) -> Option<&VirtualMachineInstanceMigrationState> {
    vmi.status.as_ref()?.migration_state.as_deref()
}

/// Marked as the target VMI of a (decentralized) migration.
pub(super) fn is_migration_target(vmi: &VirtualMachineInstance) -> bool {
    vmi.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubevirt.io/create-migration-target"))
        .is_some_and(|v| v == "true")
}

pub(super) fn is_migration_completed(vmi: &VirtualMachineInstance) -> bool {
    migration_state(vmi)
        .and_then(|m| m.completed)
        .unwrap_or(false)
}

/// Fully synchronized migration source (the target's sync and node addresses are known).
pub(super) fn is_migration_source(vmi: &VirtualMachineInstance) -> bool {
    migration_state(vmi)
        .and_then(|m| m.target_state.as_ref())
        .is_some_and(|t| t.sync_address.is_some() && t.node_address.is_some())
}

/// A migration has started and not ended at `now`.
pub(super) fn is_migrating(vmi: &VirtualMachineInstance, now: Timestamp) -> bool {
    let Some(m) = migration_state(vmi) else {
        return false;
    };
    let started = m.start_timestamp.as_ref().is_some_and(|t| now >= t.0);
    let stopped = m.end_timestamp.as_ref().is_some_and(|t| now >= t.0);
    started && !stopped
}

/// KubeVirt's `isMigrationInProgress`: the VMI or the domain says a migration runs, or the VMI is an
/// unfinished migration target.
pub(super) fn migration_in_progress(
    vmi: &VirtualMachineInstance,
    domain: Option<&super::Domain>,
) -> bool {
    if migration_state(vmi)
        .is_some_and(|m| m.start_timestamp.is_some() && m.end_timestamp.is_none())
    {
        return true;
    }
    if let Some(d) = domain {
        if d.spec
            .metadata
            .kubevirt
            .migration
            .as_ref()
            .is_some_and(|m| m.start_timestamp.is_some() && m.end_timestamp.is_none())
        {
            return true;
        }
        if d.status.status == "Paused"
            && matches!(
                d.status.reason.as_str(),
                "Migration" | "StartingUp" | "Postcopy"
            )
        {
            return true;
        }
    }
    is_migration_target(vmi) && !is_migration_completed(vmi)
}

/// The VMI carries this node's name in its node label or status.
pub(super) fn owned_by_node(vmi: &VirtualMachineInstance, node: &str) -> bool {
    let label = vmi
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubevirt.io/nodeName"));
    if label.is_some_and(|n| !n.is_empty() && n == node) {
        return true;
    }
    vmi.status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty() && n == node)
}

/// Seconds since the epoch of an RFC 3339 string, if it parses.
pub(super) fn unix_seconds(s: &str) -> Option<i64> {
    parse_time(s).map(|t| t.as_second())
}
