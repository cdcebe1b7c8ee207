//! An informer cache: what one controller process believes the cluster looks like, fed by watch
//! events that arrive late or not at all, and rebuilt from a full list after a relist or restart.

use foldhash::HashMap;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kvrs_api::{VirtualMachine, VirtualMachineInstance};
use kvrs_decide::vm::Revision;
use kvrs_executor::world::{ControllerCache, WantedRevisions};
use serde::Deserialize;
use serde_json::Value;

use super::store::{Obj, WatchEvent, res};

/// Label on launcher pods naming the VMI UID they run.
pub const CREATED_BY_LABEL: &str = "kubevirt.io/created-by";

/// One process's view of the cluster.
#[derive(Clone, Debug, Default)]
pub struct Cache {
    objects: HashMap<&'static str, BTreeMap<String, Arc<Obj>>>,
    /// Launcher pods by the VMI UID they belong to, then by key. Each is parsed once, by the
    /// first VMI decision that reads it (on the decision thread, not the simulator's, whose
    /// work bounds a large run), and the parse is kept for every later sync.
    pods_by_vmi: HashMap<String, PodsOfVmi>,
    /// ControllerRevisions by key, parsed once as they enter the cache (and the VM spec a start
    /// revision records, once by the first sync that reads it).
    revisions: BTreeMap<String, Revision>,
    /// The keys of the ControllerRevisions each owner UID owns (a VM's sync reads the ones it
    /// owns without a scan of the namespace).
    revisions_by_owner: HashMap<String, Vec<String>>,
}

/// The pods of one VMI by key, in key order: nearly always one or two, so a sorted vector (a
/// `BTreeMap` node has room for eleven parsed pods whether it holds one or not: ~26 KB of a
/// simulated VM's memory went to that empty room).
#[derive(Clone, Debug, Default)]
struct PodsOfVmi(Vec<(String, CachedPod)>);

impl PodsOfVmi {
    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut CachedPod> {
        let i = self.position(key).ok()?;
        Some(&mut self.0[i].1)
    }

    fn insert(&mut self, key: String, pod: CachedPod) {
        match self.position(&key) {
            Ok(i) => self.0[i].1 = pod,
            Err(i) => self.0.insert(i, (key, pod)),
        }
    }

    fn remove(&mut self, key: &str) -> Option<CachedPod> {
        let i = self.position(key).ok()?;
        Some(self.0.remove(i).1)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn values(&self) -> impl Iterator<Item = &CachedPod> {
        self.0.iter().map(|(_, pod)| pod)
    }
}

/// What a cache update replaced: the object's previous version and, for a pod, its parsed view.
/// Dropping them is left to the caller (the simulator hands them to its second thread).
#[derive(Default)]
pub struct Replaced {
    /// The previous version of the object.
    pub object: Option<Arc<Obj>>,
    /// The parsed view of the previous version of a pod, if it was parsed.
    pub pod: Option<Box<Pod>>,
}

/// A cached launcher pod and its typed view, parsed on first read. The view is boxed: a `Pod`
/// is ~2.3 KB inline, which every cached pod took whether parsed or not.
#[derive(Clone, Debug)]
struct CachedPod {
    obj: Arc<Obj>,
    typed: OnceLock<Option<Box<Pod>>>,
}

impl CachedPod {
    fn typed(&self) -> Option<&Pod> {
        self.typed
            .get_or_init(|| parse::<Pod>(&self.obj).map(Box::new))
            .as_deref()
    }
}

fn pod_owner(obj: &Obj) -> Option<&str> {
    obj.json()?
        .get("metadata")?
        .get("labels")?
        .get(CREATED_BY_LABEL)?
        .as_str()
}

/// The typed view of a cached JSON object (`None` for one that does not parse, which the
/// typed readers then do not see, as an informer drops what it cannot decode).
fn parse<T: for<'de> Deserialize<'de>>(obj: &Obj) -> Option<T> {
    T::deserialize(obj.json()?).ok()
}

impl Cache {
    /// The cached object.
    pub fn get(&self, resource: &str, key: &str) -> Option<&Arc<Obj>> {
        self.objects.get(resource)?.get(key)
    }

    /// Every cached object of a resource.
    pub fn iter(&self, resource: &str) -> impl Iterator<Item = (&String, &Arc<Obj>)> {
        self.objects
            .get(resource)
            .into_iter()
            .flat_map(BTreeMap::iter)
    }

    /// Cached objects of a resource whose key starts with `prefix`.
    pub fn with_prefix<'a>(
        &'a self,
        resource: &str,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Obj>> + 'a {
        self.objects
            .get(resource)
            .into_iter()
            .flat_map(move |m| {
                m.range(prefix.to_string()..)
                    .take_while(move |(k, _)| k.starts_with(prefix))
            })
            .map(|(_, v)| v)
    }

    /// Cached ControllerRevisions whose key starts with `prefix`.
    pub fn revisions_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Revision> + 'a {
        self.revisions
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
    }

    /// Pods of a VMI UID.
    pub fn pods_of(&self, vmi_uid: &str) -> Vec<&Pod> {
        self.pods_by_vmi
            .get(vmi_uid)
            .into_iter()
            .flat_map(PodsOfVmi::values)
            .filter_map(CachedPod::typed)
            .collect()
    }

    /// Applies one watch event.
    /// Returns what it replaced, for the caller to drop where it likes.
    pub fn apply(&mut self, ev: &WatchEvent) -> Replaced {
        self.set(ev.resource, &ev.key, ev.obj.clone())
    }

    /// Sets or removes one object; returns what it replaced.
    pub fn set(&mut self, resource: &'static str, key: &str, obj: Option<Arc<Obj>>) -> Replaced {
        let map = self.objects.entry(resource).or_default();
        let old = match (&obj, map.get_mut(key)) {
            // A key already cached keeps its String: only the value changes.
            (Some(o), Some(slot)) => Some(std::mem::replace(slot, o.clone())),
            (Some(o), None) => map.insert(key.to_string(), o.clone()),
            (None, _) => map.remove(key),
        };
        if resource == res::PODS {
            let old_owner = old.as_deref().and_then(pod_owner);
            let new_owner = obj.as_deref().and_then(pod_owner);
            // An update that keeps the pod's owner (nearly all of them) replaces its entry in
            // place: no owner or key string is built again.
            if let (Some(o), Some(owner)) = (&obj, new_owner)
                && old_owner == Some(owner)
                && let Some(slot) = self
                    .pods_by_vmi
                    .get_mut(owner)
                    .and_then(|pods| pods.get_mut(key))
            {
                let replaced = std::mem::replace(
                    slot,
                    CachedPod {
                        obj: o.clone(),
                        typed: OnceLock::new(),
                    },
                );
                return Replaced {
                    object: old,
                    pod: replaced.typed.into_inner().flatten(),
                };
            }
            let mut replaced = None;
            if let Some(owner) = old_owner
                && let Some(pods) = self.pods_by_vmi.get_mut(owner)
            {
                replaced = pods
                    .remove(key)
                    .and_then(|p| p.typed.into_inner().flatten());
                if pods.is_empty() {
                    self.pods_by_vmi.remove(owner);
                }
            }
            if let (Some(o), Some(owner)) = (&obj, new_owner) {
                let pod = CachedPod {
                    obj: o.clone(),
                    typed: OnceLock::new(),
                };
                self.pods_by_vmi
                    .entry(owner.to_string())
                    .or_default()
                    .insert(key.to_string(), pod);
            }
            return Replaced {
                object: old,
                pod: replaced,
            };
        } else if resource == res::REVISIONS {
            let old = match obj.as_deref().and_then(parse::<ControllerRevision>) {
                Some(cr) => self.revisions.insert(key.to_string(), Revision::from(cr)),
                None => self.revisions.remove(key),
            };
            if let Some(old) = old {
                for uid in owner_uids(&old) {
                    if let Some(keys) = self.revisions_by_owner.get_mut(uid) {
                        keys.retain(|k| k != key);
                        if keys.is_empty() {
                            self.revisions_by_owner.remove(uid);
                        }
                    }
                }
            }
            if let Some(new) = self.revisions.get(key) {
                for uid in owner_uids(new) {
                    self.revisions_by_owner
                        .entry(uid.to_string())
                        .or_default()
                        .push(key.to_string());
                }
            }
        }
        Replaced {
            object: old,
            pod: None,
        }
    }

    /// Forgets everything (a restarted process starts empty).
    pub fn clear(&mut self) {
        self.objects.clear();
        self.pods_by_vmi.clear();
        self.revisions.clear();
        self.revisions_by_owner.clear();
    }
}

/// The UIDs of a revision's owners.
fn owner_uids(revision: &Revision) -> impl Iterator<Item = &str> {
    revision
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.uid.as_str())
}

/// virt-controller's informer cache as the shared world functions read it
/// ([`kvrs_executor::world`]): the VM and VMI decisions are fed exactly as in the cluster binary.
impl ControllerCache for Cache {
    type Obj<'a, T: 'a> = &'a T;

    fn vm(&self, key: &str) -> Option<&VirtualMachine> {
        self.get(res::VMS, key)?.vm()
    }

    fn vmi(&self, key: &str) -> Option<&VirtualMachineInstance> {
        self.get(res::VMIS, key)?.vmi()
    }

    fn launcher_pods(&self, namespace: &str, vmi_uid: &str) -> Vec<&Pod> {
        let mut pods = self.pods_of(vmi_uid);
        pods.retain(|p| p.metadata.namespace.as_deref() == Some(namespace));
        pods
    }

    /// The start revisions by their key prefix, the owned ones by owner UID, the named ones by
    /// key: no scan of the namespace.
    fn revisions(&self, namespace: &str, wanted: &WantedRevisions<'_>) -> Vec<Revision> {
        let prefix = format!("{namespace}/{}", wanted.start_prefix);
        let mut out: Vec<Revision> = self.revisions_with_prefix(&prefix).cloned().collect();
        let in_namespace = |k: &&String| {
            k.strip_prefix(namespace)
                .is_some_and(|rest| rest.starts_with('/'))
        };
        let owned = self
            .revisions_by_owner
            .get(wanted.owner_uid)
            .into_iter()
            .flatten()
            .filter(in_namespace)
            .filter_map(|k| self.revisions.get(k));
        out.extend(owned.cloned());
        let named = wanted
            .names
            .iter()
            .filter_map(|n| self.revisions.get(&format!("{namespace}/{n}")));
        out.extend(named.cloned());
        out
    }

    /// None: the simulated API server keeps instancetypes, like every kind but VMs, VMIs, pods
    /// and ControllerRevisions, as untyped objects no controller reads.
    fn instancetype_objects(&self, _: &str) -> Vec<Value> {
        Vec::new()
    }

    /// None: a simulated cluster has no CDI.
    fn data_volumes(&self, _: &str) -> Vec<Value> {
        Vec::new()
    }

    /// None: the simulated API server keeps PVCs as untyped objects no controller reads.
    fn pvcs(&self, _: &str) -> Vec<PersistentVolumeClaim> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(owner: &str, phase: &str) -> Option<Arc<Obj>> {
        Some(Arc::new(Obj::Other(json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {CREATED_BY_LABEL: owner}},
            "status": {"phase": phase},
        }))))
    }

    /// The typed pods follow every change of the JSON ones: updates, a new owner, removal.
    #[test]
    fn typed_pods_follow_the_cache() {
        let mut c = Cache::default();
        c.set(res::PODS, "default/p", pod("a", "Pending"));
        c.set(res::PODS, "default/p", pod("a", "Running"));
        let phases = |c: &Cache, uid: &str| -> Vec<String> {
            c.pods_of(uid)
                .iter()
                .filter_map(|p| p.status.as_ref()?.phase.clone())
                .collect()
        };
        assert_eq!(phases(&c, "a"), ["Running"]);
        c.set(res::PODS, "default/p", pod("b", "Running"));
        assert!(phases(&c, "a").is_empty());
        assert_eq!(phases(&c, "b"), ["Running"]);
        c.set(res::PODS, "default/p", None);
        assert!(c.pods_of("b").is_empty());
        assert!(c.pods_by_vmi.is_empty());
    }

    /// A VMI's pods come back in key order however they arrived, and one removed leaves the
    /// others (a migration's source and target pods).
    #[test]
    fn a_vmis_pods_are_listed_in_key_order() {
        let mut c = Cache::default();
        c.set(res::PODS, "default/p3", pod("a", "Pending"));
        c.set(res::PODS, "default/p1", pod("a", "Running"));
        c.set(res::PODS, "default/p2", pod("a", "Failed"));
        let phases = |c: &Cache| -> Vec<String> {
            c.pods_of("a")
                .iter()
                .filter_map(|p| p.status.as_ref()?.phase.clone())
                .collect()
        };
        assert_eq!(phases(&c), ["Running", "Failed", "Pending"]);
        c.set(res::PODS, "default/p2", None);
        c.set(res::PODS, "default/p1", pod("a", "Succeeded"));
        assert_eq!(phases(&c), ["Succeeded", "Pending"]);
    }
}
