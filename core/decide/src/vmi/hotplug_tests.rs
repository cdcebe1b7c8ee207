//! The VMI controller's hotplug decisions: the attachment pod created for ready claims, replaced
//! when the set changes, deleted once its volumes are unmounted, and the volume status entries
//! from Pending to AttachedToNode (KubeVirt's `volume-hotplug.go` and `updateVolumeStatus`).

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::{VmiDecision, VmiWorld, decide_vmi};
use crate::ClusterConfig;
use crate::PendingExpectations;
use crate::api::VirtualMachineInstance;
use crate::{Expectation, Now, WriteOp};

include!("fixtures.rs");

/// A running VMI with a container-disk root and the hotplugged `volumes` (name, claim), whose
/// status holds `status` entries besides root's.
fn running_vmi(volumes: &[(&str, &str)], entries: Value) -> VirtualMachineInstance {
    let mut v = serde_json::to_value(vmi("Running")).unwrap();
    for (name, claim) in volumes {
        v["spec"]["volumes"].as_array_mut().unwrap().push(
            json!({"name": name, "persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}}),
        );
    }
    let mut list = vec![json!({"name": "root", "target": "vda", "phase": "Ready"})];
    list.extend(entries.as_array().cloned().unwrap_or_default());
    // Sorted by name, as the controller and virt-handler keep it.
    list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    v["status"]["volumeStatus"] = Value::Array(list);
    v["status"]["nodeName"] = json!("node01");
    v["status"]["selinuxContext"] = json!("none");
    serde_json::from_value(v).unwrap()
}

fn launcher() -> Pod {
    let running = json!({"running": {"startedAt": "2025-12-31T23:52:00Z"}});
    typed(&pod("Running", Some("node01"), running))
}

fn claim(name: &str, phase: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid")},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": phase, "capacity": {"storage": "1Gi"}}
    }))
    .unwrap()
}

/// An attachment pod owned by the launcher pod, carrying `volumes` (name, claim).
fn attachment(
    name: &str,
    volumes: &[(&str, &str)],
    phase: &str,
    ready: bool,
    created: &str,
) -> Pod {
    let mut pod_volumes = vec![json!({"name": "hotplug-disks", "emptyDir": {}})];
    pod_volumes.extend(
        volumes
            .iter()
            .map(|(n, c)| json!({"name": n, "persistentVolumeClaim": {"claimName": c}})),
    );
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                     "creationTimestamp": created,
                     "labels": {"kubevirt.io": "hotplug-disk"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "virt-launcher-vmi1-abcde",
                                          "uid": "pod-uid", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [{"name": "hotplug-disk"}], "volumes": pod_volumes},
        "status": {"phase": phase, "containerStatuses": [{"name": "hotplug-disk", "ready": ready}]}
    }))
    .unwrap()
}

fn decide(
    v: &VirtualMachineInstance,
    pods: &[&Pod],
    pvcs: &[PersistentVolumeClaim],
) -> VmiDecision {
    let cfg = ClusterConfig::default();
    let mut w: VmiWorld<'_> = world(v, pods.to_vec(), &cfg);
    w.pvcs = pvcs;
    decide_vmi(&w, &render, "xyz12")
}

fn created_pods(d: &VmiDecision) -> Vec<Value> {
    d.plan
        .writes()
        .filter(|w| w.resource == "pods")
        .filter_map(|w| match &w.op {
            WriteOp::Create { object } => Some(object.clone()),
            _ => None,
        })
        .collect()
}

fn deleted_pods(d: &VmiDecision) -> Vec<String> {
    d.plan
        .writes()
        .filter(|w| w.resource == "pods" && matches!(w.op, WriteOp::Delete { .. }))
        .map(|w| w.name.clone())
        .collect()
}

/// The status entry of `name` the decision writes.
fn entry(d: &VmiDecision, name: &str) -> Value {
    let list = d.vmi.as_ref().expect("a status write")["status"]["volumeStatus"].clone();
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

fn events(d: &VmiDecision) -> Vec<(String, String)> {
    d.plan
        .events
        .iter()
        .map(|e| (e.reason.clone(), e.message.clone()))
        .collect()
}

#[test]
fn a_bound_claim_gets_an_attachment_pod_and_its_entry_starts_from_the_claim() {
    let v = running_vmi(&[("hp1", "claim1")], json!([]));
    let l = launcher();
    let d = decide(&v, &[&l], &[claim("claim1", "Bound")]);
    let created = created_pods(&d);
    assert_eq!(created.len(), 1, "{:?}", d.plan);
    let p = &created[0];
    assert_eq!(p["metadata"]["name"], "hp-volume-xyz12");
    assert_eq!(p["metadata"]["labels"]["kubevirt.io"], "hotplug-disk");
    assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "pod-uid");
    assert_eq!(
        p["spec"]["volumes"][1],
        json!({"name": "hp1", "persistentVolumeClaim": {"claimName": "claim1"}})
    );
    assert_eq!(
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        json!(["node01"])
    );
    let create = d
        .plan
        .writes()
        .find(|w| w.resource == "pods" && matches!(w.op, WriteOp::Create { .. }))
        .unwrap();
    assert_eq!(
        create.expectation,
        Some(Expectation::Creations {
            key: "default/vmi1".into(),
            count: 1
        })
    );
    assert!(events(&d).contains(&(
        "SuccessfulCreate".into(),
        "Created attachment pod hp-volume-xyz12".into()
    )));
    // The new pod is not in the cache yet: the entry follows the claim.
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "Bound");
    assert_eq!(e["reason"], "PVCNotReady");
    assert_eq!(e["message"], "PVC is in phase Bound");
    assert_eq!(e["hotplugVolume"], json!({}));
    assert_eq!(e["persistentVolumeClaimInfo"]["claimName"], "claim1");
    // The root disk's entry, which virt-handler owns, is untouched.
    assert_eq!(
        entry(&d, "root"),
        json!({"name": "root", "target": "vda", "phase": "Ready"})
    );
}

#[test]
fn a_running_attachment_pod_moves_the_entry_to_attached_to_node() {
    let v = running_vmi(
        &[("hp1", "claim1")],
        json!([{"name": "hp1", "target": "", "phase": "Bound", "reason": "PVCNotReady",
                "message": "PVC is in phase Bound", "hotplugVolume": {}}]),
    );
    let (l, hp) = (
        launcher(),
        attachment(
            "hp-volume-aaaaa",
            &[("hp1", "claim1")],
            "Running",
            true,
            "2026-01-01T00:00:00Z",
        ),
    );
    let d = decide(&v, &[&l, &hp], &[claim("claim1", "Bound")]);
    assert!(created_pods(&d).is_empty() && deleted_pods(&d).is_empty());
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "AttachedToNode");
    assert_eq!(e["reason"], "SuccessfulCreate");
    assert_eq!(
        e["message"],
        "Created hotplug attachment pod hp-volume-aaaaa, for volume hp1"
    );
    assert_eq!(
        e["hotplugVolume"],
        json!({"attachPodName": "hp-volume-aaaaa", "attachPodUID": "hp-volume-aaaaa-uid"})
    );
    assert!(events(&d).contains(&(
        "SuccessfulCreate".into(),
        "Created hotplug attachment pod hp-volume-aaaaa, for volume hp1".into()
    )));
}

#[test]
fn a_pod_not_ready_yet_names_itself_but_gives_no_uid() {
    let v = running_vmi(&[("hp1", "claim1")], json!([]));
    let (l, hp) = (
        launcher(),
        attachment(
            "hp-volume-aaaaa",
            &[("hp1", "claim1")],
            "Pending",
            false,
            "2026-01-01T00:00:00Z",
        ),
    );
    let d = decide(&v, &[&l, &hp], &[claim("claim1", "Bound")]);
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "AttachedToNode");
    assert_eq!(
        e["hotplugVolume"],
        json!({"attachPodName": "hp-volume-aaaaa"})
    );
}

/// Bad input: the claim does not exist. KubeVirt's Pending entry and sync error, no pod.
#[test]
fn a_missing_claim_leaves_a_pending_entry_and_no_pod() {
    let v = running_vmi(&[("hp1", "nosuch")], json!([]));
    let l = launcher();
    let d = decide(&v, &[&l], &[]);
    assert!(created_pods(&d).is_empty());
    assert_eq!(
        d.plan.error_message(),
        Some("Error determining volume status didn't find PVC nosuch")
    );
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "Pending");
    assert_eq!(e["reason"], "FailedPvcNotFound");
    assert_eq!(e["message"], "PVC nosuch not found");
    assert!(e.get("persistentVolumeClaimInfo").is_none());
}

/// A claim not bound yet: the entry says so. KubeVirt still creates the attachment pod for a
/// claim no DataVolume controls (its scheduling is what binds a WaitForFirstConsumer claim).
#[test]
fn a_pending_claim_shows_claim_pending() {
    let v = running_vmi(&[("hp1", "claim1")], json!([]));
    let l = launcher();
    let d = decide(&v, &[&l], &[claim("claim1", "Pending")]);
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "Pending");
    assert_eq!(e["reason"], "PVCNotReady");
    assert_eq!(e["message"], "PVC is in phase ClaimPending");
    assert_eq!(created_pods(&d).len(), 1);
}

/// A DataVolume still importing: its claim is not ready, no pod.
#[test]
fn a_claim_whose_data_volume_imports_gets_no_pod() {
    let v = running_vmi(&[("hp1", "dv1")], json!([]));
    let l = launcher();
    let mut pvc = serde_json::to_value(claim("dv1", "Bound")).unwrap();
    pvc["metadata"]["ownerReferences"] = json!([{"apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume", "name": "dv1", "uid": "dv-uid", "controller": true}]);
    let pvcs = [serde_json::from_value(pvc).unwrap()];
    let dvs = [json!({"metadata": {"name": "dv1", "namespace": "default"},
                      "status": {"phase": "ImportInProgress"}})];
    let cfg = ClusterConfig::default();
    let mut w = world(&v, vec![&l], &cfg);
    w.pvcs = &pvcs;
    w.data_volumes = &dvs;
    let d = decide_vmi(&w, &render, "xyz12");
    assert!(created_pods(&d).is_empty(), "{:?}", d.plan);
    assert!(d.plan.error.is_none());
}

#[test]
fn a_new_volume_gets_a_new_pod_and_the_old_one_stays_until_it_runs() {
    let v = running_vmi(
        &[("hp1", "claim1"), ("hp2", "claim2")],
        json!([{"name": "hp1", "target": "sda", "phase": "Ready",
                "hotplugVolume": {"attachPodName": "hp-volume-old11", "attachPodUID": "hp-volume-old11-uid"}}]),
    );
    let pvcs = [claim("claim1", "Bound"), claim("claim2", "Bound")];
    let l = launcher();
    let old = attachment(
        "hp-volume-old11",
        &[("hp1", "claim1")],
        "Running",
        true,
        "2026-01-01T00:00:00Z",
    );
    let d = decide(&v, &[&l, &old], &pvcs);
    let created = created_pods(&d);
    assert_eq!(created.len(), 1);
    let names: Vec<&str> = created[0]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["hotplug-disks", "hp1", "hp2"]);
    // hp1 is Ready: mounted already, the new pod carries its claim but does not mount it.
    let mounts = created[0]["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!mounts.iter().any(|m| m["name"] == "hp1"), "{mounts:?}");
    assert!(deleted_pods(&d).is_empty(), "the old pod still serves hp1");

    // The new pod runs: the old one goes.
    let new = attachment(
        "hp-volume-new22",
        &[("hp1", "claim1"), ("hp2", "claim2")],
        "Running",
        true,
        "2026-01-01T00:01:00Z",
    );
    let d = decide(&v, &[&l, &old, &new], &pvcs);
    assert!(created_pods(&d).is_empty());
    assert_eq!(deleted_pods(&d), ["hp-volume-old11"]);
    assert!(events(&d).contains(&(
        "SuccessfulDelete".into(),
        "Deleted attachment pod hp-volume-old11".into()
    )));
    // hp1 is Ready: virt-handler owns its entry now, the controller only follows the pod.
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "Ready");
    assert_eq!(e["hotplugVolume"]["attachPodName"], "hp-volume-new22");
}

#[test]
fn a_removed_volume_keeps_its_pod_until_virt_handler_unmounted_it() {
    let l = launcher();
    let hp = attachment(
        "hp-volume-aaaaa",
        &[("hp1", "claim1")],
        "Running",
        true,
        "2026-01-01T00:00:00Z",
    );
    let pvcs = [claim("claim1", "Bound")];
    // Still mounted in the launcher pod: the pod stays, the entry too.
    let mounted = running_vmi(
        &[],
        json!([{"name": "hp1", "target": "sda", "phase": "MountedToPod",
                "hotplugVolume": {"attachPodName": "hp-volume-aaaaa", "attachPodUID": "hp-volume-aaaaa-uid"}}]),
    );
    let d = decide(&mounted, &[&l, &hp], &pvcs);
    assert!(deleted_pods(&d).is_empty());
    if d.vmi.is_some() {
        assert_eq!(entry(&d, "hp1")["phase"], "MountedToPod");
    }

    // Unmounted (virt-handler left it AttachedToNode's successor): the pod goes, the entry is
    // Detaching while the pod is there.
    let unmounted = running_vmi(
        &[],
        json!([{"name": "hp1", "target": "", "phase": "AttachedToNode",
                "hotplugVolume": {"attachPodName": "hp-volume-aaaaa", "attachPodUID": "hp-volume-aaaaa-uid"}}]),
    );
    let d = decide(&unmounted, &[&l, &hp], &pvcs);
    assert_eq!(deleted_pods(&d), ["hp-volume-aaaaa"]);
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "Detaching");

    // The pod is being deleted: KubeVirt's message.
    let mut deleting = serde_json::to_value(&hp).unwrap();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:05:00Z");
    let deleting: Pod = serde_json::from_value(deleting).unwrap();
    let d = decide(&unmounted, &[&l, &deleting], &pvcs);
    assert!(deleted_pods(&d).is_empty());
    let e = entry(&d, "hp1");
    assert_eq!(e["phase"], "Detaching");
    assert_eq!(e["reason"], "SuccessfulDelete");
    assert_eq!(
        e["message"],
        "Deleted hotplug attachment pod hp-volume-aaaaa, for volume hp1"
    );

    // The pod is gone: so is the entry.
    let d = decide(&unmounted, &[&l], &pvcs);
    assert_eq!(entry(&d, "hp1"), Value::Null);
    assert_ne!(entry(&d, "root"), Value::Null);
}

#[test]
fn a_settled_vmi_changes_neither_pods_nor_volume_status() {
    let hp1 = json!({"name": "hp1", "target": "sda", "phase": "Ready",
        "hotplugVolume": {"attachPodName": "hp-volume-aaaaa", "attachPodUID": "hp-volume-aaaaa-uid"},
        "persistentVolumeClaimInfo": super::pvc_info::info_of(&claim("claim1", "Bound"))});
    let v = running_vmi(&[("hp1", "claim1")], json!([hp1.clone()]));
    let (l, hp) = (
        launcher(),
        attachment(
            "hp-volume-aaaaa",
            &[("hp1", "claim1")],
            "Running",
            true,
            "2026-01-01T00:00:00Z",
        ),
    );
    let d = decide(&v, &[&l, &hp], &[claim("claim1", "Bound")]);
    assert!(created_pods(&d).is_empty() && deleted_pods(&d).is_empty());
    if d.vmi.is_some() {
        assert_eq!(entry(&d, "hp1"), hp1);
    }
    let touches_volumes = d.plan.writes().any(|w| match &w.op {
        WriteOp::Patch { patch, .. } => patch.to_string().contains("volumeStatus"),
        _ => false,
    });
    assert!(!touches_volumes, "{:?}", d.plan);
}

#[test]
fn a_final_vmi_deletes_its_attachment_pods() {
    let mut v = serde_json::to_value(running_vmi(&[("hp1", "claim1")], json!([]))).unwrap();
    v["status"]["phase"] = json!("Succeeded");
    let v: VirtualMachineInstance = serde_json::from_value(v).unwrap();
    let (l, hp) = (
        launcher(),
        attachment(
            "hp-volume-aaaaa",
            &[("hp1", "claim1")],
            "Running",
            true,
            "2026-01-01T00:00:00Z",
        ),
    );
    let d = decide(&v, &[&l, &hp], &[claim("claim1", "Bound")]);
    assert_eq!(deleted_pods(&d), ["hp-volume-aaaaa"]);
}
