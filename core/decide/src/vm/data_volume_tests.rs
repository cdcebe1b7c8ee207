//! The VM decision with `dataVolumeTemplates`, as KubeVirt v1.9.0's VM controller handles
//! them: each DataVolume created once (owned by the VM, labelled with its UID, claim adoption
//! allowed) under a creation expectation, the start held until they are populated, and their
//! failures reported as KubeVirt reports them.

use serde_json::{Value, json};

use super::{PendingExpectations, VmDecision, VmWorld, decide_vm};
use crate::ClusterConfig;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::{EventType, Expectation, Now, WriteOp};

include!("fixtures.rs");

/// A VM (run strategy Always) whose disk is the DataVolume template `disk`.
fn vm_with_template() -> VirtualMachine {
    let mut v = vm(Some("Always"), None, json!({}));
    v.spec.data_volume_templates = Some(vec![
        serde_json::from_value(json!({
            "metadata": {"name": "disk", "labels": {"tier": "gold"},
                         "annotations": {"note": "kept"}},
            "spec": {"source": {"http": {"url": "http://images/disk.img"}},
                     "storage": {"resources": {"requests": {"storage": "1Gi"}}}}}))
        .unwrap(),
    ]);
    if let Some(s) = v.spec.template.spec.as_mut() {
        s.volumes = Some(vec![
            serde_json::from_value(json!({"name": "root", "dataVolume": {"name": "disk"}}))
                .unwrap(),
        ]);
    }
    v
}

fn data_volume(phase: &str, conditions: Value) -> Value {
    json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
           "metadata": {"name": "disk", "namespace": "default", "uid": "dv-uid",
                        "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                            "kind": "VirtualMachine", "name": "vm1", "uid": "vm-uid",
                            "controller": true, "blockOwnerDeletion": true}]},
           "status": {"phase": phase, "conditions": conditions}})
}

fn decide(v: &VirtualMachine, dvs: &[Value], expectations: PendingExpectations) -> VmDecision {
    let cfg = ClusterConfig::default();
    let mut w: VmWorld<'_> = world(v, None, &cfg);
    w.data_volumes = dvs;
    w.expectations = expectations;
    decide_vm(&w)
}

fn creates<'d>(d: &'d VmDecision, resource: &str) -> Vec<&'d Value> {
    d.plan
        .writes()
        .filter(|w| w.resource == resource)
        .filter_map(|w| match &w.op {
            WriteOp::Create { object } => Some(object),
            _ => None,
        })
        .collect()
}

#[test]
fn the_data_volume_is_created_once_as_kubevirt_makes_it() {
    let v = vm_with_template();
    let d = decide(&v, &[], PendingExpectations::default());
    let dvs = creates(&d, "datavolumes");
    assert_eq!(dvs.len(), 1, "{:?}", d.plan);
    let dv = dvs[0];
    assert_eq!(dv["apiVersion"], "cdi.kubevirt.io/v1beta1");
    assert_eq!(dv["kind"], "DataVolume");
    assert_eq!(dv["metadata"]["name"], "disk");
    assert_eq!(
        dv["metadata"]["labels"],
        json!({"tier": "gold", "kubevirt.io/created-by": "vm-uid"})
    );
    assert_eq!(
        dv["metadata"]["annotations"],
        json!({"note": "kept", "cdi.kubevirt.io/allowClaimAdoption": "true"})
    );
    assert_eq!(
        dv["metadata"]["ownerReferences"],
        json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vm1",
                "uid": "vm-uid", "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(
        dv["spec"]["source"]["http"]["url"],
        "http://images/disk.img"
    );
    let write = d
        .plan
        .writes()
        .find(|w| w.resource == "datavolumes")
        .unwrap();
    assert_eq!(
        write.expectation,
        Some(Expectation::Creations {
            key: "default/vm1".into(),
            count: 1
        })
    );
    assert!(
        creates(&d, "virtualmachineinstances").is_empty(),
        "no start yet"
    );
    let ev = d
        .plan
        .events
        .iter()
        .find(|e| e.reason == "SuccessfulDataVolumeCreate")
        .unwrap();
    assert_eq!(ev.message, "Created DataVolume disk");

    // The create is not in the cache yet, the expectation is: nothing more.
    let d = decide(
        &v,
        &[],
        PendingExpectations {
            creations: 1,
            deletions: 0,
        },
    );
    assert!(creates(&d, "datavolumes").is_empty());
    // In the cache and importing: not created again, no start, the VM is Provisioning.
    let importing = [data_volume(
        "ImportInProgress",
        json!([{"type": "Running", "status": "True"}]),
    )];
    let d = decide(&v, &importing, PendingExpectations::default());
    assert!(creates(&d, "datavolumes").is_empty());
    assert!(creates(&d, "virtualmachineinstances").is_empty());
    assert_eq!(d.status.unwrap()["printableStatus"], "Provisioning");
}

#[test]
fn a_succeeded_or_waiting_data_volume_lets_the_vm_start() {
    let v = vm_with_template();
    for phase in ["Succeeded", "WaitForFirstConsumer", "PendingPopulation"] {
        let dvs = [data_volume(phase, json!([]))];
        let d = decide(&v, &dvs, PendingExpectations::default());
        assert_eq!(creates(&d, "virtualmachineinstances").len(), 1, "{phase}");
    }
}

#[test]
fn a_failed_import_is_kubevirts_warning_and_data_volume_error() {
    let v = vm_with_template();
    let dvs = [data_volume("Failed", json!([]))];
    let d = decide(&v, &dvs, PendingExpectations::default());
    assert!(creates(&d, "virtualmachineinstances").is_empty());
    let ev = d
        .plan
        .events
        .iter()
        .find(|e| e.reason == "FailedDataVolumeImport")
        .expect("KubeVirt's event");
    assert_eq!(ev.kind, EventType::Warning);
    assert_eq!(ev.message, "DataVolume disk failed to import disk image");
    assert_eq!(d.status.unwrap()["printableStatus"], "DataVolumeError");

    // An importer that stopped on an error is a DataVolumeError too (no event: still running).
    let dvs = [data_volume(
        "ImportInProgress",
        json!([{"type": "Running", "status": "False", "reason": "Error", "message": "boom"}]),
    )];
    let d = decide(&v, &dvs, PendingExpectations::default());
    assert_eq!(d.status.unwrap()["printableStatus"], "DataVolumeError");
}

#[test]
fn a_data_volume_over_quota_is_a_sync_error() {
    let v = vm_with_template();
    let dvs = [data_volume(
        "Pending",
        json!([{"type": "Bound", "status": "Unknown", "reason": "ErrExceededQuota",
                "message": "exceeded quota: q"}]),
    )];
    let d = decide(&v, &dvs, PendingExpectations::default());
    assert!(creates(&d, "virtualmachineinstances").is_empty());
    let ev = d
        .plan
        .events
        .iter()
        .find(|e| e.reason == "FailedDataVolumeImport")
        .unwrap();
    assert_eq!(ev.message, "DataVolume disk exceeds quota limits");
    let err = d.plan.error.as_ref().expect("a sync error");
    assert_eq!(
        err.message,
        "Error encountered while creating DataVolumes: DataVolume disk importer is not running \
         due to an error: exceeded quota: q"
    );
    let status = d.status.unwrap();
    let failure = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failure")
        .unwrap();
    assert_eq!(failure["reason"], "FailedCreate");
}

#[test]
fn a_halted_vm_creates_its_data_volumes_without_waiting() {
    let mut v = vm_with_template();
    v.spec.run_strategy = Some("Halted".into());
    let d = decide(&v, &[], PendingExpectations::default());
    assert_eq!(creates(&d, "datavolumes").len(), 1);
    assert!(creates(&d, "virtualmachineinstances").is_empty());
}

#[test]
fn a_running_vm_keeps_its_vmi_when_its_data_volume_fails_later() {
    let v = vm_with_template();
    let running = vmi("Running", true);
    let dvs = [data_volume("Failed", json!([]))];
    let cfg = ClusterConfig::default();
    let mut w: VmWorld<'_> = world(&v, Some(&running), &cfg);
    w.data_volumes = &dvs;
    let d = decide_vm(&w);
    assert!(
        d.plan
            .writes()
            .all(|w| w.resource != "virtualmachineinstances"),
        "{:?}",
        d.plan
    );
    assert!(
        d.plan
            .events
            .iter()
            .any(|e| e.reason == "FailedDataVolumeImport")
    );
    assert_eq!(d.status.unwrap()["printableStatus"], "Running");
}

#[test]
fn deferred_creation_waits_for_the_start() {
    let mut v = vm_with_template();
    v.metadata.annotations.get_or_insert_default().insert(
        "kubevirt.io/immediate-data-volume-creation".into(),
        "false".into(),
    );
    v.spec.run_strategy = Some("Halted".into());
    let d = decide(&v, &[], PendingExpectations::default());
    assert!(
        creates(&d, "datavolumes").is_empty(),
        "not before the start"
    );
    v.spec.run_strategy = Some("Always".into());
    let d = decide(&v, &[], PendingExpectations::default());
    assert_eq!(creates(&d, "datavolumes").len(), 1, "at the start");
    assert!(creates(&d, "virtualmachineinstances").is_empty());
}

#[test]
fn a_refused_create_is_kubevirts_warning_and_a_retry() {
    let v = vm_with_template();
    let plan = super::data_volume_create_failed(&v, "disk", "datavolumes \"disk\" is forbidden");
    assert_eq!(plan.events.len(), 1);
    assert_eq!(plan.events[0].kind, EventType::Warning);
    assert_eq!(plan.events[0].reason, "FailedDataVolumeCreate");
    assert_eq!(
        plan.events[0].message,
        "Error creating DataVolume disk: datavolumes \"disk\" is forbidden"
    );
    assert_eq!(
        plan.error.as_ref().unwrap().message,
        "Error encountered while creating DataVolumes: failed to create DataVolume: \
         datavolumes \"disk\" is forbidden"
    );
    assert!(plan.write_list().is_empty());
}
