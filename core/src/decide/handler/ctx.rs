//! The plan under construction while one sync runs.

use super::plan::{Decision, HandlerEvent, HandlerPlan, LauncherCall, NodeStep, QueueOp};
use crate::api::VirtualMachineInstanceStatus;

/// Accumulates what the sync does, in order.
#[derive(Debug)]
pub(super) struct Ctx {
    pub decision: Decision,
    pub launcher_calls: Vec<LauncherCall>,
    pub node_steps: Vec<NodeStep>,
    pub status: Option<VirtualMachineInstanceStatus>,
    pub events: Vec<HandlerEvent>,
    pub queue: Vec<QueueOp>,
}

impl Default for Ctx {
    fn default() -> Self {
        Self {
            decision: Decision::None,
            launcher_calls: Vec::new(),
            node_steps: Vec::new(),
            status: None,
            events: Vec::new(),
            queue: Vec::new(),
        }
    }
}

/// A sync error: the text KubeVirt would report.
pub(super) type SyncResult = Result<(), String>;

impl Ctx {
    pub fn call(&mut self, c: LauncherCall) {
        self.launcher_calls.push(c);
    }

    pub fn step(&mut self, s: NodeStep) {
        self.node_steps.push(s);
    }

    pub fn event(&mut self, kind: &str, reason: &str, message: impl Into<String>) {
        self.events.push(HandlerEvent {
            kind: kind.into(),
            reason: reason.into(),
            message: message.into(),
        });
    }

    pub fn add_after(&mut self, secs: u64) {
        self.queue.push(QueueOp::AddAfter {
            delay_seconds: secs,
        });
    }

    pub fn add_rate_limited(&mut self) {
        self.queue.push(QueueOp::AddRateLimited);
    }

    /// Closes the plan: a failed sync is retried with backoff, a good one resets the backoff.
    pub fn finish(mut self, result: SyncResult) -> HandlerPlan {
        let error = result.err();
        self.queue.push(if error.is_some() {
            QueueOp::AddRateLimited
        } else {
            QueueOp::Forget
        });
        HandlerPlan {
            decision: self.decision,
            launcher_calls: self.launcher_calls,
            node_steps: self.node_steps,
            status: self.status,
            events: self.events,
            queue: self.queue,
            error,
        }
    }
}
