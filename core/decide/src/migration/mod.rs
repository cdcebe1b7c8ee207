//! The migration controller decision: KubeVirt v1.9.0's
//! `pkg/virt-controller/watch/migration` reconcile of one VirtualMachineInstanceMigration key,
//! as a pure function.
//!
//! The controller drives a local live migration up to the hand-off and follows it afterwards:
//! it accepts the migration (Pending), creates the target launcher pod within the parallel
//! limits (Scheduling), writes the VMI's `status.migrationState` once the pod runs, which hands
//! the migration to the virt-handlers of both nodes (Scheduled), and then only mirrors what the
//! handlers write into that state (PreparingTarget, TargetReady, Running, Succeeded or Failed).
//! A migration deleted before the hand-off is failed and its target pod deleted; one deleted
//! after it asks the source handler to abort. The finalizer virt-api's webhook put on the
//! migration is removed once it is final.
//!
//! What the webhooks decide is not repeated here, as KubeVirt's controller does not repeat it:
//! virt-api refuses a migration of a VMI that does not exist, is final, is not `LiveMigratable`
//! or already has a migration in flight, and adds the finalizer and the `kubevirt.io/vmi-name`
//! label (`bins/virt-api`, `webhooks/migration.rs`).
//!
//! Not covered (the decision leaves such migrations alone or says so): decentralized
//! (cross-cluster) migrations, hotplug attachment pods, backend-storage PVCs, VM backups, the
//! evacuation backoff, resource-quota rejections, the target's network-info annotation and
//! memory-overhead report, the hotplug CPU/memory labels. Utility volumes are waited on as
//! KubeVirt waits (their detaching is not this controller's). MigrationPolicies are applied at
//! the hand-off ([`policy`]); the target's container disks are pinned to the digests the source
//! runs (`image_ids`). `tests/migration_oracle.rs` compares the decision with KubeVirt's own
//! controller.

mod admit;
mod config;
mod image_ids;
mod phase;
pub mod policy;
mod status;
mod sync;
mod target_pod;
mod view;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::api::VirtualMachineInstance;
use crate::{
    ApiWrite, ClusterConfig, DecideError, ErrorKind, Expectation, Now, PatchType,
    PendingExpectations, Plan, Requeue, WriteOp, meta,
};

pub use config::{
    MigrationConfig, PARALLEL_MIGRATIONS_PER_CLUSTER, PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE,
};
pub use phase::MigrationPhase;
pub use target_pod::{TargetPodError, TargetRenderer, target_renderer};
pub use view::Vmim;

/// The labels, annotations, finalizer and condition types the migration controller reads and
/// writes (KubeVirt's names).
pub mod names {
    /// Label of kubevirt.io objects (`virt-launcher` on launcher pods).
    pub const APP: &str = "kubevirt.io";
    /// Label of a launcher pod: the UID of its VMI.
    pub const CREATED_BY: &str = "kubevirt.io/created-by";
    /// Label of a target pod: the UID of its migration.
    pub const MIGRATION_JOB_UID: &str = "kubevirt.io/migrationJobUID";
    /// Annotation of a target pod: the name of its migration.
    pub const MIGRATION_JOB_NAME: &str = "kubevirt.io/migrationJobName";
    /// Label of the VMI once handed off: the target node (it makes the target handler watch it).
    pub const MIGRATION_TARGET_NODE_NAME: &str =
        kvrs_api::names::labels::MIGRATION_TARGET_NODE_NAME;
    /// Label of a migration: the name of its VMI (its selector).
    pub const VMI_NAME: &str = "kubevirt.io/vmi-name";
    /// The finalizer virt-api's webhook puts on every migration.
    pub const FINALIZER: &str = "kubevirt.io/migrationJobFinalize";
    /// Annotation of a target pod: when the target domain was ready.
    pub const MIGRATION_TARGET_READY_TIMESTAMP: &str =
        "kubevirt.io/migration-target-ready-timestamp";
    /// Annotation of a migration overriding the unschedulable-target timeout (seconds).
    pub const UNSCHEDULABLE_POD_TIMEOUT: &str =
        "kubevirt.io/migrationUnschedulablePodTimeoutSeconds";
    /// Annotation of a migration overriding the pending-target timeout (seconds).
    pub const PENDING_POD_TIMEOUT: &str = "kubevirt.io/migrationPendingPodTimeoutSeconds";
    /// Annotation of a migration replacing the target's compute image (KubeVirt's functional tests).
    pub const FUNC_TEST_TARGET_IMAGE_OVERRIDE: &str =
        "kubevirt.io/func-test-migration-target-image-override";
    /// Annotation of a VMI run as non-root (kept for upgrades from KubeVirt < 0.52).
    pub const NON_ROOT: &str = "kubevirt.io/nonroot";
    /// Node label prefix of the CPU vendor.
    pub const CPU_VENDOR: &str = "cpu-vendor.node.kubevirt.io/";
    /// Node label prefix of a CPU feature.
    pub const CPU_FEATURE: &str = "cpu-feature.node.kubevirt.io/";
    /// Node label prefix of the node's host CPU model.
    pub const HOST_MODEL_CPU: &str = "host-model-cpu.node.kubevirt.io/";
    /// Node label prefix of the features the host model requires.
    pub const HOST_MODEL_REQUIRED_FEATURES: &str = "host-model-required-features.node.kubevirt.io/";
    /// Node label prefix of the host models a node can receive.
    pub const HOST_MODEL_MIGRATION_CPU: &str = "cpu-model-migration.node.kubevirt.io/";
    /// Migration condition: the user asked to abort (the migration was deleted).
    pub const CONDITION_ABORT_REQUESTED: &str = "migrationAbortRequested";
    /// Migration condition: the target pod was refused by a ResourceQuota.
    pub const CONDITION_REJECTED_BY_QUOTA: &str = "migrationRejectedByResourceQuota";
}

/// Everything the migration decision reads.
#[derive(Clone, Debug)]
pub struct MigrationWorld<'a> {
    /// The migration as the cache holds it.
    pub migration: &'a Value,
    /// All migrations in the cache (the parallel limits count the running ones cluster-wide,
    /// `canMigrateVMI` looks up the one owning the VMI).
    pub migrations: &'a [Value],
    /// VMIs in the cache: the migration's own (by `spec.vmiName`) and those of the running
    /// migrations, whose nodes the per-node limit counts.
    pub vmis: Vec<&'a VirtualMachineInstance>,
    /// Launcher pods in the cache (labelled `kubevirt.io`), of every namespace.
    pub pods: Vec<&'a Pod>,
    /// Nodes in the cache (the source node's CPU labels go into the target's node selector).
    pub nodes: &'a [Node],
    /// The KubeVirt CR, when the cache holds exactly one (its `status.synchronizationAddresses`
    /// are copied into the migration's status).
    pub kubevirt: Option<&'a Value>,
    /// Outstanding pod expectations of this migration's key.
    pub expectations: PendingExpectations,
    /// Pod creations outstanding under any migration key (KubeVirt's `AllPendingCreations`):
    /// while any is, no new target pod is created, so the limits count every target pod.
    pub pending_creations_anywhere: u32,
    /// This controller handed the migration off earlier (KubeVirt's in-memory `handOffMap`;
    /// the shell remembers [`MigrationDecision::handed_off`] until the key is gone). It covers
    /// the time the VMI cache needs to show the hand-off write.
    pub handed_off: bool,
    /// Cluster configuration (the `Root` feature gate).
    pub config: &'a ClusterConfig,
    /// The cluster's migration configuration.
    pub migration_config: &'a MigrationConfig,
    /// The clock.
    pub now: Now,
}

impl<'a> MigrationWorld<'a> {
    /// The migration's VMI, if the cache has it.
    pub fn vmi(&self) -> Option<&'a VirtualMachineInstance> {
        let m = Vmim(self.migration);
        self.vmis.iter().copied().find(|v| {
            meta::name(&v.metadata) == m.vmi_name() && meta::namespace(&v.metadata) == m.namespace()
        })
    }
}

/// The decision: the plan, and whether this reconcile handed the migration off.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationDecision {
    /// Writes, events, queue outcome and error.
    pub plan: Plan,
    /// The plan hands the migration off to virt-handler (writes the VMI's migration state): the
    /// shell must remember the key and pass [`MigrationWorld::handed_off`] until the
    /// migration is deleted, as KubeVirt's `handOffMap` does.
    pub handed_off: bool,
    /// The migration's status after the plan's status write, when it writes one.
    pub status: Option<Value>,
}

/// Decides one reconcile of a migration key (KubeVirt's `execute`). `render` builds the
/// target pod; `pod_name_suffix` is the random suffix of its name, drawn by the caller.
pub fn decide_migration(
    w: &MigrationWorld<'_>,
    render: TargetRenderer<'_>,
    pod_name_suffix: &str,
) -> MigrationDecision {
    let m = Vmim(w.migration);
    let mut out = MigrationDecision {
        plan: Plan::idle(),
        handed_off: false,
        status: None,
    };
    let mig_meta = object_meta(w.migration);
    if !meta::observed_latest_api_version(&mig_meta) {
        out.plan.push_write(api_version_write(m, &mig_meta));
        return out;
    }
    let Some(vmi) = w.vmi() else {
        if !m.is_deleting() {
            // The VMI is gone: so is the reason for the migration.
            out.plan.push_write(ApiWrite::new(
                "virtualmachineinstancemigrations",
                m.namespace(),
                m.name(),
                WriteOp::Delete {
                    precondition_uid: Some(m.uid().to_string()),
                },
            ));
        }
        return out;
    };
    if m.is_decentralized() {
        // Deliberately unsupported: no retry, the error says why.
        out.plan.error = Some(DecideError::new(
            ErrorKind::InvalidObject,
            "decentralized live migration is not supported by kvrs's migration controller",
        ));
        return out;
    }
    let targets = view::target_pods(m, vmi, &w.pods);
    let cx = Cx {
        w,
        m,
        vmi,
        target: targets.first().copied(),
        handed_off: w.handed_off || view::state_of(vmi, m.uid()).is_some(),
    };
    let sync_err = if w.expectations.satisfied() {
        sync::sync(&cx, render, pod_name_suffix, &mut out)
    } else {
        None
    };
    out.status = status::update(&cx, &mut out.plan);
    if let Some(e) = sync_err {
        out.plan.error = Some(e);
        out.plan.queue = Requeue::rate_limited();
        return out;
    }
    if m.is_final() {
        status::garbage_collect(&cx, &mut out.plan);
    }
    out
}

/// What the parts of one reconcile share.
pub(super) struct Cx<'w, 'a> {
    w: &'w MigrationWorld<'a>,
    m: Vmim<'a>,
    vmi: &'a VirtualMachineInstance,
    /// The migration's target pod, if the cache shows one.
    target: Option<&'a Pod>,
    /// The VMI's migration state is this migration's, or this controller wrote it.
    handed_off: bool,
}

/// The migration's metadata, typed.
fn object_meta(v: &Value) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    v.get("metadata")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default()
}

/// The `test` that makes a write apply only to the object the decision read: its
/// resourceVersion (KubeVirt writes with `Update`), or its UID when the cache entry has none.
pub(super) fn precondition(v: &Value) -> Value {
    match v
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        Some(rv) => crate::patch::op("test", crate::patch::RESOURCE_VERSION_PATH, Some(json!(rv))),
        None => crate::patch::op(
            "test",
            "/metadata/uid",
            Some(v.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)),
        ),
    }
}

/// KubeVirt's first step: record the API version the migration was observed at and make sure
/// it carries its selector label (`ensureSelectorLabelPresent`).
fn api_version_write(
    m: Vmim<'_>,
    mig_meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> ApiWrite {
    let old = mig_meta.annotations.clone();
    let mut new = old.clone().unwrap_or_default();
    new.insert(meta::LATEST_OBSERVED_API_VERSION.into(), "v1".into());
    new.insert(meta::STORAGE_OBSERVED_API_VERSION.into(), "v1".into());
    let mut ops = vec![precondition(m.0)];
    if let Value::Array(a) = crate::patch::replace_map("/metadata/annotations", old.as_ref(), &new)
    {
        ops.extend(a);
    }
    if meta::label(mig_meta, names::VMI_NAME).is_none() {
        let old = mig_meta.labels.clone();
        let mut new = old.clone().unwrap_or_default();
        new.insert(names::VMI_NAME.into(), m.vmi_name().into());
        if let Value::Array(a) = crate::patch::replace_map("/metadata/labels", old.as_ref(), &new) {
            ops.extend(a);
        }
    }
    ApiWrite::new(
        "virtualmachineinstancemigrations",
        m.namespace(),
        m.name(),
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: Value::Array(ops),
        },
    )
    .expecting(Expectation::ObservedUpdate { key: m.key() })
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_target;
