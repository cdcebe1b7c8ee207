//! The informer caches: one kube-runtime watcher and reflector per resource, and the bridge from
//! their events to the shared observer (queue keys, fulfilled expectations).
//!
//! Each event is looked at *before* the reflector applies it, so the observer sees the object
//! as the cache held it and as it is now. A relist (after a 410 Gone or a broken stream) replays
//! every object; objects the relist no longer contains are reported as deleted, so their keys are
//! queued and a controller waiting for that deletion stops waiting.
//!
//! The migration controller's keys come from the same events: a launcher pod wakes the
//! migration it is the target of, a VMI the migrations naming it, which only the migration
//! cache can tell (`crate::migration_cache`).

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api as KubeResourceApi, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use kvrs_api::names::labels;
use kvrs_api::{VirtualMachine, VirtualMachineInstance};
use kvrs_decide::vm::Revision;
use kvrs_executor::{
    StorageChange, StorageKind, StorageSeen, backend_claim_created, observe_storage,
};
use kvrs_queue::AsyncQueue;
use kvrs_runtime::world::{ControllerCache, WantedRevisions};
use kvrs_runtime::{Change, ControllerExpectations, Seen, Watched, observe, observe_migrations};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::migration_cache::{migration_json, migration_resource, pod_migrations, vmi_migrations};

/// Everything the controllers share: queues and expectations.
pub struct Shared {
    /// The VM controller's queue.
    pub vm_queue: AsyncQueue<String>,
    /// The VMI controller's queue.
    pub vmi_queue: AsyncQueue<String>,
    /// The VM controller's expectations.
    pub vm_expectations: Mutex<ControllerExpectations>,
    /// The VMI controller's expectations.
    pub vmi_expectations: Mutex<ControllerExpectations>,
    /// The migration controller's queue.
    pub migration_queue: AsyncQueue<String>,
    /// The migration controller's expectations: its own store, as in KubeVirt, so a migration
    /// and a VMI of the same name never share one.
    pub migration_expectations: Mutex<ControllerExpectations>,
    /// The migrations this controller handed off to virt-handler (KubeVirt's `handOffMap`):
    /// remembered until the migration is gone, as the VMI cache may not show the hand-off
    /// write yet when the migration is synced again.
    pub handed_off: Mutex<HashSet<String>>,
    /// The migration cache, set once its watch starts (before the pod and VMI watches): pod
    /// and VMI events are resolved to migration keys through it.
    pub(crate) migrations: OnceLock<Store<DynamicObject>>,
    /// The VM and VMI caches, set once their watches start (before the DataVolume and claim
    /// watches): a DataVolume or claim event is resolved to the VMs and VMIs standing on it
    /// through them.
    pub(crate) vms: OnceLock<Store<VirtualMachine>>,
    pub(crate) vmis: OnceLock<Store<VirtualMachineInstance>>,
    /// The pod cache, set once its watch starts: an attachment pod's event is resolved to its
    /// VMI through the launcher pod that owns it.
    pub(crate) pods: OnceLock<Store<Pod>>,
}

impl Shared {
    /// Empty queues and expectations, the queues reporting to `metrics`.
    pub fn new(metrics: &crate::metrics::ControllerMetrics) -> Self {
        let queue = |name| {
            AsyncQueue::from_queue(
                kvrs_queue::WorkQueue::new().with_metrics(metrics.queue_hooks(name)),
            )
        };
        Self {
            vm_queue: queue("vm"),
            vmi_queue: queue("vmi"),
            vm_expectations: Mutex::new(ControllerExpectations::new()),
            vmi_expectations: Mutex::new(ControllerExpectations::new()),
            migration_queue: queue("migration"),
            migration_expectations: Mutex::new(ControllerExpectations::new()),
            handed_off: Mutex::new(HashSet::new()),
            migrations: OnceLock::new(),
            vms: OnceLock::new(),
            vmis: OnceLock::new(),
            pods: OnceLock::new(),
        }
    }

    /// A DataVolume or claim event: the VM controller's DataVolume expectations, and the keys
    /// of the VMs and VMIs standing on the object.
    fn observe_storage(&self, change: &StorageChange<'_>) {
        tracing::debug!(
            kind = ?change.kind,
            object = change.key,
            created = change.old.is_none(),
            deleted = change.new.is_none(),
            "storage watch event"
        );
        let dependents = crate::storage_cache::dependents(change.key, self);
        let keys = observe_storage(change, &dependents, &mut lock(&self.vm_expectations));
        if let Some(vmi) = backend_claim_created(change) {
            lock(&self.vmi_expectations).objects.creation_observed(&vmi);
            self.vmi_queue.add(vmi);
        }
        for k in keys.vm_keys {
            self.vm_queue.add(k);
        }
        for k in keys.vmi_keys {
            self.vmi_queue.add(k);
        }
    }

    fn observe(&self, change: &Change<'_>, migrations: &[String]) {
        tracing::debug!(
            watched = ?change.watched,
            object = change.key,
            created = change.old.is_none(),
            deleted = change.new.is_none(),
            "watch event"
        );
        let keys = {
            let mut vm = lock(&self.vm_expectations);
            let mut vmi = lock(&self.vmi_expectations);
            observe(change, &mut vm, &mut vmi)
        };
        for k in keys.vm_keys {
            let out = self.vm_queue.add(k);
            tracing::trace!(?out, "vm queue add");
        }
        for k in keys.vmi_keys {
            let out = self.vmi_queue.add(k);
            tracing::trace!(?out, "vmi queue add");
        }
        let keys = observe_migrations(change, migrations, &mut lock(&self.migration_expectations));
        for k in keys {
            let out = self.migration_queue.add(k);
            tracing::trace!(?out, "migration queue add");
        }
    }
}

/// A poisoned lock still guards consistent expectations (they are updated in single calls).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The caches the decisions read.
#[derive(Clone)]
pub struct Caches {
    /// VirtualMachines, all namespaces.
    pub vms: Store<VirtualMachine>,
    /// VirtualMachineInstances, all namespaces.
    pub vmis: Store<VirtualMachineInstance>,
    /// Pods labelled `kubevirt.io` (launcher pods and their hotplug attachment pods).
    pub pods: Store<Pod>,
    /// ControllerRevisions (the VM controller's start revisions).
    pub revisions: Store<ControllerRevision>,
    /// PersistentVolumeClaims.
    pub pvcs: Store<PersistentVolumeClaim>,
    /// CDI DataVolumes, when the cluster has CDI's CRD.
    pub data_volumes: Option<Store<DynamicObject>>,
    /// StorageClasses: the class of a VMI's backend-storage claim, and whether a pending one
    /// waits for its first consumer. Read at sync time, never a reason for one (as KubeVirt).
    pub storage_classes: Store<StorageClass>,
    /// CDI StorageProfiles, when the cluster has CDI's CRD: the access mode of a new
    /// backend-storage claim.
    pub storage_profiles: Option<Store<DynamicObject>>,
    /// The `instancetype.kubevirt.io` objects VMs reference, by kind, when the cluster has the
    /// CRDs (KubeVirt's instancetype controller reads the same four informers).
    pub instancetypes: Vec<(&'static str, Store<DynamicObject>)>,
    /// Nodes: which devices their virt-handlers advertise (whether launcher pods request
    /// vhost-net, [`kvrs_pod::vhost_net_available`]), and the CPU labels of a migration's source
    /// node. Not waited for: until it has listed, the answer is KubeVirt's default.
    pub nodes: Store<Node>,
    /// VirtualMachineInstanceMigrations, all namespaces.
    pub migrations: Store<DynamicObject>,
    /// KubeVirt CRs, when the cluster serves them: the migration controller's configuration
    /// and synchronization addresses.
    pub kubevirts: Option<Store<DynamicObject>>,
    /// MigrationPolicies, when the cluster serves them (`crate::policy_cache`).
    pub migration_policies: Option<Store<DynamicObject>>,
    /// Namespaces: the labels MigrationPolicies select on.
    pub namespaces: Store<Namespace>,
}

impl Caches {
    /// Whether launcher pods request `devices.kubevirt.io/vhost-net`, from the Node cache.
    pub fn vhost_net_available(&self) -> bool {
        let nodes = self.nodes.state();
        kvrs_pod::vhost_net_available(
            nodes
                .iter()
                .map(|n| n.status.as_ref().and_then(|s| s.allocatable.as_ref())),
            |q| {
                q.0.trim()
                    .parse::<i64>()
                    .map_or(!q.0.trim().is_empty(), |n| n > 0)
            },
        )
    }
}

/// The objects of `store` in `namespace`.
fn in_namespace<K>(store: &Store<K>, namespace: &str) -> impl Iterator<Item = Arc<K>>
where
    K: Resource + Clone,
    K::DynamicType: Eq + Hash + Clone,
{
    store
        .state()
        .into_iter()
        .filter(move |o| o.meta().namespace.as_deref() == Some(namespace))
}

/// The reflector stores as the VM and VMI worlds read them (`kvrs_runtime::world`): objects are
/// handed out as the stores share them.
impl ControllerCache for Caches {
    type Obj<'a, T: 'a> = Arc<T>;

    fn vm(&self, key: &str) -> Option<Arc<VirtualMachine>> {
        let (ns, name) = split(key);
        self.vms.get(&reflector::ObjectRef::new(name).within(ns))
    }

    fn vmi(&self, key: &str) -> Option<Arc<VirtualMachineInstance>> {
        let (ns, name) = split(key);
        self.vmis.get(&reflector::ObjectRef::new(name).within(ns))
    }

    fn launcher_pods(&self, namespace: &str, vmi_uid: &str) -> Vec<Arc<Pod>> {
        in_namespace(&self.pods, namespace)
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::CREATED_BY))
                    .is_some_and(|uid| uid == vmi_uid)
            })
            .collect()
    }

    fn attachment_pods(&self, namespace: &str, owner_uid: &str) -> Vec<Arc<Pod>> {
        in_namespace(&self.pods, namespace)
            .filter(|p| {
                p.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == owner_uid)
            })
            .collect()
    }

    fn revisions(&self, namespace: &str, wanted: &WantedRevisions<'_>) -> Vec<Revision> {
        in_namespace(&self.revisions, namespace)
            .filter(|r| wanted.selects(r))
            .map(Revision::new)
            .collect()
    }

    /// Each with its kind and `apiVersion` (a list's items may come without them).
    fn instancetype_objects(&self, namespace: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for (kind, store) in &self.instancetypes {
            for o in store.state() {
                if o.metadata
                    .namespace
                    .as_deref()
                    .is_some_and(|n| n != namespace)
                {
                    continue;
                }
                if let Ok(mut v) = serde_json::to_value(o.as_ref()) {
                    v["apiVersion"] = Value::String("instancetype.kubevirt.io/v1beta1".into());
                    v["kind"] = Value::String((*kind).into());
                    out.push(v);
                }
            }
        }
        out
    }

    fn data_volumes(&self, namespace: &str) -> Vec<Value> {
        let Some(store) = &self.data_volumes else {
            return Vec::new();
        };
        in_namespace(store, namespace)
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect()
    }

    fn storage_classes(&self) -> Vec<Value> {
        self.storage_classes
            .state()
            .iter()
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect()
    }

    fn storage_profiles(&self) -> Vec<Value> {
        let Some(store) = &self.storage_profiles else {
            return Vec::new();
        };
        store
            .state()
            .iter()
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect()
    }

    fn pvcs(&self, namespace: &str) -> Vec<PersistentVolumeClaim> {
        in_namespace(&self.pvcs, namespace)
            .map(|p| p.as_ref().clone())
            .collect()
    }

    fn migrations(&self, namespace: &str) -> Vec<Value> {
        in_namespace(&self.migrations, namespace)
            .filter_map(|m| migration_json(&m))
            .collect()
    }
}

/// `namespace` and `name` of a `namespace/name` key.
pub(crate) fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// The four `instancetype.kubevirt.io/v1beta1` kinds and their plurals.
pub const INSTANCETYPE_KINDS: [(&str, &str); 4] = [
    ("VirtualMachineInstancetype", "virtualmachineinstancetypes"),
    (
        "VirtualMachineClusterInstancetype",
        "virtualmachineclusterinstancetypes",
    ),
    ("VirtualMachinePreference", "virtualmachinepreferences"),
    (
        "VirtualMachineClusterPreference",
        "virtualmachineclusterpreferences",
    ),
];

/// `namespace/name` of an object.
pub fn key_of<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

fn seen_vmi(v: &VirtualMachineInstance, _: &Shared) -> Seen {
    Seen {
        deleting: v.metadata.deletion_timestamp.is_some(),
        vmi_key: None,
    }
}

fn seen_meta<K: Resource>(o: &K, _: &Shared) -> Seen {
    Seen {
        deleting: o.meta().deletion_timestamp.is_some(),
        vmi_key: None,
    }
}

/// A launcher pod names its VMI in a label; a hotplug attachment pod (KubeVirt's
/// `resolveControllerRef`) is owned by its launcher pod, looked up in the pod cache, so its
/// creation, readiness and deletion wake the VMI and fulfil its expectations.
fn seen_pod(p: &Pod, shared: &Shared) -> Seen {
    let ns = p.namespace().unwrap_or_default();
    let vmi_name = |pod: &Pod| pod.labels().get(labels::VM_NAME).cloned();
    let owner = || {
        let owner = p
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == "Pod")?;
        let launcher = shared
            .pods
            .get()?
            .get(&reflector::ObjectRef::new(&owner.name).within(&ns))?;
        if launcher.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
            return None;
        }
        vmi_name(&launcher)
    };
    let vmi_key = vmi_name(p)
        .or_else(owner)
        .map(|name| format!("{ns}/{name}"));
    Seen {
        deleting: p.metadata.deletion_timestamp.is_some(),
        vmi_key,
    }
}

/// One observed change, owned (computed before the cache applies the event, observed after).
struct Observed {
    key: String,
    old: Option<Seen>,
    new: Option<Seen>,
    /// The migration keys the object concerns, in its old and its new version.
    migrations: Vec<String>,
    /// For a DataVolume or claim: its old and new version as the storage observer sees them.
    storage: Option<(Option<StorageSeen>, Option<StorageSeen>)>,
}

/// How a watch describes its objects to the observer: what it needs to know of one version
/// ([`Seen`]) and which migrations it concerns.
struct Describe<K> {
    seen: fn(&K, &Shared) -> Seen,
    migrations: fn(&K, &Shared) -> Vec<String>,
    /// For DataVolumes and claims: their kind and what the storage observer needs of a version
    /// (their events go to it instead of the object observer).
    storage: Option<StorageDescription<K>>,
}

/// A storage object's kind and what the storage observer needs of one of its versions.
type StorageDescription<K> = (StorageKind, fn(&K) -> StorageSeen);

impl<K> Clone for Describe<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Describe<K> {}

fn no_migrations<K>(_: &K, _: &Shared) -> Vec<String> {
    Vec::new()
}

/// The changes `event` makes to the cache `view` (which has not applied it yet).
fn changes<K>(
    event: &Event<K>,
    view: &Store<K>,
    relisted: &mut Option<HashSet<String>>,
    describe: Describe<K>,
    dyntype: &K::DynamicType,
    shared: &Shared,
) -> Vec<Observed>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let old_of = |obj: &K| view.get(&reflector::ObjectRef::from_obj_with(obj, dyntype.clone()));
    let migrations_of = |objs: &[Option<&K>]| {
        let mut keys: Vec<String> = objs
            .iter()
            .flatten()
            .flat_map(|o| (describe.migrations)(o, shared))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    };
    let seen = describe.seen;
    let storage =
        |old: Option<&K>, new: Option<&K>| describe.storage.map(|(_, f)| (old.map(f), new.map(f)));
    match event {
        Event::Apply(obj) | Event::InitApply(obj) => {
            let key = key_of(obj);
            if let Some(keys) = relisted.as_mut() {
                keys.insert(key.clone());
            }
            let old = old_of(obj);
            vec![Observed {
                key,
                old: old.as_deref().map(|o| seen(o, shared)),
                new: Some(seen(obj, shared)),
                migrations: migrations_of(&[old.as_deref(), Some(obj)]),
                storage: storage(old.as_deref(), Some(obj)),
            }]
        }
        Event::Delete(obj) => {
            let old = old_of(obj);
            vec![Observed {
                key: key_of(obj),
                old: old
                    .as_deref()
                    .map(|o| seen(o, shared))
                    .or_else(|| Some(seen(obj, shared))),
                new: None,
                migrations: migrations_of(&[old.as_deref(), Some(obj)]),
                storage: storage(Some(old.as_deref().unwrap_or(obj)), None),
            }]
        }
        Event::Init => {
            *relisted = Some(HashSet::new());
            Vec::new()
        }
        Event::InitDone => {
            // Objects the relist no longer has were deleted while the watch was down.
            let keys = relisted.take().unwrap_or_default();
            view.state()
                .iter()
                .map(|obj| (key_of(obj.as_ref()), obj))
                .filter(|(key, _)| !keys.contains(key))
                .map(|(key, obj)| Observed {
                    key,
                    old: Some(seen(obj, shared)),
                    new: None,
                    migrations: migrations_of(&[Some(obj.as_ref())]),
                    storage: storage(Some(obj.as_ref()), None),
                })
                .collect()
        }
    }
}

/// Starts a watcher for `api` keeping a cache, feeding `shared`'s observer; returns the cache
/// and the task (which runs until the process stops: watch errors back off and relist).
///
/// Each event is compared with the cache before the cache applies it (the observer needs the
/// old and the new version) and observed after: a worker woken by the queue key must find the
/// new version in the cache, or it would decide on the old one and nothing would wake it again.
fn watch<K>(
    api: KubeResourceApi<K>,
    config: watcher::Config,
    watched: Watched,
    describe: Describe<K>,
    dyntype: K::DynamicType,
    shared: Arc<Shared>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let mut writer = reflector::store::Writer::new(dyntype.clone());
    let reader = writer.as_reader();
    let view = reader.clone();
    let task = tokio::spawn(async move {
        let mut relisted: Option<HashSet<String>> = None;
        // A relist's objects reach the cache all at once, when it completes: their changes are
        // held until then, or a worker would read the pre-relist cache (a pod missing from it
        // looks deleted).
        let mut held: Vec<Observed> = Vec::new();
        let mut stream = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    let mut observed =
                        changes(&event, &view, &mut relisted, describe, &dyntype, &shared);
                    writer.apply_watcher_event(&event);
                    match event {
                        Event::Init => held.clear(),
                        Event::InitApply(_) => {
                            held.append(&mut observed);
                            continue;
                        }
                        Event::InitDone => {
                            held.append(&mut observed);
                            observed = std::mem::take(&mut held);
                        }
                        Event::Apply(_) | Event::Delete(_) => {}
                    }
                    for o in observed {
                        if let (Some((kind, _)), Some((old, new))) = (describe.storage, o.storage) {
                            shared.observe_storage(&StorageChange {
                                kind,
                                key: &o.key,
                                old,
                                new,
                            });
                            continue;
                        }
                        shared.observe(
                            &Change {
                                watched,
                                key: &o.key,
                                old: o.old,
                                new: o.new,
                            },
                            &o.migrations,
                        );
                    }
                }
                Err(e) => warn!(?watched, "watch error, relisting after backoff: {e}"),
            }
        }
    });
    (reader, task)
}

/// Starts every watch virt-controller needs; a cluster without CDI runs without DataVolumes (as
/// KubeVirt, which checks whether CDI's DataVolume CRD is served before it watches them; a CDI
/// installed later restarts the controller: [`data_volume_api_changed`]).
pub async fn start(client: &kube::Client, shared: Arc<Shared>) -> (Caches, Vec<JoinHandle<()>>) {
    let mut tasks = Vec::new();
    let all = watcher::Config::default();
    // First: the pod and VMI watches resolve their objects to migrations through it.
    let (migrations, t) = watch(
        KubeResourceApi::<DynamicObject>::all_with(client.clone(), &migration_resource()),
        all.clone(),
        Watched::Migration,
        Describe {
            seen: seen_meta::<DynamicObject>,
            migrations: no_migrations,
            storage: None,
        },
        migration_resource(),
        shared.clone(),
    );
    tasks.push(t);
    // Set once, here, by the only caller.
    let _ = shared.migrations.set(migrations.clone());
    let (vms, t) = watch(
        KubeResourceApi::<VirtualMachine>::all(client.clone()),
        all.clone(),
        Watched::Vm,
        Describe {
            seen: seen_meta::<VirtualMachine>,
            migrations: no_migrations,
            storage: None,
        },
        (),
        shared.clone(),
    );
    tasks.push(t);
    let _ = shared.vms.set(vms.clone());
    let (vmis, t) = watch(
        KubeResourceApi::<VirtualMachineInstance>::all(client.clone()),
        all.clone(),
        Watched::Vmi,
        Describe {
            seen: seen_vmi,
            migrations: vmi_migrations,
            storage: None,
        },
        (),
        shared.clone(),
    );
    tasks.push(t);
    let _ = shared.vmis.set(vmis.clone());
    let (pods, t) = watch(
        KubeResourceApi::<Pod>::all(client.clone()),
        watcher::Config::default().labels(labels::APP),
        Watched::Pod,
        Describe {
            seen: seen_pod,
            migrations: pod_migrations,
            storage: None,
        },
        (),
        shared.clone(),
    );
    tasks.push(t);
    let _ = shared.pods.set(pods.clone());
    let (revisions, t) = watch(
        KubeResourceApi::<ControllerRevision>::all(client.clone()),
        all.clone(),
        Watched::Other,
        Describe {
            seen: seen_meta::<ControllerRevision>,
            migrations: no_migrations,
            storage: None,
        },
        (),
        shared.clone(),
    );
    tasks.push(t);
    let (pvcs, t) = watch(
        KubeResourceApi::<PersistentVolumeClaim>::all(client.clone()),
        all.clone(),
        Watched::Other,
        Describe {
            seen: seen_meta::<PersistentVolumeClaim>,
            migrations: no_migrations,
            storage: Some((StorageKind::Claim, crate::storage_cache::claim_seen)),
        },
        (),
        shared.clone(),
    );
    tasks.push(t);
    let data_volumes = if has_data_volumes(client).await {
        let gvk = GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "datavolumes");
        let (dvs, t) = watch(
            KubeResourceApi::<DynamicObject>::all_with(client.clone(), &ar),
            all.clone(),
            Watched::Other,
            Describe {
                seen: seen_meta::<DynamicObject>,
                migrations: no_migrations,
                storage: Some((
                    StorageKind::DataVolume,
                    crate::storage_cache::data_volume_seen,
                )),
            },
            ar,
            shared.clone(),
        );
        tasks.push(t);
        Some(dvs)
    } else {
        info!("no DataVolume CRD (cdi.kubevirt.io) on this cluster: running without DataVolumes");
        None
    };
    let storage_profiles = if served_resources(client, "cdi.kubevirt.io")
        .await
        .iter()
        .any(|p| p == "storageprofiles")
    {
        let gvk = GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "StorageProfile");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "storageprofiles");
        let (store, t) = watch_dynamic(client, &ar);
        tasks.push(t);
        Some(store)
    } else {
        None
    };
    let (storage_classes, task) = watch_typed::<StorageClass>(client);
    tasks.push(task);
    let mut instancetypes = Vec::new();
    let served = served_resources(client, "instancetype.kubevirt.io").await;
    for (kind, plural) in INSTANCETYPE_KINDS {
        if !served.iter().any(|p| p == plural) {
            info!("no {plural} (instancetype.kubevirt.io) on this cluster: running without them");
            continue;
        }
        let gvk = GroupVersionKind::gvk("instancetype.kubevirt.io", "v1beta1", kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
        let (store, t) = watch_dynamic(client, &ar);
        tasks.push(t);
        instancetypes.push((kind, store));
    }
    let kubevirts = if served_resources(client, "kubevirt.io")
        .await
        .iter()
        .any(|p| p == "kubevirts")
    {
        let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "kubevirts");
        let (store, t) = watch_dynamic(client, &ar);
        tasks.push(t);
        Some(store)
    } else {
        None
    };
    let migration_policies = if served_resources(client, "migrations.kubevirt.io")
        .await
        .iter()
        .any(|p| p == "migrationpolicies")
    {
        let (store, t) = watch_dynamic(client, &crate::policy_cache::policy_resource());
        tasks.push(t);
        Some(store)
    } else {
        info!(
            "no MigrationPolicy CRD (migrations.kubevirt.io) on this cluster: running without them"
        );
        None
    };
    let (namespaces, task) = watch_typed::<Namespace>(client);
    tasks.push(task);
    let (nodes, task) = watch_typed::<Node>(client);
    tasks.push(task);
    (
        Caches {
            vms,
            vmis,
            pods,
            revisions,
            pvcs,
            data_volumes,
            storage_classes,
            storage_profiles,
            instancetypes,
            nodes,
            migrations,
            kubevirts,
            migration_policies,
            namespaces,
        },
        tasks,
    )
}

/// A cache of objects no controller is woken by (instancetypes, KubeVirt CRs): they are read
/// when a key is synced.
fn watch_dynamic(
    client: &kube::Client,
    ar: &ApiResource,
) -> (Store<DynamicObject>, JoinHandle<()>) {
    let writer = reflector::store::Writer::new(ar.clone());
    let api = KubeResourceApi::<DynamicObject>::all_with(client.clone(), ar);
    reflect(writer, api)
}

/// A cache of every `K` (namespaces, nodes: read by the evacuation and migration decisions,
/// never the reason for a sync).
fn watch_typed<K>(client: &kube::Client) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    reflect(
        reflector::store::Writer::default(),
        KubeResourceApi::<K>::all(client.clone()),
    )
}

/// Fills `writer`'s store from a watch of `api` (with backoff) on a task of its own.
fn reflect<K>(
    writer: reflector::store::Writer<K>,
    api: KubeResourceApi<K>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let reader = writer.as_reader();
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let task = tokio::spawn(async move {
        reflector::reflector(writer, stream)
            .for_each(|_| async {})
            .await;
    });
    (reader, task)
}

/// How often the controller looks again whether CDI's DataVolume API is served.
pub const CDI_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// Resolves once CDI's DataVolume API is served when it was not (`had` false), or no longer
/// served when it was: the caches started without (or with) a DataVolume watch, and only a
/// fresh start sets them up again. KubeVirt's controller re-initialises itself then ("cdi api
/// has been introduced"); kvrs's process ends, and its Deployment starts it anew.
pub async fn data_volume_api_changed(client: &kube::Client, had: bool) -> bool {
    loop {
        tokio::time::sleep(CDI_CHECK_PERIOD).await;
        let has = has_data_volumes(client).await;
        if has != had {
            return has;
        }
    }
}

pub(crate) async fn has_data_volumes(client: &kube::Client) -> bool {
    match kube::discovery::group(client, "cdi.kubevirt.io").await {
        Ok(g) => g
            .recommended_resources()
            .iter()
            .any(|(r, _)| r.plural == "datavolumes"),
        Err(_) => false,
    }
}

/// The plurals `group` serves (none when the group is unknown).
async fn served_resources(client: &kube::Client, group: &str) -> Vec<String> {
    match kube::discovery::group(client, group).await {
        Ok(g) => g
            .recommended_resources()
            .into_iter()
            .map(|(r, _)| r.plural)
            .collect(),
        Err(_) => Vec::new(),
    }
}

impl Caches {
    /// Waits until every cache has listed once.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.vms.wait_until_ready().await?;
        self.vmis.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.revisions.wait_until_ready().await?;
        self.pvcs.wait_until_ready().await?;
        self.migrations.wait_until_ready().await?;
        if let Some(dvs) = &self.data_volumes {
            dvs.wait_until_ready().await?;
        }
        for (_, store) in &self.instancetypes {
            store.wait_until_ready().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    /// An attachment pod carries no VMI label: its VMI is its launcher pod's, found in the pod
    /// cache by the owner reference (name and UID), so its events wake the VMI.
    #[test]
    fn an_attachment_pod_resolves_to_its_launchers_vmi() {
        let shared = Shared::new(&crate::metrics::ControllerMetrics::new());
        let mut writer = reflector::store::Writer::<Pod>::new(());
        let launcher = pod(json!({
            "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "ns", "uid": "l-uid",
                         "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "vm1"}}}));
        writer.apply_watcher_event(&Event::Apply(launcher.clone()));
        let _ = shared.pods.set(writer.as_reader());
        let attachment = |uid: &str| {
            pod(json!({
                "metadata": {"name": "hp-volume-xyz12", "namespace": "ns",
                             "labels": {"kubevirt.io": "hotplug-disk"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                 "name": "virt-launcher-vm1-abcde", "uid": uid, "controller": true}]}}))
        };
        assert_eq!(
            seen_pod(&launcher, &shared).vmi_key.as_deref(),
            Some("ns/vm1")
        );
        assert_eq!(
            seen_pod(&attachment("l-uid"), &shared).vmi_key.as_deref(),
            Some("ns/vm1")
        );
        // An owner of the same name but another UID is not its launcher.
        assert_eq!(seen_pod(&attachment("other"), &shared).vmi_key, None);
    }
}
