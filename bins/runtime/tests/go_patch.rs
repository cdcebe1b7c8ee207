//! A conditional JSON patch of a value holding `<`, `>` or `&` on a real kube-apiserver: its
//! `test` matches only when the patch is Go-encoded (`kvrs_runtime::kube::go_patch`), because
//! the API server compares scalars by their bytes against the stored (Go-encoded) document.
//! Found on the real node: virt-api's `addvolume` of a VM whose cloud-init script held
//! `2>/dev/null` was refused with a bare 422 every time.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kvrs_runtime::kube::go_patch::send_json_patch;
use kvrs_test_cluster::{Options, TestCluster};
use serde_json::json;

const SCRIPT: &str = "echo ok 2>/dev/null & echo <done>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_of_a_string_with_gt_and_amp_matches_when_go_encoded() {
    let cluster = tokio::task::block_in_place(|| TestCluster::start(Options::apiserver_only()))
        .expect("cluster starts");
    let out = cluster.kubectl_with_stdin(
        ["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "script", "namespace": "default"},
                "data": {"run": SCRIPT}})
        .to_string(),
    );
    assert!(out.status.success(), "{out:?}");
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.admin_kubeconfig_path())
        .expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    let client = kube::Client::try_from(config).expect("kube client");
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "configmaps"),
    );
    let ops = json!([
        {"op": "test", "path": "/data/run", "value": SCRIPT},
        {"op": "replace", "path": "/data/run", "value": format!("{SCRIPT} # patched")},
    ]);

    // serde_json's bytes: the API server's byte comparison refuses the test.
    let plain: json_patch::Patch = serde_json::from_value(ops.clone()).unwrap();
    let err = api
        .patch("script", &PatchParams::default(), &Patch::<()>::Json(plain))
        .await
        .expect_err("the serde_json-encoded test does not match");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "a 422 from the failed test: {err}"
    );

    // Go's bytes: the same test matches and the patch applies.
    let patched = send_json_patch(&api, "script", None, &PatchParams::default(), &ops)
        .await
        .expect("the Go-encoded patch applies");
    assert_eq!(patched.data["data"]["run"], format!("{SCRIPT} # patched"));

    // And a test that really does not hold still fails.
    let stale = json!([{"op": "test", "path": "/data/run", "value": SCRIPT}]);
    let err = send_json_patch(&api, "script", None, &PatchParams::default(), &stale)
        .await
        .expect_err("a stale test fails");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err}"
    );
}
