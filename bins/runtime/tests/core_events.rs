//! Events reach a real kube-apiserver as KubeVirt's do: core/v1 Events with KubeVirt's
//! `source.component`, recorded under exactly the events rule of KubeVirt v1.9.0's controller
//! ClusterRole (core `events`: create, patch, update), and a repeated event counted on the one
//! stored instead of stored again.

use kvrs_decide::{Event, ObjectRef};
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::setup::connect;
use kvrs_test_cluster::TestCluster;
use serde_json::Value;

const NS: &str = "events";

/// A ServiceAccount whose only permission is KubeVirt's events rule.
const KUBEVIRT_EVENTS_RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: kubevirt-controller, namespace: events}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kubevirt-events-only}
rules:
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["update", "create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubevirt-events-only}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kubevirt-events-only}
subjects:
  - {kind: ServiceAccount, name: kubevirt-controller, namespace: events}
"#;

fn vm_event(message: &str) -> Event {
    Event::normal(
        ObjectRef {
            kind: "VirtualMachine".into(),
            namespace: NS.into(),
            name: "vm1".into(),
            uid: Some("0b7c5f0e-0000-4000-8000-000000000001".into()),
        },
        "SuccessfulCreate",
        message,
    )
}

fn events(cluster: &TestCluster) -> Vec<Value> {
    let out = cluster.kubectl(["get", "events", "-n", NS, "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("events json");
    v["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_core_v1_from_kubevirt_s_source_and_counted() {
    let cluster = tokio::task::block_in_place(|| TestCluster::apiserver_with_namespace(NS));
    let applied = cluster.kubectl_with_stdin(["apply", "-f", "-"], KUBEVIRT_EVENTS_RBAC);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let token = cluster.service_account_token(NS, "kubevirt-controller");
    let kubeconfig = cluster.kubeconfig_for_token(&token);
    let client = connect(Some(&kubeconfig)).await.expect("a client");
    let api = KubeApi::new(client, "virt-controller")
        .with_event_source("virtualmachine-controller", None);

    api.record_event(&vm_event(
        "Started the virtual machine by creating the new virtual machine instance vm1",
    ))
    .await;
    api.record_event(&vm_event(
        "Started the virtual machine by creating the new virtual machine instance vm1",
    ))
    .await;
    api.record_event(&vm_event("a different message")).await;

    let got = events(&cluster);
    assert_eq!(got.len(), 2, "one event per distinct message: {got:#?}");
    let started = got
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Started"))
        })
        .expect("the repeated event");
    assert_eq!(started["count"], 2, "{started:#}");
    assert_eq!(started["source"]["component"], "virtualmachine-controller");
    assert_eq!(started["reason"], "SuccessfulCreate");
    assert_eq!(started["type"], "Normal");
    assert_eq!(started["involvedObject"]["kind"], "VirtualMachine");
    assert_eq!(started["involvedObject"]["apiVersion"], "kubevirt.io/v1");
    assert!(
        started["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("vm1.")),
        "{started:#}"
    );
    let other = got
        .iter()
        .find(|e| e["message"] == "a different message")
        .expect("the other event");
    assert_eq!(other["count"], 1);

    // An event that has gone (expired, deleted) is recorded again when it repeats.
    let name = started["metadata"]["name"].as_str().unwrap().to_string();
    let deleted = cluster.kubectl(["delete", "event", "-n", NS, &name]);
    assert!(deleted.status.success());
    api.record_event(&vm_event(
        "Started the virtual machine by creating the new virtual machine instance vm1",
    ))
    .await;
    let again: Vec<Value> = events(&cluster)
        .into_iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Started"))
        })
        .collect();
    assert_eq!(again.len(), 1, "{again:#?}");
    assert_eq!(again[0]["source"]["component"], "virtualmachine-controller");
}
