//! The migration source controller: on the node the VMI runs on, once the target published its
//! address and ports, start the source proxy and tell the launcher to migrate (once); relay an
//! abort request; copy the launcher's migration record into `status.migrationState`; fail the
//! VMI when the domain left for a target that never reported it.

use super::super::ctx::{Ctx, SyncResult};
use super::super::domain::Domain;
use super::super::plan::{Decision, LauncherCall, NodeStep};
use super::super::{HandlerWorld, view};
use super::{
    NODE_NAME_LABEL, check_launcher, is_done, label, launcher_client, options, state, state_mut,
};
use crate::api::{VirtualMachineInstance, VirtualMachineInstanceMigrationState};
use crate::handler::parse_time;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Seconds the target node gets to report the domain after the migration ended.
pub(super) const TARGET_DETECTION_TIMEOUT: i64 = 60;
/// Event message when the migration is sent to the launcher.
pub(super) const MIGRATING: &str = "VirtualMachineInstance is migrating.";
/// Event message when an abort is sent to the launcher.
pub(super) const ABORTING: &str = "VirtualMachineInstance is aborting migration.";

/// `execute`: whether this node is the source, then `sync`. Returns the sync result and the VMI
/// as it should be stored afterwards (`None`: no write).
pub(super) fn execute(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
) -> (SyncResult, Option<VirtualMachineInstance>) {
    cx.decision = Decision::MigrationNotInvolved;
    // The source controller's informer only holds VMIs labelled with this node.
    let Some(vmi) = w.vmi.filter(|v| label(v, NODE_NAME_LABEL) == Some(w.node)) else {
        return (Ok(()), None);
    };
    if view::is_final(vmi) || view::is_deleting(vmi) {
        return (Ok(()), None);
    }
    if !w.facts.expectations_satisfied.unwrap_or(true) {
        cx.decision = Decision::WaitingForExpectations;
        return (Ok(()), None);
    }
    let domain = w.domain.filter(|d| !d.is_deleted());
    if domain.is_some_and(|d| d.uid() != view::uid(vmi)) {
        // A stale domain of an older VMI with this name: the VM controller cleans it up first.
        return (Ok(()), None);
    }
    let Some(m) = state(vmi) else {
        return (Ok(()), None);
    };
    if is_done(Some(m)) {
        // KubeVirt stops the source listener on every node (a no-op where none runs); only the
        // source node can have one, so the other nodes' plans stay empty.
        if m.source_node.as_deref() != Some(w.node) {
            return (Ok(()), None);
        }
        cx.decision = Decision::MigrationSourceCleanup;
        cx.step(NodeStep::StopSourceProxy {
            key: view::uid(vmi).to_string(),
        });
        return (Ok(()), None);
    }
    if !is_source(vmi, w.node) {
        return (Ok(()), None);
    }
    cx.decision = Decision::MigrationSourceSync;
    sync(w, cx, vmi, domain)
}

/// `isMigrationSource`: the VMI runs here and its migration leaves from here.
pub(super) fn is_source(vmi: &VirtualMachineInstance, node: &str) -> bool {
    let on_node = vmi.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
    on_node && state(vmi).and_then(|m| m.source_node.as_deref()) == Some(node)
}

fn sync(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
    domain: Option<&Domain>,
) -> (SyncResult, Option<VirtualMachineInstance>) {
    let mut new = vmi.clone();
    let result = if domain.is_some_and(Domain::is_alive) {
        migrate(w, cx, vmi, domain)
    } else {
        Ok(())
    };
    if let Err(e) = &result {
        cx.event("Warning", "SyncFailed", e.clone());
    }
    update_status(w, cx, &mut new, domain);
    (result, Some(new))
}

/// `migrateVMI`: abort, or (once) proxy + `MigrateVirtualMachine`.
fn migrate(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
    domain: Option<&Domain>,
) -> SyncResult {
    if let Some(r) = check_launcher(w, cx) {
        return r;
    }
    launcher_client(w, vmi)?;
    let Some(m) = state(vmi) else {
        return Ok(());
    };
    if m.abort_requested == Some(true) {
        return abort(w, cx, m, domain);
    }
    if view::migration_in_progress(vmi, domain) || launcher_has_it(m, domain) {
        return Ok(());
    }
    let Some(ports) = m.target_direct_migration_node_ports.as_ref() else {
        // The target has not published its proxy ports yet.
        cx.add_after(1);
        return Ok(());
    };
    let ports = ports
        .iter()
        .map(|(k, v)| {
            u16::try_from(*v).map(|p| (k.clone(), p)).map_err(|_| {
                format!(
                    "failed to handle migration proxy: status.migrationState.targetDirectMigrationNodePorts[{k}]: {v} is not a port"
                )
            })
        })
        .collect::<Result<_, _>>()?;
    cx.step(NodeStep::StartSourceProxy {
        key: view::uid(vmi).to_string(),
        target_address: m.target_node_address.clone().unwrap_or_default(),
        ports,
    });
    if let Some(e) = &w.facts.migration.source_proxy_error {
        return Err(format!("failed to handle migration proxy: {e}"));
    }
    let opts = options::build(
        vmi,
        w.facts.migration.cluster_configuration.as_ref(),
        w.config.gate(options::STALL_DETECTION_GATE),
    )
    .map_err(|e| e.to_string())?;
    let call = LauncherCall::MigrateVirtualMachine(opts);
    let name = call.name();
    cx.call(call);
    if let Some(e) = w.facts.launcher_error(name) {
        return Err(e.to_string());
    }
    cx.event("Normal", "Migrating", MIGRATING);
    Ok(())
}

/// The launcher already recorded this migration (same UID, started): it ran, or runs, even when
/// the record also says it ended. KubeVirt resends `MigrateVirtualMachine` then and the launcher
/// ignores it; kvrs does not send it.
fn launcher_has_it(m: &VirtualMachineInstanceMigrationState, domain: Option<&Domain>) -> bool {
    let record = domain.and_then(|d| d.spec.metadata.kubevirt.migration.as_ref());
    record.is_some_and(|r| {
        r.start_timestamp.is_some() && Some(r.uid.as_str()) == m.migration_uid.as_deref()
    })
}

/// `handleMigrationAbort`: cancel once; neither the VMI nor the launcher says it is under way.
fn abort(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    m: &VirtualMachineInstanceMigrationState,
    domain: Option<&Domain>,
) -> SyncResult {
    let handled = |s: &str| matches!(s, "Aborting" | "Succeeded");
    if handled(m.abort_status.as_deref().unwrap_or("")) {
        return Ok(());
    }
    let record = domain.and_then(|d| d.spec.metadata.kubevirt.migration.as_ref());
    if record.is_some_and(|r| handled(&r.abort_status)) {
        return Ok(());
    }
    let call = LauncherCall::CancelVirtualMachineMigration;
    let name = call.name();
    cx.call(call);
    if let Some(e) = w.facts.launcher_error(name) {
        return Err(e.to_string());
    }
    cx.event("Normal", "Migrating", ABORTING);
    Ok(())
}

/// `updateStatus`: progress from the launcher's record, then the hand-over checks.
fn update_status(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
) {
    set_progress(cx, vmi, domain);
    let now = w.now.timestamp();
    let host = state(vmi)
        .and_then(|m| m.target_node.clone())
        .unwrap_or_default();
    let (detected, left) = target_detected_ready_domain(w, cx, vmi);
    let fail = |vmi: &mut VirtualMachineInstance| {
        if let Some(s) = vmi.status.as_mut() {
            s.phase = Some(view::phases::FAILED.to_string());
        }
        if let Some(m) = state_mut(vmi) {
            m.completed = Some(true);
            m.failed = Some(true);
            m.end_timestamp.get_or_insert(Time(now));
        }
    };
    if host.is_empty() {
        fail(vmi);
        cx.event(
            "Warning",
            "Migrated",
            "The VirtualMachineInstance migrated to unknown host.",
        );
    } else if !detected && left <= 0 {
        fail(vmi);
        cx.event(
            "Warning",
            "Migrated",
            "The VirtualMachineInstance's domain was never observed on the target after the migration completed within the timeout period.",
        );
    }
}

/// `setMigrationProgressStatus`: copy the launcher's record of this migration (same UID).
fn set_progress(cx: &mut Ctx, vmi: &mut VirtualMachineInstance, domain: Option<&Domain>) {
    let Some(record) = domain.and_then(|d| d.spec.metadata.kubevirt.migration.as_ref()) else {
        return;
    };
    let Some(m) = state_mut(vmi) else {
        return;
    };
    if m.migration_uid.as_deref().unwrap_or("") != record.uid {
        return;
    }
    if let Some(t) = record.start_timestamp.as_deref().and_then(parse_time) {
        m.start_timestamp = Some(Time(t));
    }
    m.failed = Some(record.failed);
    if record.failed {
        m.completed = Some(true);
        m.end_timestamp = record
            .end_timestamp
            .as_deref()
            .and_then(parse_time)
            .map(Time);
        m.abort_status = Some(record.abort_status.clone());
        m.failure_reason = Some(record.failure_reason.clone());
        cx.event(
            "Warning",
            "Migrated",
            format!(
                "VirtualMachineInstance migration uid {} failed. reason:{}",
                record.uid, record.failure_reason
            ),
        );
    }
    m.mode = Some(record.mode.clone());
}

/// `hasTargetDetectedReadyDomain`: whether the target reported the running domain, and
/// otherwise the seconds left to wait for it after the migration ended (requeued meanwhile).
fn target_detected_ready_domain(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
) -> (bool, i64) {
    let Some(m) = state(vmi) else {
        return (false, TARGET_DETECTION_TIMEOUT);
    };
    let Some(end) = m.end_timestamp.as_ref() else {
        return (false, TARGET_DETECTION_TIMEOUT);
    };
    if m.target_state
        .as_ref()
        .is_some_and(|t| t.domain_detected == Some(true) && t.domain_ready_timestamp.is_some())
    {
        return (true, 0);
    }
    let diff = w.now.unix() - end.0.as_second();
    if diff > TARGET_DETECTION_TIMEOUT {
        return (false, 0);
    }
    let left = TARGET_DETECTION_TIMEOUT - diff;
    cx.add_after(left.max(5).unsigned_abs());
    (false, left)
}
