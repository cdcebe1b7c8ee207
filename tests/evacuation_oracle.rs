//! kvrs's `pods/eviction` decision (`kvrs_decide::evacuation::admit_eviction`) against KubeVirt
//! v1.9.0's own `PodEvictionAdmitter`, imported as a Go module (`scripts/evacuation-harness.sh`
//! builds `tests/evacuation`; the test fails when the harness cannot be built).
//!
//! Every combination of the VMI's eviction strategy, the cluster's, LiveMigratable, an earlier
//! mark, the pod being the VMI's current or a target pod, a dry run, a descheduler eviction and
//! the VMI's annotations, plus the pods KubeVirt lets go untouched (missing, not a launcher,
//! completed, no domain annotation) and a missing VMI, go through both; the answers (allowed,
//! code, message) and the VMI left behind (`status.evacuationNodeName`, the eviction-source
//! annotation) must agree.
//!
//! KubeVirt's fake clientset does not honour dry runs, so on dry runs only the answer is
//! compared.

use std::path::{Path, PathBuf};

use kvrs_core::api::VirtualMachineInstance;
use kvrs_core::decide::evacuation::{EvictionRequest, EvictionVerdict, admit_eviction};
use kvrs_core::decide::patch::apply_json_patch;
use serde_json::{Value, json};

fn harness_binary() -> PathBuf {
    kvrs_tests::go_harness("scripts/evacuation-harness.sh", "Go and the module proxy")
}

/// One scenario, as the harness reads it.
struct Scenario {
    name: String,
    pod: Option<Value>,
    vmi: Option<Value>,
    cluster_strategy: Option<&'static str>,
    eviction: Value,
    dry_run: bool,
}

impl Scenario {
    fn to_json(&self) -> Value {
        json!({"name": self.name, "pod": self.pod, "vmi": self.vmi,
               "clusterStrategy": self.cluster_strategy, "eviction": self.eviction,
               "dryRun": self.dry_run})
    }
}

fn launcher(node: &str) -> Value {
    json!({"metadata": {"name": "virt-launcher-guest-x7k2p", "namespace": "default",
               "labels": {"kubevirt.io": "virt-launcher"},
               "annotations": {"kubevirt.io/domain": "guest"}},
           "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "launcher"}]},
           "status": {"phase": "Running"}})
}

fn eviction(descheduler: bool, dry_run_option: bool) -> Value {
    let mut e = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "virt-launcher-guest-x7k2p", "namespace": "default"}});
    if descheduler {
        e["metadata"]["annotations"] = json!({"requested-by": "sigs.k8s.io/descheduler"});
    }
    if dry_run_option {
        e["deleteOptions"] = json!({"dryRun": ["All"]});
    }
    e
}

fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    let strategies = [
        None,
        Some("None"),
        Some("LiveMigrate"),
        Some("LiveMigrateIfPossible"),
        Some("External"),
    ];
    for strategy in strategies {
        for cluster in [None, Some("LiveMigrate"), Some("External")] {
            for migratable in [true, false] {
                for marked in [false, true] {
                    for target_pod in [false, true] {
                        for (dry_run, dry_option) in [(false, false), (true, false), (false, true)]
                        {
                            for descheduler in [false, true] {
                                for annotated in [false, true] {
                                    let mut vmi = json!({
                                        "metadata": {"name": "guest", "namespace": "default", "uid": "guest-uid"},
                                        "spec": {"domain": {"devices": {}}},
                                        "status": {"phase": "Running", "nodeName": "node01",
                                            "conditions": [{"type": "LiveMigratable",
                                                "status": if migratable { "True" } else { "False" }}]}});
                                    if let Some(s) = strategy {
                                        vmi["spec"]["evictionStrategy"] = json!(s);
                                    }
                                    if marked {
                                        vmi["status"]["evacuationNodeName"] = json!("node01");
                                    }
                                    if annotated {
                                        vmi["metadata"]["annotations"] = json!({"team": "a"});
                                    }
                                    let node = if target_pod { "node02" } else { "node01" };
                                    out.push(Scenario {
                                        name: format!(
                                            "strategy={strategy:?} cluster={cluster:?} migratable={migratable} marked={marked} \
                                             target={target_pod} dry={dry_run}/{dry_option} descheduler={descheduler} annotated={annotated}"
                                        ),
                                        pod: Some(launcher(node)),
                                        vmi: Some(vmi),
                                        cluster_strategy: cluster,
                                        eviction: eviction(descheduler, dry_option),
                                        dry_run,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let live = json!({"metadata": {"name": "guest", "namespace": "default", "uid": "guest-uid"},
        "spec": {"evictionStrategy": "LiveMigrate", "domain": {"devices": {}}},
        "status": {"phase": "Running", "nodeName": "node01",
            "conditions": [{"type": "LiveMigratable", "status": "True"}]}});
    let mut not_launcher = launcher("node01");
    not_launcher["metadata"]["labels"] = json!({"app": "web"});
    let mut completed = launcher("node01");
    completed["status"]["phase"] = json!("Succeeded");
    let mut anonymous = launcher("node01");
    anonymous["metadata"]["annotations"] = json!({});
    for (name, pod, vmi) in [
        ("no pod", None, Some(live.clone())),
        ("not a launcher", Some(not_launcher), Some(live.clone())),
        ("completed launcher", Some(completed), Some(live.clone())),
        ("no domain annotation", Some(anonymous), Some(live.clone())),
        ("no VMI", Some(launcher("node01")), None),
    ] {
        out.push(Scenario {
            name: name.into(),
            pod,
            vmi,
            cluster_strategy: None,
            eviction: eviction(false, false),
            dry_run: false,
        });
    }
    out
}

/// kvrs's answer as (allowed, code, message) and the VMI it leaves.
fn kvrs(s: &Scenario) -> (bool, u16, String, Option<Value>) {
    let pod = s
        .pod
        .as_ref()
        .map(|p| serde_json::from_value(p.clone()).expect("pod"));
    let vmi: Option<VirtualMachineInstance> = s
        .vmi
        .as_ref()
        .map(|v| serde_json::from_value(v.clone()).expect("vmi"));
    let r = EvictionRequest {
        pod: pod.as_ref(),
        vmi: vmi
            .as_ref()
            .ok_or_else(|| "virtualmachineinstances.kubevirt.io \"guest\" not found".to_string()),
        eviction: &s.eviction,
        dry_run: s.dry_run,
        cluster_strategy: s.cluster_strategy,
    };
    match admit_eviction(&r) {
        EvictionVerdict::Allow => (true, 0, String::new(), s.vmi.clone()),
        EvictionVerdict::Deny(m) => (false, 429, m, s.vmi.clone()),
        EvictionVerdict::Mark {
            patch,
            message,
            dry_run,
            ..
        } => {
            let mut after = s.vmi.clone().expect("a VMI to mark");
            if !dry_run {
                apply_json_patch(&mut after, &patch).expect("the mark applies");
            }
            (false, 429, message, Some(after))
        }
    }
}

/// What an eviction may change on the VMI: the mark and the annotations.
fn marks(vmi: Option<&Value>) -> (Value, Value) {
    let v = vmi.cloned().unwrap_or(Value::Null);
    (
        v["status"]["evacuationNodeName"].clone(),
        v["metadata"]["annotations"].clone(),
    )
}

#[test]
fn kvrs_decides_evictions_as_kubevirts_admitter() {
    let bin = harness_binary();
    let scenarios = scenarios();
    let input = Value::Array(scenarios.iter().map(Scenario::to_json).collect());
    let answers: Vec<Value> = kvrs_tests::run_json(&bin, &[], &input);
    assert_eq!(answers.len(), scenarios.len());
    let (mut same, mut marked, mut annotated) = (0, 0, 0);
    let mut differences = Vec::new();
    for (s, go) in scenarios.iter().zip(&answers) {
        let (allowed, code, message, vmi) = kvrs(s);
        let go_allowed = go["allowed"].as_bool().unwrap();
        let go_code = go["code"].as_u64().unwrap_or(0);
        let go_message = go["message"].as_str().unwrap_or_default();
        let answer_same = allowed == go_allowed
            && (allowed || (u64::from(code) == go_code && message == go_message));
        let dry = s.dry_run || s.eviction["deleteOptions"]["dryRun"].is_array();
        let state_same = dry || marks(vmi.as_ref()) == marks(go.get("vmi"));
        if answer_same && state_same {
            same += 1;
            if !dry && marks(vmi.as_ref()).0.is_string() && !marks(s.vmi.as_ref()).0.is_string() {
                marked += 1;
                if marks(vmi.as_ref()).1 != marks(s.vmi.as_ref()).1 {
                    annotated += 1;
                }
            }
        } else {
            differences.push(format!(
                "{}:\n  kubevirt: allowed={go_allowed} code={go_code} {go_message:?} marks={:?}\n  kvrs:     allowed={allowed} code={code} {message:?} marks={:?}",
                s.name,
                marks(go.get("vmi")),
                marks(vmi.as_ref())
            ));
        }
    }
    eprintln!(
        "{same} of {} scenarios agree ({marked} mark the VMI, {annotated} of those annotate it too), {} differ",
        scenarios.len(),
        differences.len()
    );
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(
        marked > 0 && annotated > 0,
        "the grid reaches the mark and the descheduler's annotation"
    );
}

// ---- the evacuation controller ----

fn harness_output(bin: &Path, args: &[&str], input: &Value) -> Vec<Value> {
    kvrs_tests::run_json(bin, args, input)
}

/// One node sync: the node, its one VMI (with its pods and migrations) and the configuration.
fn node_scenarios() -> Vec<Value> {
    let mut out = Vec::new();
    let taints = [
        ("untainted", json!([]), None),
        (
            "drain",
            json!([{"key": "kubevirt.io/drain", "effect": "NoSchedule"}]),
            None,
        ),
        (
            "drain-noexecute",
            json!([{"key": "kubevirt.io/drain", "effect": "NoExecute"}]),
            None,
        ),
        (
            "custom",
            json!([{"key": "example.com/maint", "effect": "NoSchedule"}]),
            Some("example.com/maint"),
        ),
    ];
    let strategies = [
        None,
        Some("None"),
        Some("LiveMigrate"),
        Some("LiveMigrateIfPossible"),
        Some("External"),
    ];
    for (taint_name, taints, key) in &taints {
        for cluster in [None, Some("LiveMigrate")] {
            for strategy in strategies {
                for migratable in [true, false] {
                    for marked in [None, Some("node01"), Some("node02")] {
                        for migrating in ["no", "running", "ended"] {
                            for state in ["Running", "Succeeded", "deleting"] {
                                for migration in ["none", "unfinished", "final"] {
                                    for pods in [1, 2] {
                                        let mut vmi = json!({
                                            "metadata": {"name": "guest", "namespace": "default", "uid": "guest-uid"},
                                            "spec": {"domain": {"devices": {}}},
                                            "status": {"phase": if state == "deleting" { "Running" } else { state },
                                                "nodeName": "node01",
                                                "conditions": [{"type": "LiveMigratable",
                                                    "status": if migratable { "True" } else { "False" }}]}});
                                        if let Some(s) = strategy {
                                            vmi["spec"]["evictionStrategy"] = json!(s);
                                        }
                                        if state == "deleting" {
                                            vmi["metadata"]["deletionTimestamp"] =
                                                json!("2020-01-01T00:00:00Z");
                                        }
                                        if let Some(n) = marked {
                                            vmi["status"]["evacuationNodeName"] = json!(n);
                                        }
                                        match migrating {
                                            "running" => {
                                                vmi["status"]["migrationState"] = json!({"migrationUid": "m1", "startTimestamp": "2020-01-01T00:00:00Z"})
                                            }
                                            "ended" => {
                                                vmi["status"]["migrationState"] = json!({"migrationUid": "m1", "startTimestamp": "2020-01-01T00:00:00Z", "endTimestamp": "2020-01-01T00:01:00Z"})
                                            }
                                            _ => {}
                                        }
                                        let migrations = match migration {
                                            "none" => json!([]),
                                            m => {
                                                json!([{"metadata": {"name": "m1", "namespace": "default", "uid": "m1-uid"},
                                                "spec": {"vmiName": "guest"},
                                                "status": {"phase": if m == "final" { "Succeeded" } else { "Scheduling" }}}])
                                            }
                                        };
                                        let pod = |name: &str, node: &str| {
                                            json!({
                                            "metadata": {"name": name, "namespace": "default",
                                                "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "guest-uid"},
                                                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                                    "name": "guest", "uid": "guest-uid", "controller": true}]},
                                            "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "launcher"}]},
                                            "status": {"phase": "Running"}})
                                        };
                                        let pods = if pods == 2 {
                                            json!([
                                                pod("virt-launcher-guest-a", "node01"),
                                                pod("virt-launcher-guest-b", "node02")
                                            ])
                                        } else {
                                            json!([pod("virt-launcher-guest-a", "node01")])
                                        };
                                        let mut config = json!({});
                                        if let Some(c) = cluster {
                                            config["evictionStrategy"] = json!(c);
                                        }
                                        if let Some(k) = key {
                                            config["migrations"] = json!({"nodeDrainTaintKey": k});
                                        }
                                        out.push(json!({
                                            "name": format!("taint={taint_name} cluster={cluster:?} strategy={strategy:?} migratable={migratable} \
                                                marked={marked:?} migrating={migrating} state={state} migration={migration} pods={}",
                                                pods.as_array().unwrap().len()),
                                            "node": {"metadata": {"name": "node01"}, "spec": {"taints": taints}},
                                            "vmis": [vmi], "migrations": migrations, "pods": pods, "config": config,
                                        }));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// kvrs's decision for one node scenario: the migrations' (VMI, annotations, priority) and
/// the events' "TYPE REASON".
fn kvrs_node(s: &Value) -> (Vec<(String, Value, String)>, Vec<String>) {
    use kvrs_core::decide::evacuation::{EvacuationWorld, decide_evacuation, names};
    use kvrs_core::decide::{Now, PendingExpectations, WriteOp};
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(s["node"].clone()).unwrap();
    let vmis: Vec<VirtualMachineInstance> = serde_json::from_value(s["vmis"].clone()).unwrap();
    let pods: Vec<k8s_openapi::api::core::v1::Pod> =
        serde_json::from_value(s["pods"].clone()).unwrap();
    let migrations: Vec<Value> = s["migrations"].as_array().cloned().unwrap_or_default();
    let key = s["config"]["migrations"]["nodeDrainTaintKey"]
        .as_str()
        .unwrap_or(names::DEFAULT_DRAIN_TAINT_KEY);
    let world = EvacuationWorld {
        node: &node,
        vmis: vmis.iter().collect(),
        migrations: &migrations,
        pods: pods.iter().collect(),
        expectations: PendingExpectations::default(),
        drain_taint_key: key,
        cluster_strategy: s["config"]["evictionStrategy"].as_str(),
        now: Now::from_unix(1_767_225_600),
    };
    let plan = decide_evacuation(&world, &|i| format!("{i:05}"));
    let created = plan
        .writes()
        .map(|w| {
            let WriteOp::Create { object } = &w.op else {
                panic!("only creates")
            };
            (
                object["spec"]["vmiName"].as_str().unwrap().to_string(),
                object["metadata"]["annotations"].clone(),
                object["spec"]["priority"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let events = plan
        .events
        .iter()
        .map(|e| format!("{:?} {}", e.kind, e.reason))
        .collect();
    (created, events)
}

#[test]
fn kvrs_evacuates_nodes_as_kubevirts_controller() {
    let bin = harness_binary();
    let scenarios = node_scenarios();
    let answers = harness_output(&bin, &["evacuation"], &Value::Array(scenarios.clone()));
    assert_eq!(answers.len(), scenarios.len());
    let (mut same, mut migrated) = (0, 0);
    let mut differences = Vec::new();
    for (s, go) in scenarios.iter().zip(&answers) {
        let (created, events) = kvrs_node(s);
        let go_created: Vec<(String, Value, String)> = go["migrations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                assert_eq!(m["generateName"], "kubevirt-evacuation-");
                (
                    m["vmiName"].as_str().unwrap().to_string(),
                    m["annotations"].clone(),
                    m["priority"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        // "Normal SuccessfulCreate Created Migration ..." → "Normal SuccessfulCreate".
        let go_events: Vec<String> = go["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e.as_str()
                    .unwrap()
                    .split(' ')
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        if created == go_created && events == go_events {
            same += 1;
            migrated += usize::from(!created.is_empty());
        } else {
            differences.push(format!(
                "{}:\n  kubevirt: {go_created:?} {go_events:?}\n  kvrs:     {created:?} {events:?}",
                s["name"].as_str().unwrap()
            ));
        }
    }
    eprintln!(
        "{same} of {} node syncs agree ({migrated} create a migration), {} differ",
        scenarios.len(),
        differences.len()
    );
    assert!(
        differences.is_empty(),
        "{}",
        differences[..differences.len().min(20)].join("\n")
    );
    assert!(migrated > 0, "the grid reaches a migration");
}
