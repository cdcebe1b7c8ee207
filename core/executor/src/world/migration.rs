//! The migration controller's world, from the informer caches virt-controller keeps for it.
//!
//! KubeVirt's migration controller reads cluster-wide caches: every migration (the parallel
//! limits count the running ones), every VMI (the per-node limit looks up the nodes of the
//! running migrations' VMIs), every launcher pod, the Nodes (the source node's CPU labels go into
//! the target's node selector) and the KubeVirt CR (its migration configuration, its
//! synchronization addresses). Which of them go into [`MigrationWorld`] is decided here once.

use std::ops::Deref;

use k8s_openapi::api::core::v1::{Node, Pod};
use kvrs_admission::ClusterConfig;
use kvrs_api::VirtualMachineInstance;
use kvrs_decide::migration::{MigrationConfig, MigrationWorld, names};
use kvrs_decide::{Now, PendingExpectations};
use serde_json::Value;

/// The caches the migration controller reads. Every method answers from the cache alone; keys
/// are `namespace/name`.
pub trait MigrationCache {
    /// How the cache hands out an object (a reference, or a pointer it shares).
    type Obj<'a, T: 'a>: Deref<Target = T>
    where
        Self: 'a;

    /// The VirtualMachineInstanceMigration of `key`, as JSON (kvrs-api has no type for it).
    fn migration(&self, key: &str) -> Option<Value>;

    /// Every migration of every namespace, as JSON.
    fn all_migrations(&self) -> Vec<Value>;

    /// Every VMI of every namespace.
    fn all_vmis(&self) -> Vec<Self::Obj<'_, VirtualMachineInstance>>;

    /// Every launcher pod (labelled `kubevirt.io`) of every namespace.
    fn all_launcher_pods(&self) -> Vec<Self::Obj<'_, Pod>>;

    /// Every Node.
    fn nodes(&self) -> Vec<Node>;

    /// The KubeVirt CRs the cache holds, as JSON.
    fn kubevirts(&self) -> Vec<Value>;
}

/// What one migration sync decides from besides the caches.
#[derive(Clone, Copy, Debug)]
pub struct MigrationInputs<'a> {
    /// The outstanding pod expectations of the migration's key.
    pub expectations: PendingExpectations,
    /// Target pod creations outstanding under any migration key.
    pub pending_creations_anywhere: u32,
    /// The shell remembers handing this migration off (KubeVirt's `handOffMap`).
    pub handed_off: bool,
    /// The clock.
    pub now: Now,
    /// The cluster configuration.
    pub config: &'a ClusterConfig,
}

/// Builds the migration controller's world for `key` from `cache` and hands it to `decide`;
/// `None` (and `decide` not called) when the cache holds no migration of that key — the shell
/// then forgets the key's expectations and hand-off, as KubeVirt does.
///
/// The migration configuration is the KubeVirt CR's when the cache holds exactly one (as
/// KubeVirt's informer reads the one CR virt-operator deployed), KubeVirt's defaults otherwise.
pub fn migration_world<C, R>(
    cache: &C,
    key: &str,
    inputs: MigrationInputs<'_>,
    decide: impl FnOnce(&MigrationWorld<'_>) -> R,
) -> Option<R>
where
    C: MigrationCache + ?Sized,
{
    let migration = cache.migration(key)?;
    let migrations = cache.all_migrations();
    let vmis = cache.all_vmis();
    let pods = cache.all_launcher_pods();
    let nodes = cache.nodes();
    let kubevirts = cache.kubevirts();
    let kubevirt = match kubevirts.as_slice() {
        [one] => Some(one),
        _ => None,
    };
    let migration_config = MigrationConfig::from_kubevirt(kubevirt);
    let world = MigrationWorld {
        migration: &migration,
        migrations: &migrations,
        vmis: vmis.iter().map(|v| &**v).collect(),
        pods: pods.iter().map(|p| &**p).collect(),
        nodes: &nodes,
        kubevirt,
        expectations: inputs.expectations,
        pending_creations_anywhere: inputs.pending_creations_anywhere,
        handed_off: inputs.handed_off,
        config: inputs.config,
        migration_config: &migration_config,
        now: inputs.now,
    };
    Some(decide(&world))
}

/// The migration a target pod claims to belong to: the name its `kubevirt.io/migrationJobName`
/// annotation gives and the UID its `kubevirt.io/migrationJobUID` label gives. KubeVirt's
/// `getControllerOf` builds the same pair; the caller checks the UID against the migration its
/// cache holds under that name (`resolveControllerRef`), so a pod left by an older migration
/// of the same name wakes nothing.
pub fn migration_of_pod(pod: &Pod) -> Option<(&str, &str)> {
    let name = pod
        .metadata
        .annotations
        .as_ref()?
        .get(names::MIGRATION_JOB_NAME)?;
    let uid = pod
        .metadata
        .labels
        .as_ref()?
        .get(names::MIGRATION_JOB_UID)?;
    Some((name.as_str(), uid.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Default)]
    struct Maps {
        migrations: Vec<Value>,
        vmis: Vec<VirtualMachineInstance>,
        kubevirts: Vec<Value>,
    }

    impl MigrationCache for Maps {
        type Obj<'a, T: 'a> = &'a T;
        fn migration(&self, key: &str) -> Option<Value> {
            migrations_of_key(&self.migrations, key)
        }
        fn all_migrations(&self) -> Vec<Value> {
            self.migrations.clone()
        }
        fn all_vmis(&self) -> Vec<&VirtualMachineInstance> {
            self.vmis.iter().collect()
        }
        fn all_launcher_pods(&self) -> Vec<&Pod> {
            Vec::new()
        }
        fn nodes(&self) -> Vec<Node> {
            Vec::new()
        }
        fn kubevirts(&self) -> Vec<Value> {
            self.kubevirts.clone()
        }
    }

    fn migrations_of_key(all: &[Value], key: &str) -> Option<Value> {
        all.iter()
            .find(|m| {
                format!(
                    "{}/{}",
                    m["metadata"]["namespace"].as_str().unwrap_or_default(),
                    m["metadata"]["name"].as_str().unwrap_or_default()
                ) == key
            })
            .cloned()
    }

    fn vmim(ns: &str, name: &str, vmi: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}, "spec": {"vmiName": vmi}})
    }

    #[test]
    fn the_world_takes_the_one_kubevirt_crs_migration_configuration() {
        let mut cache = Maps {
            migrations: vec![vmim("ns", "m1", "a"), vmim("ns", "m2", "a")],
            ..Maps::default()
        };
        let config = ClusterConfig::default();
        let inputs = MigrationInputs {
            expectations: PendingExpectations::default(),
            pending_creations_anywhere: 2,
            handed_off: true,
            now: Now::from_unix(0),
            config: &config,
        };
        let read = |cache: &Maps| {
            migration_world(cache, "ns/m2", inputs, |w| {
                (
                    w.migration["metadata"]["name"].clone(),
                    w.migrations.len(),
                    w.migration_config.parallel_per_cluster(),
                    w.pending_creations_anywhere,
                    w.handed_off,
                )
            })
        };
        assert_eq!(read(&cache), Some((json!("m2"), 2, 5, 2, true)));
        let cr = |n: u32| json!({"spec": {"configuration": {"migrations": {"parallelMigrationsPerCluster": n}}}});
        cache.kubevirts = vec![cr(9)];
        assert_eq!(read(&cache).map(|r| r.2), Some(9));
        // Two CRs: none counts (KubeVirt's defaults).
        cache.kubevirts.push(cr(7));
        assert_eq!(read(&cache).map(|r| r.2), Some(5));
        assert!(migration_world(&cache, "ns/gone", inputs, |_| ()).is_none());
    }

    #[test]
    fn a_target_pod_names_its_migration_by_annotation_and_uid_label() {
        let pod = |annotated: bool, labelled: bool| -> Pod {
            let mut v = json!({"metadata": {"name": "virt-launcher-a-x", "namespace": "ns"}});
            if annotated {
                v["metadata"]["annotations"] = json!({names::MIGRATION_JOB_NAME: "m1"});
            }
            if labelled {
                v["metadata"]["labels"] = json!({names::MIGRATION_JOB_UID: "u1"});
            }
            serde_json::from_value(v).expect("a pod")
        };
        assert_eq!(migration_of_pod(&pod(true, true)), Some(("m1", "u1")));
        // A source pod (neither) and half-marked pods belong to no migration.
        assert_eq!(migration_of_pod(&pod(false, false)), None);
        assert_eq!(migration_of_pod(&pod(true, false)), None);
        assert_eq!(migration_of_pod(&pod(false, true)), None);
    }
}
