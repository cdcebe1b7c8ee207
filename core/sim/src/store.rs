//! The simulated API server: objects as JSON with resourceVersions, UIDs, generations, graceful
//! deletion with finalizers, owner-reference garbage collection, and injected conflicts.
//!
//! Objects are stored as JSON (what patches apply to) and, for VMs and VMIs, re-serialised through
//! the typed structs on every write so that stored JSON and what a decision serialises from its
//! typed snapshot compare equal — the `test` operations of JSON patches depend on that.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{VirtualMachine, VirtualMachineInstance};
use kvrs_decide::patch::{apply_json_patch, apply_merge_patch, apply_strategic_merge_patch};
use kvrs_decide::{ApiWrite, PatchType, WriteOp, format_rfc3339};

/// Resource names the simulator knows by type.
pub mod res {
    /// VirtualMachines.
    pub const VMS: &str = "virtualmachines";
    /// VirtualMachineInstances.
    pub const VMIS: &str = "virtualmachineinstances";
    /// Pods.
    pub const PODS: &str = "pods";
    /// ControllerRevisions.
    pub const REVISIONS: &str = "controllerrevisions";
}

/// A stored object, parsed once per write and shared with every cache that receives it.
// Always behind an `Arc`, so the size difference of the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Obj {
    /// A VirtualMachine.
    Vm(VirtualMachine),
    /// A VirtualMachineInstance.
    Vmi(VirtualMachineInstance),
    /// Anything else, as JSON.
    Other(Value),
}

impl Obj {
    /// The VM, if this is one.
    pub fn vm(&self) -> Option<&VirtualMachine> {
        match self {
            Obj::Vm(v) => Some(v),
            _ => None,
        }
    }

    /// The VMI, if this is one.
    pub fn vmi(&self) -> Option<&VirtualMachineInstance> {
        match self {
            Obj::Vmi(v) => Some(v),
            _ => None,
        }
    }

    /// The JSON, if this is an untyped object.
    pub fn json(&self) -> Option<&Value> {
        match self {
            Obj::Other(v) => Some(v),
            _ => None,
        }
    }
}

/// Why the API server refused a write.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The object changed since it was read (or a conflict was injected).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A `test` operation or a precondition failed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Create of an existing name.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The object is not there.
    #[error("not found: {0}")]
    NotFound(String),
}

impl From<ApiError> for kvrs_runtime::ApiError {
    fn from(e: ApiError) -> Self {
        use kvrs_runtime::ApiErrorKind as K;
        let kind = match &e {
            ApiError::Conflict(_) => K::Conflict,
            ApiError::Invalid(_) => K::Invalid,
            ApiError::AlreadyExists(_) => K::AlreadyExists,
            ApiError::NotFound(_) => K::NotFound,
        };
        kvrs_runtime::ApiError::new(kind, e.to_string())
    }
}

/// A change to deliver to watchers.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// Resource name.
    pub resource: &'static str,
    /// `namespace/name`.
    pub key: String,
    /// The object after the change; `None` when it was removed.
    pub obj: Option<Arc<Obj>>,
    /// The object before the change (for deletions: the last state).
    pub old: Option<Arc<Obj>>,
}

#[derive(Debug)]
struct Stored {
    value: Value,
    obj: Arc<Obj>,
}

fn intern(resource: &str) -> &'static str {
    match resource {
        res::VMS => res::VMS,
        res::VMIS => res::VMIS,
        res::PODS => res::PODS,
        res::REVISIONS => res::REVISIONS,
        _ => "other",
    }
}

fn typed(resource: &str, value: &mut Value) -> Arc<Obj> {
    // Deserialising from a borrowed `Value` avoids a deep copy of the object on every write.
    let obj = match resource {
        res::VMS => VirtualMachine::deserialize(&*value).ok().map(Obj::Vm),
        res::VMIS => VirtualMachineInstance::deserialize(&*value)
            .ok()
            .map(Obj::Vmi),
        _ => None,
    };
    let obj = obj.unwrap_or_else(|| Obj::Other(value.clone()));
    // Store exactly what the typed view serialises to.
    match &obj {
        Obj::Vm(v) => *value = serde_json::to_value(v).unwrap_or_else(|_| value.clone()),
        Obj::Vmi(v) => *value = serde_json::to_value(v).unwrap_or_else(|_| value.clone()),
        Obj::Other(_) => {}
    }
    Arc::new(obj)
}

fn key_of(value: &Value) -> String {
    let ns = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{ns}/{name}")
}

/// What a write needs to know about the object it replaces, read before the stored JSON is
/// patched in place.
struct Prior {
    deletion_timestamp: Option<Value>,
    generation: Option<i64>,
    /// The spec, kept only for VMs (a spec change bumps their generation).
    spec: Option<Value>,
}

impl Prior {
    fn of(resource: &str, cur: &Value) -> Self {
        Self {
            deletion_timestamp: cur.pointer("/metadata/deletionTimestamp").cloned(),
            generation: cur.pointer("/metadata/generation").and_then(Value::as_i64),
            spec: if resource == res::VMS {
                cur.get("spec").cloned()
            } else {
                None
            },
        }
    }
}

/// The stored JSON of a parsed object (what `typed` stored next to it).
fn json_of(obj: &Obj) -> Value {
    match obj {
        Obj::Vm(v) => serde_json::to_value(v).unwrap_or(Value::Null),
        Obj::Vmi(v) => serde_json::to_value(v).unwrap_or(Value::Null),
        Obj::Other(v) => v.clone(),
    }
}

/// A copy of `cur` whose status is `status` (or `cur`'s own status when `None`), copying every
/// other field but never the old status it replaces; field order is kept.
fn with_status(cur: &Value, status: Option<Value>) -> Value {
    let Some(map) = cur.as_object() else {
        let mut n = cur.clone();
        if let Some(s) = status {
            n["status"] = s;
        }
        return n;
    };
    let mut status = status;
    let mut out = serde_json::Map::with_capacity(map.len() + 1);
    for (k, v) in map {
        let v = match (k.as_str(), status.take()) {
            ("status", Some(s)) => s,
            (_, s) => {
                status = s;
                v.clone()
            }
        };
        out.insert(k.clone(), v);
    }
    if let Some(s) = status {
        out.insert("status".to_string(), s);
    }
    Value::Object(out)
}

fn finalizers_empty(v: &Value) -> bool {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
}

/// Statistics of the API server.
#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    /// Successful writes.
    pub writes: u64,
    /// Conflicts injected.
    pub injected_conflicts: u64,
    /// Writes refused for other reasons.
    pub refused: u64,
    /// Refusals by resource and reason.
    pub refused_by: BTreeMap<String, u64>,
}

/// The in-memory API server.
#[derive(Debug, Default)]
pub struct ApiServer {
    objects: HashMap<&'static str, BTreeMap<String, Stored>>,
    rv: u64,
    uid: u64,
    names: u64,
    /// Dependents by owner UID, for garbage collection.
    dependents: HashMap<String, BTreeSet<(&'static str, String)>>,
    pending: Vec<WatchEvent>,
    /// Counters.
    pub stats: StoreStats,
}

impl ApiServer {
    /// The stored JSON of an object.
    pub fn get(&self, resource: &str, key: &str) -> Option<&Value> {
        self.objects.get(resource)?.get(key).map(|s| &s.value)
    }

    /// The parsed object.
    pub fn get_obj(&self, resource: &str, key: &str) -> Option<Arc<Obj>> {
        self.objects.get(resource)?.get(key).map(|s| s.obj.clone())
    }

    /// Every object of a resource, by key.
    pub fn list(&self, resource: &str) -> impl Iterator<Item = (&String, &Arc<Obj>)> {
        self.objects
            .get(resource)
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, s)| (k, &s.obj)))
    }

    /// Number of objects of a resource.
    pub fn count(&self, resource: &str) -> usize {
        self.objects.get(resource).map_or(0, BTreeMap::len)
    }

    /// Watch events produced since the last call.
    pub fn take_events(&mut self) -> Vec<WatchEvent> {
        std::mem::take(&mut self.pending)
    }

    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn put(&mut self, resource: &'static str, key: String, mut value: Value) {
        let obj = typed(resource, &mut value);
        let old = self.objects.entry(resource).or_default().insert(
            key.clone(),
            Stored {
                value,
                obj: obj.clone(),
            },
        );
        self.pending.push(WatchEvent {
            resource,
            key,
            obj: Some(obj),
            old: old.map(|s| s.obj),
        });
    }

    fn remove(&mut self, resource: &'static str, key: &str, now_unix: i64) {
        let Some(old) = self.objects.get_mut(resource).and_then(|m| m.remove(key)) else {
            return;
        };
        self.pending.push(WatchEvent {
            resource,
            key: key.to_string(),
            obj: None,
            old: Some(old.obj.clone()),
        });
        // Background garbage collection of dependents.
        // Read from the parsed object: the stored JSON was taken when a patch edits it in place.
        let uid = match &*old.obj {
            Obj::Vm(v) => v.metadata.uid.clone(),
            Obj::Vmi(v) => v.metadata.uid.clone(),
            Obj::Other(v) => v
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
        .unwrap_or_default();
        if let Some(deps) = self.dependents.remove(&uid) {
            for (r, k) in deps {
                let _ = self.delete(r, &k, None, now_unix);
            }
        }
    }

    /// Creates an object (as a user or a controller would).
    pub fn create(
        &mut self,
        resource: &str,
        mut value: Value,
        now_unix: i64,
    ) -> Result<String, ApiError> {
        let resource = intern(resource);
        if let Some(prefix) = value
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            && value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            self.names += 1;
            let name = format!("{prefix}{:05x}", self.names);
            value["metadata"]["name"] = json!(name);
        }
        if value.pointer("/metadata/namespace").is_none() {
            value["metadata"]["namespace"] = json!("default");
        }
        let key = key_of(&value);
        if self.get(resource, &key).is_some() {
            self.stats.refused += 1;
            return Err(ApiError::AlreadyExists(format!("{resource} {key}")));
        }
        self.uid += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uid);
        let rv = self.next_rv();
        let md = &mut value["metadata"];
        md["uid"] = json!(uid);
        md["resourceVersion"] = json!(rv);
        md["creationTimestamp"] = json!(format_rfc3339(now_unix));
        if resource == res::VMS {
            md["generation"] = json!(1);
        }
        for owner in value
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(o) = owner.get("uid").and_then(Value::as_str) {
                self.dependents
                    .entry(o.to_string())
                    .or_default()
                    .insert((resource, key.clone()));
            }
        }
        self.stats.writes += 1;
        self.put(resource, key.clone(), value);
        Ok(key)
    }

    /// Deletes an object: marks it when finalizers hold it, removes it otherwise.
    pub fn delete(
        &mut self,
        resource: &str,
        key: &str,
        precondition_uid: Option<&str>,
        now_unix: i64,
    ) -> Result<(), ApiError> {
        let resource = intern(resource);
        let Some(cur) = self.get(resource, key) else {
            return Err(ApiError::NotFound(format!("{resource} {key}")));
        };
        // Only the marking path below needs a copy of the object; the checks read it in place.
        let uid_ok = precondition_uid
            .is_none_or(|uid| cur.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid));
        let no_finalizers = finalizers_empty(cur);
        let deleting = cur.pointer("/metadata/deletionTimestamp").is_some();
        if !uid_ok {
            self.stats.refused += 1;
            return Err(ApiError::Conflict(format!(
                "{resource} {key}: UID precondition failed"
            )));
        }
        // Pods terminate gracefully: the kubelet removes them once their containers stopped.
        let graceful = resource == res::PODS;
        if no_finalizers && !graceful {
            self.stats.writes += 1;
            self.remove(resource, key, now_unix);
            return Ok(());
        }
        if deleting {
            return Ok(());
        }
        let Some(mut next) = self.get(resource, key).cloned() else {
            return Err(ApiError::NotFound(format!("{resource} {key}")));
        };
        next["metadata"]["deletionTimestamp"] = json!(format_rfc3339(now_unix));
        next["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.stats.writes += 1;
        self.put(resource, key.to_string(), next);
        Ok(())
    }

    /// Removes a terminated pod for good (what the kubelet does after the containers stopped).
    pub fn remove_pod(&mut self, key: &str, now_unix: i64) {
        self.remove(res::PODS, key, now_unix);
    }

    /// Applies a decision's write. `inject_conflict` makes it fail as if someone wrote first.
    pub fn apply(
        &mut self,
        w: &ApiWrite,
        now_unix: i64,
        inject_conflict: bool,
    ) -> Result<(), ApiError> {
        let resource = intern(&w.resource);
        let key = format!("{}/{}", w.namespace, w.name);
        if inject_conflict {
            self.stats.injected_conflicts += 1;
            return Err(ApiError::Conflict(format!("{resource} {key}: injected")));
        }
        match &w.op {
            WriteOp::Create { object } => {
                let mut object = object.clone();
                object["metadata"]["namespace"] = json!(w.namespace);
                if !w.name.is_empty() {
                    object["metadata"]["name"] = json!(w.name);
                }
                self.create(resource, object, now_unix).map(|_| ())
            }
            WriteOp::Delete { precondition_uid } => {
                self.delete(resource, &key, precondition_uid.as_deref(), now_unix)
            }
            WriteOp::Update { object } => {
                let Some(cur) = self.get(resource, &key) else {
                    return Err(ApiError::NotFound(key));
                };
                let rv = object.pointer("/metadata/resourceVersion");
                if rv.is_some() && rv != cur.pointer("/metadata/resourceVersion") {
                    self.stats.refused += 1;
                    return Err(ApiError::Conflict(format!(
                        "{resource} {key}: stale resourceVersion"
                    )));
                }
                let prior = Prior::of(resource, cur);
                let next = if w.subresource.as_deref() == Some("status") {
                    with_status(
                        cur,
                        Some(object.get("status").cloned().unwrap_or(Value::Null)),
                    )
                } else {
                    let mut n = object.clone();
                    n["metadata"]["uid"] = cur["metadata"]["uid"].clone();
                    n["metadata"]["creationTimestamp"] =
                        cur["metadata"]["creationTimestamp"].clone();
                    n
                };
                self.replace(resource, &key, prior, next, now_unix)
            }
            WriteOp::Patch { patch_type, patch } => {
                let status_only = w.subresource.as_deref() == Some("status");
                let Some(stored) = self.objects.get_mut(resource).and_then(|m| m.get_mut(&key))
                else {
                    return Err(ApiError::NotFound(key));
                };
                let prior = Prior::of(resource, &stored.value);
                // A whole-object patch edits the stored JSON in place instead of a copy; if it
                // fails, the JSON is rebuilt from the parsed object, which by construction (see
                // `typed`) serialises to exactly the stored JSON.
                let mut next = if status_only {
                    stored.value.clone()
                } else {
                    std::mem::take(&mut stored.value)
                };
                let result = match patch_type {
                    PatchType::Json => {
                        apply_json_patch(&mut next, patch).map_err(|e| e.to_string())
                    }
                    PatchType::Merge => {
                        apply_merge_patch(&mut next, patch);
                        Ok(())
                    }
                    PatchType::StrategicMerge => {
                        apply_strategic_merge_patch(&mut next, patch);
                        Ok(())
                    }
                };
                if let Err(e) = result {
                    if !status_only {
                        stored.value = json_of(&stored.obj);
                    }
                    self.stats.refused += 1;
                    let why = e.split(':').next().unwrap_or("").to_string();
                    *self
                        .stats
                        .refused_by
                        .entry(format!(
                            "{resource} patch {} {why}",
                            w.subresource.as_deref().unwrap_or("")
                        ))
                        .or_default() += 1;
                    return Err(ApiError::Invalid(format!("{resource} {key}: {e}")));
                }
                if status_only {
                    // A status patch changes nothing but the status.
                    let status = next.as_object_mut().and_then(|m| m.remove("status"));
                    next = with_status(&stored.value, status);
                }
                self.replace(resource, &key, prior, next, now_unix)
            }
        }
    }

    /// Replaces an object after a write: bumps resourceVersion (and generation on spec changes),
    /// and removes an object being deleted once its last finalizer is gone.
    fn replace(
        &mut self,
        resource: &'static str,
        key: &str,
        prior: Prior,
        mut next: Value,
        now_unix: i64,
    ) -> Result<(), ApiError> {
        // Deletion is one-way; finalizers cannot be added to an object being deleted.
        if let Some(ts) = prior.deletion_timestamp {
            next["metadata"]["deletionTimestamp"] = ts;
        }
        if resource == res::VMS && prior.spec.as_ref() != next.get("spec") {
            next["metadata"]["generation"] = json!(prior.generation.unwrap_or(1) + 1);
        }
        next["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.stats.writes += 1;
        if next.pointer("/metadata/deletionTimestamp").is_some()
            && finalizers_empty(&next)
            && resource != res::PODS
        {
            self.remove(resource, key, now_unix);
            return Ok(());
        }
        self.put(resource, key.to_string(), next);
        Ok(())
    }

    /// Edits an object as a third party would (the simulator's markers), without a conflict check.
    pub fn third_party_edit(&mut self, resource: &str, key: &str, edit: impl FnOnce(&mut Value)) {
        let resource = intern(resource);
        let Some(mut next) = self.get(resource, key).cloned() else {
            return;
        };
        edit(&mut next);
        next["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.put(resource, key.to_string(), next);
    }
}
