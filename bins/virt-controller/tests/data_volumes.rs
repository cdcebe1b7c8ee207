//! virt-controller with CDI DataVolumes on a real kube-apiserver (kube-controller-manager
//! running: its PersistentVolume binder binds the claims, its garbage collector follows owner
//! references).
//!
//! CDI is not run: its DataVolume CRD is a minimal structural one from the test support, and
//! THE TEST PLAYS CDI — it writes each DataVolume's status (phase and Bound/Ready conditions)
//! and makes the DataVolume's claim, as CDI's controller and importer would. The claim is bound
//! by the real PV binder to a PersistentVolume the test pre-binds to it. There is no kubelet:
//! the test plays it for the temporary WaitForFirstConsumer pod.
//!
//! 1. A VM with a `dataVolumeTemplates` entry: kvrs creates the DataVolume once (owned by the
//!    VM); while it imports, no VMI and the VM is Provisioning; imported but its claim not
//!    there yet, the VMI is Pending without a pod, PodScheduled=False (Unschedulable); with
//!    the claim bound, the launcher pod is created.
//! 2. A VM on a DataVolume the user made: the VMI exists while the DataVolume imports, stays
//!    Pending without a pod with DataVolumesReady=False; imported and bound, the pod follows.
//! 3. WaitForFirstConsumer: the temporary pod binds the claim, is deleted once it ran, and the
//!    launcher pod replaces it.
//!
//! And CDI installed after the controller started: the controller ends (KubeVirt's
//! "Reinitialize virt-controller, cdi api has been introduced"), and started again it makes the
//! DataVolumes of a VM's template.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

/// A VM whose root disk is the DataVolume `dv` (a template of its own when `template`).
fn vm_on_data_volume(name: &str, dv: &str, template: bool) -> Value {
    let mut v = vm(name, "Always");
    v["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "root", "dataVolume": {"name": dv}}]);
    if template {
        v["spec"]["dataVolumeTemplates"] = json!([{
            "metadata": {"name": dv, "labels": {"disk-of": name}},
            "spec": {"source": {"blank": {}},
                     "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
        }]);
    }
    v
}

/// Plays CDI: the DataVolume's status.
fn set_data_volume(h: &Harness, name: &str, phase: &str, ready: bool) {
    let status = if ready { "True" } else { "False" };
    h.patch(
        "datavolume",
        "default",
        name,
        &json!({"status": {"phase": phase, "progress": "N/A", "conditions": [
            {"type": "Bound", "status": status, "reason": phase},
            {"type": "Ready", "status": status, "reason": phase},
            {"type": "Running", "status": "False", "reason": phase}]}}),
        true,
    );
}

/// Plays CDI: the DataVolume's claim (same name, controlled by it), unbound.
fn create_claim(h: &Harness, dv: &str) {
    let owner = h.get("datavolume", "default", dv).expect("the DataVolume");
    h.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": dv, "namespace": "default", "ownerReferences": [{
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "name": dv,
            "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "volumeMode": "Filesystem", "resources": {"requests": {"storage": "1Gi"}}},
    }));
}

/// A PersistentVolume pre-bound to claim `claim`: kube-controller-manager's binder binds the
/// claim to it.
fn bind_claim(h: &Harness, claim: &str) {
    h.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("pv-{claim}")},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "", "volumeMode": "Filesystem",
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": format!("/nonexistent/kvrs-test/{claim}")},
                 "claimRef": {"namespace": "default", "name": claim}},
    }));
    h.wait_for("the claim bound", T, || {
        let c = h.get("pvc", "default", claim)?;
        (c["status"]["phase"] == "Bound").then_some(())
    });
}

fn vmi_pods(h: &Harness, vmi: &str) -> Vec<Value> {
    h.list("pods", "default", &format!("vm.kubevirt.io/name={vmi}"))
}

fn condition(v: &Value, t: &str) -> Option<Value> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .cloned()
}

fn printable(h: &Harness, name: &str) -> Option<String> {
    h.get("vm", "default", name)
        .and_then(|v| v["status"]["printableStatus"].as_str().map(str::to_string))
}

/// The VMI once it is Pending with condition `t` of status `status`.
fn wait_pending_with(h: &Harness, name: &str, t: &str, status: &str) -> Value {
    h.wait_for(&format!("VMI {name} Pending with {t}={status}"), T, || {
        let v = h.get("vmi", "default", name)?;
        let c = condition(&v, t)?;
        (v["status"]["phase"] == "Pending" && c["status"] == status).then_some(v)
    })
}

/// The launcher pod (not a temporary one) of VMI `name`, once created.
fn wait_launcher_pod(h: &Harness, name: &str) -> Value {
    h.wait_for(&format!("the launcher pod of {name}"), T, || {
        vmi_pods(h, name).into_iter().find(|p| {
            p["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"].is_null()
                && p["metadata"]["deletionTimestamp"].is_null()
        })
    })
}

#[test]
fn data_volumes_gate_the_vm_start_and_the_launcher_pod() {
    let mut h = Harness::start();
    h.install_data_volume_crd();
    h.start_controller("a", &[]);

    // 1. The template's DataVolume, created by kvrs, once.
    h.create(&vm_on_data_volume("tmpl", "tmpl-disk", true));
    let vm_uid = h.get("vm", "default", "tmpl").expect("the VM")["metadata"]["uid"].clone();
    let dv = h.wait_for("the DataVolume created by kvrs", T, || {
        h.get("datavolume", "default", "tmpl-disk")
    });
    assert_eq!(
        dv["metadata"]["ownerReferences"],
        json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "tmpl",
                "uid": vm_uid, "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(dv["metadata"]["labels"]["kubevirt.io/created-by"], vm_uid);
    assert_eq!(dv["metadata"]["labels"]["disk-of"], "tmpl");
    assert_eq!(
        dv["metadata"]["annotations"]["cdi.kubevirt.io/allowClaimAdoption"],
        "true"
    );
    assert_eq!(dv["spec"]["source"], json!({"blank": {}}));
    set_data_volume(&h, "tmpl-disk", "ImportInProgress", false);
    h.wait_for("VM Provisioning", T, || {
        (printable(&h, "tmpl").as_deref() == Some("Provisioning")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        h.get("vmi", "default", "tmpl").is_none(),
        "no VMI while the DataVolume imports"
    );
    assert_eq!(h.list("datavolume", "default", "").len(), 1, "created once");

    // Imported, the claim not there yet: the VMI waits for it without a pod.
    set_data_volume(&h, "tmpl-disk", "Succeeded", true);
    let vmi = h.wait_for("VMI Pending, PVC not found", T, || {
        let v = h.get("vmi", "default", "tmpl")?;
        let c = condition(&v, "PodScheduled")?;
        (v["status"]["phase"] == "Pending" && c["reason"] == "Unschedulable").then_some(v)
    });
    assert_eq!(
        condition(&vmi, "PodScheduled").unwrap()["message"],
        "PVC default/tmpl-disk does not exist, waiting for it to appear"
    );
    assert_eq!(
        condition(&vmi, "DataVolumesReady").unwrap()["reason"],
        "AllDVsReady"
    );
    assert!(vmi_pods(&h, "tmpl").is_empty(), "no pod without the claim");
    // The claim appears and is bound: the launcher pod.
    create_claim(&h, "tmpl-disk");
    bind_claim(&h, "tmpl-disk");
    wait_launcher_pod(&h, "tmpl");
    h.wait_for("VMI Scheduling", T, || {
        let v = h.get("vmi", "default", "tmpl")?;
        (v["status"]["phase"] == "Scheduling").then_some(())
    });
    assert_eq!(h.list("datavolume", "default", "").len(), 1);

    // 2. A DataVolume the user made, still importing: the VMI exists and waits.
    h.create(&json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "pre-disk", "namespace": "default"},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }));
    set_data_volume(&h, "pre-disk", "ImportInProgress", false);
    create_claim(&h, "pre-disk");
    h.create(&vm_on_data_volume("pre", "pre-disk", false));
    let vmi = wait_pending_with(&h, "pre", "DataVolumesReady", "False");
    assert_eq!(
        condition(&vmi, "DataVolumesReady").unwrap(),
        json!({"type": "DataVolumesReady", "status": "False", "reason": "NotAllDVsReady",
               "message": "Not all of the VMI's DVs are ready",
               "lastProbeTime": null, "lastTransitionTime": null})
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        vmi_pods(&h, "pre").is_empty(),
        "no launcher pod while the DataVolume imports"
    );
    // Imported and bound: the launcher pod.
    bind_claim(&h, "pre-disk");
    set_data_volume(&h, "pre-disk", "Succeeded", true);
    wait_launcher_pod(&h, "pre");
    h.wait_for("DataVolumesReady=True", T, || {
        let v = h.get("vmi", "default", "pre")?;
        (condition(&v, "DataVolumesReady")?["status"] == "True").then_some(())
    });

    // 3. WaitForFirstConsumer: the temporary pod is the consumer.
    h.create(&json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "wffc-disk", "namespace": "default"},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }));
    set_data_volume(&h, "wffc-disk", "WaitForFirstConsumer", false);
    create_claim(&h, "wffc-disk");
    h.create(&vm_on_data_volume("wffc", "wffc-disk", false));
    let temp = h.wait_for("the temporary pod", T, || {
        vmi_pods(&h, "wffc").into_iter().next()
    });
    assert_eq!(
        temp["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"],
        "true"
    );
    let compute = temp["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "compute")
        .cloned()
        .unwrap();
    assert_eq!(
        compute["command"],
        json!(["/bin/bash", "-c", "echo", "bound PVCs"])
    );
    let vmi = wait_pending_with(&h, "wffc", "Provisioning", "True");
    assert_eq!(vmi["status"]["phase"], "Pending");
    // The kubelet ran it (the claim is bound meanwhile), CDI imported.
    let temp_name = temp["metadata"]["name"].as_str().unwrap().to_string();
    bind_claim(&h, "wffc-disk");
    h.patch(
        "pods",
        "default",
        &temp_name,
        &json!({"status": {"phase": "Succeeded"}}),
        true,
    );
    set_data_volume(&h, "wffc-disk", "Succeeded", true);
    h.wait_for("the temporary pod deleted", T, || {
        h.get("pod", "default", &temp_name).is_none().then_some(())
    });
    let launcher = wait_launcher_pod(&h, "wffc");
    assert_ne!(launcher["metadata"]["name"], temp_name.as_str());
    h.wait_for("VMI Scheduling without Provisioning", T, || {
        let v = h.get("vmi", "default", "wffc")?;
        (v["status"]["phase"] == "Scheduling" && condition(&v, "Provisioning").is_none())
            .then_some(())
    });
}

#[test]
fn cdi_installed_later_restarts_the_controller_which_then_watches_data_volumes() {
    let mut h = Harness::start();
    let first = h.start_controller("before-cdi", &[]);
    h.wait_for("the controller leading", T, || {
        h.controller_log(first)
            .contains("caches synced")
            .then_some(())
    });
    h.install_data_volume_crd();
    let deadline = std::time::Instant::now() + T;
    let status = loop {
        if let Some(s) = h
            .controller(first)
            .child
            .try_wait()
            .expect("the controller process")
        {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controller did not end within {T:?} of CDI's CRD:\n{}",
            h.controller_log(first)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.success(), "a clean end, not a crash: {status:?}");
    let log = h.controller_log(first);
    assert!(
        log.contains("Reinitialize virt-controller, cdi api has been introduced"),
        "{log}"
    );
    // Started again (as its Deployment would), it watches DataVolumes and makes a template's.
    h.start_controller("after-cdi", &[]);
    h.create(&vm_on_data_volume("later", "later-disk", true));
    h.wait_for("the DataVolume made after the restart", T, || {
        h.get("datavolume", "default", "later-disk")
    });
}
