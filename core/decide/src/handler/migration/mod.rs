//! virt-handler's migration source and target controllers (KubeVirt v1.9.0
//! `migration-source.go` / `migration-target.go`) as pure decisions.
//!
//! KubeVirt runs three controllers per node over the same VMIs: the VM controller
//! ([`super::decide`], which leaves migration sources and in-flight migrations alone), the
//! source controller ([`decide_source`]) and the target controller ([`decide_target`]). The
//! shell calls all three for a key; each returns a [`HandlerPlan`] with its own branch. Keeping
//! them apart (instead of routing inside `decide`) keeps the VM controller's plans for
//! non-migrating VMIs unchanged and mirrors KubeVirt's separate queues.
//!
//! Node-local inputs the migration needs (the target proxy's listening ports, this node's
//! migration address, the cluster migration configuration, proxy start errors) are in
//! [`MigrationFacts`] (`NodeFacts::migration`). Writes are JSON patches of the VMI that `test`
//! the resourceVersion, the migration UID they were decided for and every field they change.
//!
//! Decentralized (cross-cluster) migrations are not handled: a VMI marked as a decentralized
//! source or target is treated as a regular one.

mod options;
mod source;
mod status;
mod target;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::HandlerWorld;
use super::plan::HandlerPlan;
use crate::api::{
    VMIMConfigurationOptions, VirtualMachineInstance, VirtualMachineInstanceMigrationState,
};

pub use options::{
    DEFAULT_BANDWIDTH, DEFAULT_COMPLETION_TIMEOUT_PER_GIB, DEFAULT_MAX_DOWNTIME_MS,
    DEFAULT_PROGRESS_TIMEOUT, MigrationOptions, OptionsError, PARALLEL_MIGRATION_THREADS,
    STALL_DETECTION_GATE, StallDetectorOptions, build as build_options, cluster_defaults,
    parse_factor,
};

/// Label naming the node that runs the VMI.
pub const NODE_NAME_LABEL: &str = "kubevirt.io/nodeName";
/// Label naming the node of the migration target (the target controller's informer filter).
pub const MIGRATION_TARGET_NODE_LABEL: &str = "kubevirt.io/migrationTargetNodeName";
/// Label marking a VMI whose launcher image is outdated (dropped after a migration).
pub const OUTDATED_LAUNCHER_IMAGE_LABEL: &str = "kubevirt.io/outdatedLauncherImage";
/// Annotation naming the node an eviction migrates away from (dropped after a migration).
pub const EVICTION_SOURCE_ANNOTATION: &str = "kubevirt.io/eviction-source";
/// Annotation of a (decentralized) migration target VMI.
pub const CREATE_MIGRATION_TARGET_ANNOTATION: &str = "kubevirt.io/create-migration-target";

/// Node-local facts of the migration controllers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MigrationFacts {
    /// The target proxy's ports for this VMI (`ProxyManager::target_listener_ports`): TCP port
    /// as text -> libvirt port it stands for. Empty while no target proxy listens.
    pub target_listener_ports: BTreeMap<String, u16>,
    /// This node's migration address (what the target publishes as `targetNodeAddress`).
    pub migration_ip_address: String,
    /// The cluster's migration configuration (KubeVirt CR), for VMIs whose migration state
    /// carries none; KubeVirt's defaults fill whatever is unset.
    pub cluster_configuration: Option<VMIMConfigurationOptions>,
    /// Error of the last attempt to start the source proxy.
    pub source_proxy_error: Option<String>,
    /// Error of the last attempt to start the target proxy.
    pub target_proxy_error: Option<String>,
    /// The target pod's CPU set, for dedicated-CPU VMIs (published as `targetCPUSet`).
    #[serde(rename = "targetCPUSet")]
    pub target_cpu_set: Option<Vec<i32>>,
    /// The target node's NUMA topology as JSON (published as `targetNodeTopology`).
    pub target_node_topology: Option<String>,
}

impl MigrationFacts {
    /// Nothing known (the default): not written into scenario files.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Decides one sync of the migration source controller for `world.key`.
pub fn decide_source(world: &HandlerWorld<'_>) -> HandlerPlan {
    let mut cx = super::ctx::Ctx::new(world);
    let (result, updated) = source::execute(world, &mut cx);
    status::finish(world, cx, updated.as_ref(), result)
}

/// Decides one sync of the migration target controller for `world.key`.
pub fn decide_target(world: &HandlerWorld<'_>) -> HandlerPlan {
    let mut cx = super::ctx::Ctx::new(world);
    let (result, updated) = target::execute(world, &mut cx);
    status::finish(world, cx, updated.as_ref(), result)
}

fn state(vmi: &VirtualMachineInstance) -> Option<&VirtualMachineInstanceMigrationState> {
    vmi.status.as_ref()?.migration_state.as_deref()
}

fn state_mut(
    vmi: &mut VirtualMachineInstance,
) -> Option<&mut VirtualMachineInstanceMigrationState> {
    vmi.status.as_mut()?.migration_state.as_deref_mut()
}

/// `isMigrationDone`: no migration, or it ended (completed or failed).
fn is_done(m: Option<&VirtualMachineInstanceMigrationState>) -> bool {
    m.is_none_or(|m| {
        m.end_timestamp.is_some() && (m.completed == Some(true) || m.failed == Some(true))
    })
}

/// `abortInProgress`: an abort was requested and the migration has not ended.
fn abort_in_progress(vmi: &VirtualMachineInstance) -> bool {
    let m = state(vmi);
    m.is_some_and(|m| m.abort_requested == Some(true)) && !is_done(m)
}

fn label<'a>(vmi: &'a VirtualMachineInstance, key: &str) -> Option<&'a str> {
    vmi.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// `checkLauncherClient`: `Some` ends the step (an error, or a requeue while the socket is not
/// there yet); `None` lets it go on.
fn check_launcher(
    w: &HandlerWorld<'_>,
    cx: &mut super::ctx::Ctx,
) -> Option<super::ctx::SyncResult> {
    let l = &w.facts.launcher;
    if let Some(e) = &l.unresponsive_error {
        return Some(Err(e.clone()));
    }
    if l.not_initialized {
        cx.add_after(1);
        return Some(Ok(()));
    }
    if l.unresponsive {
        return Some(Err(super::flows::UNRESPONSIVE.to_string()));
    }
    None
}

/// `GetLauncherClient`: fails only when the launcher's socket is gone.
fn launcher_client(w: &HandlerWorld<'_>, vmi: &VirtualMachineInstance) -> super::ctx::SyncResult {
    if w.facts.launcher.gone {
        return Err(format!(
            "unable to create virt-launcher client connection: virt-launcher socket for vmi {} not found",
            super::view::uid(vmi)
        ));
    }
    Ok(())
}
