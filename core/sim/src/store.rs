//! The simulated API server: [`kvrs_store::Store`] (typed, so stored VM/VMI JSON is exactly
//! what kvrs's structs serialise to) behind the simulator's plural-named, key-addressed calls,
//! with injected conflicts and watch events handed out in batches.

use foldhash::{HashMap, HashMapExt};
use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde_json::Value;

use kvrs_decide::{ApiWrite, WriteOp};
use kvrs_store::{
    CreateOptions, DeleteOptions, EventKind, ResourceType, Store, StoreError, StoreOptions,
};
pub use kvrs_store::{Obj, StoreStats, res};

use crate::writes::{Writer, rv_of};
use kvrs_decide::small_json::ScanPointer;

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

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let msg = e.to_string();
        match e {
            StoreError::Conflict { .. } => ApiError::Conflict(msg),
            StoreError::AlreadyExists { .. } => ApiError::AlreadyExists(msg),
            StoreError::NotFound { .. } => ApiError::NotFound(msg),
            StoreError::Invalid { .. }
            | StoreError::FieldInvalid { .. }
            | StoreError::BadRequest(_)
            | StoreError::BadSelector(_)
            | StoreError::Expired { .. } => ApiError::Invalid(msg),
        }
    }
}

impl From<ApiError> for kvrs_executor::ApiError {
    fn from(e: ApiError) -> Self {
        use kvrs_executor::ApiErrorKind as K;
        let kind = match &e {
            ApiError::Conflict(_) => K::Conflict,
            ApiError::Invalid(_) => K::Invalid,
            ApiError::AlreadyExists(_) => K::AlreadyExists,
            ApiError::NotFound(_) => K::NotFound,
        };
        kvrs_executor::ApiError::new(kind, e.to_string())
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

fn intern(resource: &str) -> &'static str {
    match resource {
        res::VMS => res::VMS,
        res::VMIS => res::VMIS,
        res::PODS => res::PODS,
        res::REVISIONS => res::REVISIONS,
        _ => "other",
    }
}

/// Whether a VMI's phase is `Running`.
fn phase_running(o: &Obj) -> bool {
    let phase = match o {
        Obj::Vmi(v) => v.status.as_ref().and_then(|s| s.phase.as_deref()),
        Obj::Other(v) => v.at("/status/phase").and_then(Value::as_str),
        Obj::Vm(_) => None,
    };
    phase == Some("Running")
}

fn resource(plural: &str) -> Arc<ResourceType> {
    kvrs_store::by_plural(plural)
        .unwrap_or_else(|| Arc::new(ResourceType::unknown("", "v1", plural, true)))
}

/// The in-memory API server. Derefs to the [`Store`] (its `stats` among others).
#[derive(Debug)]
pub struct ApiServer {
    store: Store,
    /// The resourceVersion of the last event moved to `pending`.
    seen: u64,
    pending: Vec<WatchEvent>,
    /// The latest time a call passed (for writes that have none, like third-party edits).
    now: i64,
    /// The client of the call in progress: its events are attributed to it.
    author: Writer,
    /// Who wrote the current version of each object, by resource and key (what a refused
    /// write is blamed on).
    /// Who wrote each object last, by resource then key (looked up by `&str`, and an object
    /// written again keeps its key `String`: one allocation per object, not per event).
    last_writer: HashMap<&'static str, HashMap<String, Writer>>,
    /// VMIs whose stored phase is `Running`, kept in step with every event (so a run can wait
    /// for all of them without listing every VMI).
    running_vmis: usize,
    /// Watch events by the writer kind that caused them and resource.
    pub events_by: std::collections::BTreeMap<(&'static str, &'static str), u64>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self {
            // Events are collected after every write, so the log needs only a write's worth.
            store: Store::new(StoreOptions {
                typed: true,
                history: 4096,
                keep_evicted: true,
            }),
            seen: 0,
            pending: Vec::new(),
            now: 0,
            author: Writer::OtherClient,
            last_writer: HashMap::new(),
            running_vmis: 0,
            events_by: Default::default(),
        }
    }
}

impl Deref for ApiServer {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl DerefMut for ApiServer {
    fn deref_mut(&mut self) -> &mut Store {
        &mut self.store
    }
}

impl ApiServer {
    /// Moves the store's new events to `pending`.
    fn collect(&mut self) {
        let Ok(events) = self.store.events_after(self.seen) else {
            // Unreachable while one write produces fewer events than the log keeps.
            return;
        };
        for e in events {
            let removed = e.kind == EventKind::Deleted;
            let resource = intern(&e.resource.plural);
            *self
                .events_by
                .entry((self.author.kind(), resource))
                .or_default() += 1;
            if resource == res::VMIS {
                let running =
                    |o: Option<&Arc<Obj>>| usize::from(o.is_some_and(|o| phase_running(o)));
                self.running_vmis += running((!removed).then_some(&e.object));
                self.running_vmis -= running(e.old.as_ref());
            }
            let writers = self.last_writer.entry(resource).or_default();
            if removed {
                writers.remove(&e.key);
            } else if let Some(by) = writers.get_mut(&e.key) {
                *by = self.author;
            } else {
                writers.insert(e.key.clone(), self.author);
            }
            self.pending.push(WatchEvent {
                resource,
                key: e.key.clone(),
                obj: (!removed).then(|| e.object.clone()),
                old: e.old.clone(),
            });
        }
        self.seen = self.store.resource_version();
    }

    /// How many VMIs are in phase `Running`.
    pub fn running_vmis(&self) -> usize {
        self.running_vmis
    }

    /// The stored JSON of an object (built from the struct of a VM or VMI).
    pub fn get(&self, resource: &str, key: &str) -> Option<Cow<'_, Value>> {
        self.store.get_json(&self::resource(resource), key)
    }

    /// The parsed object, borrowed.
    pub fn object(&self, resource: &str, key: &str) -> Option<&Arc<Obj>> {
        self.store.object(&self::resource(resource), key)
    }

    /// The current version of an object and the client that wrote it.
    pub fn last_write(&self, resource: &str, key: &str) -> Option<(u64, Writer)> {
        let rv = rv_of(&*self.get_obj(resource, key)?)?;
        let by = self
            .last_writer
            .get(resource)
            .and_then(|w| w.get(key))
            .copied()
            .unwrap_or(Writer::OtherClient);
        Some((rv, by))
    }

    /// The parsed object.
    pub fn get_obj(&self, resource: &str, key: &str) -> Option<Arc<Obj>> {
        self.store.get(&self::resource(resource), key)
    }

    /// Every object of a resource, by key.
    pub fn list(&self, resource: &str) -> impl Iterator<Item = (&String, &Arc<Obj>)> {
        self.store.iter(&self::resource(resource))
    }

    /// Number of objects of a resource.
    pub fn count(&self, resource: &str) -> usize {
        self.store.count(&self::resource(resource))
    }

    /// Watch events produced since the last call.
    pub fn take_events(&mut self) -> Vec<WatchEvent> {
        self.collect();
        std::mem::take(&mut self.pending)
    }

    /// Creates an object (as a user or a controller would); returns its key.
    pub fn create(
        &mut self,
        resource: &str,
        value: Value,
        now_unix: i64,
    ) -> Result<String, ApiError> {
        self.now = now_unix;
        let rt = self::resource(resource);
        let opts = CreateOptions {
            now: now_unix,
            ..Default::default()
        };
        let created = self.store.create(&rt, None, value, &opts);
        self.collect();
        let obj = created?;
        let json = kvrs_store::json_of(&obj);
        let md = json.get("metadata");
        let field = |f: &str| md.and_then(|m| m.get(f)).and_then(Value::as_str);
        Ok(rt.key(field("namespace"), field("name").unwrap_or("")))
    }

    /// Deletes an object: marks it when finalizers (or a graceful pod deletion) hold it,
    /// removes it otherwise.
    pub fn delete(
        &mut self,
        resource: &str,
        key: &str,
        precondition_uid: Option<&str>,
        now_unix: i64,
    ) -> Result<(), ApiError> {
        self.now = now_unix;
        let opts = DeleteOptions {
            uid: precondition_uid.map(str::to_string),
            ..Default::default()
        };
        let result = self
            .store
            .delete(&self::resource(resource), key, &opts, now_unix);
        self.collect();
        result.map(|_| ()).map_err(ApiError::from)
    }

    /// Removes a terminated pod for good (what the kubelet does after the containers stopped).
    pub fn remove_pod(&mut self, key: &str, now_unix: i64) {
        self.now = now_unix;
        self.author = Writer::Kubelet;
        self.store.remove(&self::resource(res::PODS), key, now_unix);
        self.collect();
        self.author = Writer::OtherClient;
    }

    /// Applies a decision's write. `inject_conflict` makes it fail as if someone wrote first.
    pub fn apply(
        &mut self,
        w: &ApiWrite,
        writer: Writer,
        now_unix: i64,
        inject_conflict: bool,
    ) -> Result<(), ApiError> {
        self.now = now_unix;
        let rt = self::resource(&w.resource);
        let key = rt.key(Some(&w.namespace), &w.name);
        if inject_conflict {
            self.store.stats.injected_conflicts += 1;
            return Err(ApiError::Conflict(format!(
                "{} {key}: injected",
                w.resource
            )));
        }
        let sub = w.subresource.as_deref();
        self.author = writer;
        let result = match &w.op {
            WriteOp::Create { object } => {
                let mut object = object.clone();
                if !w.name.is_empty() {
                    object["metadata"]["name"] = Value::String(w.name.clone());
                }
                let opts = CreateOptions {
                    now: now_unix,
                    ..Default::default()
                };
                self.store
                    .create(&rt, Some(&w.namespace), object, &opts)
                    .map(|_| ())
            }
            WriteOp::Delete { precondition_uid } => {
                let opts = DeleteOptions {
                    uid: precondition_uid.clone(),
                    ..Default::default()
                };
                self.store.delete(&rt, &key, &opts, now_unix).map(|_| ())
            }
            WriteOp::Update { object } => self
                .store
                .update(&rt, &key, sub, object.clone(), now_unix)
                .map(|_| ()),
            WriteOp::Patch { patch_type, patch } => self
                .store
                .patch(&rt, &key, sub, *patch_type, patch, now_unix)
                .map(|_| ()),
        };
        self.collect();
        self.author = Writer::OtherClient;
        result.map_err(ApiError::from)
    }

    /// Edits an object as a third party would (the simulator's markers), without a conflict check.
    pub fn third_party_edit(&mut self, resource: &str, key: &str, edit: impl FnOnce(&mut Value)) {
        self.edit_as(Writer::OtherClient, resource, key, edit);
    }

    /// [`Self::third_party_edit`] of the top-level `fields` alone (the markers'): a typed VM or
    /// VMI is then neither serialised nor parsed whole ([`Store::edit_fields_unchecked`]).
    pub fn third_party_edit_fields(
        &mut self,
        resource: &str,
        key: &str,
        fields: &[&str],
        edit: impl FnOnce(&mut Value),
    ) {
        let now = self.now;
        self.author = Writer::OtherClient;
        self.store
            .edit_fields_unchecked(&self::resource(resource), key, fields, edit, now);
        self.collect();
    }

    /// Edits an object without a conflict check, as `writer` (the kubelet's pod binding and
    /// status).
    pub fn edit_as(
        &mut self,
        writer: Writer,
        resource: &str,
        key: &str,
        edit: impl FnOnce(&mut Value),
    ) {
        let now = self.now;
        self.author = writer;
        self.store
            .edit_unchecked(&self::resource(resource), key, edit, now);
        self.collect();
        self.author = Writer::OtherClient;
    }
}
