//! Evacuation: KubeVirt v1.9.0's answer to a node drain, as pure functions.
//!
//! Two halves, as in KubeVirt:
//! - [`admit_eviction`] is virt-api's `pods/eviction` webhook (`pod-eviction-admitter.go`): an
//!   eviction of a launcher pod whose VMI should move (`evictionStrategy` `LiveMigrate`,
//!   `LiveMigrateIfPossible` on a migratable VMI, or `External`) is refused with 429, and the VMI
//!   is marked for evacuation by writing the pod's node into `status.evacuationNodeName`. The
//!   refusal is what makes `kubectl drain` retry until the pod is gone — which happens once the
//!   guest has migrated away and the source pod completed.
//! - [`decide_evacuation`] is the evacuation controller (`watch/drain/evacuation`), keyed by
//!   node: on a node carrying the drain taint (`kubevirt.io/drain:NoSchedule` or the CR's
//!   `migrations.nodeDrainTaintKey`) every VMI that wants to migrate gets a migration; on any
//!   other node only the VMIs marked for evacuation there do.
//!
//! The parallel limits (`parallelMigrationsPerCluster`, `parallelOutboundMigrationsPerNode`) are
//! not applied here: v1.9.0's evacuation controller creates one migration per candidate and the
//! migration controller holds the surplus in Pending until a slot frees (`crate::migration`'s
//! capacity check). The [`proptests`] check both halves together.

mod eviction;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::api::VirtualMachineInstance;
use crate::migration::Vmim;
use crate::{
    ApiWrite, Event, Expectation, Now, ObjectRef, PendingExpectations, Plan, WriteOp, meta,
    vmi_state,
};

pub use eviction::{
    DOMAIN_ANNOTATION, EvictionError, EvictionRequest, EvictionVerdict, REFUSAL_CODE,
    admit_eviction, vmi_to_read,
};

/// KubeVirt's names the evacuation reads and writes.
pub mod names {
    /// Annotation of a migration the evacuation controller created: the node it evacuates.
    pub const EVACUATION_MIGRATION: &str = "kubevirt.io/evacuationMigration";
    /// Annotation of a VMI evicted by the descheduler (its migrations get a lower priority).
    pub const EVICTION_SOURCE: &str = "kubevirt.io/eviction-source";
    /// The prefix of the names of the migrations the evacuation controller creates.
    pub const MIGRATION_NAME_PREFIX: &str = "kubevirt-evacuation-";
    /// The default drain taint key.
    pub const DEFAULT_DRAIN_TAINT_KEY: &str = "kubevirt.io/drain";
    /// The VMI condition virt-handler sets when the VMI can be live-migrated.
    pub const LIVE_MIGRATABLE: &str = "LiveMigratable";
    /// Migration priority of an evacuation.
    pub const PRIORITY_SYSTEM_CRITICAL: &str = "system-critical";
    /// Migration priority of an evacuation the descheduler asked for.
    pub const PRIORITY_SYSTEM_MAINTENANCE: &str = "system-maintenance";
    /// Event reason of a migration created for an evacuation.
    pub const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
}

/// A VMI's `evictionStrategy` (its own, else the cluster's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionStrategy {
    /// `None`: the eviction goes through, the guest stops.
    None,
    /// `LiveMigrate`: the VMI must migrate; a non-migratable one blocks the eviction.
    LiveMigrate,
    /// `LiveMigrateIfPossible`: migrate when migratable, else let the eviction through.
    LiveMigrateIfPossible,
    /// `External`: block the eviction and mark the VMI; someone else (cluster-api's KubeVirt
    /// provider) tears it down.
    External,
}

impl EvictionStrategy {
    /// The strategy a string names; unknown strings are `None` (KubeVirt's switch has no
    /// branch for them, and its VMI webhook refuses them at creation).
    pub fn parse(s: &str) -> Self {
        match s {
            "LiveMigrate" => Self::LiveMigrate,
            "LiveMigrateIfPossible" => Self::LiveMigrateIfPossible,
            "External" => Self::External,
            _ => Self::None,
        }
    }
}

/// KubeVirt's `VMIEvictionStrategy`: the VMI's `spec.evictionStrategy`, else the cluster's
/// (`cluster`: the KubeVirt CR's `spec.configuration.evictionStrategy`). `None` (no strategy at
/// all) is distinct from the `None` strategy only in name; both leave the VMI alone.
pub fn strategy_of(
    vmi: &VirtualMachineInstance,
    cluster: Option<&str>,
) -> Option<EvictionStrategy> {
    vmi.spec
        .eviction_strategy
        .as_deref()
        .or(cluster)
        .map(EvictionStrategy::parse)
}

/// KubeVirt's `IsMigratable`: virt-handler reported the `LiveMigratable` condition True.
pub fn is_migratable(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.r#type == names::LIVE_MIGRATABLE && c.status == "True")
        })
}

/// KubeVirt's `VMIMigratableOnEviction`: the VMI wants to migrate when its node is drained.
pub fn migratable_on_eviction(vmi: &VirtualMachineInstance, cluster: Option<&str>) -> bool {
    match strategy_of(vmi, cluster) {
        Some(EvictionStrategy::LiveMigrate) => true,
        Some(EvictionStrategy::LiveMigrateIfPossible) => is_migratable(vmi),
        _ => false,
    }
}

/// The VMI's `status.evacuationNodeName`, empty when unmarked.
pub fn evacuation_node(vmi: &VirtualMachineInstance) -> &str {
    vmi.status
        .as_ref()
        .and_then(|s| s.evacuation_node_name.as_deref())
        .unwrap_or_default()
}

fn node_of(vmi: &VirtualMachineInstance) -> &str {
    vmi.status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// KubeVirt's `IsMigrating`: the VMI's migration state has started (at or before `now`) and
/// not ended (at or before `now`).
pub fn is_migrating(vmi: &VirtualMachineInstance, now: Now) -> bool {
    let Some(state) = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_deref())
    else {
        return false;
    };
    let reached = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.is_some_and(|t| meta::unix_of(t) <= now.unix())
    };
    reached(state.start_timestamp.as_ref()) && !reached(state.end_timestamp.as_ref())
}

/// Everything the evacuation decision of one node reads.
#[derive(Clone, Debug)]
pub struct EvacuationWorld<'a> {
    /// The node (the controller's key). A node the cache no longer has needs no decision: the
    /// shell forgets its expectations.
    pub node: &'a Node,
    /// The VMIs whose `status.nodeName` is this node.
    pub vmis: Vec<&'a VirtualMachineInstance>,
    /// Every migration of every namespace; the unfinished ones are the VMIs' migrations in
    /// flight.
    pub migrations: &'a [Value],
    /// Launcher pods (labelled `kubevirt.io`) of every namespace: a VMI with two active pods is
    /// still leaving (or coming back from) a previous migration.
    pub pods: Vec<&'a Pod>,
    /// Migrations created for this node that the cache has not shown yet: while any are
    /// outstanding the decision does nothing (it would create a second one per VMI).
    pub expectations: PendingExpectations,
    /// The drain taint key (`migrations.nodeDrainTaintKey`, KubeVirt's default
    /// [`names::DEFAULT_DRAIN_TAINT_KEY`]).
    pub drain_taint_key: &'a str,
    /// The cluster's `evictionStrategy` (the KubeVirt CR's), for VMIs that set none.
    pub cluster_strategy: Option<&'a str>,
    /// The clock (`IsMigrating` compares the migration state's timestamps with it).
    pub now: Now,
}

/// Decides one sync of a node (KubeVirt's `execute` + `sync`): the migrations to create, each
/// with its expectation under the node's name and its event. `name_suffix(i)` gives the random
/// suffix of the `i`th migration's name (KubeVirt asks the API server for one with
/// `generateName`; kvrs draws it so the event can name the migration, as KubeVirt's names the
/// one the server returned).
pub fn decide_evacuation(w: &EvacuationWorld<'_>, name_suffix: &dyn Fn(usize) -> String) -> Plan {
    let mut plan = Plan::idle();
    if !w.expectations.satisfied() {
        return plan;
    }
    let node = meta::name(&w.node.metadata);
    let to_migrate = vmis_to_migrate(w);
    for (i, vmi) in candidates(w, &to_migrate).into_iter().enumerate() {
        let name = format!("{}{}", names::MIGRATION_NAME_PREFIX, name_suffix(i));
        let ns = meta::namespace(&vmi.metadata);
        plan.push_write(
            ApiWrite::new(
                "virtualmachineinstancemigrations",
                ns,
                &name,
                WriteOp::Create {
                    object: new_migration(vmi, node, &name),
                },
            )
            .expecting(Expectation::Creations {
                key: node.to_string(),
                count: 1,
            }),
        );
        plan.events.push(Event::normal(
            ObjectRef {
                kind: "VirtualMachineInstance".into(),
                namespace: ns.into(),
                name: meta::name(&vmi.metadata).into(),
                uid: vmi.metadata.uid.clone(),
            },
            names::SUCCESSFUL_CREATE,
            format!("Created Migration {name}"),
        ));
    }
    plan
}

/// KubeVirt's `GenerateNewMigration`: the migration of an evacuation, annotated with the node
/// it evacuates and at the priority of a system-critical move (a maintenance one when the
/// descheduler asked for it).
pub fn new_migration(vmi: &VirtualMachineInstance, node: &str, name: &str) -> Value {
    let descheduler =
        meta::annotation(&vmi.metadata, names::EVICTION_SOURCE) == Some("descheduler");
    let priority = if descheduler {
        names::PRIORITY_SYSTEM_MAINTENANCE
    } else {
        names::PRIORITY_SYSTEM_CRITICAL
    };
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": name,
            "namespace": meta::namespace(&vmi.metadata),
            "annotations": {names::EVACUATION_MIGRATION: node},
        },
        "spec": {"vmiName": meta::name(&vmi.metadata), "priority": priority},
    })
}

fn node_has_drain_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == "NoSchedule"))
}

/// KubeVirt's `vmisToMigrate`: every VMI of a tainted node; otherwise those marked for
/// evacuation that are still on the node they were marked on and not migrating yet.
fn vmis_to_migrate<'a>(w: &EvacuationWorld<'a>) -> Vec<&'a VirtualMachineInstance> {
    if node_has_drain_taint(w.node, w.drain_taint_key) {
        return w.vmis.clone();
    }
    w.vmis
        .iter()
        .copied()
        .filter(|v| {
            let marked = evacuation_node(v);
            !marked.is_empty() && marked == node_of(v) && !is_migrating(v, w.now)
        })
        .collect()
}

/// KubeVirt's `filterRunningNonMigratingVMIs`, the migratable half: VMIs that are not stopping,
/// want to migrate, can, have no unfinished migration and only one active pod.
fn candidates<'a>(
    w: &EvacuationWorld<'a>,
    vmis: &[&'a VirtualMachineInstance],
) -> Vec<&'a VirtualMachineInstance> {
    let in_flight: std::collections::BTreeSet<(&str, &str)> = w
        .migrations
        .iter()
        .map(Vmim)
        .filter(|m| !m.is_final())
        .map(|m| (m.namespace(), m.vmi_name()))
        .collect();
    vmis.iter()
        .copied()
        .filter(|v| !vmi_state::is_final(v) && v.metadata.deletion_timestamp.is_none())
        .filter(|v| migratable_on_eviction(v, w.cluster_strategy))
        .filter(|v| is_migratable(v))
        .filter(|v| !in_flight.contains(&(meta::namespace(&v.metadata), meta::name(&v.metadata))))
        .filter(|v| active_pods(v, &w.pods) <= 1)
        .collect()
}

/// KubeVirt's `VMIActivePodsCount`.
fn active_pods(vmi: &VirtualMachineInstance, pods: &[&Pod]) -> usize {
    pods.iter()
        .filter(|p| !crate::vmi::pod::is_down(p) && crate::vmi::pod::is_controlled_by(p, vmi))
        .count()
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
