//! The migration controller in virt-controller on a real kube-apiserver (no kubelet, no
//! virt-handler, no virt-api: the test plays them): a VirtualMachineInstanceMigration of a VMI
//! running on node01 gets a target launcher pod kept off node01, goes Pending → Scheduling, and
//! once that pod runs on node02 Scheduled, hands the VMI's migration state to the handlers and
//! goes PreparingTarget; a migration deleted before the hand-off loses its target pod and its
//! finalizer.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

/// virt-api's webhook puts this finalizer on every migration; here the test does.
const FINALIZER: &str = "kubevirt.io/migrationJobFinalize";

/// Brings VM `name`'s VMI to Running on `node` as kubelet and virt-handler would, with the
/// SELinux context virt-handler reports on a node without SELinux (the target pod copies the
/// source's level). Returns the VMI.
fn running_vmi(h: &Harness, name: &str, node: &str) -> Value {
    h.create(&vm(name, "Always"));
    h.wait_live_vmi("default", name, T);
    h.run_launcher_pod("default", name, node);
    h.wait_for("VMI Scheduled", T, || {
        let v = h.get("vmi", "default", name)?;
        (v["status"]["phase"] == "Scheduled").then_some(())
    });
    h.set_vmi_phase("default", name, "Running");
    let ops = json!([{"op": "add", "path": "/status/selinuxContext", "value": "none"}]);
    let out = h.cluster.kubectl([
        "patch",
        "vmi",
        "-n",
        "default",
        name,
        "--type=json",
        "-p",
        &ops.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vmi = h.get("vmi", "default", name).expect("the VMI");
    assert_eq!(vmi["status"]["nodeName"], node, "{vmi:#}");
    vmi
}

fn migration(name: &str, vmi: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": "default", "finalizers": [FINALIZER]},
        "spec": {"vmiName": vmi},
    })
}

fn phase_of(h: &Harness, name: &str) -> Option<String> {
    let m = h.get("vmim", "default", name)?;
    m["status"]["phase"].as_str().map(str::to_string)
}

/// The phases of the migration's `status.phaseTransitionTimestamps`, in order.
fn phases_seen(m: &Value) -> Vec<String> {
    m["status"]["phaseTransitionTimestamps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["phase"].as_str().map(str::to_string))
        .collect()
}

/// Waits for the target pod of migration `name` (labelled with its UID) and returns it.
fn target_pod(h: &Harness, migration_uid: &str) -> Value {
    h.wait_for("the target pod", T, || {
        h.list(
            "pods",
            "default",
            &format!("kubevirt.io/migrationJobUID={migration_uid}"),
        )
        .into_iter()
        .next()
    })
}

#[test]
fn a_migration_gets_a_target_pod_hands_off_and_a_cancelled_one_cleans_up() {
    let mut h = Harness::start();
    h.two_labelled_nodes();
    h.start_controller("a", &[]);

    // A VMI running on node01 is migrated: the target pod is kept off node01's pods.
    let vmi = running_vmi(&h, "mig-a", "node01");
    let vmi_uid = vmi["metadata"]["uid"].as_str().unwrap().to_string();
    h.create(&migration("job-a", "mig-a"));
    h.wait_for("migration job-a Scheduling", T, || {
        (phase_of(&h, "job-a").as_deref() == Some("Scheduling")).then_some(())
    });
    let job = h.get("vmim", "default", "job-a").expect("job-a");
    let job_uid = job["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(phases_seen(&job), ["Pending", "Scheduling"], "{job:#}");
    assert_eq!(job["metadata"]["labels"]["kubevirt.io/vmi-name"], "mig-a");
    let pod = target_pod(&h, &job_uid);
    assert_eq!(
        pod["metadata"]["annotations"]["kubevirt.io/migrationJobName"],
        "job-a"
    );
    assert_eq!(pod["metadata"]["labels"]["kubevirt.io/created-by"], vmi_uid);
    let anti = &pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        anti,
        &json!([{
            "labelSelector": {"matchLabels": {"kubevirt.io/created-by": vmi_uid}},
            "topologyKey": "kubernetes.io/hostname",
        }]),
        "the target avoids the nodes running the VMI's pods: {pod:#}"
    );
    assert!(pod["spec"]["nodeName"].is_null());
    let selector = &pod["spec"]["nodeSelector"];
    for (label, value) in [
        (
            "cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS",
            "true",
        ),
        ("cpu-feature.node.kubevirt.io/vmx", "true"),
        ("cpu-vendor.node.kubevirt.io/Intel", "true"),
    ] {
        assert_eq!(selector[label], value, "{label}: {selector:#}");
    }

    // The target runs on node02: Scheduled, and the VMI's migration state hands it off.
    let target = pod["metadata"]["name"].as_str().unwrap().to_string();
    h.run_pod("default", &target, "node02");
    let state = h.wait_for("the VMI's migration state", T, || {
        let v = h.get("vmi", "default", "mig-a")?;
        let s = v["status"]["migrationState"].clone();
        (s["migrationUid"] == job_uid.as_str()).then_some(s)
    });
    assert_eq!(state["targetNode"], "node02", "{state:#}");
    assert_eq!(state["sourceNode"], "node01", "{state:#}");
    assert_eq!(state["targetPod"], target.as_str(), "{state:#}");
    // Scheduled, then (the hand-off seen) PreparingTarget, where virt-handler takes over.
    let job = h.wait_for("migration job-a PreparingTarget", T, || {
        let m = h.get("vmim", "default", "job-a")?;
        (m["status"]["phase"] == "PreparingTarget").then_some(m)
    });
    assert_eq!(
        phases_seen(&job),
        ["Pending", "Scheduling", "Scheduled", "PreparingTarget"],
        "{job:#}"
    );
    let vmi = h.get("vmi", "default", "mig-a").expect("the VMI");
    assert_eq!(
        vmi["metadata"]["labels"]["kubevirt.io/migrationTargetNodeName"], "node02",
        "{vmi:#}"
    );
    // The VMI controller kept the source pod as the VMI's pod.
    assert_eq!(vmi["status"]["nodeName"], "node01");

    // A migration deleted before the hand-off: its target pod is deleted, then the
    // migration fails and lets go of its finalizer.
    running_vmi(&h, "mig-b", "node01");
    h.create(&migration("job-b", "mig-b"));
    h.wait_for("migration job-b Scheduling", T, || {
        (phase_of(&h, "job-b").as_deref() == Some("Scheduling")).then_some(())
    });
    let job = h.get("vmim", "default", "job-b").expect("job-b");
    let job_uid = job["metadata"]["uid"].as_str().unwrap().to_string();
    let pod = target_pod(&h, &job_uid);
    let target = pod["metadata"]["name"].as_str().unwrap().to_string();
    h.delete("vmim", "default", "job-b", &[]);
    h.wait_for("the cancelled migration's target pod gone", T, || {
        // Never bound to a node, the pod goes as soon as it is deleted.
        h.get("pod", "default", &target).is_none().then_some(())
    });
    h.wait_for(
        "the cancelled migration gone (finalizer removed)",
        T,
        || h.get("vmim", "default", "job-b").is_none().then_some(()),
    );
    // The source pod and the VMI are untouched.
    let vmi = h.get("vmi", "default", "mig-b").expect("the VMI");
    assert_eq!(vmi["status"]["phase"], "Running");
    assert!(vmi["status"]["migrationState"].is_null(), "{vmi:#}");
}
