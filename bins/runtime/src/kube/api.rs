//! [`Api`](crate::Api) on a real API server, with kube-rs.
//!
//! A plan's write names a plural resource (`virtualmachineinstances`, `pods`, ...); this module
//! knows which group and version each lives in, and sends exactly the write the plan describes:
//! a create, a JSON patch whose `test` operations make it conditional, a merge or strategic
//! patch, a delete with a UID precondition — on the subresource named. It refuses a full replace
//! of an object (a decision that asks for one is a bug: kvrs never PUTs an object it only partly
//! understands) — the one update it sends is a JSON patch the server forbids, applied to the
//! object as listed, unparsed, as KubeVirt's handler writes VMIs ([`super::update`]) — and
//! records events as KubeVirt does (core/v1, [`super::core_events`]).

use std::collections::{HashMap, HashSet};

use std::sync::{Arc, Mutex};

use kube::api::{
    Api as KubeResourceApi, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch,
    PatchParams, PostParams, Preconditions,
};
use kvrs_decide::{ApiWrite, Event, PatchType, WriteOp};

use super::core_events::CoreEventRecorder;
use super::update;

use kvrs_executor::{Api, ApiError, ApiErrorKind};

/// Where a plural resource lives: `(group, version, kind)`.
pub fn resource_of(plural: &str) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match plural {
        "virtualmachines" => ("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachineinstances" => ("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstancemigrations" => {
            ("kubevirt.io", "v1", "VirtualMachineInstanceMigration")
        }
        "pods" => ("", "v1", "Pod"),
        "nodes" => ("", "v1", "Node"),
        "persistentvolumeclaims" => ("", "v1", "PersistentVolumeClaim"),
        "controllerrevisions" => ("apps", "v1", "ControllerRevision"),
        "datavolumes" => ("cdi.kubevirt.io", "v1beta1", "DataVolume"),
        _ => return None,
    })
}

/// The `apiVersion` of a kind kvrs writes events about.
pub(crate) fn api_version_of(kind: &str) -> &'static str {
    match kind {
        "VirtualMachine"
        | "VirtualMachineInstance"
        | "VirtualMachineInstanceMigration"
        | "KubeVirt" => "kubevirt.io/v1",
        _ => "v1",
    }
}

/// The kube-rs implementation of [`Api`].
#[derive(Clone)]
pub struct KubeApi {
    client: kube::Client,
    events: Arc<CoreEventRecorder>,
    resources: HashMap<&'static str, ApiResource>,
    field_manager: String,
    /// Resources whose JSON patches the server forbade this client: written by update from
    /// then on ([`super::update`]; KubeVirt's handler ClusterRole grants VMIs no `patch`).
    patch_forbidden: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

impl KubeApi {
    /// A client writing as `component` (the field manager, e.g. `virt-controller`), recording
    /// events from `component`; [`KubeApi::with_event_source`] names KubeVirt's source instead.
    pub fn new(client: kube::Client, component: &str) -> Self {
        let resources = [
            "virtualmachines",
            "virtualmachineinstances",
            "virtualmachineinstancemigrations",
            "pods",
            "nodes",
            "persistentvolumeclaims",
            "controllerrevisions",
            "datavolumes",
        ]
        .into_iter()
        .filter_map(|plural| {
            let (group, version, kind) = resource_of(plural)?;
            let gvk = GroupVersionKind::gvk(group, version, kind);
            Some((plural, ApiResource::from_gvk_with_plural(&gvk, plural)))
        })
        .collect();
        Self {
            events: Arc::new(CoreEventRecorder::new(client.clone(), component, None)),
            client,
            resources,
            field_manager: component.to_string(),
            patch_forbidden: Arc::default(),
        }
    }

    /// Records events as `component` (KubeVirt's `source.component`: `virtualmachine-controller`
    /// for the VM and VMI controllers, `virt-handler` with the node as `host`).
    pub fn with_event_source(mut self, component: &str, host: Option<&str>) -> Self {
        self.events = Arc::new(CoreEventRecorder::new(self.client.clone(), component, host));
        self
    }

    /// The client underneath.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn api_for(&self, w: &ApiWrite) -> Result<KubeResourceApi<DynamicObject>, ApiError> {
        let ar = self.resources.get(w.resource.as_str()).ok_or_else(|| {
            ApiError::new(
                ApiErrorKind::Invalid,
                format!("kvrs does not write resource {:?}", w.resource),
            )
        })?;
        // Cluster-scoped resources (nodes) are written with an empty namespace.
        Ok(if w.namespace.is_empty() {
            KubeResourceApi::all_with(self.client.clone(), ar)
        } else {
            KubeResourceApi::namespaced_with(self.client.clone(), &w.namespace, ar)
        })
    }

    /// Sends `w`; answers the resourceVersion the server gave the object written (none for a
    /// delete), from which a caller can tell a conditional patch that changed nothing
    /// ([`kvrs_decide::patch::unchanged_by`]).
    pub async fn send(&self, w: &ApiWrite) -> Result<Option<String>, ApiError> {
        let api = self.api_for(w)?;
        let pp = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let sub = w.subresource.as_deref();
        match &w.op {
            WriteOp::Create { object } => {
                let obj: DynamicObject = serde_json::from_value(object.clone()).map_err(|e| {
                    ApiError::new(ApiErrorKind::Invalid, format!("create {}: {e}", w.resource))
                })?;
                let post = PostParams {
                    field_manager: Some(self.field_manager.clone()),
                    ..PostParams::default()
                };
                api.create(&post, &obj)
                    .await
                    .map(resource_version)
                    .map_err(api_error)
            }
            WriteOp::Patch { patch_type, patch } => {
                match patch_type {
                    PatchType::Json => {}
                    PatchType::Merge => {
                        return patch_value(&api, w, sub, &pp, Patch::Merge(patch)).await;
                    }
                    PatchType::StrategicMerge => {
                        return patch_value(&api, w, sub, &pp, Patch::Strategic(patch)).await;
                    }
                }
                if self.patch_is_forbidden(&w.resource) && update::is_object_json_patch(w) {
                    match update::read_modify_update(&api, w, &self.field_manager, patch).await {
                        // The update forbidden now: the rules changed since the patch was
                        // refused (a role swapped, or RBAC still loading then): patch again.
                        Err(err) if err.kind == ApiErrorKind::Forbidden => {
                            self.allow_patch(w, &err.message);
                        }
                        done => return done,
                    }
                }
                let conditional = patch_is_conditional(&w.op);
                // Go-encoded bytes: see `go_patch` (a `test` of a string with `>` must match).
                let sent = super::go_patch::send_json_patch(&api, &w.name, sub, &pp, patch)
                    .await
                    .map(resource_version)
                    .map_err(|e| {
                        let err = api_error(e);
                        // The API server answers a failed JSON-patch `test` with 422: for kvrs's
                        // conditional patches that means the object changed — a conflict.
                        if conditional && err.kind == ApiErrorKind::Invalid {
                            return precondition_failed(w, &err.message);
                        }
                        err
                    });
                match sent {
                    Err(err) if update::update_instead(w, err.kind) => {
                        match update::read_modify_update(&api, w, &self.field_manager, patch).await
                        {
                            // Forbidden both ways (e.g. a restarted API server whose RBAC has
                            // not loaded yet): the patch's own refusal, and nothing learnt —
                            // a client the rules let patch must not switch to updates for good.
                            Err(update_err) if update_err.kind == ApiErrorKind::Forbidden => {
                                Err(err)
                            }
                            updated => {
                                self.forbid_patch(w, &err.message);
                                updated
                            }
                        }
                    }
                    sent => sent,
                }
            }
            WriteOp::Delete { precondition_uid } => {
                let dp = DeleteParams {
                    preconditions: precondition_uid.as_ref().map(|uid| Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                api.delete(&w.name, &dp)
                    .await
                    .map(|_| None)
                    .map_err(api_error)
            }
            WriteOp::Update { .. } => Err(ApiError::new(
                ApiErrorKind::Invalid,
                format!(
                    "refusing a full update of {} {}/{}: kvrs writes patches only",
                    w.resource, w.namespace, w.name
                ),
            )),
        }
    }
}

impl KubeApi {
    fn patch_is_forbidden(&self, resource: &str) -> bool {
        self.patch_forbidden
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(resource)
    }

    /// Forgets that the server forbids this client's patches of `w`'s resource (its update was
    /// forbidden since); logged with the server's answer.
    fn allow_patch(&self, w: &ApiWrite, message: &str) {
        let known = self
            .patch_forbidden
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&w.resource);
        if known {
            tracing::info!(
                resource = %w.resource,
                namespace = %w.namespace,
                name = %w.name,
                "update of {} now forbidden to this client (the API server: {message}): \
                 writing them by JSON patch again",
                w.resource
            );
        }
    }

    /// Remembers that the server forbids this client's patches of `w`'s resource (and allows
    /// their update); logged once per resource, with the server's answer.
    fn forbid_patch(&self, w: &ApiWrite, message: &str) {
        let first = self
            .patch_forbidden
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(w.resource.clone());
        if first {
            tracing::info!(
                resource = %w.resource,
                namespace = %w.namespace,
                name = %w.name,
                "PATCH of {} forbidden to this client (the API server: {message}): writing them \
                 from now on as KubeVirt's virt-handler does, by update of the object read",
                w.resource
            );
        }
    }
}

async fn patch_value(
    api: &KubeResourceApi<DynamicObject>,
    w: &ApiWrite,
    sub: Option<&str>,
    pp: &PatchParams,
    patch: Patch<&serde_json::Value>,
) -> Result<Option<String>, ApiError> {
    match sub {
        Some(sub) => api.patch_subresource(sub, &w.name, pp, &patch).await,
        None => api.patch(&w.name, pp, &patch).await,
    }
    .map(resource_version)
    .map_err(api_error)
}

/// The resourceVersion the server answered with.
fn resource_version(written: DynamicObject) -> Option<String> {
    written.metadata.resource_version
}

/// Whether a JSON patch carries `test` operations (its 422 then means a failed precondition).
fn patch_is_conditional(op: &WriteOp) -> bool {
    match op {
        WriteOp::Patch { patch, .. } => patch
            .as_array()
            .is_some_and(|ops| ops.iter().any(|o| o["op"] == "test")),
        _ => false,
    }
}

/// A conditional patch of `w` the API server refused with 422: its `test` operations no longer
/// held, so the object changed after the cache read it. A conflict, said so: the server's own
/// message for it ("the server rejected our request due to an error in our request") names
/// neither the object nor the cause.
pub(crate) fn precondition_failed(w: &ApiWrite, server_message: &str) -> ApiError {
    let sub = w
        .subresource
        .as_deref()
        .map(|s| format!("/{s}"))
        .unwrap_or_default();
    ApiError::new(
        ApiErrorKind::Conflict,
        format!(
            "{}{sub} {}/{} changed since it was read: a test precondition of the patch did \
             not hold (the API server: {server_message}); retried on the newer version",
            w.resource, w.namespace, w.name
        ),
    )
}

/// The API server's answer as an [`ApiError`].
pub fn api_error(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(status) => {
            let kind = match (status.code, status.reason.as_str()) {
                (409, "AlreadyExists") => ApiErrorKind::AlreadyExists,
                (409, _) => ApiErrorKind::Conflict,
                (404, _) => ApiErrorKind::NotFound,
                (403, _) => ApiErrorKind::Forbidden,
                (400 | 422, _) => ApiErrorKind::Invalid,
                _ => ApiErrorKind::Other,
            };
            ApiError::new(kind, status.message.clone())
        }
        other => ApiError::new(ApiErrorKind::Other, other.to_string()),
    }
}

impl KubeApi {
    /// Records `event` as a core/v1 Event (see [`super::core_events`]). A failure is logged,
    /// never returned: an event that cannot be recorded never fails a reconcile.
    pub async fn record_event(&self, event: &Event) {
        self.events.record(event).await;
    }
}

impl Api for KubeApi {
    async fn write(&mut self, write: &ApiWrite) -> Result<(), ApiError> {
        self.send(write).await.map(drop)
    }

    async fn event(&mut self, event: &Event) {
        self.record_event(event).await;
    }
}

/// Also usable through a shared reference, so many workers share one client.
impl Api for &KubeApi {
    async fn write(&mut self, write: &ApiWrite) -> Result<(), ApiError> {
        self.send(write).await.map(drop)
    }

    async fn event(&mut self, event: &Event) {
        self.record_event(event).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_a_decision_writes_is_known() {
        for plural in [
            "virtualmachines",
            "virtualmachineinstances",
            "pods",
            "controllerrevisions",
        ] {
            assert!(resource_of(plural).is_some(), "{plural}");
        }
        assert_eq!(resource_of("pods"), Some(("", "v1", "Pod")));
        assert_eq!(resource_of("secrets"), None);
    }

    #[test]
    fn a_failed_test_precondition_is_a_conflict_naming_the_object() {
        let w = ApiWrite::new(
            "virtualmachines",
            "prod",
            "web",
            WriteOp::Patch {
                patch_type: PatchType::Json,
                patch: serde_json::json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["kubevirt.io/virtualMachineControllerFinalize"]},
                ]),
            },
        );
        assert!(patch_is_conditional(&w.op));
        let generic = "the server rejected our request due to an error in our request";
        let e = precondition_failed(&w, generic);
        assert_eq!(e.kind, ApiErrorKind::Conflict);
        assert_eq!(
            e.message,
            "virtualmachines prod/web changed since it was read: a test precondition of the \
             patch did not hold (the API server: the server rejected our request due to an \
             error in our request); retried on the newer version"
        );
        let mut status = w.clone();
        status.subresource = Some("status".into());
        assert!(
            precondition_failed(&status, generic)
                .message
                .starts_with("virtualmachines/status prod/web changed")
        );
    }
}
