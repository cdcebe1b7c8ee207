//! A drained node with random VMIs (every eviction strategy, migratable or not, some with a
//! migration already in flight), evacuated, and the migrations it creates then driven by the
//! migration controller's own decision under random parallel limits. Always:
//! - the evacuation creates at most one migration per VMI, only for a VMI that wants to and can
//!   move and has none in flight, and nothing more once its migrations are in the cache;
//! - however the migration controller's reconciles interleave, the migrations holding a target
//!   pod never exceed `parallelMigrationsPerCluster` nor, all leaving one node,
//!   `parallelOutboundMigrationsPerNode` — the bound a drain runs under.

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::fixtures::*;
use super::*;
use crate::ClusterConfig;
use crate::migration::{MigrationConfig, MigrationWorld, decide_migration};

const STRATEGIES: [Option<&str>; 5] = [
    None,
    Some("None"),
    Some("LiveMigrate"),
    Some("LiveMigrateIfPossible"),
    Some("External"),
];

#[derive(Clone, Debug)]
struct Guest {
    strategy: Option<&'static str>,
    migratable: bool,
    in_flight: bool,
}

fn guest() -> impl Strategy<Value = Guest> {
    (
        0..STRATEGIES.len(),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(s, m, f)| Guest {
            strategy: STRATEGIES[s],
            migratable: m,
            in_flight: f,
        })
}

/// A migration as it is stored after virt-api's webhook: label, finalizer, API versions.
fn stored(mut m: Value, uid: &str) -> Value {
    let vmi = m["spec"]["vmiName"].clone();
    m["metadata"]["uid"] = json!(uid);
    m["metadata"]["resourceVersion"] = json!("1");
    m["metadata"]["labels"] = json!({"kubevirt.io/vmi-name": vmi});
    m["metadata"]["finalizers"] = json!(["kubevirt.io/migrationJobFinalize"]);
    let a = m["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut a = Value::Object(a);
    a["kubevirt.io/latest-observed-api-version"] = json!("v1");
    a["kubevirt.io/storage-observed-api-version"] = json!("v1");
    m["metadata"]["annotations"] = a;
    m
}

fn render(v: &VirtualMachineInstance, _source: &Pod) -> Result<Value, String> {
    let uid = v.metadata.uid.clone().unwrap_or_default();
    let name = v.metadata.name.clone().unwrap_or_default();
    Ok(json!({
        "metadata": {"generateName": format!("virt-launcher-{name}-"), "namespace": "default",
            "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid},
            "annotations": {},
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                 "name": name, "uid": uid, "controller": true}]},
        "spec": {"containers": [{"name": "compute", "image": "launcher"}]},
    }))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_drain_stays_within_the_parallel_limits(
        guests in prop::collection::vec(guest(), 1..8),
        per_cluster in 1u32..5,
        per_node in 1u32..4,
        order in prop::collection::vec(any::<prop::sample::Index>(), 40),
    ) {
        let n = node("node-a", Some(("kubevirt.io/drain", "NoSchedule")));
        let vmis: Vec<VirtualMachineInstance> = guests
            .iter()
            .enumerate()
            .map(|(i, g)| vmi(&format!("vm{i}"), "node-a", g.strategy, g.migratable).build())
            .collect();
        let mut pods: Vec<Pod> = vmis
            .iter()
            .enumerate()
            .map(|(i, v)| launcher(&format!("virt-launcher-vm{i}-src"), v, "node-a", "Running"))
            .collect();
        let mut migrations: Vec<Value> = guests
            .iter()
            .enumerate()
            .filter(|(_, g)| g.in_flight)
            .map(|(i, _)| stored(migration(&format!("user-{i}"), &format!("vm{i}"), "Pending"), &format!("user-{i}-uid")))
            .collect();

        let suffix = |i: usize| format!("{i:05}");
        let w = EvacuationWorld {
            node: &n,
            vmis: vmis.iter().collect(),
            migrations: &migrations,
            pods: pods.iter().collect(),
            expectations: PendingExpectations::default(),
            drain_taint_key: names::DEFAULT_DRAIN_TAINT_KEY,
            cluster_strategy: None,
            now: Now::from_unix(NOW),
        };
        let plan = decide_evacuation(&w, &suffix);
        let mut seen = BTreeSet::new();
        let mut created = Vec::new();
        for write in plan.writes() {
            let WriteOp::Create { object } = &write.op else { panic!("only creates") };
            let name = object["spec"]["vmiName"].as_str().unwrap().to_string();
            prop_assert!(seen.insert(name.clone()), "two migrations for {}", name);
            let i: usize = name[2..].parse().unwrap();
            let g = &guests[i];
            prop_assert!(!g.in_flight, "{} already had a migration", name);
            prop_assert!(g.migratable, "{} cannot migrate", name);
            prop_assert!(matches!(g.strategy, Some("LiveMigrate" | "LiveMigrateIfPossible")), "{} does not want to", name);
            created.push(stored(object.clone(), &format!("{}-uid", write.name)));
        }
        // Every VMI that wants to and can move, and has nothing in flight, got one.
        let wanted = guests.iter().filter(|g| !g.in_flight && g.migratable
            && matches!(g.strategy, Some("LiveMigrate" | "LiveMigrateIfPossible"))).count();
        prop_assert_eq!(created.len(), wanted);
        let pods_then = w.pods.len();
        drop(w);
        migrations.extend(created);
        let again = EvacuationWorld {
            node: &n,
            vmis: vmis.iter().collect(),
            migrations: &migrations,
            pods: pods.iter().collect(),
            expectations: PendingExpectations::default(),
            drain_taint_key: names::DEFAULT_DRAIN_TAINT_KEY,
            cluster_strategy: None,
            now: Now::from_unix(NOW),
        };
        prop_assert_eq!(again.pods.len(), pods_then);
        prop_assert!(decide_evacuation(&again, &suffix).actions.is_empty(), "a second round created more");
        drop(again);

        // The migration controller, reconciling the migrations in a random order.
        let mc = MigrationConfig::from_migrations(Some(&json!({
            "parallelMigrationsPerCluster": per_cluster,
            "parallelOutboundMigrationsPerNode": per_node,
        })));
        let cluster = ClusterConfig::default();
        if migrations.is_empty() {
            return Ok(());
        }
        let mut most = 0;
        for (step, pick) in order.iter().enumerate() {
            let at = pick.index(migrations.len());
            let decision = {
                let world = MigrationWorld {
                    migration: &migrations[at],
                    migrations: &migrations,
                    vmis: vmis.iter().collect(),
                    pods: pods.iter().collect(),
                    nodes: std::slice::from_ref(&n),
                    kubevirt: None,
                    expectations: PendingExpectations::default(),
                    pending_creations_anywhere: 0,
                    handed_off: false,
                    config: &cluster,
                    migration_config: &mc,
                    now: Now::from_unix(NOW),
                };
                decide_migration(&world, &render, &format!("p{step:04}"))
            };
            if let Some(status) = decision.status {
                migrations[at]["status"] = status;
            }
            for write in decision.plan.writes() {
                if let (WriteOp::Create { object }, "pods") = (&write.op, write.resource.as_str()) {
                    let mut pod = object.clone();
                    pod["metadata"]["name"] = json!(write.name.clone());
                    pod["status"] = json!({"phase": "Pending"});
                    pods.push(serde_json::from_value(pod).unwrap());
                }
            }
            let with_target: Vec<&str> = migrations
                .iter()
                .filter(|m| {
                    let uid = m["metadata"]["uid"].as_str().unwrap_or_default();
                    pods.iter().any(|p| crate::meta::label(&p.metadata, "kubevirt.io/migrationJobUID") == Some(uid))
                })
                .map(|m| m["metadata"]["name"].as_str().unwrap_or_default())
                .collect();
            most = most.max(with_target.len());
            prop_assert!(with_target.len() <= per_cluster.min(per_node) as usize,
                "{} migrations with target pods ({:?}), limits {}/{}", with_target.len(), with_target, per_cluster, per_node);
        }
        // Not vacuous: the drain made progress (40 reconciles reach every migration's target
        // pod creation unless the limits hold it back).
        if wanted > 0 {
            prop_assert!(most > 0, "no target pod was ever created");
        }
    }
}
