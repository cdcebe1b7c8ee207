//! Read-only questions about a VirtualMachineInstanceMigration (held as JSON, as every kvrs
//! cache holds it: kvrs-api has no Rust type for it) and about the VMI's migration state, asked
//! the way KubeVirt's Go methods on those types ask them.

use k8s_openapi::api::core::v1::Pod;
use kvrs_api::json_pointer::JsonPointer;
use serde_json::Value;

use super::names;
use super::phase::MigrationPhase;
use crate::api::VirtualMachineInstance;
use crate::api::VirtualMachineInstanceMigrationState;
use crate::{ObjectRef, meta, vmi};

/// A VirtualMachineInstanceMigration as the informer cache holds it.
#[derive(Clone, Copy, Debug)]
pub struct Vmim<'a>(pub &'a Value);

impl<'a> Vmim<'a> {
    fn str_at(self, path: &str) -> &'a str {
        self.0.at(path).and_then(Value::as_str).unwrap_or_default()
    }

    /// `metadata.name`.
    pub fn name(self) -> &'a str {
        self.str_at("/metadata/name")
    }

    /// `metadata.namespace` (`default` when unset).
    pub fn namespace(self) -> &'a str {
        meta::json_namespace(self.0)
    }

    /// `metadata.uid`.
    pub fn uid(self) -> &'a str {
        self.str_at("/metadata/uid")
    }

    /// The queue key, `namespace/name` (KubeVirt's `MigrationKey`).
    pub fn key(self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    /// `spec.vmiName`.
    pub fn vmi_name(self) -> &'a str {
        self.str_at("/spec/vmiName")
    }

    /// `status.phase`, [`MigrationPhase::Unset`] when absent or unknown.
    pub fn phase(self) -> MigrationPhase {
        MigrationPhase::parse(self.str_at("/status/phase"))
    }

    /// Succeeded or Failed (KubeVirt's `IsFinal`).
    pub fn is_final(self) -> bool {
        self.phase().is_final()
    }

    /// Whether the migration has a deletion timestamp (it is being cancelled).
    pub fn is_deleting(self) -> bool {
        self.0
            .at("/metadata/deletionTimestamp")
            .is_some_and(|v| !v.is_null())
    }

    /// A decentralized (cross-cluster) migration: exactly one of `sendTo`/`receive` is set.
    pub fn is_decentralized(self) -> bool {
        let set = |p: &str| self.0.at(p).is_some_and(|v| !v.is_null());
        set("/spec/sendTo") != set("/spec/receive")
    }

    /// Counted against the parallel limits (KubeVirt's `IsRunning`, for a local migration:
    /// every phase from Scheduling up to, not including, the final ones).
    pub fn is_running(self) -> bool {
        !matches!(
            self.phase(),
            MigrationPhase::Unset
                | MigrationPhase::Pending
                | MigrationPhase::Succeeded
                | MigrationPhase::Failed
                | MigrationPhase::WaitingForSync
                | MigrationPhase::Synchronizing
        )
    }

    /// The phase says the target pod should exist (KubeVirt's `TargetIsCreated`).
    pub fn target_is_created(self) -> bool {
        !matches!(
            self.phase(),
            MigrationPhase::Unset
                | MigrationPhase::Pending
                | MigrationPhase::WaitingForSync
                | MigrationPhase::Synchronizing
        )
    }

    /// The phase says virt-handler owns the migration (KubeVirt's `TargetIsHandedOff`).
    pub fn target_is_handed_off(self) -> bool {
        self.target_is_created()
            && !matches!(
                self.phase(),
                MigrationPhase::Scheduling | MigrationPhase::Scheduled
            )
    }

    /// Whether `status.conditions` holds a condition of type `t`.
    pub fn has_condition(self, t: &str) -> bool {
        meta::json_condition(self.0, t).is_some()
    }

    /// The annotation `k`.
    pub fn annotation(self, k: &str) -> Option<&'a str> {
        self.0
            .at("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
    }

    /// The queue priority KubeVirt derives from `spec.priority` (`PriorityFromMigration`).
    pub fn queue_priority(self) -> i32 {
        match self.str_at("/spec/priority") {
            "system-critical" => 100,
            "user-triggered" => 50,
            "system-maintenance" => 20,
            _ => 0,
        }
    }

    /// The migration as the subject of an event.
    pub fn object_ref(self) -> ObjectRef {
        ObjectRef {
            kind: "VirtualMachineInstanceMigration".into(),
            namespace: self.namespace().into(),
            name: self.name().into(),
            uid: Some(self.uid().to_string()).filter(|u| !u.is_empty()),
        }
    }
}

/// The VMI's `status.migrationState`.
pub(super) fn migration_state(
    vmi: &VirtualMachineInstance,
) -> Option<&VirtualMachineInstanceMigrationState> {
    vmi.status.as_ref()?.migration_state.as_deref()
}

/// KubeVirt's `IsMigrationSynchronized` for a local migration: the VMI has a migration state.
pub(super) fn synchronized(vmi: &VirtualMachineInstance) -> bool {
    migration_state(vmi).is_some()
}

/// The migration state of the VMI when it belongs to migration `uid`.
pub(super) fn state_of<'v>(
    vmi: &'v VirtualMachineInstance,
    uid: &str,
) -> Option<&'v VirtualMachineInstanceMigrationState> {
    migration_state(vmi).filter(|s| s.migration_uid.as_deref().unwrap_or_default() == uid)
}

/// KubeVirt's `IsMigrationSource`: a fully synchronized decentralized source (never true for a
/// local migration, whose target state carries no sync address).
pub(super) fn is_migration_source(vmi: &VirtualMachineInstance) -> bool {
    migration_state(vmi)
        .and_then(|m| m.target_state.as_ref())
        .is_some_and(|t| t.sync_address.is_some() && t.node_address.is_some())
}

/// The VMI's `status.nodeName`.
pub(super) fn vmi_node(vmi: &VirtualMachineInstance) -> &str {
    vmi.status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// The target pods of `migration` (KubeVirt's `listMatchingTargetPods`): launcher pods created
/// for `vmi` and labelled with the migration's UID.
pub(super) fn target_pods<'p>(
    migration: Vmim<'_>,
    vmi: &VirtualMachineInstance,
    pods: &[&'p Pod],
) -> Vec<&'p Pod> {
    let vmi_uid = meta::uid(&vmi.metadata);
    pods.iter()
        .copied()
        .filter(|p| {
            meta::label(&p.metadata, names::CREATED_BY) == Some(vmi_uid)
                && meta::namespace(&p.metadata) == meta::namespace(&vmi.metadata)
                && meta::label(&p.metadata, names::MIGRATION_JOB_UID) == Some(migration.uid())
                && meta::label(&p.metadata, names::APP) == Some("virt-launcher")
        })
        .collect()
}

/// KubeVirt's `VMIActivePodsCount`: pods the VMI controls that are not terminated.
pub(super) fn active_pods(vmi: &VirtualMachineInstance, pods: &[&Pod]) -> usize {
    pods.iter()
        .filter(|p| !vmi::pod::is_down(p) && vmi::pod::is_controlled_by(p, vmi))
        .count()
}
