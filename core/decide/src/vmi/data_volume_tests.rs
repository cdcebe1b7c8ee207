//! The VMI decision with DataVolume and PVC volumes, as KubeVirt v1.9.0's VMI controller
//! treats them before the launcher pod exists: a DataVolume still importing holds the pod back
//! (DataVolumesReady False), a populated one lets it be created, a failed one fails the VMI, and
//! one waiting for its first consumer gets the temporary pod that binds its claim.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::{VmiDecision, VmiWorld, decide_vmi};
use crate::ClusterConfig;
use crate::PendingExpectations;
use crate::api::VirtualMachineInstance;
use crate::{EventType, Now, WriteOp};

include!("fixtures.rs");

/// A Pending VMI whose disk is the DataVolume `disk`.
fn vmi_on_data_volume() -> VirtualMachineInstance {
    let mut v = vmi("Pending");
    v.spec.volumes = serde_json::from_value(json!([
        {"name": "root", "dataVolume": {"name": "disk"}}
    ]))
    .unwrap();
    v
}

/// The claim CDI makes for DataVolume `disk`: same name, controlled by it.
fn claim(phase: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "disk", "namespace": "default", "uid": "pvc-uid",
                     "ownerReferences": [{"apiVersion": "cdi.kubevirt.io/v1beta1",
                         "kind": "DataVolume", "name": "disk", "uid": "dv-uid",
                         "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": phase}
    }))
    .unwrap()
}

/// DataVolume `disk` in `phase`, with CDI's Ready condition.
fn data_volume(phase: &str, ready: &str) -> Value {
    json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "disk", "namespace": "default", "uid": "dv-uid"},
        "status": {"phase": phase, "conditions": [
            {"type": "Bound", "status": ready}, {"type": "Ready", "status": ready}]}
    })
}

fn decide(
    v: &VirtualMachineInstance,
    pods: Vec<&Pod>,
    pvcs: &[PersistentVolumeClaim],
    dvs: &[Value],
) -> VmiDecision {
    let cfg = ClusterConfig::default();
    let mut w: VmiWorld<'_> = world(v, pods, &cfg);
    w.pvcs = pvcs;
    w.data_volumes = dvs;
    decide_vmi(&w, &render, "xyz12")
}

fn pod_creates(d: &VmiDecision) -> Vec<&Value> {
    d.plan
        .writes()
        .filter(|w| w.resource == "pods")
        .filter_map(|w| match &w.op {
            WriteOp::Create { object } => Some(object),
            _ => None,
        })
        .collect()
}

fn condition<'d>(d: &'d VmiDecision, t: &str) -> Option<&'d Value> {
    d.vmi
        .as_ref()?
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

fn phase(d: &VmiDecision) -> Option<&str> {
    d.vmi.as_ref()?.pointer("/status/phase")?.as_str()
}

#[test]
fn an_importing_data_volume_holds_the_pod_back() {
    let v = vmi_on_data_volume();
    let d = decide(
        &v,
        vec![],
        &[claim("Bound")],
        &[data_volume("ImportInProgress", "False")],
    );
    assert!(pod_creates(&d).is_empty(), "{:?}", d.plan);
    assert_eq!(phase(&d), Some("Pending"));
    assert_eq!(
        condition(&d, "DataVolumesReady"),
        Some(&json!({"type": "DataVolumesReady", "status": "False",
                     "reason": "NotAllDVsReady", "message": "Not all of the VMI's DVs are ready",
                     "lastProbeTime": null, "lastTransitionTime": null}))
    );
    assert!(
        condition(&d, "Synchronized").is_none(),
        "waiting is no error"
    );
    assert!(d.plan.error.is_none());
}

#[test]
fn a_populated_data_volume_lets_the_pod_be_created() {
    let v = vmi_on_data_volume();
    let d = decide(
        &v,
        vec![],
        &[claim("Bound")],
        &[data_volume("Succeeded", "True")],
    );
    let created = pod_creates(&d);
    assert_eq!(created.len(), 1, "{:?}", d.plan);
    assert!(
        created[0]["metadata"]["annotations"].is_null(),
        "not a temporary pod"
    );
    assert_eq!(phase(&d), Some("Scheduling"));
    assert_eq!(
        condition(&d, "DataVolumesReady").unwrap()["reason"],
        "AllDVsReady"
    );
    assert_eq!(
        d.plan.events[0].message,
        "Created virtual machine pod virt-launcher-vmi1-xyz12"
    );
}

#[test]
fn a_failed_data_volume_fails_the_vmi() {
    let v = vmi_on_data_volume();
    let d = decide(
        &v,
        vec![],
        &[claim("Bound")],
        &[data_volume("Failed", "False")],
    );
    assert!(pod_creates(&d).is_empty());
    assert_eq!(phase(&d), Some("Failed"));
    assert_eq!(
        condition(&d, "DataVolumesReady").unwrap()["status"],
        "False"
    );
}

#[test]
fn a_claim_whose_data_volume_is_not_cached_is_kubevirts_import_error() {
    let v = vmi_on_data_volume();
    let d = decide(&v, vec![], &[claim("Bound")], &[]);
    assert!(pod_creates(&d).is_empty());
    let ev = &d.plan.events[0];
    assert_eq!(ev.kind, EventType::Warning);
    assert_eq!(ev.reason, "FailedPvcNotFound");
    assert_eq!(
        ev.message,
        "Error determining if volume is ready: unable to find datavolume default/disk"
    );
    let sync = condition(&d, "Synchronized").unwrap();
    assert_eq!(sync["reason"], "FailedDataVolumeImport");
    assert_eq!(
        sync["message"],
        "Error determining if volume is ready unable to find datavolume default/disk"
    );
}

#[test]
fn a_missing_claim_makes_the_vmi_unschedulable() {
    let v = vmi_on_data_volume();
    let d = decide(&v, vec![], &[], &[data_volume("Succeeded", "True")]);
    assert!(pod_creates(&d).is_empty());
    assert_eq!(phase(&d), Some("Pending"));
    assert_eq!(
        condition(&d, "PodScheduled"),
        Some(
            &json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "PVC default/disk does not exist, waiting for it to appear",
                     "lastProbeTime": null, "lastTransitionTime": null})
        )
    );
}

#[test]
fn wait_for_first_consumer_gets_the_temporary_pod_then_the_launcher_pod() {
    let v = vmi_on_data_volume();
    // Step 1: the claim waits for a consumer; the temporary pod is the consumer.
    let wffc = [data_volume("WaitForFirstConsumer", "False")];
    let d = decide(&v, vec![], &[claim("Pending")], &wffc);
    let created = pod_creates(&d);
    assert_eq!(created.len(), 1, "{:?}", d.plan);
    assert_eq!(
        created[0]["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"],
        "true"
    );
    let compute = &created[0]["spec"]["containers"][0];
    assert_eq!(
        compute["command"],
        json!(["/bin/bash", "-c", "echo", "bound PVCs"])
    );
    assert_eq!(
        phase(&d),
        Some("Pending"),
        "a temporary pod does not schedule the VMI"
    );
    assert_eq!(
        condition(&d, "Provisioning"),
        Some(&json!({"type": "Provisioning", "status": "True",
                     "lastProbeTime": null, "lastTransitionTime": null}))
    );

    // Step 2: bound and imported; the temporary pod ran and is deleted, no pod made yet.
    let mut temp = created[0].clone();
    temp["metadata"]["uid"] = json!("temp-uid");
    temp["metadata"]["creationTimestamp"] = json!("2025-12-31T23:55:00Z");
    temp["status"] = json!({"phase": "Succeeded"});
    let temp: Pod = serde_json::from_value(temp).unwrap();
    let done = [data_volume("Succeeded", "True")];
    let mut pending = v.clone();
    pending.status.as_mut().unwrap().conditions = serde_json::from_value(json!([
        {"type": "Provisioning", "status": "True"}
    ]))
    .unwrap();
    let d = decide(&pending, vec![&temp], &[claim("Bound")], &done);
    let deletes: Vec<_> = d
        .plan
        .writes()
        .filter(|w| matches!(w.op, WriteOp::Delete { .. }))
        .map(|w| w.name.clone())
        .collect();
    assert_eq!(deletes, ["virt-launcher-vmi1-xyz12"]);
    assert!(pod_creates(&d).is_empty());
    assert!(d.plan.events.iter().any(|e| e.reason == "SuccessfulDelete"
        && e.message == "Deleted WaitForFirstConsumer temporary pod virt-launcher-vmi1-xyz12"));

    // Step 3: the temporary pod is gone: the launcher pod is created.
    let d = decide(&pending, vec![], &[claim("Bound")], &done);
    let created = pod_creates(&d);
    assert_eq!(created.len(), 1);
    assert!(created[0]["metadata"]["annotations"].is_null());
    assert_eq!(phase(&d), Some("Scheduling"));
}

#[test]
fn a_failed_temporary_pod_fails_the_vmi() {
    let v = vmi_on_data_volume();
    let mut temp = pod("Pending", None, json!({"waiting": {}}));
    temp["metadata"]["annotations"] = json!({"kubevirt.io/ephemeral-provisioning": "true"});
    temp["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/1 nodes are available"}]);
    let wffc = [data_volume("WaitForFirstConsumer", "False")];
    let pending = typed(&temp);
    let d = decide(&v, vec![&pending], &[claim("Pending")], &wffc);
    assert_eq!(phase(&d), Some("Pending"));
    assert_eq!(
        condition(&d, "PodScheduled").unwrap()["message"],
        "0/1 nodes are available"
    );
    temp["status"] = json!({"phase": "Failed"});
    let failed = typed(&temp);
    let d = decide(&v, vec![&failed], &[claim("Pending")], &wffc);
    assert_eq!(phase(&d), Some("Failed"));
}
