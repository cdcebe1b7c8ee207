//! The VM controller's `Reference` policy as plain data (KubeVirt v1.9.0's
//! `pkg/instancetype/revision`): the instancetype and preference a VM references are stored as
//! ControllerRevisions owned by the VM, named in `status.instancetypeRef` /
//! `status.preferenceRef`, and later expansions read the revision, not the (possibly changed)
//! object.
//!
//! [`store_plan`] decides what one sync does: which ControllerRevisions to create and the JSON
//! patch of the VM's status (`add /status/instancetypeRef`, `add /status/preferenceRef`), only
//! for refs that change. The caller runs the plan (an existing revision of the same name with
//! equal data counts as created, as in KubeVirt).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::VirtualMachine;
use kvrs_api::api::{ControllerRevisionRef, InstancetypeStatusRef};
use serde_json::{Value, json};

use crate::apply::apply;
use crate::conflict::Conflicts;
use crate::types::InstancetypeSpec;

/// The group version KubeVirt stores in revisions.
pub const STORED_API_VERSION: &str = "instancetype.kubevirt.io/v1beta1";

/// Labels of a stored revision.
pub const OBJECT_GENERATION_LABEL: &str = "instancetype.kubevirt.io/object-generation";
/// See [`OBJECT_GENERATION_LABEL`].
pub const OBJECT_KIND_LABEL: &str = "instancetype.kubevirt.io/object-kind";
/// See [`OBJECT_GENERATION_LABEL`].
pub const OBJECT_NAME_LABEL: &str = "instancetype.kubevirt.io/object-name";
/// See [`OBJECT_GENERATION_LABEL`].
pub const OBJECT_UID_LABEL: &str = "instancetype.kubevirt.io/object-uid";
/// See [`OBJECT_GENERATION_LABEL`].
pub const OBJECT_VERSION_LABEL: &str = "instancetype.kubevirt.io/object-version";

/// Why a sync cannot store the VM's references.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RevisionError {
    /// The VM sets fields the instancetype owns (checked before its revision is stored).
    #[error(transparent)]
    Conflicts(#[from] Conflicts),
    /// The referenced object was not supplied although a new revision is needed.
    #[error("{field}: the referenced object is needed to store its ControllerRevision")]
    MissingObject {
        /// `spec.instancetype` or `spec.preference`.
        field: &'static str,
    },
    /// The object cannot be read as an instancetype spec.
    #[error("{field}: {reason}")]
    BadObject {
        /// `spec.instancetype` or `spec.preference`.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

/// What one sync does with the VM's references.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StorePlan {
    /// ControllerRevisions to create (apps/v1 objects), instancetype first.
    pub create: Vec<Value>,
    /// The JSON patch of the VM's status subresource; empty when nothing changes.
    pub status_patch: Vec<Value>,
}

/// `<vm>-<object>-<version>-<uid>-<generation>`, KubeVirt's revision name.
pub fn revision_name(
    vm_name: &str,
    object_name: &str,
    version: &str,
    uid: &str,
    generation: i64,
) -> String {
    format!("{vm_name}-{object_name}-{version}-{uid}-{generation}")
}

/// The ControllerRevision KubeVirt stores for `object` (an instancetype or preference as read
/// from the API, with its kind): owned by `vm` as its controller, labelled with the object's
/// identity, holding the object with its labels, annotations, finalizers, owner references and
/// managed fields removed.
pub fn controller_revision(vm: &VirtualMachine, object: &Value) -> Value {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let meta: ObjectMeta = object
        .get("metadata")
        .cloned()
        .and_then(|m| serde_json::from_value(m).ok())
        .unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    let generation = meta.generation.unwrap_or(0);
    let version = STORED_API_VERSION.rsplit('/').next().unwrap_or("v1beta1");
    let mut data = object.clone();
    if let Some(o) = data.as_object_mut() {
        o.insert("apiVersion".into(), json!(STORED_API_VERSION));
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "labels",
                "annotations",
                "finalizers",
                "ownerReferences",
                "managedFields",
            ] {
                m.remove(field);
            }
        }
    }
    let vm_name = vm.metadata.name.clone().unwrap_or_default();
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(&vm_name, &name, version, &uid, generation),
            "namespace": vm.metadata.namespace.clone().unwrap_or_default(),
            "ownerReferences": [{
                "apiVersion": kvrs_api::api::API_VERSION,
                "kind": "VirtualMachine",
                "name": vm_name,
                "uid": vm.metadata.uid.clone().unwrap_or_default(),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
            "labels": {
                OBJECT_GENERATION_LABEL: generation.to_string(),
                OBJECT_KIND_LABEL: kind,
                OBJECT_NAME_LABEL: name,
                OBJECT_UID_LABEL: uid,
                OBJECT_VERSION_LABEL: version,
            },
        },
        "data": data,
    })
}

/// The fields of a VM's instancetype or preference matcher the status ref follows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matcher {
    /// `name`.
    pub name: Option<String>,
    /// `kind`.
    pub kind: Option<String>,
    /// `inferFromVolume`.
    pub infer_from_volume: Option<String>,
    /// `inferFromVolumeFailurePolicy`.
    pub infer_from_volume_failure_policy: Option<String>,
    /// `revisionName`.
    pub revision_name: Option<String>,
}

fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// The status ref after following the matcher, and whether a new revision must be stored (then
/// the caller names it in `controllerRevisionRef`). A changed name, kind or volume drops the
/// old revision; a matcher's `revisionName` is adopted as the ref.
pub fn sync_status_ref(
    matcher: &Matcher,
    current: Option<&InstancetypeStatusRef>,
) -> (InstancetypeStatusRef, bool) {
    let mut status = current.cloned().unwrap_or_default();
    let mut clear = false;
    for (want, have) in [
        (nonempty(&matcher.name), &mut status.name),
        (nonempty(&matcher.kind), &mut status.kind),
        (
            nonempty(&matcher.infer_from_volume),
            &mut status.infer_from_volume,
        ),
    ] {
        if let Some(w) = want
            && have.as_deref() != Some(w)
        {
            *have = Some(w.to_string());
            clear = true;
        }
    }
    if clear {
        status.controller_revision_ref = None;
    }
    if let Some(policy) = &matcher.infer_from_volume_failure_policy
        && status.infer_from_volume_failure_policy.as_ref() != Some(policy)
    {
        status.infer_from_volume_failure_policy = Some(policy.clone());
    }
    if let Some(rev) = nonempty(&matcher.revision_name) {
        let named = status
            .controller_revision_ref
            .as_ref()
            .and_then(|r| r.name.as_deref());
        if named != Some(rev) {
            status.controller_revision_ref = Some(ControllerRevisionRef {
                name: Some(rev.to_string()),
                ..Default::default()
            });
        }
    }
    let needs_revision = status.controller_revision_ref.is_none();
    (status, needs_revision)
}

/// One sync of the `Reference` policy (see the module documentation). `instancetype` and
/// `preference` are the referenced objects as read from the API (with kind and metadata); each
/// is needed only when its revision must be created.
pub fn store_plan(
    vm: &VirtualMachine,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
) -> Result<StorePlan, RevisionError> {
    let mut plan = StorePlan::default();
    let status = vm.status.as_ref();
    if let Some(m) = &vm.spec.instancetype {
        let matcher = Matcher {
            name: m.name.clone(),
            kind: m.kind.clone(),
            infer_from_volume: m.infer_from_volume.clone(),
            infer_from_volume_failure_policy: m.infer_from_volume_failure_policy.clone(),
            revision_name: m.revision_name.clone(),
        };
        let current = status.and_then(|s| s.instancetype_ref.as_ref());
        let (mut next, needs) = sync_status_ref(&matcher, current);
        if needs {
            const FIELD: &str = "spec.instancetype";
            let object = instancetype.ok_or(RevisionError::MissingObject { field: FIELD })?;
            let spec: InstancetypeSpec =
                serde_json::from_value(object.get("spec").cloned().unwrap_or(Value::Null))
                    .map_err(|e| RevisionError::BadObject {
                        field: FIELD,
                        reason: e.to_string(),
                    })?;
            let template = vm.spec.template.spec.clone().unwrap_or_default();
            apply(
                "spec.template.spec",
                &template,
                &vm.spec.template.metadata,
                Some(&spec),
                None,
            )?;
            let revision = controller_revision(vm, object);
            next.controller_revision_ref = Some(ControllerRevisionRef {
                name: revision["metadata"]["name"].as_str().map(str::to_string),
                ..Default::default()
            });
            plan.create.push(revision);
        }
        if current != Some(&next) {
            plan.status_patch
                .push(json!({"op": "add", "path": "/status/instancetypeRef", "value": next}));
        }
    }
    if let Some(m) = &vm.spec.preference {
        let matcher = Matcher {
            name: m.name.clone(),
            kind: m.kind.clone(),
            infer_from_volume: m.infer_from_volume.clone(),
            infer_from_volume_failure_policy: m.infer_from_volume_failure_policy.clone(),
            revision_name: m.revision_name.clone(),
        };
        let current = status.and_then(|s| s.preference_ref.as_ref());
        let (mut next, needs) = sync_status_ref(&matcher, current);
        if needs {
            let object = preference.ok_or(RevisionError::MissingObject {
                field: "spec.preference",
            })?;
            let revision = controller_revision(vm, object);
            next.controller_revision_ref = Some(ControllerRevisionRef {
                name: revision["metadata"]["name"].as_str().map(str::to_string),
                ..Default::default()
            });
            plan.create.push(revision);
        }
        if current != Some(&next) {
            plan.status_patch
                .push(json!({"op": "add", "path": "/status/preferenceRef", "value": next}));
        }
    }
    Ok(plan)
}
