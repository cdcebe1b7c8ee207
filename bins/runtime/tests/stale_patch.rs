//! A conditional JSON patch whose `test` no longer holds, against a real kube-apiserver: the
//! server answers 422 with a message that names neither the object nor the cause; kvrs reports
//! it as a conflict naming both, and keeps other 422s what they are. A conditional patch that
//! changes nothing is told from one that does by the version the server answers with, and a
//! controller does not wait for the watch event of one ([`ControllerApi`]).

use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kvrs_decide::patch::unchanged_by;
use kvrs_decide::{ApiWrite, Event, Expectation, PatchType, WriteOp};
use kvrs_queue::Instant;
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::controller::{ControllerApi, RecordEvent};
use kvrs_runtime::kube::setup::connect;
use kvrs_runtime::{Api as _, ApiErrorKind, ControllerExpectations, Expecting as _};
use kvrs_test_cluster::TestCluster;
use serde_json::json;

const NS: &str = "stale";

fn patch(ops: serde_json::Value) -> ApiWrite {
    ApiWrite::new(
        "pods",
        NS,
        "p",
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: ops,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_test_precondition_is_a_conflict_naming_the_object() {
    let cluster = tokio::task::block_in_place(|| TestCluster::apiserver_with_namespace(NS));
    let client = connect(Some(cluster.admin_kubeconfig_path()))
        .await
        .expect("a client for the test cluster");
    let mut api = KubeApi::new(client.clone(), "kvrs-test");
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, NS);

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "example.org/c:1"}]},
    });
    api.write(&ApiWrite::new(
        "pods",
        NS,
        "p",
        WriteOp::Create { object: pod },
    ))
    .await
    .expect("create");
    let read_rv = pods
        .get("p")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    // The version read still holds: the patch goes through.
    let test_rv =
        |rv: &str| json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv});
    api.write(&patch(json!([
        test_rv(&read_rv),
        {"op": "add", "path": "/metadata/labels", "value": {"first": "yes"}},
    ])))
    .await
    .expect("a patch of the version read");
    let stored = pods.get("p").await.unwrap();
    assert_eq!(stored.metadata.labels.unwrap()["first"], "yes");
    let now_rv = stored.metadata.resource_version.unwrap();
    assert_ne!(now_rv, read_rv);

    // A conditional patch that changes nothing is accepted with the version it tested and
    // makes no new one (so no watch event follows it): `unchanged_by` tells it from a write.
    let label = |key: &str| json!([test_rv(&now_rv), {"op": "add", "path": format!("/metadata/labels/{key}"), "value": "yes"}]);
    for (key, changes) in [("first", false), ("third", true)] {
        let ops = label(key);
        let answered = api.send(&patch(ops.clone())).await.expect("a label patch");
        assert_eq!(
            answered.as_deref() == Some(now_rv.as_str()),
            !changes,
            "{key}"
        );
        assert_eq!(unchanged_by(&ops, answered.as_deref()), !changes, "{key}");
    }

    // The object changed since: the same precondition fails, as a conflict naming it.
    let e = api
        .write(&patch(json!([
            test_rv(&read_rv),
            {"op": "add", "path": "/metadata/labels/second", "value": "yes"},
        ])))
        .await
        .expect_err("a stale precondition is refused");
    assert_eq!(e.kind, ApiErrorKind::Conflict, "{e:?}");
    assert!(
        e.message
            .starts_with("pods stale/p changed since it was read: a test precondition"),
        "{}",
        e.message
    );
    let stored = pods.get("p").await.unwrap();
    assert!(
        !stored.metadata.labels.unwrap().contains_key("second"),
        "nothing of the refused patch is stored"
    );

    // A patch without `test` that the server cannot apply stays what it is: invalid.
    let e = api
        .write(&patch(json!([
            {"op": "replace", "path": "/metadata/annotations/missing", "value": "x"},
        ])))
        .await
        .expect_err("a replace of a missing field is refused");
    assert_eq!(e.kind, ApiErrorKind::Invalid, "{e:?}");
    assert!(
        !e.message.contains("changed since it was read"),
        "{}",
        e.message
    );
}

/// Events nobody reads.
struct NoEvents;

impl RecordEvent for NoEvents {
    fn record(&self, _: &Event) {}
}

/// Against a real kube-apiserver: a controller's own patch that changed nothing brings no watch
/// event, so its expectation is lowered as the write returns; one that changed the object is
/// left for the watch to observe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_patch_that_changed_nothing_is_not_waited_for() {
    const NS: &str = "own-updates";
    let cluster = tokio::task::block_in_place(|| TestCluster::apiserver_with_namespace(NS));
    let client = connect(Some(cluster.admin_kubeconfig_path()))
        .await
        .expect("a client for the test cluster");
    let api = KubeApi::new(client, "kvrs-test");
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS, "labels": {"first": "yes"}},
        "spec": {"containers": [{"name": "c", "image": "example.org/c:1"}]},
    });
    let created = api
        .send(&ApiWrite::new(
            "pods",
            NS,
            "p",
            WriteOp::Create { object: pod },
        ))
        .await
        .expect("create")
        .expect("a resourceVersion");
    let key = format!("{NS}/p");
    let expectations = Mutex::new(ControllerExpectations::new());
    let now = Instant::ZERO;
    let pending =
        |e: &Mutex<ControllerExpectations>| e.lock().unwrap().pending(&key, now).creations;
    // A write of the pod adding label `label`, conditional on the created version, expecting
    // to observe its own update (as the VMI controller's writes of a VMI it owns do).
    let labelled = |label: &str| {
        ApiWrite::new(
            "pods",
            NS,
            "p",
            WriteOp::Patch {
                patch_type: PatchType::Json,
                patch: json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": created},
                    {"op": "add", "path": format!("/metadata/labels/{label}"), "value": "yes"},
                ]),
            },
        )
        .expecting(Expectation::ObservedUpdate { key: key.clone() })
    };

    // (label, whether the patch changes the pod, what is left pending after it)
    for (label, changes, left) in [("first", false, 0), ("second", true, 1)] {
        let write = labelled(label);
        let mut fx = ControllerApi::new(&api, &NoEvents, &expectations);
        fx.raise(write.expectation.as_ref().unwrap(), now);
        fx.write(&write).await.expect("a label patch");
        assert!(
            fx.waited() > std::time::Duration::ZERO,
            "{label}: the write is timed"
        );
        // Unchanged: no event will come, so it is not waited for; changed: its watch
        // event is still to be observed.
        assert_eq!(pending(&expectations), left, "{label} (changes: {changes})");
    }
}
