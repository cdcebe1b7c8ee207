//! An informer cache: what one controller process believes the cluster looks like, fed by watch
//! events that arrive late or not at all, and rebuilt from a full list after a relist or restart.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::store::{Obj, WatchEvent, res};

/// Label on launcher pods naming the VMI UID they run.
pub const CREATED_BY_LABEL: &str = "kubevirt.io/created-by";

/// One process's view of the cluster.
#[derive(Debug, Default)]
pub struct Cache {
    objects: HashMap<&'static str, BTreeMap<String, Arc<Obj>>>,
    /// Pod keys by the VMI UID they belong to.
    pods_by_vmi: HashMap<String, BTreeSet<String>>,
}

fn pod_owner(obj: &Obj) -> Option<String> {
    obj.json()?
        .get("metadata")?
        .get("labels")?
        .get(CREATED_BY_LABEL)?
        .as_str()
        .map(str::to_string)
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

    /// Pods of a VMI UID.
    pub fn pods_of(&self, vmi_uid: &str) -> Vec<&Value> {
        self.pods_by_vmi
            .get(vmi_uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.get(res::PODS, k)?.json())
            .collect()
    }

    /// Applies one watch event.
    pub fn apply(&mut self, ev: &WatchEvent) {
        self.set(ev.resource, &ev.key, ev.obj.clone());
    }

    /// Sets or removes one object.
    pub fn set(&mut self, resource: &'static str, key: &str, obj: Option<Arc<Obj>>) {
        let map = self.objects.entry(resource).or_default();
        let old = match obj {
            Some(o) => {
                if resource == res::PODS {
                    if let Some(owner) = pod_owner(&o) {
                        self.pods_by_vmi
                            .entry(owner)
                            .or_default()
                            .insert(key.to_string());
                    }
                }
                map.insert(key.to_string(), o)
            }
            None => map.remove(key),
        };
        if let (Some(old), true) = (old, resource == res::PODS) {
            let still = self
                .objects
                .get(resource)
                .is_some_and(|m| m.contains_key(key));
            if !still {
                if let Some(owner) = pod_owner(&old) {
                    if let Some(set) = self.pods_by_vmi.get_mut(&owner) {
                        set.remove(key);
                        if set.is_empty() {
                            self.pods_by_vmi.remove(&owner);
                        }
                    }
                }
            }
        }
    }

    /// Forgets everything (a restarted process starts empty).
    pub fn clear(&mut self) {
        self.objects.clear();
        self.pods_by_vmi.clear();
    }
}
