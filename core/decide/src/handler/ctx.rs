//! The plan under construction while one sync runs.

use super::HandlerWorld;
use super::plan::{Decision, HandlerPlan, LauncherCall, NodeStep, QueueOp, status_write};
use crate::api::VirtualMachineInstanceStatus;
use crate::{Action, DecideError, ErrorKind, Event, ObjectRef, Plan, Requeue};

/// Accumulates what the sync does, in order.
#[derive(Debug)]
pub(super) struct Ctx {
    pub decision: Decision,
    pub actions: Vec<Action>,
    pub status: Option<VirtualMachineInstanceStatus>,
    pub events: Vec<Event>,
    pub queue: Vec<QueueOp>,
    /// The IO-error retry state to keep after this sync.
    pub io_error_retry: Option<super::retry::RetryState>,
    object: ObjectRef,
}

/// A sync error: the text KubeVirt would report.
pub(super) type SyncResult = Result<(), String>;

impl Ctx {
    /// An empty plan for a sync of `w.key`; events name the VMI (or, once it is gone, its key).
    pub(crate) fn new(w: &HandlerWorld<'_>) -> Self {
        let (namespace, name) = w.key.split_once('/').unwrap_or(("", w.key));
        Self {
            decision: Decision::None,
            actions: Vec::new(),
            status: None,
            events: Vec::new(),
            queue: Vec::new(),
            io_error_retry: w
                .facts
                .io_error_retry
                .filter(|s| !super::retry::IO_ERROR_RETRY.expired(s, w.now.unix())),
            object: ObjectRef {
                kind: "VirtualMachineInstance".into(),
                namespace: namespace.into(),
                name: name.into(),
                uid: w.vmi.and_then(|v| v.metadata.uid.clone()),
            },
        }
    }

    pub(crate) fn call(&mut self, c: LauncherCall) {
        self.actions.push(Action::Launcher(c));
    }

    pub(crate) fn step(&mut self, s: NodeStep) {
        self.actions.push(Action::Node(s));
    }

    pub(crate) fn event(&mut self, kind: &str, reason: &str, message: impl Into<String>) {
        let object = self.object.clone();
        self.events.push(match kind {
            "Warning" => Event::warning(object, reason, message),
            _ => Event::normal(object, reason, message),
        });
    }

    pub(crate) fn add_after(&mut self, secs: u64) {
        self.queue.push(QueueOp::AddAfter {
            delay_seconds: secs,
        });
    }

    pub(crate) fn add_rate_limited(&mut self) {
        self.queue.push(QueueOp::AddRateLimited);
    }

    /// Closes the plan: the status write goes last (after the launcher answered), a failed sync
    /// is retried with backoff, a good one resets the backoff.
    pub(crate) fn finish(mut self, w: &HandlerWorld<'_>, result: SyncResult) -> HandlerPlan {
        let error = result.err().map(|m| DecideError::new(ErrorKind::Sync, m));
        self.queue.push(if error.is_some() {
            QueueOp::AddRateLimited
        } else {
            QueueOp::Forget
        });
        if let (Some(status), Some(vmi)) = (&self.status, w.vmi) {
            self.actions.push(Action::Write(status_write(vmi, status)));
        }
        HandlerPlan {
            decision: self.decision,
            plan: Plan {
                actions: self.actions,
                events: self.events,
                queue: Requeue(self.queue),
                error,
            },
            status: self.status,
            io_error_retry: self.io_error_retry,
        }
    }
}
