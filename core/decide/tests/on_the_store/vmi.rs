//! The VMI decision against the store: Pending to Scheduled, pod metadata patches, writes on the
//! version read, and the safety properties of every decision.

use k8s_openapi::api::core::v1::Pod;
use kvrs_admission::ClusterConfig;
use kvrs_api::api::VirtualMachineInstance;
use kvrs_decide::PendingExpectations;
use kvrs_decide::vmi::{VmiWorld, decide_vmi};
use kvrs_decide::{Expectation, Now, WriteOp};
use kvrs_decide_test_support::ObjectStore;
use serde_json::{Value, json};

include!("../../src/vmi/fixtures.rs");

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
                v.metadata.deletion_timestamp = kvrs_decide::meta::time_at(NOW - 1);
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
    assert!(kvrs_decide::patch::unchanged_by(patch, Some("7")));
    assert!(!kvrs_decide::patch::unchanged_by(patch, Some("8")));
    assert!(!kvrs_decide::patch::unchanged_by(patch, None));

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
