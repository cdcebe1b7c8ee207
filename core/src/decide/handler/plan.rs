//! What one handler sync decides: the branch taken, launcher commands in order, node-local steps,
//! the VMI status to write, events and what to do with the queue key.

use serde::{Deserialize, Serialize};

use crate::api::VirtualMachineInstanceStatus;

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
}

/// A command sent to virt-launcher over its command socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LauncherCall {
    /// Define/start/update the domain from the VMI.
    SyncVirtualMachine,
    /// ACPI shutdown.
    ShutdownVirtualMachine,
    /// Destroy the domain now.
    KillVirtualMachine,
    /// Undefine the domain.
    DeleteDomain,
    /// Ask the guest agent about itself.
    GetGuestInfo,
}

impl LauncherCall {
    /// The command name as KubeVirt's command client spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::SyncVirtualMachine => "SyncVirtualMachine",
            Self::ShutdownVirtualMachine => "ShutdownVirtualMachine",
            Self::KillVirtualMachine => "KillVirtualMachine",
            Self::DeleteDomain => "DeleteDomain",
            Self::GetGuestInfo => "GetGuestInfo",
        }
    }
}

/// Node-local work the handler does around the launcher commands, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum NodeStep {
    /// Mount the container disks into the launcher pod and verify them.
    MountContainerDisks,
    /// Mount hotplugged volumes.
    MountHotplugVolumes,
    /// Unmount hotplugged volumes that left the spec.
    UnmountHotplugVolumes,
    /// Plug these networks into the pod (bridge, tap, masquerade rules, ...).
    SetupNetworks {
        /// Network names from `spec.networks`.
        networks: Vec<String>,
    },
    /// Give the launcher's user (qemu, 107) these device nodes inside the pod.
    ClaimDevices {
        /// Paths relative to the launcher's root.
        paths: Vec<String>,
    },
    /// Final local cleanup of a VMI with this UID: unmount container disks and hotplug volumes,
    /// tear the network cache down, close the launcher client, drop the domain from the cache.
    Cleanup {
        /// VMI UID (may be a stale one).
        uid: String,
    },
    /// Close the cached launcher client.
    CloseLauncherClient,
}

/// An event recorded on the VMI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlerEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short reason, e.g. `ShuttingDown`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// An operation on the work queue for this key, in the order the controller makes them.
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

/// The whole outcome of one handler sync.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandlerPlan {
    /// Which branch was taken.
    pub decision: Decision,
    /// Launcher commands, in order.
    pub launcher_calls: Vec<LauncherCall>,
    /// Node-local steps, in order (launcher commands happen between them as listed in `launcher_calls`).
    pub node_steps: Vec<NodeStep>,
    /// The new VMI status when it differs from the stored one. KubeVirt writes it with a full update;
    /// kvrs writes the status only. After writing, the caller expects to see its own write in the
    /// informer before syncing the key again.
    pub status: Option<VirtualMachineInstanceStatus>,
    /// Events on the VMI, in order.
    pub events: Vec<HandlerEvent>,
    /// Queue operations, in order; the last is `Forget` or `AddRateLimited`.
    pub queue: Vec<QueueOp>,
    /// The sync error, when the sync failed (the key is then retried with backoff).
    pub error: Option<String>,
}

impl HandlerPlan {
    /// The shortest explicit requeue delay requested, if any.
    pub fn requeue_after(&self) -> Option<u64> {
        self.queue
            .iter()
            .filter_map(|op| match op {
                QueueOp::AddAfter { delay_seconds } => Some(*delay_seconds),
                _ => None,
            })
            .min()
    }

    /// Whether the key goes back on the queue (after a delay or with backoff).
    pub fn requeued(&self) -> bool {
        self.queue.iter().any(|op| !matches!(op, QueueOp::Forget))
    }
}
