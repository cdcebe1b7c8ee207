//! The backend-storage claim of a VMI with a persistent TPM or EFI (KubeVirt's
//! `handleBackendStorage`, `IsPVCReady` and `UpdateVolumeStatus`): created before the launcher
//! pod, waited for until bound, mounted by its generated name, reported in the volume status,
//! deleted when the VMI keeps no state.

// The shared fixtures (`fixtures.rs`) bring helpers for launcher pods this module has no use for.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::{VmiDecision, VmiWorld, decide_vmi, launcher_renderer};
use crate::ClusterConfig;
use crate::PendingExpectations;
use crate::api::VirtualMachineInstance;
use crate::{Expectation, Now, WriteOp};

include!("fixtures.rs");

/// A new VMI (phase unset) the launcher renderer accepts.
fn new_vmi() -> VirtualMachineInstance {
    let mut v = serde_json::to_value(vmi("")).unwrap();
    v["spec"]["domain"]["memory"] = json!({"guest": "128Mi"});
    serde_json::from_value(v).unwrap()
}

/// [`new_vmi`] owned by VM `vmi1`, with a persistent TPM.
fn tpm_vmi() -> VirtualMachineInstance {
    let mut v = serde_json::to_value(new_vmi()).unwrap();
    v["spec"]["domain"]["devices"]["tpm"] = json!({"persistent": true});
    v["metadata"]["ownerReferences"] = json!([{"apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine", "name": "vmi1", "uid": "vm-uid", "controller": true,
        "blockOwnerDeletion": true}]);
    serde_json::from_value(v).unwrap()
}

fn class(name: &str, default: bool, binding: &str) -> Value {
    let mut sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                        "metadata": {"name": name}, "provisioner": "p",
                        "volumeBindingMode": binding});
    if default {
        sc["metadata"]["annotations"] =
            json!({"storageclass.kubernetes.io/is-default-class": "true"});
    }
    sc
}

fn backend_claim(name: &str, phase: &str, class: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                     "labels": {"persistent-state-for": "vmi1"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                 "storageClassName": class, "resources": {"requests": {"storage": "10Mi"}}},
        "status": {"phase": phase}
    }))
    .unwrap()
}

struct Inputs<'a> {
    vmi: &'a VirtualMachineInstance,
    pvcs: &'a [PersistentVolumeClaim],
    classes: &'a [Value],
    profiles: &'a [Value],
    config: ClusterConfig,
}

impl<'a> Inputs<'a> {
    fn new(vmi: &'a VirtualMachineInstance) -> Self {
        Inputs {
            vmi,
            pvcs: &[],
            classes: &[],
            profiles: &[],
            config: ClusterConfig::default(),
        }
    }

    /// One reconcile with kvrs's own launcher renderer (it mounts the claim as `vm-state`).
    fn decide(&self) -> VmiDecision {
        let inputs = kvrs_pod::PodInputs::default();
        let render = launcher_renderer(&self.config, &inputs);
        let mut w: VmiWorld<'_> = world(self.vmi, Vec::<&Pod>::new(), &self.config);
        w.pvcs = self.pvcs;
        w.storage_classes = self.classes;
        w.storage_profiles = self.profiles;
        decide_vmi(&w, &render, "xyz12")
    }
}

fn created(d: &VmiDecision, resource: &str) -> Vec<Value> {
    d.plan
        .writes()
        .filter(|w| w.resource == resource)
        .filter_map(|w| match &w.op {
            WriteOp::Create { object } => Some(object.clone()),
            _ => None,
        })
        .collect()
}

fn synchronized(d: &VmiDecision) -> Value {
    d.vmi
        .as_ref()
        .and_then(|v| {
            v["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Synchronized")
                .cloned()
        })
        .unwrap_or(Value::Null)
}

#[test]
fn a_persistent_tpm_gets_its_claim_before_the_pod() {
    let v = tpm_vmi();
    let classes = [
        class("slow", false, "Immediate"),
        class("local", true, "Immediate"),
    ];
    let mut i = Inputs::new(&v);
    i.classes = &classes;
    let d = i.decide();
    assert!(created(&d, "pods").is_empty(), "no pod before the claim");
    let claims = created(&d, "persistentvolumeclaims");
    assert_eq!(claims.len(), 1, "{:?}", d.plan);
    let c = &claims[0];
    assert_eq!(c["metadata"]["name"], "persistent-state-for-vmi1-xyz12");
    assert_eq!(c["metadata"]["generateName"], "persistent-state-for-vmi1-");
    assert_eq!(
        c["metadata"]["labels"],
        json!({"persistent-state-for": "vmi1", "cdi.kubevirt.io/applyStorageProfile": "true"})
    );
    assert_eq!(
        c["metadata"]["ownerReferences"][0]["kind"], "VirtualMachine",
        "owned by the VM, so the next VMI finds the same state"
    );
    assert_eq!(
        c["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}},
               "storageClassName": "local", "volumeMode": "Filesystem"})
    );
    let expectation = d
        .plan
        .writes()
        .find(|w| w.resource == "persistentvolumeclaims")
        .and_then(|w| w.expectation.clone());
    assert_eq!(
        expectation,
        Some(Expectation::Creations {
            key: "default/vmi1".into(),
            count: 1
        })
    );
    assert!(
        d.plan.error.is_none(),
        "no error: the claim's appearance brings the VMI back"
    );
}

#[test]
fn the_configured_class_and_its_profiles_access_mode_are_used() {
    let v = tpm_vmi();
    let classes = [class("local", true, "Immediate")];
    let profiles = [
        json!({"metadata": {"name": "shared"}, "status": {"claimPropertySets": [
        {"volumeMode": "Block", "accessModes": ["ReadWriteOnce"]},
        {"volumeMode": "Filesystem", "accessModes": ["ReadWriteOnce", "ReadWriteMany"]}]}}),
    ];
    let mut i = Inputs::new(&v);
    i.classes = &classes;
    i.profiles = &profiles;
    i.config.vm_state_storage_class = "shared".into();
    let c = &created(&i.decide(), "persistentvolumeclaims")[0];
    assert_eq!(c["spec"]["storageClassName"], "shared");
    assert_eq!(c["spec"]["accessModes"], json!(["ReadWriteMany"]));
}

#[test]
fn without_a_default_class_the_vmi_says_why_and_gets_no_pod() {
    let v = tpm_vmi();
    let classes = [class("slow", false, "Immediate")];
    let mut i = Inputs::new(&v);
    i.classes = &classes;
    let d = i.decide();
    assert!(created(&d, "persistentvolumeclaims").is_empty());
    assert!(created(&d, "pods").is_empty());
    let c = synchronized(&d);
    assert_eq!(c["reason"], "FailedBackendStorageCreate", "{c}");
    assert_eq!(c["message"], "no default storage class found");
    assert!(d.plan.error.is_some(), "retried with backoff");
}

#[test]
fn a_pending_claim_holds_the_pod_unless_its_class_waits_for_a_consumer() {
    let v = tpm_vmi();
    let classes = [
        class("local", true, "Immediate"),
        class("wffc", false, "WaitForFirstConsumer"),
    ];
    let pending = [backend_claim(
        "persistent-state-for-vmi1-ab12c",
        "Pending",
        "local",
    )];
    let mut i = Inputs::new(&v);
    i.classes = &classes;
    i.pvcs = &pending;
    let d = i.decide();
    assert!(created(&d, "pods").is_empty());
    assert!(
        created(&d, "persistentvolumeclaims").is_empty(),
        "no second claim"
    );
    let c = synchronized(&d);
    assert_eq!(
        (c["reason"].as_str(), c["message"].as_str()),
        (Some("BackendStorageNotReady"), Some("PVC pending"))
    );

    let waiting = [backend_claim(
        "persistent-state-for-vmi1-ab12c",
        "Pending",
        "wffc",
    )];
    i.pvcs = &waiting;
    let d = i.decide();
    assert_eq!(
        created(&d, "pods").len(),
        1,
        "the pod is the claim's first consumer"
    );

    let lost = [backend_claim(
        "persistent-state-for-vmi1-ab12c",
        "Lost",
        "local",
    )];
    i.pvcs = &lost;
    let c = synchronized(&i.decide());
    assert_eq!(
        (c["reason"].as_str(), c["message"].as_str()),
        (
            Some("FailedBackendStorageProbe"),
            Some("backend storage PVC lost")
        )
    );
}

#[test]
fn a_bound_claim_is_mounted_by_its_name_and_reported() {
    let v = tpm_vmi();
    let classes = [class("local", true, "Immediate")];
    let bound = [backend_claim(
        "persistent-state-for-vmi1-ab12c",
        "Bound",
        "local",
    )];
    let mut i = Inputs::new(&v);
    i.classes = &classes;
    i.pvcs = &bound;
    let d = i.decide();
    let pods = created(&d, "pods");
    assert_eq!(pods.len(), 1);
    let state = pods[0]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "vm-state")
        .cloned();
    assert_eq!(
        state,
        Some(json!({"name": "vm-state",
                    "persistentVolumeClaim": {"claimName": "persistent-state-for-vmi1-ab12c"}}))
    );
    let status = &d.vmi.as_ref().unwrap()["status"]["volumeStatus"];
    let entry = status
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "persistent-state-for-this-vm")
        .cloned();
    assert_eq!(
        entry,
        Some(
            json!({"name": "persistent-state-for-this-vm", "target": "", "persistentVolumeClaimInfo":
            {"claimName": "persistent-state-for-vmi1-ab12c", "accessModes": ["ReadWriteOnce"]}})
        )
    );
}

#[test]
fn a_legacy_claim_is_found_by_its_name() {
    let v = tpm_vmi();
    let mut legacy = backend_claim("persistent-state-for-vmi1", "Bound", "local");
    legacy.metadata.labels = None;
    let claims = [legacy];
    let mut i = Inputs::new(&v);
    i.pvcs = &claims;
    let d = i.decide();
    assert!(created(&d, "persistentvolumeclaims").is_empty());
    assert_eq!(created(&d, "pods").len(), 1);
}

#[test]
fn a_vmi_without_persistent_state_has_its_claim_deleted() {
    let v = new_vmi();
    let claims = [backend_claim(
        "persistent-state-for-vmi1-ab12c",
        "Bound",
        "local",
    )];
    let mut i = Inputs::new(&v);
    i.pvcs = &claims;
    let d = i.decide();
    let deleted: Vec<(&str, &WriteOp)> = d
        .plan
        .writes()
        .filter(|w| w.resource == "persistentvolumeclaims")
        .map(|w| (w.name.as_str(), &w.op))
        .collect();
    assert_eq!(
        deleted,
        [(
            "persistent-state-for-vmi1-ab12c",
            &WriteOp::Delete {
                precondition_uid: Some("persistent-state-for-vmi1-ab12c-uid".into())
            }
        )]
    );
    assert_eq!(
        created(&d, "pods").len(),
        1,
        "the pod does not wait for it: {:?}",
        d.plan
    );
}
