//! API writes: what a decision asks the API server to do, with the preconditions that make the
//! write safe against a concurrent change and the expectation the shell raises before sending it.

use serde_json::{Map, Value, json};

/// The body of a patch and how the server must interpret it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON patch (`application/json-patch+json`); `test` operations make it conditional.
    Json,
    /// RFC 7386 JSON merge patch (`application/merge-patch+json`).
    Merge,
    /// Kubernetes strategic merge patch (`application/strategic-merge-patch+json`).
    StrategicMerge,
}

impl PatchType {
    /// The content type.
    pub fn content_type(&self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// The verb of a write and its payload.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteOp {
    /// Create `object` (complete, as it is to be stored).
    Create {
        /// The object.
        object: Value,
    },
    /// Replace the object (or its subresource) with `object`.
    Update {
        /// The object.
        object: Value,
    },
    /// Patch the object.
    Patch {
        /// How to read `patch`.
        patch_type: PatchType,
        /// The patch document.
        patch: Value,
    },
    /// Delete the object.
    Delete {
        /// Only delete if the stored object still has this UID (a newer object of the same name
        /// must not be deleted by a decision about an older one).
        precondition_uid: Option<String>,
    },
}

impl WriteOp {
    /// `create`, `update`, `patch` or `delete`.
    pub fn verb(&self) -> &'static str {
        match self {
            WriteOp::Create { .. } => "create",
            WriteOp::Update { .. } => "update",
            WriteOp::Patch { .. } => "patch",
            WriteOp::Delete { .. } => "delete",
        }
    }
}

/// Bookkeeping the shell must do in its expectations store BEFORE sending the paired write, and
/// undo if the write fails. It is what keeps a controller whose cache lags behind its own writes
/// from creating (or deleting) the same thing twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expectation {
    /// Expect the cache to show `count` more objects created under the controller key `key`.
    Creations {
        /// Controller key (`namespace/name`).
        key: String,
        /// How many creations.
        count: u32,
    },
    /// Expect the cache to show the controller's own update of the object `key` before acting on
    /// it again (a VMI controller that acted on its pre-update copy would undo its own write).
    ObservedUpdate {
        /// The object's key (`namespace/name`).
        key: String,
    },
    /// Expect the cache to show the controller's own update of a launcher pod before the VMI
    /// controller acts on that pod's VMI again: a reconcile woken by something else (its own VMI
    /// status write) would read the unpatched pod and patch it a second time.
    ObservedPodUpdate {
        /// The key (`namespace/name`) of the VMI the pod runs.
        vmi_key: String,
    },
    /// Expect the cache to show these objects (by `namespace/name`) deleted under `key`.
    Deletions {
        /// Controller key (`namespace/name`).
        key: String,
        /// The objects to be seen gone.
        objects: Vec<String>,
    },
}

/// One API write: verb, target and payload, plus the expectation to raise first.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiWrite {
    /// Plural resource name, e.g. `virtualmachineinstances`, `pods`, `controllerrevisions`.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
    /// Namespace of the target.
    pub namespace: String,
    /// Name of the target (for a create with `generateName`, the name the oracle server assigns).
    pub name: String,
    /// Verb and payload.
    pub op: WriteOp,
    /// Expectation to raise before sending (and lower if the write fails).
    pub expectation: Option<Expectation>,
    /// Neither this write nor the one before it in the plan depends on the other, so a shell
    /// may send the two at the same time (`kvrs_executor::execute` does). Set by a decision only
    /// where KubeVirt's order of the two is incidental; the writes after them still wait for
    /// both.
    pub alongside_previous: bool,
}

impl ApiWrite {
    /// A write without expectation.
    pub fn new(resource: &str, namespace: &str, name: &str, op: WriteOp) -> Self {
        Self {
            resource: resource.into(),
            subresource: None,
            namespace: namespace.into(),
            name: name.into(),
            op,
            expectation: None,
            alongside_previous: false,
        }
    }

    /// The same write against a subresource.
    pub fn on_subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(sub.into());
        self
    }

    /// The same write with an expectation raised first.
    pub fn expecting(mut self, e: Expectation) -> Self {
        self.expectation = Some(e);
        self
    }

    /// The same write, independent of the write before it (see
    /// [`alongside_previous`](Self::alongside_previous)).
    pub fn independent_of_previous(mut self) -> Self {
        self.alongside_previous = true;
        self
    }

    /// Which client KubeVirt would use: `kubevirt` for kubevirt.io resources, `k8s` otherwise.
    pub fn client(&self) -> &'static str {
        match self.resource.as_str() {
            "virtualmachines" | "virtualmachineinstances" | "virtualmachineinstancemigrations" => {
                "kubevirt"
            }
            _ => "k8s",
        }
    }

    /// The write in the shape of an oracle `actions` entry.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("client".into(), json!(self.client()));
        m.insert("verb".into(), json!(self.op.verb()));
        m.insert("resource".into(), json!(self.resource));
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        m.insert("namespace".into(), json!(self.namespace));
        m.insert("name".into(), json!(self.name));
        match &self.op {
            WriteOp::Create { object } | WriteOp::Update { object } => {
                m.insert("object".into(), object.clone());
            }
            WriteOp::Patch { patch_type, patch } => {
                m.insert("patchType".into(), json!(patch_type.content_type()));
                m.insert("patch".into(), patch.clone());
            }
            WriteOp::Delete { precondition_uid } => {
                if let Some(uid) = precondition_uid {
                    m.insert(
                        "DeleteOptions".into(),
                        json!({ "preconditions": { "uid": uid } }),
                    );
                }
            }
        }
        Value::Object(m)
    }
}
