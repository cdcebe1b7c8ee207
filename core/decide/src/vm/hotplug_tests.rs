use serde_json::{Value, json};

use super::super::{PendingExpectations, VmWorld, decide_vm};
use super::*;
use crate::ClusterConfig;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::{Now, WriteOp};

include!("fixtures.rs");

fn hot_volume(name: &str, claim: &str) -> Value {
    json!({"name": name, "persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}})
}

fn hot_disk(name: &str) -> Value {
    json!({"name": name, "serial": name, "disk": {"bus": "scsi"}})
}

/// A running VM (`Always`) whose template has `root` plus `volumes` / `disks`.
fn running_vm(volumes: Value, disks: Value, status: Value) -> VirtualMachine {
    let mut v = serde_json::to_value(vm(Some("Always"), None, status)).unwrap();
    let spec = &mut v["spec"]["template"]["spec"];
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .extend(volumes.as_array().cloned().unwrap_or_default());
    spec["domain"]["devices"]["disks"] = disks;
    serde_json::from_value(v).unwrap()
}

/// Its VMI in `phase` with `root` plus `volumes` / `disks`, and volume statuses for `statuses`.
fn vmi_with(
    phase: &str,
    volumes: Value,
    disks: Value,
    statuses: &[&str],
) -> VirtualMachineInstance {
    let mut v = serde_json::to_value(vmi(phase, phase == "Running")).unwrap();
    let mut all = vec![json!({"name": "root", "containerDisk": {"image": "img"}})];
    all.extend(volumes.as_array().cloned().unwrap_or_default());
    v["spec"]["volumes"] = Value::Array(all);
    v["spec"]["domain"]["devices"]["disks"] = disks;
    v["status"]["volumeStatus"] = statuses
        .iter()
        .map(|n| json!({"name": n, "target": ""}))
        .collect();
    serde_json::from_value(v).unwrap()
}

/// The JSON patches of the VMI in the decision.
fn vmi_patches(
    vm: &VirtualMachine,
    vmi: &VirtualMachineInstance,
    cfg: &ClusterConfig,
) -> Vec<Value> {
    let d = decide_vm(&world(vm, Some(vmi), cfg));
    d.plan
        .writes()
        .filter(|w| w.resource == "virtualmachineinstances")
        .filter_map(|w| match &w.op {
            WriteOp::Patch { patch, .. } => Some(patch.clone()),
            _ => None,
        })
        .filter(|p| p[0]["path"] == "/spec/volumes")
        .collect()
}

#[test]
fn a_template_hotplug_volume_is_added_to_the_running_vmi() {
    let cfg = ClusterConfig::default();
    let vm = running_vm(
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data")]),
        json!({}),
    );
    let vmi = vmi_with("Running", json!([]), json!([]), &["root"]);
    let patches = vmi_patches(&vm, &vmi, &cfg);
    assert_eq!(
        patches,
        vec![json!([
            {"op": "test", "path": "/spec/volumes", "value": [{"name": "root", "containerDisk": {"image": "img"}}]},
            {"op": "test", "path": "/spec/domain/devices/disks", "value": []},
            {"op": "replace", "path": "/spec/volumes", "value": [
                {"name": "root", "containerDisk": {"image": "img"}}, hot_volume("data", "c1")]},
            {"op": "add", "path": "/spec/domain/devices/disks", "value": [hot_disk("data")]},
        ])]
    );
}

#[test]
fn a_volume_gone_from_the_template_is_removed_from_the_vmi() {
    let cfg = ClusterConfig::default();
    let vm = running_vm(json!([]), json!([]), json!({}));
    let vmi = vmi_with(
        "Running",
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data")]),
        &["root", "data"],
    );
    let patches = vmi_patches(&vm, &vmi, &cfg);
    assert_eq!(patches.len(), 1);
    assert_eq!(
        patches[0][2],
        json!({"op": "replace", "path": "/spec/volumes", "value": [{"name": "root", "containerDisk": {"image": "img"}}]})
    );
    assert_eq!(
        patches[0][3],
        json!({"op": "replace", "path": "/spec/domain/devices/disks", "value": []})
    );
}

#[test]
fn nothing_to_carry_when_in_sync_unplugging_or_not_running() {
    let cfg = ClusterConfig::default();
    let vm = running_vm(
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data")]),
        json!({}),
    );
    let same = vmi_with(
        "Running",
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data")]),
        &["root", "data"],
    );
    assert!(vmi_patches(&vm, &same, &cfg).is_empty());
    // Still reported while being unplugged: not added back until the status lets it go.
    let unplugging = vmi_with("Running", json!([]), json!([]), &["root", "data"]);
    assert!(vmi_patches(&vm, &unplugging, &cfg).is_empty());
    let scheduled = vmi_with("Scheduled", json!([]), json!([]), &["root"]);
    assert!(vmi_patches(&vm, &scheduled, &cfg).is_empty());
    // With the legacy gate on, the template is not carried declaratively.
    let legacy = ClusterConfig::with_feature_gates("HotplugVolumes");
    let fresh = vmi_with("Running", json!([]), json!([]), &["root"]);
    assert!(vmi_patches(&vm, &fresh, &legacy).is_empty());
}

#[test]
fn a_changed_hotplug_volume_is_replaced_on_the_vmi() {
    let cfg = ClusterConfig::default();
    let vm = running_vm(
        json!([hot_volume("data", "c2")]),
        json!([hot_disk("data")]),
        json!({}),
    );
    let vmi = vmi_with(
        "Running",
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data")]),
        &["root", "data"],
    );
    // Removed first; re-added once the VMI no longer reports it (KubeVirt's two steps).
    let patches = vmi_patches(&vm, &vmi, &cfg);
    assert_eq!(patches[0][2]["value"].as_array().unwrap().len(), 1);
    assert_eq!(patches[0][3]["value"], json!([]));
}

#[test]
fn legacy_volume_requests_change_the_template_and_the_vmi() {
    let cfg = ClusterConfig::with_feature_gates("HotplugVolumes");
    let request = json!({"addVolumeOptions": {"name": "data", "disk": {"name": "data", "disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "c1", "hotpluggable": true}}}});
    let vm = running_vm(json!([]), json!([]), json!({"volumeRequests": [request]}));
    let vmi = vmi_with("Running", json!([]), json!([]), &["root"]);
    let d = decide_vm(&world(&vm, Some(&vmi), &cfg));
    let vm_patch = d
        .plan
        .writes()
        .find(|w| w.resource == "virtualmachines" && w.subresource.is_none())
        .expect("a VM patch");
    let WriteOp::Patch { patch, .. } = &vm_patch.op else {
        panic!("not a patch")
    };
    let ops = patch.as_array().unwrap();
    let volumes = ops
        .iter()
        .find(|o| o["path"] == "/spec/template/spec/volumes" && o["op"] == "replace")
        .unwrap();
    assert_eq!(volumes["value"][1], hot_volume("data", "c1"));
    let patches = vmi_patches(&vm, &vmi, &cfg);
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0][2]["value"][1], hot_volume("data", "c1"));
    assert_eq!(
        patches[0][3]["value"],
        json!([{"name": "data", "disk": {"bus": "scsi"}}])
    );
}

#[test]
fn a_legacy_request_the_vmi_refuses_is_a_sync_error() {
    let cfg = ClusterConfig::default();
    let request = json!({"addVolumeOptions": {"name": "data", "disk": {"name": "data", "disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "c1"}}}});
    let vm = running_vm(json!([]), json!([]), json!({"volumeRequests": [request]}));
    let vmi = vmi_with("Running", json!([]), json!([]), &["root"]);
    let d = decide_vm(&world(&vm, Some(&vmi), &cfg));
    let status = d.status.expect("a status write");
    let failure = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failure")
        .expect("a Failure condition");
    assert_eq!(failure["reason"], HOTPLUG_VOLUME_ERROR);
    assert_eq!(
        failure["message"],
        "Error encountered while handling volume hotplug requests: VMI default/vm1 is owned by a VM"
    );
}

fn spec(volumes: Value, disks: Value) -> VirtualMachineInstanceSpec {
    serde_json::from_value(json!({"domain": {"devices": {"disks": disks}}, "volumes": volumes}))
        .unwrap()
}

#[test]
fn only_hotplug_changes_are_live_updatable() {
    let root_v = json!({"name": "root", "containerDisk": {"image": "img"}});
    let root_d = json!({"name": "root", "disk": {"bus": "virtio"}});
    let started = spec(json!([root_v]), json!([root_d]));
    let plugged = spec(
        json!([root_v, hot_volume("data", "c1")]),
        json!([root_d, hot_disk("data")]),
    );
    assert_eq!(live_updatable(&started, &plugged, false), (true, true));
    assert_eq!(live_updatable(&plugged, &started, false), (true, true));
    let cold = spec(
        json!([root_v, {"name": "data", "persistentVolumeClaim": {"claimName": "c1"}}]),
        json!([root_d, hot_disk("data")]),
    );
    assert_eq!(live_updatable(&started, &cold, false), (false, false));
    let rebused = spec(
        json!([root_v]),
        json!([{"name": "root", "disk": {"bus": "sata"}}]),
    );
    assert_eq!(live_updatable(&started, &rebused, false), (true, false));
}

#[test]
fn done_volume_requests_are_trimmed_from_the_status() {
    let cfg = ClusterConfig::with_feature_gates("HotplugVolumes");
    let add = json!({"addVolumeOptions": {"name": "data", "disk": {"name": "data", "disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "c1"}}}});
    let remove = json!({"removeVolumeOptions": {"name": "gone"}});
    let vm = running_vm(
        json!([]),
        json!([]),
        json!({"volumeRequests": [add, remove]}),
    );
    let vmi = vmi_with("Running", json!([]), json!([]), &["root"]);
    let d = decide_vm(&world(&vm, Some(&vmi), &cfg));
    let status = d.status.expect("a status write");
    assert!(status.get("volumeRequests").is_none(), "{status}");
}
