//! KubeVirt v1.9.0's migration `sync`: the side effects of a reconcile besides the migration's
//! own status — the target pod (created within the limits, deleted when the migration is
//! cancelled or its pod stays pending too long), the hand-off to virt-handler through the VMI's
//! migration state, the abort request, and marking on the VMI a migration whose target died
//! before the migration started.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::admit::{can_migrate, capacity};
use super::phase::MigrationPhase;
use super::target_pod::{self, TargetRenderer};
use super::view::{migration_state, state_of, synchronized, vmi_node};
use super::{Cx, MigrationDecision, names};
use crate::api::{VirtualMachineInstance, VirtualMachineInstanceMigrationState};
use crate::patch::op;
use crate::{
    ApiWrite, DecideError, ErrorKind, Event, Expectation, PatchType, Plan, QueueOp, Requeue,
    WriteOp, meta, vmi, vmi_state,
};

/// The unschedulable-target timeout (KubeVirt's `defaultUnschedulablePendingTimeoutSeconds`).
const UNSCHEDULABLE_TIMEOUT_SECONDS: i64 = 5 * 60;
/// The pending-target timeout (KubeVirt's `defaultCatchAllPendingTimeoutSeconds`).
const CATCH_ALL_TIMEOUT_SECONDS: i64 = 15 * 60;
/// `status.runtimeUser` of a non-root VMI.
const NON_ROOT_UID: i64 = 107;

/// Runs the sync step; the error it returns ends the reconcile after the status write.
pub(super) fn sync(
    cx: &Cx<'_, '_>,
    render: TargetRenderer<'_>,
    suffix: &str,
    out: &mut MigrationDecision,
) -> Option<DecideError> {
    let (m, vmi) = (cx.m, cx.vmi);
    if vmi_state::is_deleting(vmi) {
        return None;
    }
    if state_of(vmi, m.uid()).is_some_and(|s| s.completed == Some(true)) {
        return None;
    }
    if !can_migrate(m, vmi, cx.w.migrations) {
        return Some(DecideError::new(
            ErrorKind::Sync,
            "vmi is ineligible for migration because another migration job is running",
        ));
    }
    let plan = &mut out.plan;
    match m.phase() {
        MigrationPhase::Pending => {
            if m.is_deleting() {
                cancel_before_hand_off(cx, plan);
                return None;
            }
            if vmi
                .spec
                .utility_volumes
                .as_ref()
                .is_some_and(|u| !u.is_empty())
            {
                return None;
            }
            match cx.target {
                None => return create_target(cx, render, suffix, plan),
                Some(p) if vmi::pod::is_ready(p) => {}
                Some(p) => pending_timeout(cx, p, plan),
            }
        }
        MigrationPhase::Scheduling => {
            if m.is_deleting() {
                cancel_before_hand_off(cx, plan);
                return None;
            }
            if let Some(p) = cx.target {
                pending_timeout(cx, p, plan);
            }
        }
        MigrationPhase::Scheduled => {
            if m.is_deleting() && !cx.handed_off {
                cancel_before_hand_off(cx, plan);
                return None;
            }
            if let Some(p) = cx.target.filter(|p| vmi::pod::is_ready(p))
                && hand_off(cx, p, plan)
            {
                out.handed_off = true;
            }
        }
        MigrationPhase::PreparingTarget | MigrationPhase::TargetReady => {
            // Only our own state (KubeVirt reads whichever state the VMI has, and its patch's
            // test then fails when another migration owns it).
            let target_gone = cx.target.is_none_or(vmi::pod::is_down);
            let unstarted = state_of(vmi, m.uid()).is_some_and(|s| {
                s.start_timestamp.is_none() && s.failed != Some(true) && s.completed != Some(true)
            });
            if target_gone && unstarted {
                mark_failed_on_vmi(cx, plan);
            }
        }
        // Differs from KubeVirt, which also tries when another migration owns the state (its
        // patch's test then fails on every retry): only our own state is marked.
        MigrationPhase::Failed
            if state_of(vmi, m.uid()).is_some_and(|s| s.failed != Some(true)) =>
        {
            mark_failed_on_vmi(cx, plan);
        }
        MigrationPhase::Running if m.is_deleting() && synchronized(vmi) => {
            request_abort(cx, plan);
        }
        _ => {}
    }
    None
}

/// KubeVirt's `handlePreHandoffMigrationCancel`: delete the target pod of a migration cancelled
/// before virt-handler took it over.
fn cancel_before_hand_off(cx: &Cx<'_, '_>, plan: &mut Plan) {
    // Differs from KubeVirt, which sends the delete again on every sync until the pod is gone.
    let Some(pod) = cx.target.filter(|p| !vmi::pod::is_deleting(p)) else {
        return;
    };
    let message = format!(
        "migration canceled and pod {}/{} is deleted",
        meta::namespace(&pod.metadata),
        vmi::pod::name(pod)
    );
    delete_target_pod(cx, pod, plan, message);
}

/// The Pending step without a target pod: find the source, make the VMI's runtime user the
/// cluster's, wait for capacity, then create the target pod (KubeVirt's
/// `handleTargetPodCreation` and `createTargetPod`).
fn create_target(
    cx: &Cx<'_, '_>,
    render: TargetRenderer<'_>,
    suffix: &str,
    plan: &mut Plan,
) -> Option<DecideError> {
    let (m, vmi) = (cx.m, cx.vmi);
    // A VMI without a pod is going away; its final phase will fail the migration.
    let source = vmi::pod::current_pod(vmi, &cx.w.pods)?;
    let mut vmi_for_pod = std::borrow::Cow::Borrowed(vmi);
    if let Some((write, updated)) = runtime_user(cx) {
        plan.push_write(write);
        vmi_for_pod = std::borrow::Cow::Owned(updated);
    }
    if let Err(wait) = capacity(cx.w, vmi) {
        plan.queue = Requeue(vec![
            QueueOp::AddAfter {
                delay_seconds: wait.delay(m.queue_priority()).as_secs(),
            },
            QueueOp::Forget,
        ]);
        return None;
    }
    if vmi_state::phase_of(vmi) != "Running" {
        return None;
    }
    let mut pod = match target_pod::build(
        render,
        m,
        &vmi_for_pod,
        source,
        cx.w.nodes,
        cx.w.migration_config,
    ) {
        Ok(p) => p,
        Err(e) => return Some(DecideError::new(ErrorKind::LauncherRender, e.to_string())),
    };
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .unwrap_or_else(|| {
            let prefix = pod
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| format!("virt-launcher-{}-", meta::name(&vmi.metadata)));
            format!("{prefix}{suffix}")
        });
    pod["metadata"]["name"] = json!(name);
    plan.push_write(
        ApiWrite::new(
            "pods",
            meta::namespace(&vmi.metadata),
            &name,
            WriteOp::Create { object: pod },
        )
        .expecting(Expectation::Creations {
            key: m.key(),
            count: 1,
        }),
    );
    plan.events.push(Event::normal(
        m.object_ref(),
        "SuccessfulCreate",
        format!("Created migration target pod {name}"),
    ));
    None
}

/// KubeVirt's `setupVMIRuntimeUser`: the target runs as the cluster runs VMIs (root only with
/// the `Root` feature gate), so the VMI's runtime user and non-root annotation are set to match
/// before the target pod is rendered. Returns the write and the VMI as it will be.
///
/// Differs from KubeVirt, whose patch has no precondition: it tests the VMI's UID.
fn runtime_user(cx: &Cx<'_, '_>) -> Option<(ApiWrite, VirtualMachineInstance)> {
    let vmi = cx.vmi;
    let root = cx.w.config.gate("Root");
    let want = if root { 0 } else { NON_ROOT_UID };
    let have = vmi
        .status
        .as_ref()
        .and_then(|s| s.runtime_user)
        .unwrap_or(0);
    let annotated = meta::annotation(&vmi.metadata, names::NON_ROOT).is_some();
    let annotation_path = format!(
        "/metadata/annotations/{}",
        crate::patch::escape(names::NON_ROOT)
    );
    let mut ops = Vec::new();
    if have != want {
        ops.push(op("replace", "/status/runtimeUser", Some(json!(want))));
    }
    if !root && !annotated {
        if vmi.metadata.annotations.is_none() {
            ops.push(op(
                "add",
                "/metadata/annotations",
                Some(json!({ names::NON_ROOT: "true" })),
            ));
        } else {
            ops.push(op("add", &annotation_path, Some(json!("true"))));
        }
    }
    if root && annotated {
        ops.push(op("remove", &annotation_path, None));
    }
    if ops.is_empty() {
        return None;
    }
    let mut updated = vmi.clone();
    let status = updated.status.get_or_insert_with(Default::default);
    status.runtime_user = Some(want);
    let annotations = updated
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if root {
        annotations.remove(names::NON_ROOT);
    } else {
        annotations.insert(names::NON_ROOT.into(), "true".into());
    }
    ops.insert(
        0,
        op(
            "test",
            "/metadata/uid",
            Some(json!(meta::uid(&vmi.metadata))),
        ),
    );
    Some((vmi_patch(vmi, Value::Array(ops)), updated))
}

/// A JSON patch of the VMI.
fn vmi_patch(vmi: &VirtualMachineInstance, patch: Value) -> ApiWrite {
    ApiWrite::new(
        "virtualmachineinstances",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata),
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch,
        },
    )
}

/// A timeout in seconds from a migration annotation, or the default when absent or malformed.
fn timeout(cx: &Cx<'_, '_>, annotation: &str, default: i64) -> i64 {
    cx.m.annotation(annotation)
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(default)
}

/// KubeVirt's `handlePendingPodTimeout`: a target pod that stays Pending — unschedulable for
/// five minutes, or for any reason for fifteen — is deleted (the migration then fails);
/// otherwise the key is looked at again when the timeout would expire.
fn pending_timeout(cx: &Cx<'_, '_>, pod: &Pod, plan: &mut Plan) {
    if vmi::pod::phase(pod) != "Pending" || vmi::pod::is_deleting(pod) {
        return;
    }
    let Some(created) = pod.metadata.creation_timestamp.as_ref() else {
        return;
    };
    let pending_for = (cx.w.now.unix() - meta::unix_of(created)).max(0);
    let unschedulable_after = timeout(
        cx,
        names::UNSCHEDULABLE_POD_TIMEOUT,
        UNSCHEDULABLE_TIMEOUT_SECONDS,
    );
    let catch_all_after = timeout(cx, names::PENDING_POD_TIMEOUT, CATCH_ALL_TIMEOUT_SECONDS);
    let (ns, name) = (meta::namespace(&pod.metadata), vmi::pod::name(pod));
    let mut again = Vec::new();
    let unschedulable = vmi::pod::condition(pod, "PodScheduled")
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    if unschedulable {
        plan.events.push(Event::warning(
            cx.m.object_ref(),
            "migrationTargetPodUnschedulable",
            format!(
                "Migration target pod for VMI [{}/{}] is currently unschedulable.",
                meta::namespace(&cx.vmi.metadata),
                meta::name(&cx.vmi.metadata)
            ),
        ));
        if pending_for >= unschedulable_after {
            delete_target_pod(
                cx,
                pod,
                plan,
                format!("unschedulable pod {ns}/{name} timeout period exceeded"),
            );
            return;
        }
        again.push(unschedulable_after - pending_for);
    }
    if pending_for >= catch_all_after {
        delete_target_pod(
            cx,
            pod,
            plan,
            format!("pending pod {ns}/{name} timeout period exceeded"),
        );
        return;
    }
    again.push(catch_all_after - pending_for);
    let mut ops: Vec<QueueOp> = again
        .into_iter()
        .map(|s| QueueOp::AddAfter {
            delay_seconds: u64::try_from(s).unwrap_or(0),
        })
        .collect();
    ops.push(QueueOp::Forget);
    plan.queue = Requeue(ops);
}

/// Deletes a migration's target pod (UID precondition, deletion expected) with a
/// `SuccessfulDelete` event saying why: KubeVirt's `deleteTimedOutTargetPod`, and the delete of
/// `handlePreHandoffMigrationCancel`.
fn delete_target_pod(cx: &Cx<'_, '_>, pod: &Pod, plan: &mut Plan, message: String) {
    let ns = meta::namespace(&pod.metadata);
    let name = vmi::pod::name(pod);
    plan.push_write(
        ApiWrite::new(
            "pods",
            ns,
            name,
            WriteOp::Delete {
                precondition_uid: pod.metadata.uid.clone(),
            },
        )
        .expecting(Expectation::Deletions {
            key: cx.m.key(),
            objects: vec![format!("{ns}/{name}")],
        }),
    );
    plan.events.push(Event::normal(
        cx.m.object_ref(),
        "SuccessfulDelete",
        message,
    ));
}

/// KubeVirt's `handleTargetPodHandoff` for a local migration: a fresh migration state naming
/// the migration, both nodes and pods, and the migration configuration, plus the VMI label
/// that makes the target node's virt-handler watch the VMI. Returns whether it wrote.
fn hand_off(cx: &Cx<'_, '_>, pod: &Pod, plan: &mut Plan) -> bool {
    let (m, vmi) = (cx.m, cx.vmi);
    if state_of(vmi, m.uid()).is_some() {
        return false;
    }
    let target_node = vmi::pod::node_name(pod).to_string();
    let from_migration = |k: &str| {
        m.0.pointer("/status/migrationState")
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    // KubeVirt's `matchMigrationPolicy`: the cluster's configuration under the VMI's policy.
    let (options, policy_name) =
        cx.w.migration_config
            .for_vmi(vmi.metadata.labels.as_ref(), meta::namespace(&vmi.metadata));
    let state = VirtualMachineInstanceMigrationState {
        migration_uid: Some(m.uid().into()),
        target_node: Some(target_node.clone()),
        source_node: Some(vmi_node(vmi).into()),
        target_pod: Some(vmi::pod::name(pod).into()),
        source_pod: from_migration("sourcePod"),
        source_persistent_state_pvc_name: from_migration("sourcePersistentStatePVCName"),
        target_persistent_state_pvc_name: from_migration("targetPersistentStatePVCName"),
        migration_configuration: serde_json::from_value(Value::Object(options)).ok(),
        migration_policy_name: policy_name,
        ..Default::default()
    };
    let new_state = serde_json::to_value(&state).unwrap_or_default();
    // Differs from KubeVirt, which tests the whole old state: a state read through the typed
    // VMI need not serialize byte for byte as stored (timestamps, quantities), and a `test`
    // that can never hold would retry forever; the owner is what the test must pin.
    let ops_for_state = match migration_state(vmi) {
        None => vec![
            op("test", "/status/migrationState", Some(Value::Null)),
            op("add", "/status/migrationState", Some(new_state)),
        ],
        Some(old) => vec![
            op(
                "test",
                "/status/migrationState/migrationUid",
                Some(old.migration_uid.as_ref().map_or(Value::Null, |u| json!(u))),
            ),
            op("replace", "/status/migrationState", Some(new_state)),
        ],
    };
    let mut ops = ops_for_state;
    let old_labels = vmi.metadata.labels.clone();
    let mut labels = old_labels.clone().unwrap_or_default();
    labels.insert(names::MIGRATION_TARGET_NODE_NAME.into(), target_node);
    if old_labels.as_ref() != Some(&labels) {
        ops.push(op(
            "test",
            "/metadata/labels",
            Some(old_labels.map_or(Value::Null, |l| json!(l))),
        ));
        ops.push(op("replace", "/metadata/labels", Some(json!(labels))));
    }
    plan.push_write(vmi_patch(vmi, Value::Array(ops)));
    plan.events.push(Event::normal(
        m.object_ref(),
        "SuccessfulHandOver",
        "Migration target pod is ready for preparation by virt-handler.",
    ));
    true
}

/// KubeVirt's `handleMarkMigrationFailedOnVMI`: the target died before the migration started,
/// which no handler will report, so the controller ends the VMI's migration state itself.
fn mark_failed_on_vmi(cx: &Cx<'_, '_>, plan: &mut Plan) {
    let (m, vmi) = (cx.m, cx.vmi);
    let Some(state) = migration_state(vmi) else {
        return;
    };
    let now = json!(cx.w.now.rfc3339());
    let mut ops = vec![
        op(
            "test",
            "/status/migrationState/migrationUid",
            Some(json!(m.uid())),
        ),
        op("add", "/status/migrationState/failed", Some(json!(true))),
        op("add", "/status/migrationState/completed", Some(json!(true))),
    ];
    if state.end_timestamp.is_none() {
        ops.push(op(
            "add",
            "/status/migrationState/endTimestamp",
            Some(now.clone()),
        ));
    }
    if state.start_timestamp.is_none() {
        ops.push(op(
            "add",
            "/status/migrationState/startTimestamp",
            Some(now),
        ));
    }
    if state
        .failure_reason
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        ops.push(op(
            "add",
            "/status/migrationState/failureReason",
            Some(json!("Target pod is down")),
        ));
    }
    plan.push_write(vmi_patch(vmi, Value::Array(ops)));
    plan.events.push(Event::warning(
        crate::vmi::vmi_ref(vmi),
        "FailedMigration",
        format!(
            "VirtualMachineInstance migration uid {} failed. reason: Target pod is down",
            m.uid()
        ),
    ));
}

/// KubeVirt's `markMigrationAbortInVmiStatus`: a migration deleted while it runs asks the
/// source virt-handler to abort it.
///
/// Differs from KubeVirt, which tests and replaces the VMI's whole status (so any concurrent
/// status write by a handler makes it retry): the patch tests that the state is still this
/// migration's and sets only `abortRequested`.
fn request_abort(cx: &Cx<'_, '_>, plan: &mut Plan) {
    let (m, vmi) = (cx.m, cx.vmi);
    let Some(state) = state_of(vmi, m.uid()) else {
        return;
    };
    if state.abort_requested == Some(true) {
        return;
    }
    let ops = vec![
        op(
            "test",
            "/status/migrationState/migrationUid",
            Some(json!(m.uid())),
        ),
        op(
            "add",
            "/status/migrationState/abortRequested",
            Some(json!(true)),
        ),
    ];
    plan.push_write(vmi_patch(vmi, Value::Array(ops)));
    plan.events.push(Event::normal(
        m.object_ref(),
        "SuccessfulAbortMigration",
        "Migration is ready to be canceled by virt-handler.",
    ));
}
