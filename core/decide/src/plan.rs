//! The one plan shape every kvrs decision returns: ordered actions, events, what to do with the
//! queue key, and the reconcile's error.
//!
//! The VM controller, the VMI controller and virt-handler all end a reconcile the same way in
//! KubeVirt: a sequence of side effects, then `Forget`, `AddAfter` or `AddRateLimited` on the key
//! and maybe an error. Giving them one shape is what lets one executor (`kvrs-executor`) run all
//! three in the cluster binaries, in `kvrs run` and in the simulator.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::{Action, ApiWrite, Event, WriteOp};

/// What one reconcile of one key decided.
///
/// The shell runs `actions` in order and stops at the first failing API write (the later actions
/// were computed under the assumption that the earlier ones succeed); a failed write turns the
/// queue outcome into a rate-limited retry with the API error as `error`, as KubeVirt's
/// controllers return the error from their sync and let the queue retry with backoff. A failing
/// launcher call or node step is a fact the handler's decision reads: the shell records it and
/// decides again (see `kvrs-executor`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// Kubernetes events to record, in order.
    pub events: Vec<Event>,
    /// What to do with the queue key afterwards.
    pub queue: Requeue,
    /// The error the reconcile reports (the key is then retried with backoff), if any.
    pub error: Option<DecideError>,
}

impl Plan {
    /// A plan that does nothing and forgets the key.
    pub fn idle() -> Self {
        Self::default()
    }

    /// Appends an API write.
    pub fn push_write(&mut self, write: ApiWrite) {
        self.actions.push(Action::Write(write));
    }

    /// The API writes, in order.
    pub fn writes(&self) -> impl Iterator<Item = &ApiWrite> {
        self.actions.iter().filter_map(Action::as_write)
    }

    /// The object of the plan's first create of `resource` (e.g. `virtualmachineinstances`).
    pub fn created(&self, resource: &str) -> Option<&Value> {
        self.writes().find_map(|w| match &w.op {
            WriteOp::Create { object } if w.resource == resource => Some(object),
            _ => None,
        })
    }

    /// The API writes, in order, collected (for tests and oracle comparisons that index them).
    pub fn write_list(&self) -> Vec<&ApiWrite> {
        self.writes().collect()
    }

    /// The last API write, if any.
    pub fn last_write_mut(&mut self) -> Option<&mut ApiWrite> {
        self.actions.iter_mut().rev().find_map(|a| match a {
            Action::Write(w) => Some(w),
            _ => None,
        })
    }

    /// The error's message, if the reconcile failed.
    pub fn error_message(&self) -> Option<&str> {
        self.error.as_ref().map(|e| e.message.as_str())
    }

    /// Records `err` as the reconcile's error and asks for a rate-limited retry, as a sync that
    /// returns an error does.
    pub fn fail(&mut self, kind: ErrorKind, message: impl Into<String>) {
        self.error = Some(DecideError::new(kind, message));
        self.queue = Requeue::rate_limited();
    }

    /// The plan in the JSON shape of the oracle outputs (`actions`, `events`, `queue`, `error`),
    /// reads, launcher calls and node steps left out. `key` is the queue key.
    pub fn to_json(&self, key: &str) -> Value {
        let mut out = Map::new();
        out.insert(
            "actions".into(),
            Value::Array(self.writes().map(ApiWrite::to_json).collect()),
        );
        out.insert(
            "events".into(),
            Value::Array(self.events.iter().map(Event::to_json).collect()),
        );
        out.insert("queue".into(), self.queue.to_json(key));
        out.insert("requeued".into(), Value::Bool(self.queue.requeued()));
        if let Some(d) = self.queue.delay() {
            out.insert("requeueAfterSeconds".into(), json!(d.as_secs()));
        }
        if let Some(e) = &self.error {
            out.insert("error".into(), Value::String(e.message.clone()));
        }
        Value::Object(out)
    }
}

/// An operation on the work queue for the reconciled key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op")]
pub enum QueueOp {
    /// Enqueue the key again after this many seconds.
    AddAfter {
        /// Delay in whole seconds.
        #[serde(rename = "delaySeconds")]
        delay_seconds: u64,
    },
    /// Enqueue again with the per-key exponential backoff (the sync failed).
    AddRateLimited,
    /// Reset the key's backoff (the sync succeeded).
    Forget,
}

/// What happens to the queue key after the reconcile: the queue operations, in the order
/// KubeVirt's controllers make them.
///
/// Usually one of three shapes — [`Requeue::forget`], [`Requeue::after`] (a timer, not an error:
/// the backoff is reset too) or [`Requeue::rate_limited`] — but virt-handler sometimes makes two
/// (`AddAfter` then `AddRateLimited` when a sync fails after asking for a timer), so the
/// operations are kept as a list and a shell replays them in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Requeue(pub Vec<QueueOp>);

impl Default for Requeue {
    fn default() -> Self {
        Self::forget()
    }
}

impl Requeue {
    /// Done: reset the key's retry backoff.
    pub fn forget() -> Self {
        Self(vec![QueueOp::Forget])
    }

    /// Look again after `delay`, and reset the retry backoff.
    pub fn after(delay: Duration) -> Self {
        Self(vec![
            QueueOp::AddAfter {
                delay_seconds: delay.as_secs(),
            },
            QueueOp::Forget,
        ])
    }

    /// The reconcile failed: retry with the per-key exponential backoff.
    pub fn rate_limited() -> Self {
        Self(vec![QueueOp::AddRateLimited])
    }

    /// The operations in order.
    pub fn ops(&self) -> &[QueueOp] {
        &self.0
    }

    /// Whether the key goes back on the queue (after a delay or with backoff).
    pub fn requeued(&self) -> bool {
        self.0.iter().any(|op| !matches!(op, QueueOp::Forget))
    }

    /// Whether the key is retried with backoff.
    pub fn is_rate_limited(&self) -> bool {
        self.0.contains(&QueueOp::AddRateLimited)
    }

    /// The shortest explicit delay asked for, if any.
    pub fn after_seconds(&self) -> Option<u64> {
        self.0
            .iter()
            .filter_map(|op| match op {
                QueueOp::AddAfter { delay_seconds } => Some(*delay_seconds),
                _ => None,
            })
            .min()
    }

    /// [`Requeue::after_seconds`] as a duration.
    pub fn delay(&self) -> Option<Duration> {
        self.after_seconds().map(Duration::from_secs)
    }

    /// The operations as the oracles record them, each with the key.
    pub fn to_json(&self, key: &str) -> Value {
        Value::Array(
            self.0
                .iter()
                .map(|op| match op {
                    QueueOp::AddAfter { delay_seconds } => {
                        json!({ "op": "AddAfter", "key": key, "delaySeconds": delay_seconds })
                    }
                    QueueOp::AddRateLimited => json!({ "op": "AddRateLimited", "key": key }),
                    QueueOp::Forget => json!({ "op": "Forget", "key": key }),
                })
                .collect(),
        )
    }
}

/// What kind of failure ended a reconcile: a stable, low-cardinality label for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The reconcile's sync step failed (KubeVirt's `syncError`, e.g. a failed VMI create).
    Sync,
    /// The object is not something the controller can act on (an unknown run strategy or phase).
    InvalidObject,
    /// The launcher pod could not be rendered from the VMI.
    LauncherRender,
    /// An API write failed (set by the shell that sent it).
    ApiWrite,
    /// A virt-launcher command failed.
    LauncherCall,
    /// A node-local step (container disks, network, devices) failed.
    NodeStep,
}

impl ErrorKind {
    /// The label, e.g. `api_write`.
    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::Sync => "sync",
            ErrorKind::InvalidObject => "invalid_object",
            ErrorKind::LauncherRender => "launcher_render",
            ErrorKind::ApiWrite => "api_write",
            ErrorKind::LauncherCall => "launcher_call",
            ErrorKind::NodeStep => "node_step",
        }
    }
}

/// A reconcile's error: its kind (for metrics) and KubeVirt's message (for people, and for the
/// oracle comparisons, which check the text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecideError {
    /// What failed.
    pub kind: ErrorKind,
    /// The message as KubeVirt words it.
    pub message: String,
}

impl DecideError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// [`ErrorKind::label`].
    pub fn label(&self) -> &'static str {
        self.kind.label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PatchType, WriteOp};

    #[test]
    fn plan_json_has_oracle_field_names() {
        let mut plan = Plan::idle();
        plan.push_write(
            ApiWrite::new(
                "virtualmachines",
                "default",
                "vm1",
                WriteOp::Patch {
                    patch_type: PatchType::Merge,
                    patch: json!({"status": {"ready": true}}),
                },
            )
            .on_subresource("status"),
        );
        let j = plan.to_json("default/vm1");
        assert_eq!(j["actions"][0]["patchType"], "application/merge-patch+json");
        assert_eq!(j["actions"][0]["client"], "kubevirt");
        assert_eq!(j["queue"][0]["op"], "Forget");
        assert_eq!(j["requeued"], false);
    }

    #[test]
    fn requeue_shapes() {
        assert!(!Requeue::forget().requeued());
        let after = Requeue::after(Duration::from_secs(90));
        assert!(after.requeued() && !after.is_rate_limited());
        assert_eq!(after.after_seconds(), Some(90));
        assert_eq!(after.to_json("ns/a")[1]["op"], "Forget");
        assert!(Requeue::rate_limited().is_rate_limited());
    }

    #[test]
    fn failing_sets_error_and_backoff() {
        let mut plan = Plan::idle();
        plan.fail(ErrorKind::Sync, "boom");
        assert_eq!(plan.error.as_ref().map(DecideError::label), Some("sync"));
        assert_eq!(plan.queue, Requeue::rate_limited());
    }
}
