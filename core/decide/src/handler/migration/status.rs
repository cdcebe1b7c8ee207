//! The VMI write of a migration sync: KubeVirt updates the whole VMI (status, and on the target
//! labels and annotations); kvrs sends a JSON patch that tests what the decision read (the
//! resourceVersion, the migration UID) and every field it changes, so a VMI that moved on
//! meanwhile is decided again instead of overwritten.

use serde_json::{Value, json};

use super::super::HandlerWorld;
use super::super::ctx::{Ctx, SyncResult};
use super::super::plan::HandlerPlan;
use crate::api::VirtualMachineInstance;
use crate::patch::{field_ops, op, resource_version_test};
use crate::{Action, ApiWrite, PatchType, WriteOp};

/// Path of the migration UID every migration write is conditional on.
pub(super) const MIGRATION_UID_PATH: &str = "/status/migrationState/migrationUid";

/// Closes the plan: the VMI write (when `updated` differs from the stored VMI) goes after the
/// launcher calls and node steps, then the queue operation.
pub(super) fn finish(
    w: &HandlerWorld<'_>,
    mut cx: Ctx,
    updated: Option<&VirtualMachineInstance>,
    result: SyncResult,
) -> HandlerPlan {
    let write = match (w.vmi, updated) {
        (Some(old), Some(new)) => vmi_write(old, new),
        _ => None,
    };
    let changed_status = write
        .is_some()
        .then(|| updated.and_then(|n| n.status.clone()))
        .flatten();
    if let Some(write) = write {
        cx.actions.push(Action::Write(write));
    }
    let mut plan = cx.finish(w, result);
    plan.status = changed_status;
    plan
}

/// The patch turning `old` into `new` (status, labels, annotations), or `None` when nothing
/// changed.
pub(super) fn vmi_write(
    old: &VirtualMachineInstance,
    new: &VirtualMachineInstance,
) -> Option<ApiWrite> {
    let mut changes = Vec::new();
    changes.extend(field_ops(
        "/status",
        Some(&to_value(&old.status)),
        &to_value(&new.status),
    ));
    changes.extend(field_ops(
        "/metadata/labels",
        Some(&to_value(&old.metadata.labels)),
        &to_value(&new.metadata.labels),
    ));
    changes.extend(field_ops(
        "/metadata/annotations",
        Some(&to_value(&old.metadata.annotations)),
        &to_value(&new.metadata.annotations),
    ));
    if changes.is_empty() {
        return None;
    }
    let uid = old
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|m| m.migration_uid.clone());
    let mut ops = Vec::new();
    ops.extend(resource_version_test(&old.metadata));
    ops.push(op("test", MIGRATION_UID_PATH, Some(json!(uid))));
    ops.extend(changes);
    let ns = old.metadata.namespace.as_deref().unwrap_or("default");
    let name = old.metadata.name.as_deref().unwrap_or("");
    let patch = WriteOp::Patch {
        patch_type: PatchType::Json,
        patch: Value::Array(ops),
    };
    Some(ApiWrite::new("virtualmachineinstances", ns, name, patch))
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}
