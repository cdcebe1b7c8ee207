//! The store: tables of objects by resource, one global resourceVersion counter, and the
//! bounded event log every write is recorded in (what watches replay).
//!
//! Everything is plain data in and out: the caller supplies the time (`now`, Unix seconds) and,
//! when it wants them, UIDs and generateName suffixes, so the same inputs always give the same
//! store — the simulator depends on that.

use foldhash::{HashMap, HashMapExt};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};

use kvrs_decide::PatchType;
use kvrs_decide::format_rfc3339;
use kvrs_decide::patch::{apply_json_patch, apply_merge_patch, apply_strategic_merge_patch};

use crate::error::StoreError;
use crate::names;
use crate::object::{
    Obj, finalizers_empty, meta_mut, meta_str, owner_uids, owner_uids_of, parse, spec_differs,
    with_status,
};
use crate::resource::{ResourceType, Typed};
use crate::selector::Selector;
use crate::watch::{json_of, selects};
use kvrs_decide::small_json::ScanPointer;

mod in_place;

/// How a store is built.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Keep VMs and VMIs as kvrs's typed structs alone, their JSON built when read (the
    /// simulator); off, objects are stored exactly as written (an API server for real clients,
    /// which must not lose fields kvrs's structs do not model).
    pub typed: bool,
    /// Events kept for watches; a watch from an older resourceVersion is [`StoreError::Expired`].
    pub history: usize,
    /// Keep the events pushed out of the log (and the versions only they held) until
    /// [`Store::take_evicted`] instead of dropping them on the writer's thread: dropping an
    /// object version is a walk over its whole tree, which an owner with an idle thread (the
    /// simulator) does there.
    pub keep_evicted: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            typed: false,
            history: 10_000,
            keep_evicted: false,
        }
    }
}

/// Whether an admission hook sees a create or an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A new object.
    Create,
    /// A replaced or patched object (or its status).
    Update,
}

/// Called with every object about to be stored by a create or update; it may change the
/// object (defaulting) or refuse it (validation, a 422 Invalid with its message). The string
/// names the resource as `plural` or `plural/subresource`.
pub type AdmitFn =
    dyn Fn(Operation, &ResourceType, &str, &mut Value) -> Result<(), String> + Send + Sync;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Created.
    Added,
    /// Changed (including marked for deletion).
    Modified,
    /// Removed.
    Deleted,
}

/// One write, as recorded in the event log.
#[derive(Clone, Debug)]
pub struct Event {
    /// The resourceVersion the write produced.
    pub rv: u64,
    /// What happened.
    pub kind: EventKind,
    /// The object's resource.
    pub resource: Arc<ResourceType>,
    /// The object's key (`namespace/name`, or `name` when cluster-scoped).
    pub key: String,
    /// The object after the write; for a removal its last state, with the removal's
    /// resourceVersion (as a watch reports it).
    pub object: Arc<Obj>,
    /// The object before the write.
    pub old: Option<Arc<Obj>>,
}

/// Counters of the store's writes.
#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    /// Successful writes.
    pub writes: u64,
    /// Patches of typed objects done in place (see `store/in_place.rs`), writes or not.
    pub in_place_patches: u64,
    /// Conflicts injected by the caller (the simulator counts them here).
    pub injected_conflicts: u64,
    /// Writes refused.
    pub refused: u64,
    /// Refused patches by resource and reason.
    pub refused_by: BTreeMap<String, u64>,
}

/// What to fill in on a create.
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// Creation time (Unix seconds).
    pub now: i64,
    /// The UID to give the object; a counter-derived UID when `None`.
    pub uid: Option<String>,
    /// The suffix appended to `generateName`; a counter when `None`.
    pub name_suffix: Option<String>,
}

/// How dependents of a deleted object are treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// The owner goes first, then the garbage collector deletes its dependents.
    #[default]
    Background,
    /// Dependents are deleted before the owner (here: at once, in the same call).
    Foreground,
    /// Dependents are kept, their ownerReferences to the owner removed.
    Orphan,
}

/// A delete request's options.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Delete only if the object has this UID.
    pub uid: Option<String>,
    /// Delete only if the object has this resourceVersion.
    pub resource_version: Option<String>,
    /// Grace period (pods); the pod's `terminationGracePeriodSeconds` (or 30) when `None`.
    pub grace_period_seconds: Option<i64>,
    /// Dependents' fate.
    pub propagation: Propagation,
}

/// The outcome of a delete.
#[derive(Clone, Debug)]
pub enum Deleted {
    /// The object is gone; its last state.
    Removed(Arc<Obj>),
    /// The object is marked (finalizers or a graceful pod deletion hold it); its new state.
    Pending(Arc<Obj>),
}

/// A list's items and the resourceVersion it is consistent with.
#[derive(Clone, Debug)]
pub struct List {
    /// Selected objects, by key.
    pub items: Vec<Arc<Obj>>,
    /// The store's resourceVersion when listed (where a watch continues from).
    pub resource_version: u64,
}

/// A write ready to be installed: the new stored object and what the indexes need of it.
struct Written {
    /// The object: a typed one keeps no JSON ([`crate::object`] says why).
    stored: Arc<Obj>,
    rv: u64,
    /// The owner UIDs before and after, when they may have changed.
    owners: Option<(Vec<String>, Vec<String>)>,
    /// The object's UID, when it may be new to the index.
    uid: Option<String>,
    /// Marked for deletion with nothing holding it: removed right after the write.
    releasable: bool,
}

/// Whether a written object is marked for deletion with no finalizer and no grace period left.
fn releasable(value: &Value) -> bool {
    value.at("/metadata/deletionTimestamp").is_some()
        && finalizers_empty(value)
        && value
            .at("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
}

#[derive(Debug)]
struct Table {
    rt: Arc<ResourceType>,
    objects: BTreeMap<String, Arc<Obj>>,
}

/// The object store.
pub struct Store {
    options: StoreOptions,
    tables: BTreeMap<String, Table>,
    rv: u64,
    uids: u64,
    names: u64,
    log: VecDeque<Event>,
    /// Events pushed out of the log, kept for [`Store::take_evicted`] (with
    /// [`StoreOptions::keep_evicted`]).
    evicted: Vec<Event>,
    /// The resourceVersion of the last event dropped from the log: watches from before it
    /// cannot be served.
    compacted: u64,
    /// Dependents by owner UID: `(resource id, key)`.
    dependents: HashMap<String, BTreeSet<(String, String)>>,
    /// Where each live UID is: `(resource id, key)`.
    by_uid: HashMap<String, (String, String)>,
    admit: Option<Arc<AdmitFn>>,
    /// Whether patches of typed objects take the in-place path ([`in_place`]); off only in
    /// the test comparing it with the general path.
    pub(crate) in_place: bool,
    /// Counters.
    pub stats: StoreStats,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("rv", &self.rv)
            .field("resources", &self.tables.keys().collect::<Vec<_>>())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new(StoreOptions::default())
    }
}

pub(crate) fn not_found(rt: &ResourceType, key: &str) -> StoreError {
    StoreError::NotFound {
        resource: rt.id(),
        name: key.to_string(),
    }
}

fn conflict(rt: &ResourceType, key: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Conflict {
        resource: rt.id(),
        name: key.to_string(),
        reason: reason.into(),
    }
}

fn invalid(rt: &ResourceType, key: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        resource: rt.id(),
        name: key.to_string(),
        reason: reason.into(),
    }
}

impl Store {
    /// An empty store.
    pub fn new(options: StoreOptions) -> Self {
        Self {
            options,
            tables: BTreeMap::new(),
            rv: 0,
            uids: 0,
            names: 0,
            log: VecDeque::new(),
            evicted: Vec::new(),
            compacted: 0,
            dependents: HashMap::new(),
            by_uid: HashMap::new(),
            admit: None,
            in_place: true,
            stats: StoreStats::default(),
        }
    }

    /// Installs the admission hook every create and update goes through.
    pub fn set_admission(&mut self, admit: Option<Arc<AdmitFn>>) {
        self.admit = admit;
    }

    /// The current resourceVersion (of the last write; 0 before any).
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch can start from.
    pub fn oldest_watchable(&self) -> u64 {
        self.compacted
    }

    fn table(&self, rt: &ResourceType) -> Option<&Table> {
        rt.with_id(|id| self.tables.get(id))
    }

    fn table_mut(&mut self, rt: &Arc<ResourceType>) -> &mut Table {
        if !rt.with_id(|id| self.tables.contains_key(id)) {
            self.tables.insert(
                rt.id(),
                Table {
                    rt: rt.clone(),
                    objects: BTreeMap::new(),
                },
            );
        }
        rt.with_id(|id| self.tables.get_mut(id))
            .expect("the table was inserted above")
    }

    pub(crate) fn dependents_index(&self, owner_uid: &str) -> Vec<(String, String)> {
        self.dependents
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn resource_by_id(&self, id: &str) -> Option<Arc<ResourceType>> {
        self.tables.get(id).map(|t| t.rt.clone())
    }

    /// The resource types that have (or had) objects.
    pub fn resources(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.tables.values().map(|t| &t.rt)
    }

    /// The stored JSON of an object (built from the struct for a typed one).
    pub fn get_json(&self, rt: &ResourceType, key: &str) -> Option<Cow<'_, Value>> {
        self.table(rt)?.objects.get(key).map(|o| json_of(o))
    }

    /// Whether an object is stored under `key`.
    fn contains(&self, rt: &ResourceType, key: &str) -> bool {
        self.table(rt).is_some_and(|t| t.objects.contains_key(key))
    }

    /// The parsed object.
    pub fn get(&self, rt: &ResourceType, key: &str) -> Option<Arc<Obj>> {
        self.object(rt, key).cloned()
    }

    /// The parsed object, borrowed.
    pub fn object(&self, rt: &ResourceType, key: &str) -> Option<&Arc<Obj>> {
        self.table(rt)?.objects.get(key)
    }

    /// Every object of a resource, by key.
    pub fn iter<'a>(
        &'a self,
        rt: &ResourceType,
    ) -> impl Iterator<Item = (&'a String, &'a Arc<Obj>)> + use<'a> {
        self.table(rt).into_iter().flat_map(|t| t.objects.iter())
    }

    /// Number of objects of a resource.
    pub fn count(&self, rt: &ResourceType) -> usize {
        self.table(rt).map_or(0, |t| t.objects.len())
    }

    /// The selected objects of a resource and the resourceVersion to watch from.
    pub fn list(&self, rt: &ResourceType, selector: &Selector) -> List {
        let items = self
            .table(rt)
            .into_iter()
            .flat_map(|t| t.objects.iter())
            .filter(|(key, o)| selects(selector, key, o))
            .map(|(_, o)| o.clone())
            .collect();
        List {
            items,
            resource_version: self.rv,
        }
    }

    /// Every event after `rv`, of every resource, in order; [`StoreError::Expired`] when some
    /// of them are no longer kept.
    pub fn events_after(&self, rv: u64) -> Result<impl Iterator<Item = &Event>, StoreError> {
        if rv < self.compacted {
            return Err(StoreError::Expired {
                requested: rv,
                oldest: self.compacted,
            });
        }
        let start = self.log.partition_point(|e| e.rv <= rv);
        Ok(self.log.range(start..))
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// The events pushed out of the log since the last call (none unless
    /// [`StoreOptions::keep_evicted`]), for the caller to drop where it likes.
    pub fn take_evicted(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.evicted)
    }

    fn record(&mut self, event: Event) {
        self.log.push_back(event);
        while self.log.len() > self.options.history.max(1) {
            if let Some(e) = self.log.pop_front() {
                self.compacted = e.rv;
                if self.options.keep_evicted {
                    self.evicted.push(e);
                }
            }
        }
    }

    fn typed(&self, rt: &ResourceType) -> Typed {
        if self.options.typed {
            rt.typed
        } else {
            Typed::Json
        }
    }

    fn admit(
        &self,
        op: Operation,
        rt: &ResourceType,
        sub: Option<&str>,
        key: &str,
        value: &mut Value,
    ) -> Result<(), StoreError> {
        let Some(admit) = &self.admit else {
            return Ok(());
        };
        let resource = match sub {
            Some(s) => format!("{}/{s}", rt.plural),
            None => rt.plural.clone(),
        };
        admit(op, rt, &resource, value).map_err(|e| {
            invalid(
                rt,
                key,
                format!("admission webhook denied the request: {e}"),
            )
        })
    }

    /// Stores an update unless it changes nothing: as the real API server, a write that leaves
    /// the object as it was (resourceVersion aside) is not a write — no new resourceVersion, no
    /// watch event. Without this, a controller that re-sends the status it already wrote
    /// would wake itself through its own watch, forever.
    fn commit_if_changed(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        next: Value,
        now: i64,
    ) -> Arc<Obj> {
        if let Some(cur) = self.table_mut(rt).objects.get(key)
            && same_but_resource_version(&json_of(cur), &next)
        {
            return cur.clone();
        }
        self.commit(rt, key, next, now)
    }

    /// Stores `value` under `key` with a new resourceVersion, records the event, keeps the
    /// ownership indexes, and removes an object whose deletion nothing holds any more.
    fn commit(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        mut value: Value,
        now: i64,
    ) -> Arc<Obj> {
        let rv = self.next_rv();
        meta_mut(&mut value).insert("resourceVersion".into(), json!(rv.to_string()));
        let releasable = releasable(&value);
        let uid = meta_str(&value, "uid").unwrap_or_default().to_string();
        let new_owners = owner_uids(&value);
        let typed = self.typed(rt);
        let obj = parse(typed, value);
        let old_owners = self
            .table(rt)
            .and_then(|t| t.objects.get(key))
            .map(|o| owner_uids_of(o))
            .unwrap_or_default();
        let written = Written {
            stored: obj,
            rv,
            owners: Some((old_owners, new_owners)),
            uid: Some(uid),
            releasable,
        };
        self.install(rt, key, written, now)
    }

    /// Puts a written object in its table: the ownership and UID indexes follow it, the write
    /// is counted and recorded as an event, and an object whose deletion nothing holds any
    /// more is removed.
    fn install(&mut self, rt: &Arc<ResourceType>, key: &str, w: Written, now: i64) -> Arc<Obj> {
        let obj = w.stored.clone();
        let objects = &mut self.table_mut(rt).objects;
        // A key already stored keeps its String: only the object changes.
        let old = match objects.get_mut(key) {
            Some(slot) => Some(std::mem::replace(slot, w.stored)),
            None => {
                objects.insert(key.to_string(), w.stored);
                None
            }
        };
        if let Some((old_owners, new_owners)) = w.owners
            // An update that keeps its owners (nearly every one) leaves the index as it is.
            && (old.is_none() || old_owners != new_owners)
        {
            let id = rt.id();
            for o in old_owners.iter().filter(|o| !new_owners.contains(o)) {
                if let Some(set) = self.dependents.get_mut(o) {
                    set.remove(&(id.clone(), key.to_string()));
                }
            }
            for o in new_owners {
                self.dependents
                    .entry(o)
                    .or_default()
                    .insert((id.clone(), key.to_string()));
            }
        }
        if let Some(uid) = w.uid.filter(|u| !u.is_empty()) {
            let indexed = rt.with_id(|id| {
                self.by_uid
                    .get(&uid)
                    .is_some_and(|(i, k)| i == id && k == key)
            });
            if !indexed {
                self.by_uid.insert(uid, (rt.id(), key.to_string()));
            }
        }
        self.stats.writes += 1;
        let kind = if old.is_some() {
            EventKind::Modified
        } else {
            EventKind::Added
        };
        self.record(Event {
            rv: w.rv,
            kind,
            resource: rt.clone(),
            key: key.to_string(),
            object: obj.clone(),
            old,
        });
        if w.releasable {
            self.remove(rt, key, now);
        }
        obj
    }

    /// Removes an object outright (ignoring finalizers: the kubelet's final removal in the
    /// simulator), then garbage-collects its dependents. Returns its last state.
    pub fn remove(&mut self, rt: &Arc<ResourceType>, key: &str, now: i64) -> Option<Arc<Obj>> {
        let old = self.table_mut(rt).objects.remove(key)?;
        let rv = self.next_rv();
        let mut last = json_of(&old).into_owned();
        let old_obj = old;
        meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        let uid = meta_str(&last, "uid").unwrap_or_default().to_string();
        let id = rt.id();
        for o in owner_uids(&last) {
            if let Some(set) = self.dependents.get_mut(&o) {
                set.remove(&(id.clone(), key.to_string()));
            }
        }
        let typed = self.typed(rt);
        let object = parse(typed, last);
        self.stats.writes += 1;
        self.record(Event {
            rv,
            kind: EventKind::Deleted,
            resource: rt.clone(),
            key: key.to_string(),
            object: object.clone(),
            old: Some(old_obj),
        });
        self.by_uid.remove(&uid);
        self.collect_dependents(&uid, now);
        Some(object)
    }

    /// Background garbage collection: dependents of a removed owner are deleted unless another
    /// owner of theirs is alive, in which case only the dangling reference is dropped.
    fn collect_dependents(&mut self, owner_uid: &str, now: i64) {
        let Some(deps) = self.dependents.remove(owner_uid) else {
            return;
        };
        for (id, key) in deps {
            let Some(rt) = self.tables.get(&id).map(|t| t.rt.clone()) else {
                continue;
            };
            let Some(cur) = self.get_json(&rt, &key) else {
                continue;
            };
            let others_alive = owner_uids(&cur)
                .iter()
                .any(|u| u != owner_uid && self.by_uid.contains_key(u));
            if others_alive {
                self.drop_owner_ref(&rt, &key, owner_uid, now);
            } else {
                let _ = self.delete(&rt, &key, &DeleteOptions::default(), now);
            }
        }
    }

    fn drop_owner_ref(&mut self, rt: &Arc<ResourceType>, key: &str, owner_uid: &str, now: i64) {
        let Some(mut next) = self.get_json(rt, key).map(Cow::into_owned) else {
            return;
        };
        if let Some(refs) = next
            .at_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
        }
        self.commit(rt, key, next, now);
    }

    /// Creates an object in `namespace` (the body's namespace, or `default`, when `None`).
    pub fn create(
        &mut self,
        rt: &Arc<ResourceType>,
        namespace: Option<&str>,
        mut value: Value,
        opts: &CreateOptions,
    ) -> Result<Arc<Obj>, StoreError> {
        if !value.is_object() {
            return Err(StoreError::BadRequest(format!(
                "{}: the body is not an object",
                rt.id()
            )));
        }
        let md = meta_mut(&mut value);
        if rt.namespaced {
            let body_ns = md
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            let ns = match (namespace, body_ns) {
                (Some(a), Some(b)) if a != b => {
                    return Err(StoreError::BadRequest(NAMESPACE_MISMATCH.into()));
                }
                (Some(a), _) => a.to_string(),
                (None, Some(b)) => b.to_string(),
                (None, None) => "default".to_string(),
            };
            md.insert("namespace".into(), json!(ns));
        } else {
            md.remove("namespace");
        }
        let named = md
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !named {
            let Some(prefix) = md
                .get("generateName")
                .and_then(Value::as_str)
                .map(str::to_string)
            else {
                return Err(StoreError::BadRequest(format!(
                    "{}: name or generateName is required",
                    rt.id()
                )));
            };
            let suffix = match &opts.name_suffix {
                Some(s) => s.clone(),
                None => {
                    self.names += 1;
                    format!("{:05x}", self.names)
                }
            };
            meta_mut(&mut value).insert("name".into(), json!(format!("{prefix}{suffix}")));
        }
        // The name and namespace become keys and, on a node, paths: validated as
        // kube-apiserver validates them, before anything else reads them.
        let causes = names::validate_identity(
            rt,
            meta_str(&value, "name").unwrap_or(""),
            meta_str(&value, "generateName"),
            meta_str(&value, "namespace"),
        );
        if !causes.is_empty() {
            self.stats.refused += 1;
            return Err(field_invalid(
                rt,
                meta_str(&value, "name").unwrap_or(""),
                causes,
            ));
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            // As kube-apiserver's namespace strategy: the name as a label, for selectors.
            let name = meta_str(&value, "name").unwrap_or("").to_string();
            let md = meta_mut(&mut value);
            if !md.get("labels").is_some_and(Value::is_object) {
                md.insert("labels".into(), json!({}));
            }
            if let Some(labels) = md.get_mut("labels").and_then(Value::as_object_mut) {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        let key = rt.key(
            meta_str(&value, "namespace"),
            meta_str(&value, "name").unwrap_or(""),
        );
        if self.contains(rt, &key) {
            self.stats.refused += 1;
            return Err(StoreError::AlreadyExists {
                resource: rt.id(),
                name: key,
            });
        }
        if let Some(o) = value.as_object_mut() {
            o.entry("apiVersion")
                .or_insert_with(|| json!(rt.api_version()));
            o.entry("kind").or_insert_with(|| json!(rt.kind));
            // Status is the controllers' to write: a CRD with a status subresource drops it on
            // create, and a new pod starts Pending, as the real API server does.
            if rt.status_subresource && !rt.group.is_empty() {
                o.remove("status");
            } else if rt.group.is_empty() && rt.plural == "pods" {
                o.insert("status".into(), json!({"phase": "Pending"}));
            }
        }
        self.admit(Operation::Create, rt, None, &key, &mut value)?;
        let uid = match &opts.uid {
            Some(u) => u.clone(),
            None => {
                self.uids += 1;
                format!("00000000-0000-4000-8000-{:012x}", self.uids)
            }
        };
        let md = meta_mut(&mut value);
        md.insert("uid".into(), json!(uid));
        md.insert("creationTimestamp".into(), json!(format_rfc3339(opts.now)));
        md.remove("deletionTimestamp");
        md.remove("deletionGracePeriodSeconds");
        if rt.status_subresource {
            md.insert("generation".into(), json!(1));
        } else {
            md.remove("generation");
        }
        Ok(self.commit(rt, &key, value, opts.now))
    }

    /// Checks the preconditions of an update of `cur` to `next` and carries over what a client
    /// cannot change: identity, deletion marks, the status (main resource) or everything but
    /// the status (`status` subresource), and the generation, bumped on a spec change.
    fn prepare_update(
        &self,
        rt: &ResourceType,
        key: &str,
        sub: Option<&str>,
        cur: &Value,
        next: Value,
    ) -> Result<Value, StoreError> {
        if !next.is_object() {
            return Err(StoreError::BadRequest(format!(
                "{key}: the object is not a JSON object"
            )));
        }
        let want = meta_str(&next, "resourceVersion").filter(|s| !s.is_empty());
        if let Some(want) = want
            && Some(want) != meta_str(cur, "resourceVersion")
        {
            return Err(conflict(
                rt,
                key,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut next = match sub {
            None if rt.status_subresource => keep_status(next, cur.get("status")),
            None => next,
            // A status write that left everything else as stored (what every status patch
            // does) is already what `with_status` would build: kept, not rebuilt.
            Some("status") if rt.status_subresource && only_status_differs(cur, &next) => next,
            Some("status") if rt.status_subresource => {
                let mut next = next;
                // The body is dropped after this: its status is moved, not copied.
                let status = next
                    .as_object_mut()
                    .and_then(|m| m.remove("status"))
                    .unwrap_or(Value::Null);
                with_status(cur, Some(status))
            }
            Some(s) => {
                return Err(StoreError::NotFound {
                    resource: format!("{}/{s}", rt.id()),
                    name: key.to_string(),
                });
            }
        };
        let md = meta_mut(&mut next);
        for field in in_place::PROTECTED_METADATA {
            match cur.get("metadata").and_then(|m| m.get(field)) {
                Some(v) => md.insert(field.into(), v.clone()),
                None => md.remove(field),
            };
        }
        if rt.status_subresource && spec_differs(cur, &next) {
            let g = cur
                .at("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta_mut(&mut next).insert("generation".into(), json!(g + 1));
        }
        Ok(next)
    }

    /// Replaces an object (`sub` = `Some("status")`: only its status).
    pub fn update(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        sub: Option<&str>,
        value: Value,
        now: i64,
    ) -> Result<Arc<Obj>, StoreError> {
        let Some(cur) = self.get_json(rt, key) else {
            return Err(not_found(rt, key));
        };
        if let Err(e) = check_identity(rt, &cur, &value, false) {
            self.stats.refused += 1;
            return Err(e);
        }
        let mut next = match self.prepare_update(rt, key, sub, &cur, value) {
            Ok(n) => n,
            Err(e) => {
                self.stats.refused += 1;
                return Err(e);
            }
        };
        self.admit(Operation::Update, rt, sub, key, &mut next)?;
        Ok(self.commit_if_changed(rt, key, next, now))
    }

    /// Patches an object (`sub` = `Some("status")`: only its status changes).
    pub fn patch(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        sub: Option<&str>,
        patch_type: PatchType,
        patch: &Value,
        now: i64,
    ) -> Result<Arc<Obj>, StoreError> {
        if let Some(done) = self.patch_in_place(rt, key, sub, patch_type, patch, now) {
            return done;
        }
        let Some(cur) = self.get_json(rt, key) else {
            return Err(not_found(rt, key));
        };
        let mut next = cur.into_owned();
        let applied = match patch_type {
            PatchType::Json => apply_json_patch(&mut next, patch).map_err(|e| e.to_string()),
            PatchType::Merge => {
                apply_merge_patch(&mut next, patch);
                Ok(())
            }
            PatchType::StrategicMerge => {
                apply_strategic_merge_patch(&mut next, patch);
                Ok(())
            }
        };
        let result = applied
            .map_err(|e| {
                let why = e.split(':').next().unwrap_or("").to_string();
                *self
                    .stats
                    .refused_by
                    .entry(format!("{} patch {} {why}", rt.plural, sub.unwrap_or("")))
                    .or_default() += 1;
                invalid(rt, key, e)
            })
            .and_then(|()| {
                let cur = self.get_json(rt, key).ok_or_else(|| not_found(rt, key))?;
                check_identity(rt, &cur, &next, true)?;
                self.prepare_update(rt, key, sub, &cur, next)
            });
        let mut next = match result {
            Ok(n) => n,
            Err(e) => {
                self.stats.refused += 1;
                return Err(e);
            }
        };
        self.admit(Operation::Update, rt, sub, key, &mut next)?;
        Ok(self.commit_if_changed(rt, key, next, now))
    }

    /// Edits an object as a third party would, without preconditions or status rules (the
    /// simulator's markers and its kubelet).
    pub fn edit_unchecked(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        edit: impl FnOnce(&mut Value),
        now: i64,
    ) -> Option<Arc<Obj>> {
        let mut next = self.get_json(rt, key)?.into_owned();
        edit(&mut next);
        Some(self.commit(rt, key, next, now))
    }

    /// [`Store::edit_unchecked`] for an edit that reads and writes only the top-level `fields`
    /// it names (what it sets elsewhere is not stored): a typed VM or VMI serialises those
    /// fields alone and rebuilds only them into its struct, as an in-place patch does; a JSON
    /// object is edited whole. The simulator's third party marks every new VM and VMI in its
    /// metadata and status: serialising and parsing the whole object for that cost ~45 k
    /// instructions per object.
    pub fn edit_fields_unchecked(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        fields: &[&str],
        edit: impl FnOnce(&mut Value),
        now: i64,
    ) -> Option<Arc<Obj>> {
        let old = self.table(rt)?.objects.get(key)?.clone();
        if matches!(*old, Obj::Other(_)) {
            return self.edit_unchecked(rt, key, edit, now);
        }
        let next = in_place::edited_fields(&old, fields, edit);
        let Value::Object(next) = next else {
            // The edit replaced the whole object: stored as the general edit stores it.
            return Some(self.commit(rt, key, next, now));
        };
        let rv = self.next_rv();
        let written = in_place::commit_edited(self.typed(rt), &old, next, fields, rv);
        Some(self.install(rt, key, written, now))
    }

    /// The `pods/binding` subresource: assigns an unbound pod to `node`.
    pub fn bind(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        node: &str,
        now: i64,
    ) -> Result<Arc<Obj>, StoreError> {
        let Some(cur) = self.get_json(rt, key) else {
            return Err(not_found(rt, key));
        };
        if node.is_empty() {
            return Err(invalid(rt, key, "target.name: Required value"));
        }
        if let Some(bound) = cur
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(conflict(
                rt,
                key,
                format!("pod {key} is already assigned to node {bound:?}"),
            ));
        }
        if cur.at("/metadata/deletionTimestamp").is_some() {
            return Err(conflict(
                rt,
                key,
                format!("pod {key} is being deleted, cannot be assigned to a host"),
            ));
        }
        let mut next = cur.into_owned();
        if !next.get("spec").is_some_and(Value::is_object) {
            next["spec"] = json!({});
        }
        next["spec"]["nodeName"] = json!(node);
        Ok(self.commit(rt, key, next, now))
    }
}

/// kube-apiserver's answer to a body whose namespace is not the request's.
const NAMESPACE_MISMATCH: &str =
    "the namespace of the provided object does not match the namespace sent on the request";

/// A 422 Invalid of the object `name` of `rt`.
pub(crate) fn field_invalid(
    rt: &ResourceType,
    name: &str,
    causes: Vec<names::FieldCause>,
) -> StoreError {
    let kind = if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    };
    StoreError::FieldInvalid {
        kind,
        name: name.to_string(),
        causes,
    }
}

/// Refuses an update or patch result `next` of `cur` that changes what identifies the object,
/// as kube-apiserver does: a name that is not the URL's, or none (400, `checkName`), a
/// namespace that is not the request's (400), a different UID (422 immutable). A PUT body may
/// leave the name out (`patched` false): the URL's is used.
pub(crate) fn check_identity(
    rt: &ResourceType,
    cur: &Value,
    next: &Value,
    patched: bool,
) -> Result<(), StoreError> {
    let empty = serde_json::Map::new();
    let cur_md = cur
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    check_identity_of(
        rt,
        cur_md,
        next.get("metadata").and_then(Value::as_object),
        patched,
    )
}

/// [`check_identity`] of the metadata maps.
pub(crate) fn check_identity_of(
    rt: &ResourceType,
    cur_md: &serde_json::Map<String, Value>,
    md: Option<&serde_json::Map<String, Value>>,
    patched: bool,
) -> Result<(), StoreError> {
    // Scanned, not hashed (`small_json`): this runs on every write of metadata.
    let stored = |f: &str| kvrs_decide::small_json::member(cur_md, f).and_then(Value::as_str);
    let url_name = stored("name").unwrap_or("");
    let field = |f: &str| {
        md.and_then(|m| kvrs_decide::small_json::member(m, f))
            .and_then(Value::as_str)
    };
    match field("name").filter(|n| !n.is_empty()) {
        None if patched => {
            return Err(StoreError::BadRequest(format!(
                "the name of the object ({url_name} based on URL) was undeterminable: name must be provided"
            )));
        }
        Some(n) if n != url_name => {
            return Err(StoreError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({url_name})"
            )));
        }
        _ => {}
    }
    if rt.namespaced
        && let Some(ns) = field("namespace").filter(|n| !n.is_empty())
        && Some(ns) != stored("namespace")
    {
        return Err(StoreError::BadRequest(NAMESPACE_MISMATCH.into()));
    }
    if let Some(uid) = field("uid").filter(|u| !u.is_empty())
        && Some(uid) != stored("uid")
    {
        return Err(field_invalid(
            rt,
            url_name,
            vec![names::immutable("metadata.uid", uid)],
        ));
    }
    Ok(())
}

/// `next` with the stored status `status` in place of its own (or without one when `None`):
/// what [`with_status`] makes of it, field order included, without copying `next`.
fn keep_status(mut next: Value, status: Option<&Value>) -> Value {
    let Some(map) = next.as_object_mut() else {
        return with_status(&next, status.cloned());
    };
    match (status, map.get_mut("status")) {
        (Some(s), Some(slot)) => *slot = s.clone(),
        (Some(s), None) => {
            map.insert("status".to_string(), s.clone());
        }
        (None, _) => {
            map.shift_remove("status");
        }
    }
    next
}

/// Whether `next` is `cur` with (at most) another status: the same fields in the same order,
/// all but `status` equal, and a status of its own (added at the end when `cur` had none) —
/// exactly what [`with_status`]`(cur, next.status)` builds.
pub(crate) fn only_status_differs(cur: &Value, next: &Value) -> bool {
    let (Some(cur), Some(next)) = (cur.as_object(), next.as_object()) else {
        return false;
    };
    if next.get("status").is_none_or(Value::is_null) {
        return false;
    }
    let added = !cur.contains_key("status");
    if next.len() != cur.len() + usize::from(added) {
        return false;
    }
    let mut next_fields = next.iter();
    let same_order_and_values = cur.iter().all(|(k, v)| {
        next_fields
            .next()
            .is_some_and(|(nk, nv)| nk == k && (k == "status" || nv == v))
    });
    let rest_is_status = next_fields.all(|(k, _)| k == "status");
    same_order_and_values && rest_is_status
}

/// An object's `metadata` map, or `empty` when it has none (or it is not a map).
fn meta_map<'a>(
    o: &'a serde_json::Map<String, Value>,
    empty: &'a serde_json::Map<String, Value>,
) -> &'a serde_json::Map<String, Value> {
    o.get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(empty)
}

/// Whether `a` and `b` are the same object, their `metadata.resourceVersion` aside (compared
/// in place: no copy of either).
fn same_but_resource_version(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let empty = serde_json::Map::new();
    let (ma, mb) = (meta_map(a, &empty), meta_map(b, &empty));
    let without_rv = |m: &serde_json::Map<String, Value>| {
        m.iter().filter(|(k, _)| *k != "resourceVersion").count()
    };
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| k == "metadata" || b.get(k) == Some(v))
        && {
            without_rv(ma) == without_rv(mb)
                && ma
                    .iter()
                    .all(|(k, v)| k == "resourceVersion" || mb.get(k) == Some(v))
        }
}
