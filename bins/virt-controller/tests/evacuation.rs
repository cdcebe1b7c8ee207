//! Evacuation and MigrationPolicies in virt-controller on a real kube-apiserver (no kubelet,
//! no virt-handler, no virt-api: the test plays them):
//! - the drain taint `kubevirt.io/drain:NoSchedule` on a node creates one migration per VMI
//!   that wants to move (KubeVirt's names, annotation and priority), none for a VMI with the
//!   `None` strategy, and the migration controller gives no more of them target pods than
//!   `parallelOutboundMigrationsPerNode` allows;
//! - a VMI marked for evacuation (`status.evacuationNodeName`, as virt-api's eviction webhook
//!   marks it) on an untainted node gets its migration too;
//! - a MigrationPolicy selecting a VMI by its labels and its namespace's shapes the migration
//!   configuration handed to virt-handler, and names itself in the VMI's migration state.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

fn kubectl_ok(h: &Harness, args: &[&str]) {
    let out = h.cluster.kubectl(args.iter().copied());
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Brings VM `name` (with `evictionStrategy` `strategy`) to a Running VMI on `node`, as kubelet
/// and virt-handler would, live-migratable as virt-handler reports it.
fn running_vmi(h: &Harness, name: &str, strategy: &str, node: &str) -> Value {
    let mut v = vm(name, "Always");
    v["spec"]["template"]["spec"]["evictionStrategy"] = json!(strategy);
    h.create(&v);
    h.wait_live_vmi("default", name, T);
    h.run_launcher_pod("default", name, node);
    h.wait_for("VMI Scheduled", T, || {
        let v = h.get("vmi", "default", name)?;
        (v["status"]["phase"] == "Scheduled").then_some(())
    });
    h.set_vmi_phase("default", name, "Running");
    let ops = json!([
        {"op": "add", "path": "/status/selinuxContext", "value": "none"},
        {"op": "add", "path": "/status/conditions/-", "value":
            {"type": "LiveMigratable", "status": "True", "lastProbeTime": null,
             "lastTransitionTime": support::now_rfc3339()}},
    ]);
    kubectl_ok(
        h,
        &[
            "patch",
            "vmi",
            "-n",
            "default",
            name,
            "--type=json",
            "-p",
            &ops.to_string(),
        ],
    );
    let vmi = h.get("vmi", "default", name).expect("the VMI");
    assert_eq!(vmi["status"]["nodeName"], node, "{vmi:#}");
    vmi
}

/// The migrations in `default`, by VMI name.
fn migrations_by_vmi(h: &Harness) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = h
        .list("vmim", "default", "")
        .into_iter()
        .map(|m| {
            (
                m["spec"]["vmiName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                m,
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Launcher pods created as some migration's target.
fn target_pods(h: &Harness) -> Vec<Value> {
    h.list("pods", "default", "kubevirt.io/migrationJobUID")
}

#[test]
fn a_drained_node_gets_one_migration_per_vmi_within_the_parallel_limits() {
    let mut h = Harness::start();
    h.two_labelled_nodes();
    h.start_controller("a", &[]);
    for name in ["evac-a", "evac-b", "evac-c"] {
        running_vmi(&h, name, "LiveMigrate", "node01");
    }
    running_vmi(&h, "stays", "None", "node01");
    // Nothing moves before the drain.
    std::thread::sleep(Duration::from_secs(2));
    assert!(migrations_by_vmi(&h).is_empty());

    kubectl_ok(
        &h,
        &[
            "taint",
            "nodes",
            "node01",
            "kubevirt.io/drain=draining:NoSchedule",
        ],
    );
    let migrations = h.wait_for("three evacuation migrations", T, || {
        let m = migrations_by_vmi(&h);
        (m.len() >= 3).then_some(m)
    });
    let vmis: Vec<&str> = migrations.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(
        vmis,
        ["evac-a", "evac-b", "evac-c"],
        "none for the None strategy"
    );
    for (vmi, m) in &migrations {
        let name = m["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("kubevirt-evacuation-"), "{name}");
        assert_eq!(name.len(), "kubevirt-evacuation-".len() + 5, "{name}");
        assert_eq!(
            m["metadata"]["annotations"]["kubevirt.io/evacuationMigration"], "node01",
            "{vmi}: {m:#}"
        );
        assert_eq!(m["spec"]["priority"], "system-critical", "{vmi}: {m:#}");
    }
    // KubeVirt's default parallelOutboundMigrationsPerNode (2): the migration controller gives
    // two of them target pods and holds the third.
    h.wait_for("two target pods", T, || {
        (target_pods(&h).len() == 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        target_pods(&h).len(),
        2,
        "no third target pod while two are in flight"
    );
    assert_eq!(
        migrations_by_vmi(&h).len(),
        3,
        "no second migration for a VMI: {:#?}",
        migrations_by_vmi(&h)
    );
    let events = h.list("events", "default", "");
    // KubeVirt's event on each VMI, naming its migration.
    let mut created: Vec<(String, String)> = events
        .iter()
        .filter(|e| {
            e["reason"] == "SuccessfulCreate"
                && e["involvedObject"]["kind"] == "VirtualMachineInstance"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("Created Migration "))
        })
        .map(|e| {
            let vmi = e["involvedObject"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let message = e["message"].as_str().unwrap_or_default().to_string();
            (vmi, message)
        })
        .collect();
    created.sort();
    let expected: Vec<(String, String)> = migrations
        .iter()
        .map(|(vmi, m)| {
            let name = m["metadata"]["name"].as_str().unwrap_or_default();
            (vmi.clone(), format!("Created Migration {name}"))
        })
        .collect();
    assert_eq!(created, expected);
}

#[test]
fn a_vmi_marked_for_evacuation_migrates_off_an_untainted_node() {
    let mut h = Harness::start();
    h.two_labelled_nodes();
    h.start_controller("a", &[]);
    running_vmi(&h, "marked", "LiveMigrateIfPossible", "node01");
    running_vmi(&h, "unmarked", "LiveMigrate", "node01");
    std::thread::sleep(Duration::from_secs(2));
    assert!(migrations_by_vmi(&h).is_empty());
    // As virt-api's eviction webhook marks it.
    let ops = json!([{"op": "add", "path": "/status/evacuationNodeName", "value": "node01"}]);
    kubectl_ok(
        &h,
        &[
            "patch",
            "vmi",
            "-n",
            "default",
            "marked",
            "--type=json",
            "-p",
            &ops.to_string(),
        ],
    );
    let migrations = h.wait_for("the marked VMI's migration", T, || {
        let m = migrations_by_vmi(&h);
        (!m.is_empty()).then_some(m)
    });
    std::thread::sleep(Duration::from_secs(3));
    let vmis: Vec<String> = migrations_by_vmi(&h).into_iter().map(|(v, _)| v).collect();
    assert_eq!(vmis, ["marked"], "only the marked VMI: {migrations:#?}");
}

#[test]
fn a_migration_policy_shapes_the_handed_off_configuration() {
    let mut h = Harness::start();
    h.cluster
        .wait_for_crds(&["migrationpolicies.migrations.kubevirt.io"], T)
        .expect("the MigrationPolicy CRD");
    h.two_labelled_nodes();
    // The more specific policy (VMI and namespace labels) wins over the namespace-wide one.
    h.create(
        &json!({"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
        "metadata": {"name": "default-namespace"},
        "spec": {"selectors": {"namespaceSelector": {"kubernetes.io/metadata.name": "default"}},
                 "allowAutoConverge": false, "completionTimeoutPerGiB": 100}}),
    );
    h.create(
        &json!({"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
        "metadata": {"name": "slow-db"},
        "spec": {"selectors": {
                    "namespaceSelector": {"kubernetes.io/metadata.name": "default"},
                    "virtualMachineInstanceSelector": {"app": "pol-a"}},
                 "bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": 300,
                 "allowAutoConverge": true, "allowPostCopy": true}}),
    );
    h.start_controller("a", &[]);
    running_vmi(&h, "pol-a", "LiveMigrate", "node01");
    h.create(
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "job-a", "namespace": "default",
                     "finalizers": ["kubevirt.io/migrationJobFinalize"]},
        "spec": {"vmiName": "pol-a"}}),
    );
    let pod = h.wait_for("the target pod", T, || target_pods(&h).into_iter().next());
    h.run_pod(
        "default",
        pod["metadata"]["name"].as_str().unwrap(),
        "node02",
    );
    let state = h.wait_for("the VMI's migration state", T, || {
        let v = h.get("vmi", "default", "pol-a")?;
        let s = v["status"]["migrationState"].clone();
        s["migrationConfiguration"].is_object().then_some(s)
    });
    assert_eq!(state["migrationPolicyName"], "slow-db", "{state:#}");
    let c = &state["migrationConfiguration"];
    assert_eq!(c["bandwidthPerMigration"], "64Mi", "{c:#}");
    assert_eq!(c["completionTimeoutPerGiB"], 300, "{c:#}");
    assert_eq!(c["allowAutoConverge"], true, "{c:#}");
    assert_eq!(c["allowPostCopy"], true, "{c:#}");
    assert_eq!(
        c["allowWorkloadDisruption"], true,
        "follows allowPostCopy: {c:#}"
    );
    assert_eq!(
        c["progressTimeout"], 150,
        "the cluster's default where the policy is silent"
    );
}
