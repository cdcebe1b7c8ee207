//! Lifecycle tables for the VMI decision, the double-create guard for launcher pods, and the
//! Pod Security rejection rewrite. Decisions applied to a store (Pending to Scheduled, the safety
//! properties) are in tests/on_the_store, next to the store they need.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{VmiWorld, decide_vmi, pod_create_failed};
use crate::ClusterConfig;
use crate::PendingExpectations;
use crate::api::VirtualMachineInstance;
use crate::{Expectation, Now, Requeue, WriteOp};

include!("fixtures.rs");

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

/// The readiness-gate patch of the launcher pod raises `ObservedPodUpdate` under the VMI's key,
/// so the next reconcile of the VMI waits to see that pod update (a reconcile woken by the VMI's
/// own status write would otherwise read the unpatched pod and patch it again); once the pod
/// carries the condition, nothing is patched.
#[test]
fn the_readiness_gate_patch_waits_to_be_seen_and_is_not_repeated() {
    let cfg = ClusterConfig::default();
    let scheduling = vmi("Scheduling");
    let running = json!({"running": {"startedAt": "2025-12-31T23:52:00Z"}});
    let bare = pod("Running", Some("node01"), running);
    let status_patches = |d: &super::VmiDecision| -> Vec<Option<Expectation>> {
        d.plan
            .writes()
            .filter(|w| w.resource == "pods" && w.subresource.as_deref() == Some("status"))
            .map(|w| w.expectation.clone())
            .collect()
    };
    let d = decide_vmi(&world(&scheduling, vec![&typed(&bare)], &cfg), &render, "x");
    assert_eq!(
        status_patches(&d),
        [Some(Expectation::ObservedPodUpdate {
            vmi_key: "default/vmi1".into()
        })]
    );
    let mut gated = bare.clone();
    gated["status"]["conditions"] = json!([{"type": "kubevirt.io/virtual-machine-unpaused",
        "status": "True", "reason": "NotPaused"}]);
    let d = decide_vmi(
        &world(&scheduling, vec![&typed(&gated)], &cfg),
        &render,
        "x",
    );
    assert!(status_patches(&d).is_empty(), "{:?}", d.plan);
}

/// A PVC volume whose claim is not in the cache: no pod, KubeVirt's event and Synchronized
/// reason and message; with the claim, the pod is created and, once it runs, the volume status
/// carries the claim's info.
#[test]
fn a_missing_claim_is_waited_for_and_a_present_one_is_described() {
    let cfg = ClusterConfig::default();
    let mut v = vmi("Pending");
    v.spec.volumes = serde_json::from_value(json!([
        {"name": "root", "persistentVolumeClaim": {"claimName": "root-claim"}}
    ]))
    .unwrap();
    let d = decide_vmi(&world(&v, vec![], &cfg), &render, "x");
    assert!(d.plan.writes().all(|w| w.resource != "pods"));
    let msg = "PVC default/root-claim does not exist, waiting for it to appear";
    assert!(
        d.plan
            .events
            .iter()
            .any(|e| e.reason == "FailedPvcNotFound" && e.message == msg),
        "{:?}",
        d.plan.events
    );
    let cond = d
        .vmi
        .as_ref()
        .and_then(|v| v["status"]["conditions"].as_array().cloned())
        .unwrap_or_default();
    assert!(
        cond.iter()
            .any(|c| c["type"] == "Synchronized" && c["reason"] == "FailedPvcNotFound"),
        "{cond:?}"
    );
    // KubeVirt's informal error: no rate-limited retry, the claim's event brings the VMI back.
    assert!(
        !d.plan.queue.requeued() && d.plan.error.is_none(),
        "{:?}",
        d.plan.queue
    );

    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "root-claim", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}
    }))
    .unwrap();
    let claims = [claim];
    let mut w = world(&v, vec![], &cfg);
    w.pvcs = &claims;
    let d = decide_vmi(&w, &render, "x");
    assert!(d.plan.writes().any(|w| w.resource == "pods"));

    let mut v = v.clone();
    v.status.as_mut().unwrap().phase = Some("Running".into());
    let p = pod("Running", Some("node01"), json!({"running": {}}));
    let typed_pod = typed(&p);
    let mut w = world(&v, vec![&typed_pod], &cfg);
    w.pvcs = &claims;
    let d = decide_vmi(&w, &render, "x");
    let after = d.vmi.expect("the controller writes the volume status");
    assert_eq!(
        after["status"]["volumeStatus"][0]["persistentVolumeClaimInfo"]["accessModes"],
        json!(["ReadWriteMany"])
    );
    assert_eq!(
        after["status"]["volumeStatus"][0]["persistentVolumeClaimInfo"]["filesystemOverhead"],
        json!("0.055")
    );
}

#[test]
fn a_decentralized_migration_target_waits_for_its_target_node_label() {
    let cfg = ClusterConfig::default();
    let creates = |v: &kvrs_api::VirtualMachineInstance| {
        decide_vmi(&world(v, vec![], &cfg), &render, "xyz12")
            .plan
            .writes()
            .filter(|w| matches!(w.op, WriteOp::Create { .. }))
            .count()
    };
    let mut v = vmi("Pending");
    v.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            kvrs_api::names::annotations::CREATE_MIGRATION_TARGET.into(),
            "true".into(),
        );
    assert_eq!(creates(&v), 0, "no pod before the target node is known");
    // KubeVirt's label name (`IsMigrationTargetNodeLabelSet`), not a kebab-case variant.
    v.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(
            kvrs_api::names::labels::MIGRATION_TARGET_NODE_NAME.into(),
            "node02".into(),
        );
    assert_eq!(creates(&v), 1, "a pod once the label names the node");
}
