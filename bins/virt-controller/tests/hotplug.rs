//! The VMI controller's side of volume hotplug on a real kube-apiserver (kube-controller-manager
//! binds the claim; no kubelet, no virt-handler, no virt-api: the test plays them).
//!
//! 1. Bad input: a hotplugged volume whose claim does not exist — KubeVirt's Pending entry
//!    (`FailedPvcNotFound`, `PVC nosuch not found`), and no attachment pod.
//! 2. A hotplugged volume on a bound claim: KubeVirt's attachment pod appears (owned by the
//!    launcher pod, pinned to its node, the claim mounted); the test runs it as the kubelet
//!    would, and the volume status entry reaches AttachedToNode with the pod's name and UID.
//! 3. The volume removed from the spec: the attachment pod is deleted, and the entry goes with
//!    it.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

/// A JSON patch of `kind` `name` in `default`; `false` when the API server refused it (a
/// failed `test`).
fn json_patch(h: &Harness, kind: &str, name: &str, ops: &Value) -> bool {
    let p = ops.to_string();
    let out = h.cluster.kubectl([
        "patch",
        kind,
        "-n",
        "default",
        name,
        "--type=json",
        "-p",
        &p,
    ]);
    out.status.success()
}

/// A claim of 1Gi bound by kube-controller-manager's binder to a PersistentVolume made for it.
fn bound_claim(h: &Harness, claim: &str) {
    h.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "volumeMode": "Filesystem", "resources": {"requests": {"storage": "1Gi"}}},
    }));
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

/// Brings VM `name`'s VMI to Running on `node`, as kubelet and virt-handler would (with the
/// SELinux context virt-handler reports on a node without SELinux).
fn running_vmi(h: &Harness, name: &str, node: &str) -> String {
    h.create(&vm(name, "Always"));
    h.wait_live_vmi("default", name, T);
    let launcher = h.run_launcher_pod("default", name, node);
    h.wait_for("VMI Scheduled", T, || {
        let v = h.get("vmi", "default", name)?;
        (v["status"]["phase"] == "Scheduled").then_some(())
    });
    h.set_vmi_phase("default", name, "Running");
    assert!(json_patch(
        h,
        "vmi",
        name,
        &json!([{"op": "add", "path": "/status/selinuxContext", "value": "none"}])
    ));
    launcher
}

/// Adds hotplugged volume `volume` on `claim` to the VM's template and to its running VMI, as
/// `virtctl addvolume` and the VM controller's declarative hotplug do (the VMI is patched
/// unless the VM controller already carried the volume over).
fn add_volume(h: &Harness, name: &str, volume: &str, claim: &str) {
    let v = json!({"name": volume, "persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}});
    let d = json!({"name": volume, "serial": volume, "disk": {"bus": "scsi"}});
    assert!(json_patch(
        h,
        "vm",
        name,
        &json!([{"op": "add", "path": "/spec/template/spec/volumes/-", "value": v},
                {"op": "add", "path": "/spec/template/spec/domain/devices/disks/-", "value": d}])
    ));
    h.wait_for("the volume in the VMI's spec", T, || {
        let vmi = h.get("vmi", "default", name)?;
        let volumes = vmi["spec"]["volumes"].clone();
        if volumes.as_array()?.iter().any(|x| x["name"] == volume) {
            return Some(());
        }
        let disks = vmi["spec"]["domain"]["devices"]["disks"].clone();
        let mut new_volumes = volumes.as_array()?.clone();
        new_volumes.push(v.clone());
        let mut new_disks = disks.as_array()?.clone();
        new_disks.push(d.clone());
        json_patch(
            h,
            "vmi",
            name,
            &json!([{"op": "test", "path": "/spec/volumes", "value": volumes},
                    {"op": "replace", "path": "/spec/volumes", "value": new_volumes},
                    {"op": "test", "path": "/spec/domain/devices/disks", "value": disks},
                    {"op": "replace", "path": "/spec/domain/devices/disks", "value": new_disks}]),
        )
        .then_some(())
    });
}

/// Removes volume `volume` (and its disk) from the VM's template and from the VMI.
fn remove_volume(h: &Harness, name: &str, volume: &str) {
    let drop_named = |list: &Value| -> Value {
        Value::Array(
            list.as_array()
                .into_iter()
                .flatten()
                .filter(|x| x["name"] != volume)
                .cloned()
                .collect(),
        )
    };
    for (kind, prefix) in [("vm", "/spec/template/spec"), ("vmi", "/spec")] {
        h.wait_for(&format!("{volume} removed from the {kind}"), T, || {
            let obj = h.get(kind, "default", name)?;
            let spec = obj.pointer(prefix)?;
            let (volumes, disks) = (spec["volumes"].clone(), spec["domain"]["devices"]["disks"].clone());
            if !volumes.as_array()?.iter().any(|x| x["name"] == volume)
                && !disks.as_array()?.iter().any(|x| x["name"] == volume)
            {
                return Some(());
            }
            json_patch(
                h,
                kind,
                name,
                &json!([{"op": "test", "path": format!("{prefix}/volumes"), "value": volumes},
                        {"op": "replace", "path": format!("{prefix}/volumes"), "value": drop_named(&volumes)},
                        {"op": "test", "path": format!("{prefix}/domain/devices/disks"), "value": disks},
                        {"op": "replace", "path": format!("{prefix}/domain/devices/disks"), "value": drop_named(&disks)}]),
            )
            .then_some(())
        });
    }
}

fn attachment_pods(h: &Harness) -> Vec<Value> {
    h.list("pods", "default", "kubevirt.io=hotplug-disk")
}

/// The VMI's volume status entry of `volume`.
fn volume_status(h: &Harness, name: &str, volume: &str) -> Option<Value> {
    let vmi = h.get("vmi", "default", name)?;
    vmi["status"]["volumeStatus"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == volume)
        .cloned()
}

#[test]
fn a_hotplugged_claim_gets_an_attachment_pod_and_loses_it_when_removed() {
    let mut h = Harness::start();
    h.start_controller("a", &[]);
    let launcher_name = running_vmi(&h, "hp", "node01");
    let launcher = h
        .get("pod", "default", &launcher_name)
        .expect("the launcher pod");

    // 1. A claim that does not exist: KubeVirt's Pending entry, no attachment pod.
    add_volume(&h, "hp", "missing", "nosuch");
    let entry = h.wait_for("the Pending entry of the missing claim", T, || {
        volume_status(&h, "hp", "missing").filter(|e| e["phase"] == "Pending")
    });
    assert_eq!(entry["reason"], "FailedPvcNotFound", "{entry:#}");
    assert_eq!(entry["message"], "PVC nosuch not found");
    assert_eq!(entry["hotplugVolume"], json!({}));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        attachment_pods(&h).is_empty(),
        "no attachment pod without the claim"
    );
    remove_volume(&h, "hp", "missing");
    h.wait_for("the missing claim's entry gone", T, || {
        volume_status(&h, "hp", "missing").is_none().then_some(())
    });

    // 2. A bound claim: the attachment pod, as KubeVirt renders it.
    bound_claim(&h, "hp-claim");
    add_volume(&h, "hp", "hp1", "hp-claim");
    let pod = h.wait_for("the attachment pod", T, || {
        attachment_pods(&h).into_iter().next()
    });
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    assert!(pod_name.starts_with("hp-volume-"), "{pod_name}");
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": launcher_name,
                "uid": launcher["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
    );
    let spec = &pod["spec"];
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"],
        json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node01"]}])
    );
    let claims: Vec<(&str, &str)> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| {
            Some((
                v["name"].as_str()?,
                v["persistentVolumeClaim"]["claimName"].as_str()?,
            ))
        })
        .collect();
    assert_eq!(claims, [("hp1", "hp-claim")]);
    let container = &spec["containers"][0];
    assert_eq!(container["name"], "hotplug-disk");
    assert_eq!(
        container["command"],
        json!([
            "/bin/sh",
            "-c",
            "/usr/bin/container-disk --copy-path /path/hp"
        ])
    );
    assert!(
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "hp1", "mountPath": "/hp1"})),
        "{container:#}"
    );
    assert_eq!(spec["terminationGracePeriodSeconds"], 0);
    // Seen but not running yet: AttachedToNode, named, without the UID virt-handler mounts from.
    let entry = h.wait_for("the entry AttachedToNode", T, || {
        volume_status(&h, "hp", "hp1").filter(|e| e["phase"] == "AttachedToNode")
    });
    assert_eq!(
        entry["hotplugVolume"],
        json!({"attachPodName": pod_name}),
        "{entry:#}"
    );
    assert_eq!(entry["persistentVolumeClaimInfo"]["claimName"], "hp-claim");
    // The kubelet runs it: the entry gets the pod's UID.
    h.run_pod("default", &pod_name, "node01");
    let pod_uid = h.get("pod", "default", &pod_name).unwrap()["metadata"]["uid"].clone();
    let entry = h.wait_for("the entry with the pod's UID", T, || {
        volume_status(&h, "hp", "hp1").filter(|e| !e["hotplugVolume"]["attachPodUID"].is_null())
    });
    assert_eq!(
        entry,
        json!({"name": "hp1", "target": "", "phase": "AttachedToNode", "reason": "SuccessfulCreate",
               "message": format!("Created hotplug attachment pod {pod_name}, for volume hp1"),
               "hotplugVolume": {"attachPodName": pod_name, "attachPodUID": pod_uid},
               "persistentVolumeClaimInfo": entry["persistentVolumeClaimInfo"].clone()})
    );
    assert_eq!(attachment_pods(&h).len(), 1, "one pod for the set");

    // 3. Removed from the spec: the pod is deleted, then the entry goes.
    remove_volume(&h, "hp", "hp1");
    h.wait_for("the attachment pod deleted", T, || {
        match h.get("pod", "default", &pod_name) {
            None => Some(()),
            Some(p) if !p["metadata"]["deletionTimestamp"].is_null() => {
                // Plays the kubelet: the container has stopped.
                let _ = h.cluster.kubectl([
                    "delete",
                    "pod",
                    "-n",
                    "default",
                    &pod_name,
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                ]);
                None
            }
            Some(_) => None,
        }
    });
    h.wait_for("the entry gone", T, || {
        volume_status(&h, "hp", "hp1").is_none().then_some(())
    });
    // The rest of the VMI's volumes are untouched, and its launcher pod stays.
    assert!(volume_status(&h, "hp", "root").is_some());
    assert!(h.get("pod", "default", &launcher_name).is_some());
    let events = h.list("events", "default", "");
    let reasons: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["involvedObject"]["name"] == "hp")
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for want in [
        (
            "SuccessfulCreate",
            format!("Created attachment pod {pod_name}"),
        ),
        (
            "SuccessfulDelete",
            format!("Deleted attachment pod {pod_name}"),
        ),
    ] {
        assert!(
            reasons.iter().any(|(r, m)| r == want.0 && *m == want.1),
            "{want:?} in {reasons:?}"
        );
    }
}
