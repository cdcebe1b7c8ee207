//! The migration's status: KubeVirt v1.9.0's `updateStatus` (failures first, then
//! `processMigrationPhase`), the phase transition timestamps, the source pod and the
//! synchronization addresses, written to the status subresource; the finalizer removed once
//! the migration is final; and `garbageCollectFinalizedMigrations`.

use serde_json::{Map, Value, json};

use super::phase::MigrationPhase;
use super::view::{Vmim, is_migration_source, migration_state, state_of, synchronized};
use super::{Cx, names, precondition};
use crate::api::VirtualMachineInstance;
use crate::patch::{field_ops, op};
use crate::{ApiWrite, Event, PatchType, Plan, QueueOp, Requeue, WriteOp, meta, vmi, vmi_state};

/// Hotplug conditions under which a completed migration is not yet Succeeded (the VMI
/// controller starts another migration for them).
const HOT_VCPU_CHANGE: &str = "HotVCPUChange";
const HOT_MEMORY_CHANGE: &str = "HotMemoryChange";
const MIGRATION_REQUIRED: &str = "MigrationRequired";

const FAILED_MIGRATION: &str = "FailedMigration";

/// Computes the new status, pushes its writes, and returns it when it changed.
pub(super) fn update(cx: &Cx<'_, '_>, plan: &mut Plan) -> Option<Value> {
    let m = cx.m;
    let vmi = cx.vmi;
    let old_status = m.0.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut st = match &old_status {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    let mut remove_finalizer = false;
    let fail = |st: &mut Map<String, Value>, plan: &mut Plan, msg: &str| {
        st.insert("phase".into(), json!(MigrationPhase::Failed.as_str()));
        plan.events
            .push(Event::warning(m.object_ref(), FAILED_MIGRATION, msg));
    };
    let own_state = state_of(vmi, m.uid());
    let target_down = cx.target.is_some_and(vmi::pod::is_down);

    if m.is_final() {
        if let Some(s) = own_state {
            // The VMI's record of how the migration ended, kept with the migration.
            st.insert(
                "migrationState".into(),
                serde_json::to_value(s).unwrap_or_default(),
            );
        }
        remove_finalizer = true;
    } else if vmi_state::is_final(vmi) && !is_migration_source(vmi) {
        fail(
            &mut st,
            plan,
            "Migration failed vmi shutdown during migration.",
        );
    } else if m.is_deleting() && !cx.handed_off {
        plan.events.push(Event::warning(
            m.object_ref(),
            FAILED_MIGRATION,
            "Migration failed due to being canceled",
        ));
        add_condition(cx, &mut st, names::CONDITION_ABORT_REQUESTED);
        st.insert("phase".into(), json!(MigrationPhase::Failed.as_str()));
    } else if target_down {
        fail(
            &mut st,
            plan,
            "Migration failed because target pod shutdown during migration",
        );
    } else if m.target_is_created() && cx.target.is_none() {
        fail(
            &mut st,
            plan,
            "Migration target pod was removed during active migration.",
        );
    } else if m.target_is_handed_off() && !synchronized(vmi) {
        fail(
            &mut st,
            plan,
            "VMI's migration state was cleared during the active migration.",
        );
    } else if m.target_is_handed_off() && own_state.is_none() {
        fail(
            &mut st,
            plan,
            "VMI's migration state was taken over by another migration job during active migration.",
        );
    } else if own_state.is_some_and(|s| s.failed == Some(true)) {
        fail(&mut st, plan, "source node reported migration failed");
    } else if m.is_deleting() {
        add_condition(cx, &mut st, names::CONDITION_ABORT_REQUESTED);
    } else {
        process_phase(cx, &mut st, plan);
    }

    // Phase transition timestamps, the first time a phase is reached.
    let new_phase = st
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if new_phase != m.phase().as_str() {
        let list = st
            .entry("phaseTransitionTimestamps")
            .or_insert_with(|| json!([]));
        if let Value::Array(ts) = list
            && !ts.iter().any(|t| t["phase"] == new_phase.as_str())
        {
            ts.push(json!({"phase": new_phase, "phaseTransitionTimestamp": cx.w.now.rfc3339()}));
        }
    }
    // KubeVirt's SetSourcePod: while Pending, the VMI's current pod is the source.
    if new_phase == MigrationPhase::Pending.as_str()
        && let Some(src) = vmi::pod::current_pod(vmi, &cx.w.pods)
    {
        let ms = st.entry("migrationState").or_insert_with(|| json!({}));
        if !ms.is_object() {
            *ms = json!({});
        }
        ms["sourcePod"] = json!(vmi::pod::name(src));
    }
    if let Some(kv) = cx.w.kubevirt {
        match kv.pointer("/status/synchronizationAddresses") {
            Some(a) if !a.is_null() => {
                st.insert("synchronizationAddresses".into(), a.clone());
            }
            _ => {
                st.remove("synchronizationAddresses");
            }
        }
    }

    let new_status = Value::Object(st);
    let mut written = None;
    if !meta::eq_without_zero_values(&old_status, &new_status) {
        let mut ops = vec![precondition(m.0)];
        ops.extend(field_ops("/status", Some(&old_status), &new_status));
        plan.push_write(migration_patch(m, Value::Array(ops)).on_subresource("status"));
        written = Some(new_status);
    }
    if remove_finalizer && let Some(w) = finalizer_removal(m) {
        plan.push_write(w);
    }
    written
}

/// A JSON patch of the migration.
fn migration_patch(m: Vmim<'_>, patch: Value) -> ApiWrite {
    ApiWrite::new(
        "virtualmachineinstancemigrations",
        m.namespace(),
        m.name(),
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch,
        },
    )
}

/// The finalizer list without KubeVirt's migration finalizer, tested against the list read.
///
/// Differs from KubeVirt, which writes the whole object with `Update` after its status update
/// and so conflicts with its own status write once; the patch tests only the finalizers.
fn finalizer_removal(m: Vmim<'_>) -> Option<ApiWrite> {
    let old = m.0.pointer("/metadata/finalizers")?.as_array()?;
    if !old.iter().any(|f| f == names::FINALIZER) {
        return None;
    }
    let new: Vec<Value> = old
        .iter()
        .filter(|f| *f != names::FINALIZER)
        .cloned()
        .collect();
    let ops = vec![
        op(
            "test",
            "/metadata/finalizers",
            Some(Value::Array(old.clone())),
        ),
        op("replace", "/metadata/finalizers", Some(Value::Array(new))),
    ];
    Some(migration_patch(m, Value::Array(ops)))
}

/// Appends condition `t` (status True, probed now) unless the migration has one.
fn add_condition(cx: &Cx<'_, '_>, st: &mut Map<String, Value>, t: &str) {
    if cx.m.has_condition(t) {
        return;
    }
    let list = st.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    if let Value::Array(cs) = list {
        cs.push(json!({
            "type": t,
            "status": "True",
            "lastProbeTime": cx.w.now.rfc3339(),
            "lastTransitionTime": null,
        }));
    }
}

/// KubeVirt's `processMigrationPhase` for a local migration: one step forward when what the
/// phase waits for is there.
fn process_phase(cx: &Cx<'_, '_>, st: &mut Map<String, Value>, plan: &mut Plan) {
    let m = cx.m;
    let vmi = cx.vmi;
    let set = |st: &mut Map<String, Value>, p: MigrationPhase| {
        st.insert("phase".into(), json!(p.as_str()));
    };
    let own = state_of(vmi, m.uid());
    match m.phase() {
        MigrationPhase::Unset => {
            if super::admit::can_migrate(m, vmi, cx.w.migrations) {
                set(st, MigrationPhase::Pending);
            } else {
                set(st, MigrationPhase::Failed);
                plan.events.push(Event::warning(
                    m.object_ref(),
                    FAILED_MIGRATION,
                    "VMI is not eligible for migration because another migration job is in progress.",
                ));
            }
        }
        // Waiting for utility volumes (or failed on them) keeps the migration from Scheduling.
        MigrationPhase::Pending if !utility_volumes(cx, st, plan) && cx.target.is_some() => {
            set(st, MigrationPhase::Scheduling);
        }
        MigrationPhase::Scheduling => {
            if let Some(Value::Array(cs)) = st.get_mut("conditions") {
                cs.retain(|c| c["type"] != names::CONDITION_REJECTED_BY_QUOTA);
            }
            if cx.target.is_some_and(vmi::pod::is_ready) {
                set(st, MigrationPhase::Scheduled);
            }
        }
        MigrationPhase::Scheduled if own.is_some_and(|s| !is_empty(&s.target_node)) => {
            set(st, MigrationPhase::PreparingTarget);
        }
        // KubeVirt reads the VMI's state here whoever owns it; the failure checks before
        // have already failed a migration whose state another one took over.
        MigrationPhase::PreparingTarget
            if migration_state(vmi).is_some_and(|s| {
                !is_empty(&s.target_node) && !is_empty(&s.target_node_address)
            }) =>
        {
            set(st, MigrationPhase::TargetReady);
        }
        MigrationPhase::TargetReady
            if migration_state(vmi).is_some_and(|s| s.start_timestamp.is_some()) =>
        {
            set(st, MigrationPhase::Running);
        }
        MigrationPhase::Running => {
            running(cx, st, plan);
        }
        _ => {}
    }
}

/// Migration condition: the VMI still has utility volumes attached.
const CONDITION_BLOCKED_BY_UTILITY_VOLUMES: &str = "migrationBlockedByUtilityVolumes";
/// Annotation of a migration overriding how long it waits for utility volumes (seconds).
const UTILITY_VOLUMES_TIMEOUT: &str = "kubevirt.io/migrationUtilityVolumesTimeoutSeconds";
/// The waiting time KubeVirt gives when the configuration names none.
const UTILITY_VOLUMES_TIMEOUT_SECONDS: i64 = 150;
/// Unix seconds of Go's zero time: a migration without a creation timestamp has waited since.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// KubeVirt's `handleUtilityVolumes`: a Pending migration of a VMI with utility volumes (volumes
/// virt-handler attaches for tools, which cannot follow the VMI to another node) waits for them
/// to be detached, marked by a condition and looked at again when its time runs out; once the
/// time (the configuration's `utilityVolumesTimeout`, or the migration's annotation) has passed
/// since the migration was created, the migration fails. Returns whether it waits or failed.
/// Without utility volumes the condition is removed.
fn utility_volumes(cx: &Cx<'_, '_>, st: &mut Map<String, Value>, plan: &mut Plan) -> bool {
    let (m, vmi) = (cx.m, cx.vmi);
    let has = vmi
        .spec
        .utility_volumes
        .as_ref()
        .is_some_and(|u| !u.is_empty());
    if !has {
        if let Some(Value::Array(cs)) = st.get_mut("conditions") {
            cs.retain(|c| c["type"] != CONDITION_BLOCKED_BY_UTILITY_VOLUMES);
        }
        return false;
    }
    let mut timeout =
        cx.w.migration_config
            .options
            .get("utilityVolumesTimeout")
            .and_then(Value::as_i64)
            .unwrap_or(UTILITY_VOLUMES_TIMEOUT_SECONDS);
    if let Some(t) = m
        .annotation(UTILITY_VOLUMES_TIMEOUT)
        .and_then(|v| v.parse::<i64>().ok())
    {
        timeout = t;
    }
    let created =
        m.0.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(crate::parse_rfc3339)
            .unwrap_or(GO_ZERO_TIME_UNIX);
    let waited = (cx.w.now.unix() - created).max(0);
    let vmi_name = format!(
        "{}/{}",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata)
    );
    if waited >= timeout {
        plan.events.push(Event::warning(
            m.object_ref(),
            FAILED_MIGRATION,
            format!(
                "Migration timeout waiting for utility volumes to detach from VMI [{vmi_name}]. \
                 Utility volumes still present after {waited} seconds."
            ),
        ));
        st.insert("phase".into(), json!(MigrationPhase::Failed.as_str()));
        return true;
    }
    let left = timeout - waited;
    plan.events.push(Event::warning(
        m.object_ref(),
        "UtilityVolumeMigrationPending",
        format!(
            "Migration waiting for utility volumes to detach from VMI [{vmi_name}]. \
             Will timeout in {left} seconds."
        ),
    ));
    if !m.has_condition(CONDITION_BLOCKED_BY_UTILITY_VOLUMES) {
        let list = st.entry("conditions").or_insert_with(|| json!([]));
        if !list.is_array() {
            *list = json!([]);
        }
        if let Value::Array(cs) = list {
            cs.push(json!({
                "type": CONDITION_BLOCKED_BY_UTILITY_VOLUMES,
                "status": "True",
                "lastProbeTime": cx.w.now.rfc3339(),
                "lastTransitionTime": null,
                "reason": "UtilityVolumesPresent",
                "message": format!(
                    "Migration is waiting for utility volumes to detach. Will timeout in {left} seconds."
                ),
            }));
        }
    }
    plan.queue = Requeue(vec![
        QueueOp::AddAfter {
            delay_seconds: u64::try_from(left).unwrap_or(0),
        },
        QueueOp::Forget,
    ]);
    true
}

fn is_empty(s: &Option<String>) -> bool {
    s.as_deref().unwrap_or_default().is_empty()
}

/// Running: mark the target pod with the time its domain was ready, and succeed once the
/// source reports the migration completed (and no hotplug asks for another one).
fn running(cx: &Cx<'_, '_>, st: &mut Map<String, Value>, plan: &mut Plan) {
    let vmi = cx.vmi;
    let Some(state) = migration_state(vmi) else {
        return;
    };
    if let (Some(pod), Some(ready)) = (cx.target, state.target_node_domain_ready_timestamp.as_ref())
        && meta::annotation(&pod.metadata, names::MIGRATION_TARGET_READY_TIMESTAMP).is_none()
    {
        let path = format!(
            "/metadata/annotations/{}",
            crate::patch::escape(names::MIGRATION_TARGET_READY_TIMESTAMP)
        );
        let mut ops = vec![op(
            "test",
            "/metadata/uid",
            Some(json!(meta::uid(&pod.metadata))),
        )];
        if pod.metadata.annotations.is_none() {
            // KubeVirt's patch adds the key only, which fails on a pod without annotations.
            ops.push(op("add", "/metadata/annotations", Some(json!({}))));
        }
        ops.push(op(
            "add",
            &path,
            Some(json!(go_time_string(ready.0.as_second()))),
        ));
        plan.push_write(ApiWrite::new(
            "pods",
            meta::namespace(&pod.metadata),
            vmi::pod::name(pod),
            WriteOp::Patch {
                patch_type: PatchType::Json,
                patch: Value::Array(ops),
            },
        ));
    }
    if state.completed == Some(true)
        && vmi_state::condition(vmi, HOT_VCPU_CHANGE).is_none()
        && !vmi_state::has_condition_status(vmi, HOT_MEMORY_CHANGE, "True")
        && !vmi_state::has_condition_status(vmi, MIGRATION_REQUIRED, "True")
    {
        st.insert("phase".into(), json!(MigrationPhase::Succeeded.as_str()));
        plan.events.push(Event::normal(
            cx.m.object_ref(),
            "SuccessfulMigration",
            "Source node reported migration succeeded",
        ));
    }
}

/// Go's `time.Time.String()` of a UTC instant (what KubeVirt writes into the annotation).
fn go_time_string(unix: i64) -> String {
    let s = crate::format_rfc3339(unix); // YYYY-MM-DDTHH:MM:SSZ
    format!("{} {} +0000 UTC", &s[..10], &s[11..19])
}

/// KubeVirt keeps the five newest final migrations of a VMI.
const FINALIZED_MIGRATIONS_KEPT: usize = 5;

/// KubeVirt's `garbageCollectFinalizedMigrations`: beyond the five newest final migrations of
/// the VMI, delete the oldest, and the pod each left behind (a failed one's target, a
/// succeeded one's source).
pub(super) fn garbage_collect(cx: &Cx<'_, '_>, plan: &mut Plan) {
    let vmi: &VirtualMachineInstance = cx.vmi;
    let ns = meta::namespace(&vmi.metadata);
    let mut finals: Vec<Vmim<'_>> =
        cx.w.migrations
            .iter()
            .map(Vmim)
            .filter(|m| m.namespace() == ns && m.vmi_name() == meta::name(&vmi.metadata))
            .filter(|m| m.is_final() && !m.is_deleting())
            .collect();
    finals.sort_by_key(|m| {
        m.0.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(crate::parse_rfc3339)
            .unwrap_or(i64::MIN)
    });
    let excess = finals.len().saturating_sub(FINALIZED_MIGRATIONS_KEPT);
    for m in finals.into_iter().take(excess) {
        let state = m.0.pointer("/status/migrationState");
        let flag = |k: &str| state.and_then(|s| s.get(k)).and_then(Value::as_bool) == Some(true);
        let field = |k: &str| {
            state
                .and_then(|s| s.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let old_pod = if flag("failed") {
            field("targetPod")
        } else if flag("completed") {
            field("sourcePod")
        } else {
            ""
        };
        // Only a pod the cache shows: the delete is made conditional on its UID (KubeVirt
        // deletes by name and ignores NotFound).
        if let Some(p) = cx.w.pods.iter().find(|p| {
            !old_pod.is_empty()
                && vmi::pod::name(p) == old_pod
                && meta::namespace(&p.metadata) == ns
        }) {
            plan.push_write(ApiWrite::new(
                "pods",
                ns,
                old_pod,
                WriteOp::Delete {
                    precondition_uid: p.metadata.uid.clone(),
                },
            ));
        }
        plan.push_write(ApiWrite::new(
            "virtualmachineinstancemigrations",
            ns,
            m.name(),
            WriteOp::Delete {
                precondition_uid: Some(m.uid().to_string()),
            },
        ));
    }
}
