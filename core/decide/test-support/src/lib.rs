//! # kvrs-decide-test-support
//!
//! Test aids for `kvrs-decide`'s plans. [`ObjectStore`] is an in-memory API server that applies a
//! [`Plan`]'s writes to JSON objects with the semantics that matter to the controllers:
//! finalizers delay deletion, a bound pod is deleted gracefully, `generateName`, UID
//! preconditions, patch `test` failures. Tests feed a decision's result back as the next snapshot
//! with it (kvrs-decide's own store tests, the oracle replay of KubeVirt's VM scenarios in
//! `kvrs-tests`).
//!
//! It is deliberately small — no resource versions, no admission, no watch — and not part of
//! any published API (`publish = false`): a cluster-like store with Kubernetes semantics is
//! `kvrs-store`.
//!
//! ```
//! use kvrs_decide::{ApiWrite, Plan, Requeue, WriteOp};
//! use kvrs_decide_test_support::ObjectStore;
//! use serde_json::json;
//!
//! let mut store = ObjectStore::new();
//! store.insert("pods", json!({"metadata": {"name": "p", "namespace": "ns", "finalizers": ["f"]}}));
//!
//! let mut plan = Plan::idle();
//! plan.push_write(ApiWrite::new("pods", "ns", "p", WriteOp::Delete { precondition_uid: None }));
//! assert_eq!(store.execute(&plan, 0), (Requeue::forget(), None));
//! // A finalizer holds the pod: it is only marked for deletion.
//! let pod = store.get("pods", "ns", "p").unwrap();
//! assert_eq!(pod["metadata"]["deletionTimestamp"], "1970-01-01T00:00:30Z");
//!
//! // Deleting what is not there fails the plan, as the API server would.
//! let mut plan = Plan::idle();
//! plan.push_write(ApiWrite::new("pods", "ns", "q", WriteOp::Delete { precondition_uid: None }));
//! let (requeue, error) = store.execute(&plan, 0);
//! assert_eq!(requeue, Requeue::rate_limited());
//! assert_eq!(error.as_deref(), Some("pods \"q\" not found"));
//! ```

#![warn(unreachable_pub)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use kvrs_api::json_pointer::JsonPointer;
use kvrs_decide::meta::json_namespace;
use kvrs_decide::patch::{apply_json_patch, apply_merge_patch, apply_strategic_merge_patch};
use kvrs_decide::{ApiWrite, PatchType, Plan, Requeue, WriteOp, format_rfc3339};

/// Objects by `(resource, namespace, name)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectStore {
    /// The stored objects.
    pub objects: BTreeMap<(String, String, String), Value>,
    /// Suffix given to `generateName` creates without a name.
    pub generate_suffix: String,
}

fn group_of(resource: &str) -> &'static str {
    match resource {
        "virtualmachines" | "virtualmachineinstances" | "virtualmachineinstancemigrations" => {
            ".kubevirt.io"
        }
        "controllerrevisions" => ".apps",
        "datavolumes" => ".cdi.kubevirt.io",
        _ => "",
    }
}

/// The API server's not-found message for `resource`/`name`.
fn not_found(resource: &str, name: &str) -> String {
    format!("{resource}{} \"{name}\" not found", group_of(resource))
}

impl ObjectStore {
    /// An empty store naming generated objects with suffix `00000`, as the oracles' fake does.
    pub fn new() -> Self {
        Self {
            objects: BTreeMap::new(),
            generate_suffix: "00000".into(),
        }
    }

    /// Stores `obj` under `resource` (namespace `default` when unset).
    pub fn insert(&mut self, resource: &str, obj: Value) {
        let ns = json_namespace(&obj).to_string();
        let name = obj
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.objects.insert((resource.into(), ns, name), obj);
    }

    /// The object, if stored.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(resource.into(), ns.into(), name.into()))
    }

    /// All objects of `resource`.
    pub fn list<'a>(&'a self, resource: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .iter()
            .filter(move |((r, _, _), _)| r == resource)
            .map(|(_, v)| v)
    }

    /// Applies the plan's writes in order until one fails. Returns the plan's outcome as the
    /// shell would see it: on failure the error and a rate-limited requeue.
    pub fn execute(&mut self, plan: &Plan, now: i64) -> (Requeue, Option<String>) {
        for w in plan.writes() {
            if let Err(e) = self.apply(w, now) {
                return (Requeue::rate_limited(), Some(e));
            }
        }
        (
            plan.queue.clone(),
            plan.error.as_ref().map(|e| e.message.clone()),
        )
    }

    /// Applies one write.
    pub fn apply(&mut self, w: &ApiWrite, now: i64) -> Result<(), String> {
        let key = (w.resource.clone(), w.namespace.clone(), w.name.clone());
        match &w.op {
            WriteOp::Create { object } => {
                let mut obj = object.clone();
                let mut name = w.name.clone();
                if obj
                    .at("/metadata/name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    let prefix = obj
                        .at("/metadata/generateName")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    name = format!("{prefix}{}", self.generate_suffix);
                    obj["metadata"]["name"] = json!(name);
                }
                let key = (w.resource.clone(), w.namespace.clone(), name.clone());
                if self.objects.contains_key(&key) {
                    return Err(format!(
                        "{}{} \"{name}\" already exists",
                        w.resource,
                        group_of(&w.resource)
                    ));
                }
                self.objects.insert(key, obj);
                Ok(())
            }
            WriteOp::Update { object } => {
                let cur = self
                    .objects
                    .get_mut(&key)
                    .ok_or_else(|| not_found(&w.resource, &w.name))?;
                let had = finalizer_count(cur);
                if w.subresource.as_deref() == Some("status") {
                    cur["status"] = object.get("status").cloned().unwrap_or(Value::Null);
                } else {
                    let status = cur.get("status").cloned();
                    *cur = object.clone();
                    if let Some(s) = status.filter(|_| w.resource == "virtualmachines") {
                        cur["status"] = s;
                    }
                }
                if had > 0 {
                    self.finish_deletion(&key);
                }
                Ok(())
            }
            WriteOp::Patch { patch_type, patch } => {
                let cur = self
                    .objects
                    .get_mut(&key)
                    .ok_or_else(|| not_found(&w.resource, &w.name))?;
                let mut next = cur.clone();
                match patch_type {
                    PatchType::Json => {
                        apply_json_patch(&mut next, patch).map_err(|e| e.to_string())?
                    }
                    PatchType::Merge => apply_merge_patch(&mut next, patch),
                    PatchType::StrategicMerge => apply_strategic_merge_patch(&mut next, patch),
                }
                let had = finalizer_count(cur);
                *cur = next;
                if had > 0 {
                    self.finish_deletion(&key);
                }
                Ok(())
            }
            WriteOp::Delete { precondition_uid } => {
                let cur = self
                    .objects
                    .get_mut(&key)
                    .ok_or_else(|| not_found(&w.resource, &w.name))?;
                if let Some(uid) = precondition_uid
                    && cur.at("/metadata/uid").and_then(Value::as_str) != Some(uid.as_str())
                {
                    return Err(format!("Precondition failed: UID in precondition: {uid}"));
                }
                let has_finalizers = cur
                    .at("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
                let bound_pod = w.resource == "pods"
                    && cur
                        .at("/spec/nodeName")
                        .and_then(Value::as_str)
                        .is_some_and(|n| !n.is_empty());
                if has_finalizers || bound_pod {
                    if cur
                        .at("/metadata/deletionTimestamp")
                        .is_none_or(Value::is_null)
                    {
                        let grace = cur
                            .at("/spec/terminationGracePeriodSeconds")
                            .and_then(Value::as_i64)
                            .unwrap_or(30);
                        cur["metadata"]["deletionTimestamp"] = json!(format_rfc3339(now + grace));
                        cur["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                    }
                } else {
                    self.objects.remove(&key);
                }
                Ok(())
            }
        }
    }

    /// A terminating object whose last finalizer was just removed is gone.
    fn finish_deletion(&mut self, key: &(String, String, String)) {
        let gone = self.objects.get(key).is_some_and(|o| {
            o.at("/metadata/deletionTimestamp")
                .is_some_and(|d| !d.is_null())
                && o.at("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
        });
        if gone {
            self.objects.remove(key);
        }
    }
}

fn finalizer_count(o: &Value) -> usize {
    o.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}
