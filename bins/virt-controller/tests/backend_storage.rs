//! The backend-storage claim of a VM with a persistent TPM, on a real kube-apiserver with
//! kube-controller-manager (its PersistentVolume binder binds the claim to a volume the test
//! makes; there is no provisioner and no kubelet).
//!
//! kvrs's VMI controller creates the claim before the launcher pod (in the default storage
//! class, 10Mi, owned by the VM), holds the pod while the claim is pending, renders the pod
//! with the claim once it is bound and reports it in the VMI's volume status; the VM stopped
//! and started again, the new VMI's pod mounts the same claim (the state survives the restart)
//! and no second claim is made.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

fn condition(v: &Value, t: &str) -> Option<Value> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .cloned()
}

fn backend_claims(h: &Harness, vm: &str) -> Vec<Value> {
    h.list("pvc", "default", &format!("persistent-state-for={vm}"))
}

fn live_launcher_pods(h: &Harness, vmi: &str) -> Vec<Value> {
    h.list("pods", "default", &format!("vm.kubevirt.io/name={vmi}"))
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// The claim named in the launcher pod's `vm-state` volume.
fn state_claim_of(pod: &Value) -> Option<String> {
    pod["spec"]["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == "vm-state")?["persistentVolumeClaim"]["claimName"]
        .as_str()
        .map(String::from)
}

#[test]
fn a_persistent_tpm_keeps_its_state_claim_across_a_restart() {
    let mut h = Harness::start();
    h.create(&json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local",
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
    }));
    h.start_controller("a", &[]);

    let mut tpm_vm = vm("tpm", "Always");
    tpm_vm["spec"]["template"]["spec"]["domain"]["devices"]["tpm"] = json!({"persistent": true});
    h.create(&tpm_vm);
    let vm_uid = h.get("vm", "default", "tpm").expect("the VM")["metadata"]["uid"].clone();

    // The claim, before any pod.
    let claim = h.wait_for("the backend-storage claim", T, || {
        backend_claims(&h, "tpm").into_iter().next()
    });
    let name = claim["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("persistent-state-for-tpm-"), "{name}");
    assert_eq!(
        claim["metadata"]["ownerReferences"],
        json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "tpm",
                "uid": vm_uid, "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(claim["spec"]["storageClassName"], "local");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "10Mi");
    assert_eq!(claim["spec"]["volumeMode"], "Filesystem");

    // Pending (no volume yet): the VMI says why, and no pod.
    let vmi = h.wait_for("the VMI waiting for its claim", T, || {
        let v = h.get("vmi", "default", "tpm")?;
        let c = condition(&v, "Synchronized")?;
        (c["reason"] == "BackendStorageNotReady").then_some(v)
    });
    assert_eq!(
        condition(&vmi, "Synchronized").unwrap()["message"],
        "PVC pending"
    );
    assert!(
        live_launcher_pods(&h, "tpm").is_empty(),
        "no pod before the claim is bound"
    );

    // A volume for it: bound by kube-controller-manager, then the pod mounts it.
    h.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-tpm-state"},
        "spec": {"capacity": {"storage": "10Mi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "local", "volumeMode": "Filesystem",
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": "/nonexistent/kvrs-test/tpm-state"},
                 "claimRef": {"namespace": "default", "name": name}},
    }));
    let pod = h.wait_for("the launcher pod", T, || {
        live_launcher_pods(&h, "tpm").into_iter().next()
    });
    assert_eq!(state_claim_of(&pod).as_deref(), Some(name.as_str()));
    let entry = h.wait_for("the claim in the VMI's volume status", T, || {
        let v = h.get("vmi", "default", "tpm")?;
        v["status"]["volumeStatus"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == "persistent-state-for-this-vm")
            .cloned()
    });
    assert_eq!(
        entry["persistentVolumeClaimInfo"]["claimName"], name,
        "{entry}"
    );

    // Stopped and started: the new VMI's pod mounts the same claim; no second claim.
    h.patch(
        "vm",
        "default",
        "tpm",
        &json!({"spec": {"runStrategy": "Halted"}}),
        false,
    );
    h.wait_vmi_gone("default", "tpm", T);
    assert_eq!(
        backend_claims(&h, "tpm").len(),
        1,
        "the claim outlives the VMI (the VM owns it)"
    );
    h.patch(
        "vm",
        "default",
        "tpm",
        &json!({"spec": {"runStrategy": "Always"}}),
        false,
    );
    let pod = h.wait_for("the second launcher pod", T, || {
        live_launcher_pods(&h, "tpm").into_iter().next()
    });
    assert_eq!(state_claim_of(&pod).as_deref(), Some(name.as_str()));
    let claims = backend_claims(&h, "tpm");
    assert_eq!(claims.len(), 1, "one claim: {claims:?}");
}
