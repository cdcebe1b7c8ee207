//! Whether a migration may go ahead: KubeVirt v1.9.0's `canMigrateVMI` (one migration owns a
//! VMI's migration state at a time) and the capacity checks of `handleTargetPodCreation`
//! (pending pod creations, the VMI's active pods, the cluster and per-node parallel limits).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::MigrationWorld;
use super::view::{Vmim, migration_state, target_pods, vmi_node};
use crate::api::VirtualMachineInstance;
use crate::meta;

/// KubeVirt's `canMigrateVMI`: the VMI's migration state is free, ours, or owned by a
/// migration that is gone or final.
pub(super) fn can_migrate(
    migration: Vmim<'_>,
    vmi: &VirtualMachineInstance,
    migrations: &[Value],
) -> bool {
    let owner = migration_state(vmi)
        .and_then(|s| s.migration_uid.as_deref())
        .unwrap_or_default();
    if owner.is_empty() || owner == migration.uid() {
        return true;
    }
    !migrations
        .iter()
        .map(Vmim)
        .filter(|m| m.namespace() == migration.namespace())
        .any(|m| m.uid() == owner && !m.is_final())
}

/// Why a migration waits instead of creating its target pod now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    /// Target pod creations of this controller are not yet in the cache.
    PendingCreations,
    /// The VMI already has more than one active pod (another target is up).
    VmiHasTargetPod,
    /// `parallelMigrationsPerCluster` migrations are running.
    ClusterLimit,
    /// `parallelOutboundMigrationsPerNode` migrations leave the VMI's node.
    NodeLimit,
}

impl Wait {
    /// How long KubeVirt waits before it looks again: a second for the cache, otherwise by the
    /// migration's priority (`getRequeueDelayForPriority`).
    pub(super) fn delay(self, priority: i32) -> Duration {
        let secs = match self {
            Wait::PendingCreations | Wait::VmiHasTargetPod => 1,
            Wait::ClusterLimit | Wait::NodeLimit => match priority {
                p if p >= 100 => 1,
                p if p >= 50 => 3,
                _ => 5,
            },
        };
        Duration::from_secs(secs)
    }
}

/// The capacity checks of `handleTargetPodCreation`, in KubeVirt's order.
pub(super) fn capacity(w: &MigrationWorld<'_>, vmi: &VirtualMachineInstance) -> Result<(), Wait> {
    if w.pending_creations_anywhere > 0 {
        return Err(Wait::PendingCreations);
    }
    let pods_of_ns: Vec<&Pod> = w
        .pods
        .iter()
        .copied()
        .filter(|p| meta::namespace(&p.metadata) == meta::namespace(&vmi.metadata))
        .collect();
    if super::view::active_pods(vmi, &pods_of_ns) > 1 {
        return Err(Wait::VmiHasTargetPod);
    }
    let running = running_migrations(w);
    if running.len() >= w.migration_config.parallel_per_cluster() {
        return Err(Wait::ClusterLimit);
    }
    let node = vmi_node(vmi);
    let outbound = running
        .iter()
        .filter_map(|m| find_vmi(w, *m))
        .filter(|v| {
            vmi_node(v) == node
                || migration_state(v).is_some_and(|s| s.source_node.as_deref() == Some(node))
        })
        .count();
    if outbound >= w.migration_config.parallel_outbound_per_node() {
        return Err(Wait::NodeLimit);
    }
    Ok(())
}

fn find_vmi<'a>(w: &MigrationWorld<'a>, m: Vmim<'_>) -> Option<&'a VirtualMachineInstance> {
    w.vmis.iter().copied().find(|v| {
        meta::name(&v.metadata) == m.vmi_name() && meta::namespace(&v.metadata) == m.namespace()
    })
}

/// KubeVirt's `findRunningMigrations`: unfinished migrations that run, or that are still
/// Pending but already have a target pod (so a burst of new migrations cannot overshoot the
/// limit while their phases lag behind their pods).
pub(super) fn running_migrations<'a>(w: &MigrationWorld<'a>) -> Vec<Vmim<'a>> {
    w.migrations
        .iter()
        .map(Vmim)
        .filter(|m| !m.is_final())
        .filter(|m| {
            m.is_running()
                || find_vmi(w, *m).is_some_and(|v| !target_pods(*m, v, &w.pods).is_empty())
        })
        .collect()
}
