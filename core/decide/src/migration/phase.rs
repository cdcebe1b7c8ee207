//! The migration phases and their order.

use serde::{Deserialize, Serialize};

/// `status.phase` of a VirtualMachineInstanceMigration (KubeVirt's
/// `VirtualMachineInstanceMigrationPhase`).
///
/// A local migration walks `Unset → Pending → Scheduling → Scheduled → PreparingTarget →
/// TargetReady → Running → Succeeded`, and may end `Failed` from any phase; the decentralized
/// phases `WaitingForSync` and `Synchronizing` come before `Pending`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MigrationPhase {
    /// No phase yet: the controller has not looked at the migration.
    Unset,
    /// Decentralized target waiting for the source's state.
    WaitingForSync,
    /// Decentralized source synchronizing with the target.
    Synchronizing,
    /// Accepted, waiting for capacity and the target pod.
    Pending,
    /// The target pod exists and is being scheduled.
    Scheduling,
    /// The target pod runs; the migration is being handed to virt-handler.
    Scheduled,
    /// The target virt-handler prepares the target.
    PreparingTarget,
    /// The target is ready to receive.
    TargetReady,
    /// The source streams the guest to the target.
    Running,
    /// The guest runs on the target.
    Succeeded,
    /// The migration failed or was cancelled.
    Failed,
}

impl MigrationPhase {
    /// The phase as the API spells it (`""` for [`MigrationPhase::Unset`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unset => "",
            Self::WaitingForSync => "WaitingForSync",
            Self::Synchronizing => "Synchronizing",
            Self::Pending => "Pending",
            Self::Scheduling => "Scheduling",
            Self::Scheduled => "Scheduled",
            Self::PreparingTarget => "PreparingTarget",
            Self::TargetReady => "TargetReady",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    /// The phase of an API string; an unknown string reads as unset, as a Go switch over the
    /// phase constants falls through for it.
    pub fn parse(s: &str) -> Self {
        match s {
            "WaitingForSync" => Self::WaitingForSync,
            "Synchronizing" => Self::Synchronizing,
            "Pending" => Self::Pending,
            "Scheduling" => Self::Scheduling,
            "Scheduled" => Self::Scheduled,
            "PreparingTarget" => Self::PreparingTarget,
            "TargetReady" => Self::TargetReady,
            "Running" => Self::Running,
            "Succeeded" => Self::Succeeded,
            "Failed" => Self::Failed,
            _ => Self::Unset,
        }
    }

    /// Succeeded or Failed: nothing moves a migration out of these.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    /// Whether moving from `self` to `next` goes forward: phases only advance, and a final
    /// phase is never left (the property the tests check every decision against).
    pub fn may_become(self, next: Self) -> bool {
        self == next || (!self.is_final() && next > self)
    }
}
