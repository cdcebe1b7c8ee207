//! The `pods/eviction` webhook in front of a real kube-apiserver: the Eviction API (what
//! `kubectl drain` calls) on a virt-launcher pod goes through virt-api's
//! `virt-launcher-eviction-interceptor.kubevirt.io`, registered from `bins/deploy/virt-api` with
//! its match condition and `sideEffects: NoneOnDryRun`:
//! - a `LiveMigrate` VMI's launcher pod is not evicted (429, KubeVirt's message) and the VMI is
//!   marked for evacuation with the pod's node; asking again says the evacuation is under way;
//! - a dry-run eviction marks nothing;
//! - a `LiveMigrate` VMI that cannot migrate refuses the eviction without a mark;
//!   `LiveMigrateIfPossible` lets the pod go; the KubeVirt CR's `evictionStrategy` applies to a
//!   VMI that sets none;
//! - `kubectl drain` of a node running such a VMI keeps retrying and gives up, the pod still
//!   there and the VMI marked.
//!
//! As in `tests/cluster.rs`, only etcd and kube-apiserver run, and the webhook entry calls
//! virt-api (in this process) by URL. Only the eviction entry is registered: the test plays
//! virt-handler and writes VMI status, which the VMI webhooks reserve for KubeVirt.

mod support;

use std::time::Duration;

use kvrs_test_cluster::{Options, TestCluster};
use serde_json::{Value, json};
use support::{
    VirtApi, create, get_json, kubectl, loopback_addr, must, root, runtime, wait_for, yaml,
};

/// POSTs `body` to the API server's `path` as the admin: the HTTP code and the JSON answer.
fn post(cluster: &TestCluster, path: &str, body: &Value) -> (u16, Value) {
    let out = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-X", "POST", "--cacert"])
        .arg(cluster.ca_cert_path())
        .args(["-H", "Content-Type: application/json", "-H"])
        .arg(format!("Authorization: Bearer {}", cluster.admin_token()))
        .args(["--data-binary", &body.to_string()])
        .arg(format!("{}{path}", cluster.server_url()))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, code) = text.rsplit_once('\n').expect("a status code line");
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(json).unwrap_or(Value::Null),
    )
}

/// The eviction entry of the deployed validating configuration, calling `base`.
fn register_eviction_webhook(cluster: &TestCluster, base: &str) {
    let mut conf = yaml(&root().join("bins/deploy/virt-api/validatingwebhookconfiguration.yaml"));
    let hooks: Vec<Value> = conf["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["rules"][0]["resources"] == json!(["pods/eviction"]))
        .cloned()
        .map(|mut h| {
            let path = h["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap()
                .to_string();
            h["clientConfig"] = json!({"url": format!("{base}{path}")});
            h
        })
        .collect();
    assert_eq!(hooks.len(), 1, "one pods/eviction entry");
    conf["webhooks"] = Value::Array(hooks);
    create(cluster, &conf);
}

/// A VMI running on `node` as virt-handler reports it, with its launcher pod there.
fn running_vmi(
    cluster: &TestCluster,
    name: &str,
    strategy: Option<&str>,
    migratable: bool,
    node: &str,
) -> String {
    let mut spec =
        json!({"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}});
    if let Some(s) = strategy {
        spec["evictionStrategy"] = json!(s);
    }
    create(
        cluster,
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
            "status": {"phase": "Running", "nodeName": node,
                "conditions": [{"type": "LiveMigratable",
                                "status": if migratable { "True" } else { "False" }}]}}),
    );
    let uid =
        get_json(cluster, &["vmi", "-n", "default", name]).expect("the VMI")["metadata"]["uid"]
            .clone();
    let pod = format!("virt-launcher-{name}-x7k2p");
    create(
        cluster,
        &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default",
                "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": name},
                "annotations": {"kubevirt.io/domain": name},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance", "name": name, "uid": uid,
                    "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "launcher"}]}}),
    );
    pod
}

fn evict(cluster: &TestCluster, pod: &str, dry_run: bool) -> (u16, Value) {
    let mut body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": "default"}});
    if dry_run {
        body["deleteOptions"] = json!({"dryRun": ["All"]});
    }
    post(
        cluster,
        &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
        &body,
    )
}

fn evacuation_node(cluster: &TestCluster, vmi: &str) -> Option<String> {
    let v = get_json(cluster, &["vmi", "-n", "default", vmi])?;
    v["status"]["evacuationNodeName"].as_str().map(String::from)
}

fn pod_exists(cluster: &TestCluster, pod: &str) -> bool {
    get_json(cluster, &["pod", "-n", "default", pod])
        .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null())
}

const DENIED: &str =
    "admission webhook \"virt-launcher-eviction-interceptor.kubevirt.io\" denied the request: ";

#[test]
fn evicting_a_launcher_pod_marks_its_vmi_for_evacuation_instead() {
    let cluster = TestCluster::start(Options::apiserver_only()).expect("kube-apiserver and etcd");
    cluster
        .install_kubevirt_crds(&root().join("bins/deploy"))
        .expect("CRDs");
    must(&cluster, &["create", "namespace", "kubevirt"], None);
    create(
        &cluster,
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": {"evictionStrategy": "LiveMigrate"}}}),
    );
    for node in ["node01", "node02"] {
        create(
            &cluster,
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
        );
    }
    let addr = loopback_addr();
    register_eviction_webhook(&cluster, &format!("https://{addr}"));
    let rt = runtime();
    let kubeconfig = cluster.admin_kubeconfig_path().to_path_buf();
    let api = VirtApi::start(&rt, &kubeconfig, addr, &["--tls-san", "127.0.0.1"]);
    wait_for(
        "the caBundle in the eviction webhook",
        Duration::from_secs(60),
        || {
            let conf = get_json(
                &cluster,
                &["validatingwebhookconfiguration", "kvrs-virt-api-validator"],
            )?;
            conf["webhooks"][0]["clientConfig"]["caBundle"]
                .is_string()
                .then_some(())
        },
    );

    // LiveMigrate: refused with 429, the VMI marked with the pod's node.
    let pod = running_vmi(&cluster, "live", Some("LiveMigrate"), true, "node01");
    let (code, answer) = wait_for("the webhook to answer", Duration::from_secs(30), || {
        let (code, answer) = evict(&cluster, &pod, false);
        // Until the API server trusts the new caBundle the call fails (500).
        (code != 500).then_some((code, answer))
    });
    assert_eq!(code, 429, "{answer:#}");
    assert_eq!(
        answer["message"],
        format!("{DENIED}Eviction triggered evacuation of VMI \"default/live\""),
        "{answer:#}"
    );
    assert_eq!(evacuation_node(&cluster, "live").as_deref(), Some("node01"));
    assert!(pod_exists(&cluster, &pod));
    let (code, answer) = evict(&cluster, &pod, false);
    assert_eq!(code, 429);
    assert_eq!(
        answer["message"],
        format!(
            "{DENIED}Evacuation in progress: Eviction triggered evacuation of VMI \"default/live\""
        )
    );

    // A dry run is refused the same way but marks nothing.
    let pod = running_vmi(&cluster, "dry", Some("LiveMigrate"), true, "node01");
    let (code, answer) = evict(&cluster, &pod, true);
    assert_eq!(code, 429, "{answer:#}");
    assert_eq!(
        answer["message"],
        format!("{DENIED}Eviction triggered evacuation of VMI \"default/dry\"")
    );
    assert_eq!(evacuation_node(&cluster, "dry"), None);

    // LiveMigrate without LiveMigratable: refused, not marked.
    let pod = running_vmi(&cluster, "stuck", Some("LiveMigrate"), false, "node01");
    let (code, answer) = evict(&cluster, &pod, false);
    assert_eq!(code, 429);
    assert_eq!(
        answer["message"],
        format!(
            "{DENIED}VMI stuck is configured with an eviction strategy but is not live-migratable"
        )
    );
    assert_eq!(evacuation_node(&cluster, "stuck"), None);

    // LiveMigrateIfPossible without LiveMigratable: the pod goes.
    let pod = running_vmi(
        &cluster,
        "if-possible",
        Some("LiveMigrateIfPossible"),
        false,
        "node01",
    );
    let (code, answer) = evict(&cluster, &pod, false);
    assert_eq!(code, 201, "{answer:#}");
    assert!(!pod_exists(&cluster, &pod));
    assert_eq!(evacuation_node(&cluster, "if-possible"), None);

    // No strategy of its own: the KubeVirt CR's LiveMigrate applies.
    let pod = running_vmi(&cluster, "cluster-default", None, true, "node01");
    let (code, _) = evict(&cluster, &pod, false);
    assert_eq!(code, 429);
    assert_eq!(
        evacuation_node(&cluster, "cluster-default").as_deref(),
        Some("node01")
    );

    // kubectl drain: cordons node02, retries the refused eviction, gives up; the pod stays and
    // the VMI is marked with node02.
    let pod = running_vmi(&cluster, "drained", Some("LiveMigrate"), true, "node02");
    let (ok, _, err) = kubectl(
        &cluster,
        &["drain", "node02", "--ignore-daemonsets", "--timeout=6s"],
        None,
    );
    assert!(!ok, "the drain cannot finish while the VMI is on node02");
    assert!(
        err.contains("Eviction triggered evacuation of VMI \"default/drained\""),
        "{err}"
    );
    assert!(pod_exists(&cluster, &pod));
    assert_eq!(
        evacuation_node(&cluster, "drained").as_deref(),
        Some("node02")
    );
    let node = get_json(&cluster, &["node", "node02"]).expect("node02");
    assert_eq!(node["spec"]["unschedulable"], true, "cordoned");

    api.stop(&rt);
}
