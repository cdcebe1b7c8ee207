//! kvrs's handler writes a VMI's status under KubeVirt v1.9.0's own ClusterRole for its handler,
//! against a real kube-apiserver.
//!
//! That role (`kubevirt-handler`, which KubeVirt's operator keeps when kvrs's handler is dropped
//! in through the KubeVirt CR's `customizeComponents`) grants `virtualmachineinstances` only
//! `update`, `list` and `watch`: KubeVirt's handler PUTs the VMI it read. kvrs's status write is
//! a conditional JSON patch; the server forbids it, and [`KubeApi`] sends it again as an update of
//! the object as listed — same change, same condition (the resourceVersion the decision read).
//! Before this, the drop-in's VMI stayed `Scheduled` with its guest running.

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::handler::status_write;
use kvrs_decide::patch::unchanged_by;
use kvrs_decide::{PatchType, WriteOp};
use kvrs_runtime::ApiErrorKind;
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::setup::connect;
use kvrs_test_cluster::TestCluster;
use serde_json::Value;

const NS: &str = "handler-rbac";

/// KubeVirt v1.9.0's handler ServiceAccount with exactly its ClusterRole's VMI rule
/// (pkg/virt-operator/resource/generate/rbac/handler.go: update, list, watch).
const KUBEVIRT_HANDLER_RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: kubevirt-handler, namespace: handler-rbac}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kubevirt-handler-vmis}
rules:
  - apiGroups: ["kubevirt.io"]
    resources: ["virtualmachineinstances"]
    verbs: ["update", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubevirt-handler-vmis}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kubevirt-handler-vmis}
subjects:
  - {kind: ServiceAccount, name: kubevirt-handler, namespace: handler-rbac}
"#;

/// A VMI as the controller leaves it for the handler: scheduled to a node, with a label and an
/// annotation the status write must keep.
const VMI: &str = r#"
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: after
  namespace: handler-rbac
  labels: {kubevirt.io/nodeName: node1}
  annotations: {example.org/keep: "yes, <kept> & intact"}
spec:
  domain:
    devices: {}
    resources: {requests: {memory: 128Mi}}
status:
  phase: Scheduled
  nodeName: node1
"#;

fn vmi_json(cluster: &TestCluster) -> Value {
    let out = cluster.kubectl(["get", "vmi", "-n", NS, "after", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("VMI json")
}

/// A kube-apiserver with namespace [`NS`] and KubeVirt's CRDs.
fn cluster_with_kubevirt_crds() -> TestCluster {
    let cluster = TestCluster::apiserver_with_namespace(NS);
    let root = kvrs_test_cluster::workspace_root().expect("the workspace root");
    cluster
        .install_kubevirt_crds(&root.join("bins/deploy"))
        .expect("KubeVirt's CRDs");
    cluster
}

fn typed(v: &Value) -> VirtualMachineInstance {
    serde_json::from_value(v.clone()).expect("a VMI")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_written_under_kubevirt_s_handler_role_by_update() {
    let cluster = tokio::task::block_in_place(cluster_with_kubevirt_crds);
    for yaml in [KUBEVIRT_HANDLER_RBAC, VMI] {
        let applied = cluster.kubectl_with_stdin(["apply", "-f", "-"], yaml);
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
    }
    let token = cluster.service_account_token(NS, "kubevirt-handler");
    let kubeconfig = cluster.kubeconfig_for_token(&token);
    let api = KubeApi::new(
        connect(Some(&kubeconfig)).await.expect("a client"),
        "virt-handler",
    );

    // The role really refuses the patch: what the handler met in the drop-in.
    let refused = cluster.kubectl_with_kubeconfig(
        &kubeconfig,
        [
            "patch",
            "vmi",
            "-n",
            NS,
            "after",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/status/phase","value":"Running"}]"#,
        ],
    );
    assert!(!refused.status.success(), "the role allows patch");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // The handler's own status write (the decision's `status_write`) of the version read.
    let read = vmi_json(&cluster);
    let read_vmi = typed(&read);
    let mut status = read_vmi.status.clone().expect("a status");
    status.phase = Some("Running".into());
    let write = status_write(&read_vmi, &status);
    let WriteOp::Patch {
        patch_type: PatchType::Json,
        patch,
    } = &write.op
    else {
        panic!("the status write is a JSON patch: {write:?}");
    };
    let answered = api.send(&write).await.expect("the status written");
    let stored = vmi_json(&cluster);
    assert_eq!(stored["status"]["phase"], "Running");
    assert_eq!(stored["status"]["nodeName"], "node1");
    assert_eq!(stored["spec"], read["spec"], "the spec is the one read");
    assert_eq!(stored["metadata"]["labels"], read["metadata"]["labels"]);
    assert_eq!(
        stored["metadata"]["annotations"]["example.org/keep"],
        "yes, <kept> & intact"
    );
    let written_rv = stored["metadata"]["resourceVersion"].as_str().unwrap();
    assert_ne!(written_rv, read["metadata"]["resourceVersion"]);
    assert_eq!(answered.as_deref(), Some(written_rv));
    assert!(
        !unchanged_by(patch, answered.as_deref()),
        "it changed the VMI"
    );

    // The same write from the stale version read before: refused as a conflict, nothing
    // changed — the condition the patch states holds for the update too.
    let mut stale = status.clone();
    stale.phase = Some("Failed".into());
    let err = api
        .send(&status_write(&read_vmi, &stale))
        .await
        .expect_err("a write of a stale version");
    assert_eq!(err.kind, ApiErrorKind::Conflict, "{err:?}");
    assert!(
        err.message.contains("handler-rbac/after"),
        "{}",
        err.message
    );
    assert_eq!(vmi_json(&cluster)["status"]["phase"], "Running");

    // A write of the current version that changes nothing: the server keeps the version, so
    // the handler knows no watch event follows it.
    let current = typed(&vmi_json(&cluster));
    let same = status_write(&current, current.status.as_ref().expect("a status"));
    let answered = api.send(&same).await.expect("an unchanged status");
    let WriteOp::Patch { patch, .. } = &same.op else {
        unreachable!()
    };
    assert!(
        unchanged_by(patch, answered.as_deref()),
        "{answered:?} vs {:?}",
        current.metadata.resource_version
    );

    // A VMI that is gone is NotFound, as the patch would have been.
    let gone = cluster.kubectl(["delete", "vmi", "-n", NS, "after"]);
    assert!(gone.status.success());
    let err = api
        .send(&status_write(&current, &status))
        .await
        .expect_err("a write of a deleted VMI");
    assert_eq!(err.kind, ApiErrorKind::NotFound, "{err:?}");

    // The handler's read of a VMI outside its node cache works under the role too (no `get`).
    let vmis: kube::Api<VirtualMachineInstance> = kube::Api::namespaced(api.client().clone(), NS);
    let applied = cluster.kubectl_with_stdin(["apply", "-f", "-"], VMI);
    assert!(applied.status.success());
    assert!(vmis.get("after").await.is_err(), "the role allows get");
    let found = kvrs_runtime::kube::update::get_by_list(&vmis, "after")
        .await
        .expect("a list by name");
    assert_eq!(
        found.and_then(|v| v.metadata.name).as_deref(),
        Some("after")
    );
    assert!(
        kvrs_runtime::kube::update::get_by_list(&vmis, "nobody")
            .await
            .expect("a list by name")
            .is_none()
    );
}

/// A ServiceAccount bound to no role yet: every write of it is forbidden, as a restarted API
/// server forbids everything until its roles are loaded.
const WRITER: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: writer, namespace: handler-rbac}
"#;

/// `writer` bound to the VMI rule `verbs` (as ClusterRole and binding `writer-<tag>`).
fn writer_role(tag: &str, verbs: &str) -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: writer-{tag}}}
rules:
  - apiGroups: ["kubevirt.io"]
    resources: ["virtualmachineinstances"]
    verbs: {verbs}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: writer-{tag}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: writer-{tag}}}
subjects:
  - {{kind: ServiceAccount, name: writer, namespace: handler-rbac}}
"#
    )
}

/// Sends the status write that sets `phase` on the VMI as stored now, again until the server
/// takes it (a role change reaches the API server's authorizer within a second or two).
async fn write_phase_until_taken(cluster: &TestCluster, api: &KubeApi, phase: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let current = typed(&vmi_json(cluster));
        let mut status = current.status.clone().expect("a status");
        status.phase = Some(phase.into());
        match api.send(&status_write(&current, &status)).await {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() < deadline => {
                assert_eq!(e.kind, ApiErrorKind::Forbidden, "{e:?}");
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
            Err(e) => panic!("the write of phase {phase} was never taken: {e:?}"),
        }
    }
    assert_eq!(vmi_json(cluster)["status"]["phase"], phase);
}

/// The client switches a resource to updates only when the server takes the update: forbidden
/// both ways (the ha test's restarted API server, before its RBAC loaded, refused kvrs's
/// controller's patch and the client then tried only updates, which kvrs's controller role does
/// not grant — its VMIs were never written again), it stays with patches; switched to updates
/// under an update-only role, it goes back to patches when the role changes to a patch-only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_switches_to_updates_only_while_the_server_takes_them() {
    let cluster = tokio::task::block_in_place(cluster_with_kubevirt_crds);
    let apply = |yaml: &str| {
        let applied = cluster.kubectl_with_stdin(["apply", "-f", "-"], yaml);
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
    };
    let unbind = |tag: &str| {
        let out = cluster.kubectl(["delete", "clusterrolebinding", &format!("writer-{tag}")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apply(WRITER);
    apply(VMI);
    let token = cluster.service_account_token(NS, "writer");
    let api = KubeApi::new(
        connect(Some(&cluster.kubeconfig_for_token(&token)))
            .await
            .expect("a client"),
        "virt-controller",
    );

    // No role: the patch and the update are both forbidden; the error is the patch's.
    let read = typed(&vmi_json(&cluster));
    let mut status = read.status.clone().expect("a status");
    status.phase = Some("Running".into());
    let err = api
        .send(&status_write(&read, &status))
        .await
        .expect_err("a write with no role");
    assert_eq!(err.kind, ApiErrorKind::Forbidden, "{err:?}");
    assert!(err.message.contains("patch"), "{}", err.message);

    // kvrs's controller's rule (patch, no update): the client patches.
    apply(&writer_role(
        "patch",
        r#"["get", "list", "watch", "patch"]"#,
    ));
    write_phase_until_taken(&cluster, &api, "Running").await;

    // KubeVirt's handler's rule (update, no patch): the client updates.
    unbind("patch");
    apply(&writer_role("update", r#"["list", "watch", "update"]"#));
    write_phase_until_taken(&cluster, &api, "Succeeded").await;

    // Back to patch only: the client patches again.
    unbind("update");
    apply(&writer_role(
        "patch",
        r#"["get", "list", "watch", "patch"]"#,
    ));
    write_phase_until_taken(&cluster, &api, "Failed").await;
}
