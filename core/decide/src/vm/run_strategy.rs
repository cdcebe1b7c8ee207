//! Run strategies and what each demands of the VMI (KubeVirt's `syncRunStrategy`).

use std::time::Duration;

use super::{CREATE_MIGRATION_TARGET_ANNOTATION, Reconcile, SyncError, start};
use crate::api::VirtualMachine;
use crate::patch::op;
use crate::vmi_state::{self as state, phase};
use crate::{Requeue, meta};

/// Reason of the `Failure` condition when starting failed.
pub(crate) const FAILED_CREATE: &str = "FailedCreate";

/// When a VM's VMI should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStrategy {
    /// Always keep a VMI running; restart it whenever it ends.
    Always,
    /// Restart only VMIs that failed; a guest shutdown stays down.
    RerunOnFailure,
    /// Start and stop only on request (`virtctl start/stop`).
    Manual,
    /// Never run a VMI.
    Halted,
    /// Run one VMI once and never restart it.
    Once,
    /// Create a migration-receiver VMI and wait for an incoming migration.
    WaitAsReceiver,
}

/// The run strategy of a VM cannot be determined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunStrategyError {
    /// Both the legacy `spec.running` and `spec.runStrategy` are set.
    #[error("running and runstrategy are mutually exclusive")]
    BothSet,
    /// `spec.runStrategy` names no known strategy.
    #[error("unknown runstrategy: {0}")]
    Unknown(String),
}

impl RunStrategy {
    /// The strategy from `spec.runStrategy`, or from the legacy `spec.running` (true: Always,
    /// false: Halted); Halted when neither is set.
    pub fn of(vm: &VirtualMachine) -> Result<Self, RunStrategyError> {
        match (vm.spec.running, vm.spec.run_strategy.as_deref()) {
            (Some(_), Some(_)) => Err(RunStrategyError::BothSet),
            (Some(true), None) => Ok(Self::Always),
            (Some(false), None) | (None, None) => Ok(Self::Halted),
            (None, Some(s)) => Self::parse(s),
        }
    }

    /// Parses the API spelling.
    pub fn parse(s: &str) -> Result<Self, RunStrategyError> {
        Ok(match s {
            "Always" => Self::Always,
            "RerunOnFailure" => Self::RerunOnFailure,
            "Manual" => Self::Manual,
            "Halted" => Self::Halted,
            "Once" => Self::Once,
            "WaitAsReceiver" => Self::WaitAsReceiver,
            other => return Err(RunStrategyError::Unknown(other.into())),
        })
    }

    /// The API spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::RerunOnFailure => "RerunOnFailure",
            Self::Manual => "Manual",
            Self::Halted => "Halted",
            Self::Once => "Once",
            Self::WaitAsReceiver => "WaitAsReceiver",
        }
    }

    /// Whether failed starts of this strategy are retried (and so back off).
    pub fn restarts_failed_starts(&self) -> bool {
        matches!(self, Self::Always | Self::RerunOnFailure | Self::Once)
    }
}

/// The first state-change request, if it is a start request.
pub(crate) fn has_start_request(vm: &VirtualMachine) -> bool {
    first_request(vm).is_some_and(|r| r.action == "Start")
}

/// Whether the first state-change request is a stop request for the VMI with `uid`.
pub(crate) fn has_stop_request_for(vm: &VirtualMachine, uid: &str) -> bool {
    first_request(vm).is_some_and(|r| r.action == "Stop" && r.uid.as_deref() == Some(uid))
}

fn first_request(vm: &VirtualMachine) -> Option<&crate::api::VirtualMachineStateChangeRequest> {
    vm.status.as_ref()?.state_change_requests.as_ref()?.first()
}

/// Seconds until the start-failure backoff allows the next start.
fn backoff_left(r: &Reconcile<'_, '_>) -> i64 {
    let retry =
        r.vm.status
            .as_ref()
            .and_then(|s| s.start_failure.as_ref())
            .and_then(|f| f.retry_after_timestamp.as_ref())
            .map(meta::unix_of);
    retry.map_or(0, |t| (t - r.w.now.unix()).max(0))
}

fn start_unless_backing_off(r: &mut Reconcile<'_, '_>) -> Option<SyncError> {
    let left = backoff_left(r);
    if left > 0 {
        r.plan.queue = Requeue::after(Duration::from_secs(left.unsigned_abs()));
        return None;
    }
    start::start_vmi(r)
}

/// Does what the run strategy demands of the VMI, returning the sync error if any.
pub(super) fn sync_run_strategy(
    r: &mut Reconcile<'_, '_>,
    strategy: RunStrategy,
) -> Option<SyncError> {
    let vmi = r.vmi.clone();
    match strategy {
        RunStrategy::Always => match vmi {
            Some(vmi) => {
                let uid = meta::uid(&vmi.metadata).to_string();
                if has_stop_request_for(&r.vm, &uid) || state::is_final(&vmi) {
                    // Restart: stop now, start on the next reconcile once the deletion is seen.
                    return start::stop_vmi(r, Some(&vmi));
                }
                None
            }
            None => start_unless_backing_off(r),
        },
        RunStrategy::RerunOnFailure => match vmi {
            Some(vmi) => {
                let uid = meta::uid(&vmi.metadata).to_string();
                let failed = state::phase_of(&vmi) == phase::FAILED;
                let succeeded = state::phase_of(&vmi) == phase::SUCCEEDED;
                let stop = has_stop_request_for(&r.vm, &uid);
                if !state::is_deleting(&vmi) && (stop || failed || succeeded) {
                    if let Some(e) = start::stop_vmi(r, Some(&vmi)) {
                        return Some(e);
                    }
                    if failed {
                        add_start_request(r);
                    }
                }
                None
            }
            None => {
                let status_strategy = r.vm.status.as_ref().and_then(|s| s.run_strategy.as_deref());
                if !has_start_request(&r.vm) && status_strategy == Some(strategy.as_str()) {
                    return None;
                }
                start_unless_backing_off(r)
            }
        },
        RunStrategy::Manual => match vmi {
            Some(vmi) => {
                if has_stop_request_for(&r.vm, meta::uid(&vmi.metadata)) {
                    return start::stop_vmi(r, Some(&vmi));
                }
                None
            }
            None if has_start_request(&r.vm) => start::start_vmi(r),
            None => None,
        },
        RunStrategy::Halted => match vmi {
            Some(vmi) => start::stop_vmi(r, Some(&vmi)),
            None if has_start_request(&r.vm) => {
                // A start request on a halted VM (start paused) flips it to Always; the start
                // itself happens on the reconcile that sees the new spec. KubeVirt reports this
                // round as a failed start whose cause is empty.
                switch_to_always(r);
                Some(SyncError::new(
                    FAILED_CREATE,
                    "Failure while starting VMI: <nil>",
                ))
            }
            None => None,
        },
        RunStrategy::Once => match vmi {
            None => start::start_vmi(r),
            Some(_) => None,
        },
        RunStrategy::WaitAsReceiver => match vmi {
            Some(vmi) => {
                if meta::annotation(&vmi.metadata, CREATE_MIGRATION_TARGET_ANNOTATION)
                    != Some("true")
                {
                    let completed = vmi
                        .status
                        .as_ref()
                        .and_then(|s| s.migration_state.as_ref())
                        .and_then(|m| m.completed)
                        .unwrap_or(false);
                    if completed {
                        return None;
                    }
                    return Some(SyncError::new(
                        FAILED_CREATE,
                        "Found non receiver VMI while VM is receiver",
                    ));
                }
                None
            }
            None => start::start_vmi(r),
        },
    }
}

/// Appends a start request to the VM status (RerunOnFailure restarts a failed VMI this way, so
/// the next reconcile starts it even though the strategy alone would not).
fn add_start_request(r: &mut Reconcile<'_, '_>) {
    let mut requests =
        r.vm.status
            .as_ref()
            .and_then(|s| s.state_change_requests.clone())
            .unwrap_or_default();
    requests.push(crate::api::VirtualMachineStateChangeRequest {
        action: "Start".into(),
        ..Default::default()
    });
    let value = serde_json::to_value(&requests).unwrap_or_default();
    // A VM that never had a status has no /status to add into.
    let patch = if r.stored_status().is_object() {
        serde_json::Value::Array(vec![op(
            "add",
            "/status/stateChangeRequests",
            Some(value.clone()),
        )])
    } else {
        serde_json::Value::Array(vec![op(
            "add",
            "/status",
            Some(serde_json::json!({"stateChangeRequests": value})),
        )])
    };
    let write = r.vm_patch(patch).on_subresource("status");
    r.plan.push_write(write);
    let stored = r.stored_status();
    if !stored.is_object() {
        *stored = serde_json::json!({});
    }
    stored["stateChangeRequests"] = value;
    r.vm.status
        .get_or_insert_with(Default::default)
        .state_change_requests = Some(requests);
}

fn switch_to_always(r: &mut Reconcile<'_, '_>) {
    let patch = if let Some(old) = r.vm.spec.run_strategy.clone() {
        vec![
            op("test", "/spec/runStrategy", Some(serde_json::json!(old))),
            op(
                "replace",
                "/spec/runStrategy",
                Some(serde_json::json!("Always")),
            ),
        ]
    } else {
        let old =
            r.vm.spec
                .running
                .map_or(serde_json::Value::Null, serde_json::Value::Bool);
        vec![
            op("test", "/spec/running", Some(old)),
            op("add", "/spec/running", Some(serde_json::json!(true))),
        ]
    };
    r.push_vm_patch(serde_json::Value::Array(patch));
}

/// Whether the VM is meant to be running (used by the printable status).
pub(crate) fn is_set_to_start(
    vm: &VirtualMachine,
    vmi: Option<&crate::api::VirtualMachineInstance>,
) -> bool {
    let Ok(s) = RunStrategy::of(vm) else {
        return false;
    };
    match s {
        RunStrategy::Always => true,
        RunStrategy::Halted => false,
        RunStrategy::Manual => match vmi {
            Some(v) => !has_stop_request_for(vm, meta::uid(&v.metadata)),
            None => has_start_request(vm),
        },
        RunStrategy::RerunOnFailure => vmi.is_none_or(|v| state::phase_of(v) != phase::SUCCEEDED),
        RunStrategy::Once => vmi.is_none(),
        RunStrategy::WaitAsReceiver => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(running: Option<bool>, rs: Option<&str>) -> VirtualMachine {
        let mut vm = VirtualMachine::default();
        vm.spec.running = running;
        vm.spec.run_strategy = rs.map(String::from);
        vm
    }

    #[test]
    fn strategy_from_spec() {
        assert_eq!(RunStrategy::of(&vm(None, None)), Ok(RunStrategy::Halted));
        assert_eq!(
            RunStrategy::of(&vm(Some(true), None)),
            Ok(RunStrategy::Always)
        );
        assert_eq!(
            RunStrategy::of(&vm(Some(false), None)),
            Ok(RunStrategy::Halted)
        );
        assert_eq!(
            RunStrategy::of(&vm(None, Some("Once"))),
            Ok(RunStrategy::Once)
        );
        assert_eq!(
            RunStrategy::of(&vm(Some(true), Some("Always"))),
            Err(RunStrategyError::BothSet)
        );
        assert!(matches!(
            RunStrategy::of(&vm(None, Some("Sometimes"))),
            Err(RunStrategyError::Unknown(_))
        ));
    }
}
