//! The VMI lifecycle: pod creation and deletion (`sync`) and the status the VMI controller owns
//! (`updateStatus`): phase, phase transition timestamps, conditions, active pods, node name.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{
    LauncherRenderer, VmiDecision, VmiWorld, backend_storage, created_pod_event, data_volumes, pod,
    state, vmi_ref,
};
use crate::api::VirtualMachineInstance;
use crate::patch::{self, op};
use crate::small_json::ScanPointer;
use crate::{ApiWrite, Event, Expectation, PatchType, Plan, WriteOp, meta};

/// The current VMI finalizer.
pub(crate) const VMI_FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
/// The pre-domain-qualified VMI finalizer, migrated to [`VMI_FINALIZER`].
pub(crate) const DEPRECATED_VMI_FINALIZER: &str = "foregroundDeleteVirtualMachine";
/// Label carrying the node a VMI runs on.
pub(crate) const NODE_NAME_LABEL: &str = "kubevirt.io/nodeName";
/// Label marking a VMI whose launcher runs an older image than the cluster's.
pub(crate) const OUTDATED_LAUNCHER_LABEL: &str = "kubevirt.io/outdatedLauncherImage";
pub(super) const EVICT_ONLY_ANNOTATION: &str = "descheduler.alpha.kubernetes.io/request-evict-only";
pub(super) const UNPAUSED_CONDITION: &str = "kubevirt.io/virtual-machine-unpaused";
pub(super) const MEMORY_OVERHEAD_ANNOTATION: &str = "kubevirt.io/memory-overhead-bytes";
pub(super) const MIGRATION_TRANSPORT_ANNOTATION: &str = "kubevirt.io/migrationTransportUnix";

pub(super) struct SyncError {
    pub(super) kind: crate::ErrorKind,
    pub(super) reason: String,
    pub(super) message: String,
}

impl SyncError {
    /// Whether the reconcile ends with a rate-limited retry. A claim not in the cache yet is
    /// KubeVirt's `informalSyncError` (the only one it makes, always `FailedPvcNotFound`): the
    /// status still says why, but the key is forgotten and the claim's own informer event
    /// brings the VMI back — retrying with backoff would only poll for an object that is not
    /// there.
    fn requires_requeue(&self) -> bool {
        self.reason != "FailedPvcNotFound"
    }
}

/// KubeVirt's `sync` then `updateStatus`.
pub(super) fn reconcile(
    w: &VmiWorld<'_>,
    render: LauncherRenderer<'_>,
    suffix: &str,
    mut plan: Plan,
) -> VmiDecision {
    let vmi = w.vmi;
    // Borrowed from the cache until this reconcile creates or edits the pod.
    let mut current: Option<Cow<'_, Pod>> = pod::current_pod(vmi, &w.pods).map(Cow::Borrowed);
    let dvs = data_volumes::of_volumes(vmi, w.data_volumes, w.pvcs);
    let sync_err = sync(w, &dvs, render, suffix, &mut plan, &mut current);
    let written =
        super::status::update_status(w, &dvs, &mut plan, current.as_deref(), sync_err.as_ref());
    if let Some(e) = sync_err.filter(SyncError::requires_requeue) {
        plan.fail(e.kind, e.message);
    }
    VmiDecision { plan, vmi: written }
}

fn sync(
    w: &VmiWorld<'_>,
    dvs: &[&Value],
    render: LauncherRenderer<'_>,
    suffix: &str,
    plan: &mut Plan,
    current: &mut Option<Cow<'_, Pod>>,
) -> Option<SyncError> {
    let vmi = w.vmi;
    let key = meta::key(&vmi.metadata);
    if state::is_deleting(vmi) {
        for p in w.pods.iter().filter(|p| pod::is_controlled_by(p, vmi)) {
            if pod::is_deleting(p) && !pod::is_down(p) {
                continue;
            }
            let name = pod::name(p).to_string();
            plan.push_write(
                ApiWrite::new(
                    "pods",
                    meta::namespace(&vmi.metadata),
                    &name,
                    WriteOp::Delete {
                        precondition_uid: p.metadata.uid.clone(),
                    },
                )
                .expecting(Expectation::Deletions {
                    key: key.clone(),
                    objects: vec![format!("{}/{name}", meta::namespace(&vmi.metadata))],
                }),
            );
            plan.events.push(Event::normal(
                vmi_ref(vmi),
                "SuccessfulDelete",
                format!("Deleted virtual machine pod {name}"),
            ));
        }
        return None;
    }
    if state::is_final(vmi) {
        if let Some(p) = current.as_deref() {
            super::hotplug::delete_attachment_pods_of(w, &[p], plan);
        }
        return None;
    }
    // Attachment pods of launcher pods that are down go with them.
    let down: Vec<&Pod> = w
        .pods
        .iter()
        .copied()
        .filter(|p| pod::is_controlled_by(p, vmi) && pod::is_down(p))
        .collect();
    super::hotplug::delete_attachment_pods_of(w, &down, plan);
    let volumes = match data_volumes::readiness(vmi, dvs, w.data_volumes, w.pvcs) {
        Ok(r) => r,
        Err(e) => return Some(volume_error(vmi, &e, plan)),
    };
    let is_target = meta::annotation(
        &vmi.metadata,
        kvrs_api::names::annotations::CREATE_MIGRATION_TARGET,
    ) == Some("true");
    if is_target
        && meta::label(
            &vmi.metadata,
            kvrs_api::names::labels::MIGRATION_TARGET_NODE_NAME,
        )
        .is_none()
    {
        return None;
    }
    let Some(p) = current.as_ref() else {
        if !state::is_unprocessed(vmi) {
            return None;
        }
        // A DataVolume still importing (or a claim not populated yet): no pod. Its progress
        // queues the VMI again.
        if !volumes.ready {
            return None;
        }
        if active_migration_exists(w) {
            return Some(SyncError {
                kind: crate::ErrorKind::Sync,
                reason: "FailedCreate".into(),
                message: "active migration exists".into(),
            });
        }
        let backend_claim = match backend_storage::prepare(w, suffix, plan) {
            Ok(backend_storage::BackendStorage::Created) => return None,
            Ok(backend_storage::BackendStorage::Ready(claim)) => Some(claim),
            Ok(backend_storage::BackendStorage::NotNeeded) => None,
            Err(e) => return Some(e),
        };
        let mut pod_obj = match render(vmi) {
            Ok(p) if volumes.wait_for_first_consumer => data_volumes::temporary_pod(p),
            Ok(p) => p,
            Err(e) => {
                return Some(SyncError {
                    kind: crate::ErrorKind::LauncherRender,
                    reason: "FailedCreate".into(),
                    message: format!("failed to render launch manifest: {e}"),
                });
            }
        };
        if let Some(claim) = &backend_claim {
            backend_storage::name_claim_in_pod(&mut pod_obj, claim);
        }
        let prefix = pod_obj
            .at("/metadata/generateName")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| format!("virt-launcher-{}-", meta::name(&vmi.metadata)));
        let name = pod_obj
            .at("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .unwrap_or_else(|| format!("{prefix}{suffix}"));
        pod_obj["metadata"]["name"] = json!(name);
        // The rest of the reconcile reads the pod it just created as it reads a cached one.
        let created: Pod = match serde::Deserialize::deserialize(&pod_obj) {
            Ok(p) => p,
            Err(e) => {
                return Some(SyncError {
                    kind: crate::ErrorKind::LauncherRender,
                    reason: "FailedCreate".into(),
                    message: format!("failed to render launch manifest: {e}"),
                });
            }
        };
        plan.push_write(
            ApiWrite::new(
                "pods",
                meta::namespace(&vmi.metadata),
                &name,
                WriteOp::Create { object: pod_obj },
            )
            .expecting(Expectation::Creations { key, count: 1 }),
        );
        plan.events.push(created_pod_event(vmi, &name));
        *current = Some(Cow::Owned(created));
        return None;
    };
    if !volumes.wait_for_first_consumer {
        delete_temporary_pods(w, plan);
    }
    if !pod::is_temp(p) && pod::is_ready(p) {
        let annotations = p.metadata.annotations.as_ref();
        let has = annotations
            .and_then(|a| a.get(EVICT_ONLY_ANNOTATION))
            .is_some_and(String::is_empty);
        if !has {
            // A pod without any annotation has no map to add the key into.
            let ops = if annotations.is_some() {
                let path = format!(
                    "/metadata/annotations/{}",
                    patch::escape(EVICT_ONLY_ANNOTATION)
                );
                json!([op("add", &path, Some(json!("")))])
            } else {
                json!([op(
                    "add",
                    "/metadata/annotations",
                    Some(json!({ EVICT_ONLY_ANNOTATION: "" }))
                )])
            };
            plan.push_write(ApiWrite::new(
                "pods",
                meta::namespace(&vmi.metadata),
                pod::name(p),
                WriteOp::Patch {
                    patch_type: PatchType::Json,
                    patch: ops,
                },
            ));
            let mut updated = p.clone().into_owned();
            updated
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(EVICT_ONLY_ANNOTATION.into(), String::new());
            *current = Some(Cow::Owned(updated));
        }
    }
    // KubeVirt handles hotplug volumes once the launcher pod is ready.
    if let Some(p) = current
        .as_deref()
        .filter(|p| !pod::is_temp(p) && pod::is_ready(p))
    {
        return super::hotplug::sync(w, dvs, p, suffix, plan);
    }
    None
}

/// The sync error (and event) of volumes whose readiness cannot be told: a claim not cached
/// yet is waited for (KubeVirt's informal error, a Normal event), a claim whose DataVolume is
/// not cached is a `FailedDataVolumeImport` error with a Warning.
fn volume_error(
    vmi: &VirtualMachineInstance,
    e: &data_volumes::VolumeError,
    plan: &mut Plan,
) -> SyncError {
    match e {
        data_volumes::VolumeError::PvcNotFound { .. } => {
            let message = e.to_string();
            plan.events.push(Event::normal(
                vmi_ref(vmi),
                "FailedPvcNotFound",
                message.clone(),
            ));
            SyncError {
                kind: crate::ErrorKind::Sync,
                reason: "FailedPvcNotFound".into(),
                message,
            }
        }
        data_volumes::VolumeError::DataVolumeNotFound { .. } => {
            plan.events.push(Event::warning(
                vmi_ref(vmi),
                "FailedPvcNotFound",
                format!("Error determining if volume is ready: {e}"),
            ));
            SyncError {
                kind: crate::ErrorKind::Sync,
                reason: "FailedDataVolumeImport".into(),
                message: format!("Error determining if volume is ready {e}"),
            }
        }
    }
}

/// Deletes the VMI's WaitForFirstConsumer temporary pods that ran (or are running): once no
/// DataVolume waits for a consumer, their claims are bound and the launcher pod takes over.
/// KubeVirt deletes them with a zero grace period; kvrs's delete carries the UID precondition
/// only (the pod's own command has already ended or ends at once).
fn delete_temporary_pods(w: &VmiWorld<'_>, plan: &mut Plan) {
    let vmi = w.vmi;
    let ns = meta::namespace(&vmi.metadata);
    let key = meta::key(&vmi.metadata);
    for p in w.pods.iter().filter(|p| {
        pod::is_temp(p)
            && pod::is_controlled_by(p, vmi)
            && !pod::is_deleting(p)
            && matches!(pod::phase(p), "Running" | "Succeeded" | "Failed")
    }) {
        let name = pod::name(p).to_string();
        plan.push_write(
            ApiWrite::new(
                "pods",
                ns,
                &name,
                WriteOp::Delete {
                    precondition_uid: p.metadata.uid.clone(),
                },
            )
            .expecting(Expectation::Deletions {
                key: key.clone(),
                objects: vec![format!("{ns}/{name}")],
            }),
        );
        plan.events.push(Event::normal(
            vmi_ref(vmi),
            "SuccessfulDelete",
            format!("Deleted WaitForFirstConsumer temporary pod {name}"),
        ));
    }
}

fn active_migration_exists(w: &VmiWorld<'_>) -> bool {
    let name = meta::name(&w.vmi.metadata);
    w.migrations.iter().any(|m| {
        m.at("/spec/vmiName").and_then(Value::as_str) == Some(name)
            && !matches!(
                m.at("/status/phase").and_then(Value::as_str),
                Some("Succeeded") | Some("Failed")
            )
            && m.at("/metadata/deletionTimestamp")
                .is_none_or(Value::is_null)
    })
}

/// The plan for a launcher pod create the API server rejected: the event (a Pod Security
/// rejection is explained as needing a privileged namespace), the `Synchronized=False` condition
/// and a rate-limited retry. The shell calls this instead of continuing the failed plan.
pub fn pod_create_failed(
    vmi: &VirtualMachineInstance,
    forbidden: bool,
    server_message: &str,
    now: i64,
) -> Plan {
    let mut plan = Plan::idle();
    let (event_msg, err) = if forbidden && server_message.contains("violates PodSecurity") {
        let e = format!(
            "failed to create pod for vmi {}/{}, it needs a privileged namespace to run: {server_message}",
            meta::namespace(&vmi.metadata),
            meta::name(&vmi.metadata)
        );
        (format!("failed to render launch manifest: {e}"), e)
    } else {
        (
            format!("Error creating pod: {server_message}"),
            format!("failed to create virtual machine pod: {server_message}"),
        )
    };
    plan.events
        .push(Event::warning(vmi_ref(vmi), "FailedCreate", event_msg));
    let mut conds = vmi
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| serde_json::to_value(c).unwrap_or_default())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let old = Value::Array(conds.clone());
    conds.retain(|c| c["type"] != "Synchronized");
    conds.push(json!({
        "type": "Synchronized", "status": "False", "reason": "FailedCreate",
        "message": err, "lastProbeTime": null, "lastTransitionTime": meta::time_json(now),
    }));
    plan.push_write(ApiWrite::new(
        "virtualmachineinstances",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata),
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: json!([
                op("test", "/status/conditions", Some(old)),
                op("add", "/status/conditions", Some(Value::Array(conds)))
            ]),
        },
    ));
    plan.fail(crate::ErrorKind::Sync, err);
    plan
}
