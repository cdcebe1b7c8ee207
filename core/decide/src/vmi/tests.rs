//! Lifecycle tables for the VMI decision, the double-create guard for launcher pods, and the
//! Pod Security rejection rewrite.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{VmiWorld, decide_vmi, pod_create_failed};
use crate::ClusterConfig;
use crate::PendingExpectations;
use crate::api::VirtualMachineInstance;
use crate::store::ObjectStore;
use crate::{Expectation, Requeue, WriteOp};

const NOW: i64 = 1_767_225_600;

fn vmi(phase: &str) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {
            "name": "vmi1", "namespace": "default", "uid": "vmi-uid",
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                            "kubevirt.io/storage-observed-api-version": "v1"},
            "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"],
        },
        "spec": {"domain": {"devices": {}}, "networks": [{"name": "default", "pod": {}}],
                 "volumes": [{"name": "root", "containerDisk": {"image": "img"}}]},
        "status": {"phase": phase, "phaseTransitionTimestamps": [
            {"phase": "Pending", "phaseTransitionTimestamp": "2025-12-31T23:50:00Z"}]},
    }))
    .unwrap()
}

fn pod(phase: &str, node: Option<&str>, compute: Value) -> Value {
    json!({
        "metadata": {"name": "virt-launcher-vmi1-abcde", "namespace": "default", "uid": "pod-uid",
                     "creationTimestamp": "2025-12-31T23:51:00Z",
                     "labels": {"kubevirt.io": "virt-launcher"},
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                          "name": "vmi1", "uid": "vmi-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "compute", "ready": true, "state": compute}]},
    })
}

/// The typed view of a JSON fixture, as an informer cache holds it.
fn typed(p: &Value) -> Pod {
    serde_json::from_value(p.clone()).unwrap()
}

fn render(v: &VirtualMachineInstance) -> Result<Value, String> {
    // A minimal launcher pod: this test is about the lifecycle, not the pod's content.
    Ok(
        json!({"metadata": {"generateName": format!("virt-launcher-{}-", crate::meta::name(&v.metadata)),
                           "namespace": "default",
                           "labels": {"kubevirt.io": "virt-launcher"},
                           "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                                "name": "vmi1", "uid": "vmi-uid", "controller": true}]},
              "spec": {"containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}]}}),
    )
}

fn world<'a>(
    v: &'a VirtualMachineInstance,
    pods: Vec<&'a Pod>,
    cfg: &'a ClusterConfig,
) -> VmiWorld<'a> {
    VmiWorld {
        vmi: v,
        pods,
        vms: &[],
        vm: None,
        migrations: &[],
        expectations: PendingExpectations::default(),
        now: crate::Now::from_unix(NOW),
        config: cfg,
    }
}

fn phase_after(d: &super::VmiDecision) -> Option<String> {
    d.vmi
        .as_ref()
        .and_then(|v| v.pointer("/status/phase"))
        .and_then(Value::as_str)
        .map(String::from)
}

#[test]
fn lifecycle_table() {
    let cfg = ClusterConfig::default();
    let running = json!({"running": {"startedAt": "2025-12-31T23:52:00Z"}});
    let terminated = json!({"terminated": {"exitCode": 1}});
    let waiting = json!({"waiting": {"reason": "ContainerCreating"}});
    // (VMI phase, pod, expected phase written, expected node name)
    type Row<'a> = (&'a str, Option<Value>, Option<&'a str>, Option<&'a str>);
    let table: Vec<Row> = vec![
        ("Pending", None, Some("Scheduling"), None),
        (
            "Scheduling",
            Some(pod("Pending", None, waiting.clone())),
            None,
            None,
        ),
        (
            "Scheduling",
            Some(pod("Running", Some("node01"), running.clone())),
            Some("Scheduled"),
            Some("node01"),
        ),
        (
            "Scheduling",
            Some(pod("Failed", Some("node01"), terminated.clone())),
            Some("Failed"),
            None,
        ),
        ("Scheduling", None, Some("Failed"), None),
        ("Scheduled", None, Some("Failed"), None),
        ("Running", None, Some("Failed"), None),
    ];
    for (phase, p, want_phase, want_node) in table {
        let v = vmi(phase);
        let typed_pod = p.as_ref().map(typed);
        let d = decide_vmi(
            &world(&v, typed_pod.iter().collect(), &cfg),
            &render,
            "xyz12",
        );
        let case = format!(
            "{phase} pod={:?}",
            p.as_ref().map(|p| p["status"]["phase"].clone())
        );
        let got = phase_after(&d);
        match want_phase {
            Some(w) => assert_eq!(got.as_deref(), Some(w), "{case}"),
            None => assert!(
                got.is_none() || got.as_deref() == Some(phase),
                "{case}: {got:?}"
            ),
        }
        if let Some(n) = want_node {
            let vmi = d.vmi.as_ref().unwrap();
            assert_eq!(vmi["status"]["nodeName"], n, "{case}");
            assert_eq!(
                vmi["metadata"]["labels"]["kubevirt.io/nodeName"], n,
                "{case}"
            );
        }
        // Handed-over VMIs (Scheduled, Running) are patched field by field; KubeVirt records no
        // phase transition timestamp there.
        let handed_over = matches!(phase, "Scheduled" | "Running");
        if let Some(wp) = want_phase.filter(|w| *w != phase && !handed_over) {
            let ts = d.vmi.as_ref().unwrap()["status"]["phaseTransitionTimestamps"]
                .as_array()
                .unwrap()
                .clone();
            assert_eq!(ts.last().unwrap()["phase"], json!(wp), "{case}");
        }
    }
}

#[test]
fn new_vmi_gets_one_pod_and_a_lagging_cache_does_not_get_a_second() {
    let cfg = ClusterConfig::default();
    let v = vmi("Pending");
    let d = decide_vmi(&world(&v, vec![], &cfg), &render, "xyz12");
    let creates: Vec<_> = d
        .plan
        .writes()
        .filter(|w| matches!(w.op, WriteOp::Create { .. }))
        .collect();
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0].name, "virt-launcher-vmi1-xyz12");
    assert!(matches!(
        creates[0].expectation,
        Some(Expectation::Creations { count: 1, .. })
    ));
    assert_eq!(
        d.plan.events[0].message,
        "Created virtual machine pod virt-launcher-vmi1-xyz12"
    );
    // The pod create is not in the cache yet and the expectation is outstanding: hands off.
    let mut w = world(&v, vec![], &cfg);
    w.expectations = PendingExpectations {
        creations: 1,
        deletions: 0,
    };
    let d = decide_vmi(&w, &render, "other");
    assert!(d.plan.write_list().is_empty());
    // Even with expectations lost (controller restart), a VMI past Pending never gets a new pod.
    let v = vmi("Scheduling");
    let d = decide_vmi(&world(&v, vec![], &cfg), &render, "other");
    assert!(
        !d.plan
            .writes()
            .any(|w| matches!(w.op, WriteOp::Create { .. }))
    );
}

#[test]
fn deleting_vmi_deletes_its_pods_once() {
    let cfg = ClusterConfig::default();
    let mut v = vmi("Running");
    v.metadata.deletion_timestamp = crate::meta::time_at(NOW - 5);
    let p = pod("Running", Some("node01"), json!({"running": {}}));
    let d = decide_vmi(&world(&v, vec![&typed(&p)], &cfg), &render, "x");
    let deletes: Vec<_> = d
        .plan
        .writes()
        .filter(|w| matches!(w.op, WriteOp::Delete { .. }))
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(d.plan.events[0].reason, "SuccessfulDelete");
    // A pod already terminating is not deleted again.
    let mut p2 = p.clone();
    p2["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
    let d = decide_vmi(&world(&v, vec![&typed(&p2)], &cfg), &render, "x");
    assert!(
        !d.plan
            .writes()
            .any(|w| matches!(w.op, WriteOp::Delete { .. }))
    );
}

#[test]
fn final_vmi_releases_its_finalizer_when_pods_are_gone() {
    let cfg = ClusterConfig::default();
    let v = vmi("Succeeded");
    let d = decide_vmi(&world(&v, vec![], &cfg), &render, "x");
    let after = d.vmi.unwrap();
    assert!(after["metadata"].get("finalizers").is_none(), "{after}");
}

#[test]
fn image_pull_errors_become_the_synchronized_condition() {
    let cfg = ClusterConfig::default();
    let v = vmi("Scheduling");
    let p = pod(
        "Pending",
        Some("node01"),
        json!({"waiting": {"reason": "ErrImagePull", "message": "pull failed"}}),
    );
    let d = decide_vmi(&world(&v, vec![&typed(&p)], &cfg), &render, "x");
    let after = d.vmi.unwrap();
    let sync = after["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Synchronized")
        .unwrap()
        .clone();
    assert_eq!(sync["reason"], "ErrImagePull");
    assert_eq!(sync["message"], "pull failed");
}

/// Pods without metadata, spec or status (or controlled by someone else) are not the VMI's.
#[test]
fn odd_pods_are_not_the_vmis() {
    let cfg = ClusterConfig::default();
    let v = vmi("Scheduling");
    let mut foreign = pod("Running", Some("node01"), json!({"running": {}}));
    foreign["metadata"]["ownerReferences"][0]["uid"] = json!("other-uid");
    let pods: Vec<Pod> = [json!({}), json!({"metadata": {"name": "x"}}), foreign]
        .iter()
        .map(typed)
        .collect();
    let d = decide_vmi(&world(&v, pods.iter().collect(), &cfg), &render, "x");
    assert_eq!(
        phase_after(&d).as_deref(),
        Some("Failed"),
        "no pod of its own"
    );
    assert!(!d.plan.writes().any(|w| w.resource == "pods"));
}

/// The pod metadata patches test the labels and annotations the decision read from the typed
/// pod; they must equal what the API server holds, whatever else the pod carries.
#[test]
fn pod_metadata_patches_apply_to_the_stored_pod() {
    let cfg = ClusterConfig::default();
    let mut v = vmi("Running");
    v.metadata.labels = Some([("kubevirt.io/nodeName".into(), "node01".into())].into());
    v.status.as_mut().unwrap().node_name = Some("node01".into());
    let mut p = pod("Running", Some("node01"), json!({"running": {}}));
    p["metadata"]["labels"]["zz-unrelated"] = json!("1");
    p["metadata"]["annotations"] = json!({"zz": "1", "kubevirt.io/domain": "vmi1", "a": ""});
    p["metadata"]["unknownField"] = json!({"kept": true});
    p["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "lastTransitionTime": "2025-12-31T23:52:00Z"}]);
    let d = decide_vmi(&world(&v, vec![&typed(&p)], &cfg), &render, "x");
    let pod_patches: Vec<_> = d.plan.writes().filter(|w| w.resource == "pods").collect();
    assert!(
        pod_patches
            .iter()
            .any(|w| w.to_json().to_string().contains("\"test\"")),
        "{pod_patches:?}"
    );
    let mut store = ObjectStore::new();
    store.insert("virtualmachineinstances", serde_json::to_value(&v).unwrap());
    store.insert("pods", p);
    let (_, err) = store.execute(&d.plan, NOW);
    assert_eq!(err, None, "{:?}", d.plan.write_list());
    let stored = store
        .get("pods", "default", "virt-launcher-vmi1-abcde")
        .unwrap();
    assert_eq!(
        stored["metadata"]["labels"]["kubevirt.io/nodeName"],
        "node01"
    );
    assert_eq!(stored["metadata"]["unknownField"], json!({"kept": true}));
}

#[test]
fn pod_security_rejection_is_explained() {
    let v = vmi("Pending");
    let plan = pod_create_failed(
        &v,
        true,
        "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\"",
        NOW,
    );
    assert_eq!(plan.queue, Requeue::rate_limited());
    assert!(
        plan.events[0]
            .message
            .contains("it needs a privileged namespace to run")
    );
    assert_eq!(plan.events[0].kind.as_str(), "Warning");
    let plan = pod_create_failed(&v, false, "quota exceeded", NOW);
    assert_eq!(plan.events[0].message, "Error creating pod: quota exceeded");
    assert_eq!(
        plan.error_message(),
        Some("failed to create virtual machine pod: quota exceeded")
    );
}

/// Pending -> Scheduling -> Scheduled on the in-memory store, the pod advanced by "the kubelet".
#[test]
fn pending_to_scheduled_on_the_store() {
    let cfg = ClusterConfig::default();
    let mut store = ObjectStore::new();
    store.insert(
        "virtualmachineinstances",
        serde_json::to_value(vmi("Pending")).unwrap(),
    );
    let step = |store: &mut ObjectStore| {
        let v: VirtualMachineInstance = serde_json::from_value(
            store
                .get("virtualmachineinstances", "default", "vmi1")
                .unwrap()
                .clone(),
        )
        .unwrap();
        let pods: Vec<Pod> = store.list("pods").map(typed).collect();
        let d = decide_vmi(&world(&v, pods.iter().collect(), &cfg), &render, "00000");
        let (_, e) = store.execute(&d.plan, NOW);
        assert_eq!(e, None, "{:?}", d.plan.write_list());
    };
    step(&mut store);
    let phase = |s: &ObjectStore| {
        s.get("virtualmachineinstances", "default", "vmi1").unwrap()["status"]["phase"].clone()
    };
    assert_eq!(phase(&store), "Scheduling");
    let key = (
        "pods".to_string(),
        "default".to_string(),
        "virt-launcher-vmi1-00000".to_string(),
    );
    let p = store.objects.get_mut(&key).expect("pod created");
    p["metadata"]["uid"] = json!("pod-uid");
    p["spec"]["nodeName"] = json!("node07");
    p["status"] = json!({"phase": "Running", "containerStatuses": [{"name": "compute", "ready": true, "state": {"running": {}}}]});
    step(&mut store);
    assert_eq!(phase(&store), "Scheduled");
    let v = store
        .get("virtualmachineinstances", "default", "vmi1")
        .unwrap();
    assert_eq!(v["status"]["nodeName"], "node07");
    assert_eq!(v["status"]["activePods"]["pod-uid"], "node07");
    step(&mut store);
    assert_eq!(phase(&store), "Scheduled", "steady once handed over");
}

mod invariants {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// At most one launcher pod per decision, only for an unprocessed VMI without a pod and
        /// without outstanding expectations; the plan applies to the snapshot it came from.
        #[test]
        fn vmi_decisions_are_safe(
            phase in prop_oneof![Just("Pending"), Just("Scheduling"), Just("Scheduled"), Just("Running"),
                                 Just("Succeeded"), Just("Failed")],
            pod_state in proptest::option::of(prop_oneof![
                Just(("Pending", None, json!({"waiting": {"reason": "ContainerCreating"}}))),
                Just(("Running", Some("n1"), json!({"running": {}}))),
                Just(("Failed", Some("n1"), json!({"terminated": {"exitCode": 1}}))),
                Just(("Succeeded", Some("n1"), json!({"terminated": {"exitCode": 0}}))),
            ]),
            pod_deleting in any::<bool>(),
            vmi_deleting in any::<bool>(),
            pending in any::<bool>(),
        ) {
            let cfg = ClusterConfig::default();
            let mut v = vmi(phase);
            if vmi_deleting {
                v.metadata.deletion_timestamp = crate::meta::time_at(NOW - 1);
            }
            let p = pod_state.map(|(ph, node, st)| {
                let mut p = pod(ph, node, st);
                if pod_deleting {
                    p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
                }
                p
            });
            let typed_pod = p.as_ref().map(typed);
            let mut w = world(&v, typed_pod.iter().collect(), &cfg);
            if pending {
                w.expectations = PendingExpectations { creations: 1, deletions: 0 };
            }
            let d = decide_vmi(&w, &render, "x");
            let creates = d.plan.write_list().iter().filter(|x| matches!(x.op, WriteOp::Create { .. })).count();
            prop_assert!(creates <= 1);
            if p.is_some() || pending || vmi_deleting || !matches!(phase, "Pending") {
                prop_assert_eq!(creates, 0);
            }
            let mut store = ObjectStore::new();
            store.insert("virtualmachineinstances", serde_json::to_value(&v).unwrap());
            if let Some(p) = &p {
                store.insert("pods", p.clone());
            }
            let (_, err) = store.execute(&d.plan, NOW);
            prop_assert_eq!(err.as_deref(), d.plan.error_message(), "{:?}", d.plan.write_list());
        }
    }
}

#[test]
fn pod_name_suffixes_use_the_api_server_alphabet() {
    let a = super::pod_name_suffix(0);
    let b = super::pod_name_suffix(123_456_789);
    assert_eq!(a.len(), 5);
    assert_ne!(a, b);
    assert!(b.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
}

#[test]
fn volume_status_is_sorted_by_name_as_virt_handler_writes_it() {
    let cfg = ClusterConfig::default();
    let mut v = vmi("Running");
    v.spec.volumes = serde_json::from_value(json!([
        {"name": "rootdisk", "containerDisk": {"image": "img"}},
        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config"}}
    ]))
    .unwrap();
    let p = pod("Running", Some("node01"), json!({"running": {}}));
    let d = decide_vmi(&world(&v, vec![&typed(&p)], &cfg), &render, "x");
    let after = d.vmi.expect("the controller writes the volume status");
    let names: Vec<&str> = after["status"]["volumeStatus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cloudinitdisk", "rootdisk"]);
}

/// A launcher pod whose compute container names no image leaves the VMI's
/// `launcherContainerImageVersion` absent, as Go's `omitempty` does: no write of `""` that the
/// API server would drop, which made every sync write the VMI again.
#[test]
fn a_pod_without_an_image_writes_no_empty_launcher_image() {
    let cfg = ClusterConfig::default();
    let with_node = vmi("Scheduling");
    let running = json!({"running": {"startedAt": "2025-12-31T23:52:00Z"}});
    let mentions_image = |d: &super::VmiDecision| {
        d.plan
            .writes()
            .any(|w| format!("{:?}", w.op).contains("launcherContainerImageVersion"))
            || d.vmi
                .as_ref()
                .is_some_and(|v| v.pointer("/status/launcherContainerImageVersion").is_some())
    };

    let mut no_image = pod("Running", Some("node01"), running.clone());
    no_image["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    let d = decide_vmi(
        &world(&with_node, vec![&typed(&no_image)], &cfg),
        &render,
        "x",
    );
    assert_eq!(phase_after(&d).as_deref(), Some("Scheduled"));
    assert!(!mentions_image(&d), "{:?}", d.plan);

    // The same pod with an image: the image is recorded (the check above is not vacuous).
    let with_image = pod("Running", Some("node01"), running);
    let d = decide_vmi(
        &world(&with_node, vec![&typed(&with_image)], &cfg),
        &render,
        "x",
    );
    assert_eq!(
        d.vmi
            .as_ref()
            .and_then(|v| v.pointer("/status/launcherContainerImageVersion")),
        Some(&json!("quay.io/kubevirt/virt-launcher:v1.9.0"))
    );
}

/// The VMI controller writes a VMI it still owns (before Scheduled) on the version it read, as
/// KubeVirt's `Update` does: a copy another writer moved on from is refused, never applied over
/// that writer's fields; and a write the server answers with the version it tested changed
/// nothing, which is how the controller knows no watch event will follow it.
#[test]
fn a_vmi_written_before_hand_over_is_written_on_the_version_read() {
    let cfg = ClusterConfig::default();
    let mut read = vmi("Pending");
    read.metadata.resource_version = Some("7".into());
    let d = decide_vmi(&world(&read, vec![], &cfg), &render, "00000");
    let status = d
        .plan
        .writes()
        .find(|w| w.resource == "virtualmachineinstances")
        .expect("a status write");
    assert!(matches!(
        status.expectation,
        Some(Expectation::ObservedUpdate { .. })
    ));
    let WriteOp::Patch { patch, .. } = &status.op else {
        panic!("{:?}", status.op)
    };
    assert_eq!(
        patch[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
    );
    assert!(crate::patch::unchanged_by(patch, Some("7")));
    assert!(!crate::patch::unchanged_by(patch, Some("8")));
    assert!(!crate::patch::unchanged_by(patch, None));

    let mut store = ObjectStore::new();
    let mut moved_on = serde_json::to_value(&read).unwrap();
    moved_on["metadata"]["resourceVersion"] = json!("8");
    moved_on["metadata"]["labels"] = json!({"someone": "else"});
    store.insert("virtualmachineinstances", moved_on);
    let (_, refused) = store.execute(&d.plan, NOW);
    let refused = refused.expect("a stale copy is refused");
    assert!(refused.contains("resourceVersion"), "{refused}");
    let stored = store
        .get("virtualmachineinstances", "default", "vmi1")
        .unwrap();
    assert_eq!(stored["status"]["phase"], "Pending");
    assert_eq!(stored["metadata"]["labels"]["someone"], "else");

    let mut store = ObjectStore::new();
    store.insert(
        "virtualmachineinstances",
        serde_json::to_value(&read).unwrap(),
    );
    let (_, error) = store.execute(&d.plan, NOW);
    assert_eq!(error, None);
    let stored = store
        .get("virtualmachineinstances", "default", "vmi1")
        .unwrap();
    assert_eq!(stored["status"]["phase"], "Scheduling");
}

/// The API-version annotation, the first write of a VMI nobody stamped yet, is conditional too.
#[test]
fn the_api_version_stamp_is_written_on_the_version_read() {
    let cfg = ClusterConfig::default();
    let mut read = vmi("Pending");
    read.metadata.resource_version = Some("3".into());
    read.metadata.annotations = None;
    let d = decide_vmi(&world(&read, vec![], &cfg), &render, "00000");
    let [write] = d.plan.write_list()[..] else {
        panic!("{:?}", d.plan.write_list())
    };
    let WriteOp::Patch { patch, .. } = &write.op else {
        panic!("{:?}", write.op)
    };
    assert_eq!(patch[0]["path"], "/metadata/resourceVersion");
    assert_eq!(patch[0]["value"], "3");
    assert_eq!(patch[1]["op"], "add");
}
