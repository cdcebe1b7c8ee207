//! What one handler sync decides: the branch taken, and the shared [`Plan`] — node steps and
//! launcher commands in order, the VMI status write last, events and what to do with the key.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::action::{LauncherCall, NodeStep};
pub use crate::plan::QueueOp;

use crate::api::{VirtualMachineInstance, VirtualMachineInstanceStatus};
use crate::{Action, ApiWrite, PatchType, Plan, WriteOp};

/// The branch of virt-handler's execute/sync taken for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Bring the domain in line with the VMI (first start or refresh).
    #[serde(rename = "update")]
    Update,
    /// Shut the guest down (gracefully while the grace period lasts, then kill).
    #[serde(rename = "shutdown")]
    Shutdown,
    /// Remove the domain and clean up locally.
    #[serde(rename = "delete")]
    Delete,
    /// Kill a domain that cannot recover (paused after a failed post-copy) and fail the VMI.
    #[serde(rename = "destroyIrrecoverable")]
    DestroyIrrecoverable,
    /// Nothing to do to the domain; only the status may change.
    #[serde(rename = "none")]
    None,
    /// The VMI is on another node.
    #[serde(rename = "ignored:notOwnedByNode")]
    NotOwnedByNode,
    /// The VMI is the source of a migration; the migration-source controller owns it.
    #[serde(rename = "ignored:migrationSource")]
    MigrationSource,
    /// A migration is in progress; the migration controllers own it.
    #[serde(rename = "ignored:migrationInProgress")]
    MigrationInProgress,
    /// The domain migrated away: delete it and clean up.
    #[serde(rename = "orphanDelete")]
    OrphanDelete,
    /// A domain of an older VMI with the same name is dead: clean it up, then retry.
    #[serde(rename = "staleDomainCleanup")]
    StaleDomainCleanup,
    /// A domain of an older VMI with the same name is still around: wait for it.
    #[serde(rename = "staleDomainWait")]
    StaleDomainWait,
    /// The domain's state is Unknown (launcher unreachable): do nothing this round.
    #[serde(rename = "skipped:domainUnknown")]
    DomainUnknown,
    /// The handler's own previous write has not come back through the informer yet.
    #[serde(rename = "skipped:expectations")]
    WaitingForExpectations,
    /// Migration controllers: this VMI is not theirs on this node (no migration, another node,
    /// final, a stale domain): nothing to do.
    #[serde(rename = "migration:notInvolved")]
    MigrationNotInvolved,
    /// Source controller: drive the outgoing migration (proxy, migrate, abort, progress).
    #[serde(rename = "migrationSource:sync")]
    MigrationSourceSync,
    /// Source controller: the migration is over; close the source proxy.
    #[serde(rename = "migrationSource:cleanup")]
    MigrationSourceCleanup,
    /// Target controller: prepare the target, publish its address, follow the domain.
    #[serde(rename = "migrationTarget:sync")]
    MigrationTargetSync,
    /// Target controller: the migration is over; finalize or clean up, drop the target label.
    #[serde(rename = "migrationTarget:finalCleanup")]
    MigrationTargetFinalCleanup,
    /// Target controller: the VMI is final or deleted; best-effort local cleanup.
    #[serde(rename = "migrationTarget:terminated")]
    MigrationTargetTerminated,
}

/// The whole outcome of one handler sync.
#[derive(Clone, Debug, PartialEq)]
pub struct HandlerPlan {
    /// Which branch was taken.
    pub decision: Decision,
    /// What to do, in order: node steps and launcher commands as KubeVirt runs them (pod
    /// preparation before `SyncVirtualMachine`), then the VMI status write; events; the queue
    /// operations (the last is `Forget` or `AddRateLimited`); the sync error.
    pub plan: Plan,
    /// The new VMI status when it differs from the stored one (also written by the plan's last
    /// action). KubeVirt writes it with a full update; kvrs patches the status only, conditional
    /// on the resourceVersion it decided from.
    pub status: Option<VirtualMachineInstanceStatus>,
    /// What to remember about this VMI's IO-error retries until the next sync (`None`:
    /// nothing); pass it back in [`super::facts::NodeFacts::io_error_retry`].
    pub io_error_retry: Option<super::retry::RetryState>,
}

impl HandlerPlan {
    /// The launcher commands, in order.
    pub fn launcher_calls(&self) -> Vec<LauncherCall> {
        self.plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Launcher(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    /// The node steps, in order.
    pub fn node_steps(&self) -> Vec<&NodeStep> {
        self.plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Node(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    /// The shortest explicit requeue delay requested, if any.
    pub fn requeue_after(&self) -> Option<u64> {
        self.plan.queue.after_seconds()
    }

    /// Whether the key goes back on the queue (after a delay or with backoff).
    pub fn requeued(&self) -> bool {
        self.plan.queue.requeued()
    }
}

/// The status write of a sync: a JSON patch of `/status`, conditional on the resourceVersion the
/// decision read (a VMI changed meanwhile is decided again instead of overwritten).
pub fn status_write(
    vmi: &VirtualMachineInstance,
    status: &VirtualMachineInstanceStatus,
) -> ApiWrite {
    let ns = vmi.metadata.namespace.as_deref().unwrap_or("default");
    let name = vmi.metadata.name.as_deref().unwrap_or("");
    let mut ops = Vec::new();
    ops.extend(crate::patch::resource_version_test(&vmi.metadata));
    ops.push(json!({"op": "replace", "path": "/status", "value": status}));
    let patch = WriteOp::Patch {
        patch_type: PatchType::Json,
        patch: Value::Array(ops),
    };
    ApiWrite::new("virtualmachineinstances", ns, name, patch)
}
