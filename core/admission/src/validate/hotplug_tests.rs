use serde_json::{Value, json};

use super::*;

/// A running VMI with one permanent volume `root` (reported without `hotplugVolume`).
fn running(extra_volumes: Value, extra_disks: Value) -> VirtualMachineInstance {
    let mut volumes = vec![json!({"name": "root", "containerDisk": {"image": "img"}})];
    volumes.extend(extra_volumes.as_array().cloned().unwrap_or_default());
    let mut disks = vec![json!({"name": "root", "disk": {"bus": "virtio"}})];
    disks.extend(extra_disks.as_array().cloned().unwrap_or_default());
    serde_json::from_value(json!({
        "metadata": {"name": "v", "namespace": "ns"},
        "spec": {"domain": {"devices": {"disks": disks}}, "volumes": volumes},
        "status": {"phase": "Running", "volumeStatus": [{"name": "root", "target": "vda"}]},
    }))
    .unwrap()
}

fn hot_volume(name: &str, claim: &str) -> Value {
    json!({"name": name, "persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}})
}

fn hot_disk(name: &str, bus: &str) -> Value {
    json!({"name": name, "serial": name, "disk": {"bus": bus}})
}

fn check(old: &VirtualMachineInstance, new: &VirtualMachineInstance) -> Option<String> {
    admit_hotplug_storage(old, new, &ClusterConfig::default())
}

#[test]
fn adding_and_removing_a_hotplug_volume_is_accepted() {
    let old = running(json!([]), json!([]));
    let new = running(
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data", "scsi")]),
    );
    assert_eq!(check(&old, &new), None);
    assert_eq!(check(&new, &old), None);
}

#[test]
fn a_new_hotplug_disk_needs_scsi_or_virtio() {
    let old = running(json!([]), json!([]));
    let new = running(
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data", "sata")]),
    );
    assert_eq!(
        check(&old, &new).as_deref(),
        Some(
            "Hotplug configuration for disk [data] requires bus to be 'scsi' or 'virtio'. [sata] is not permitted."
        )
    );
    let lun = running(
        json!([hot_volume("data", "c1")]),
        json!([{"name": "data", "lun": {"bus": "virtio"}}]),
    );
    assert_eq!(
        check(&old, &lun).as_deref(),
        Some(
            "Hotplug configuration for LUN [data] requires bus to be 'scsi'. [virtio] is not permitted."
        )
    );
}

#[test]
fn a_new_volume_must_be_a_claim_and_have_a_disk() {
    let old = running(json!([]), json!([]));
    let no_disk = running(json!([hot_volume("data", "c1")]), json!([]));
    assert_eq!(
        check(&old, &no_disk).as_deref(),
        Some("mismatch between volumes declared (2) and required (1)")
    );
    let not_claim = running(
        json!([{"name": "data", "emptyDisk": {"capacity": "1Gi"}}]),
        json!([hot_disk("data", "scsi")]),
    );
    assert_eq!(
        check(&old, &not_claim).as_deref(),
        Some("volume data is not a PVC or DataVolume")
    );
}

#[test]
fn permanent_volumes_and_disks_stay() {
    let old = running(json!([]), json!([]));
    let mut changed = old.clone();
    changed.spec.volumes.as_mut().unwrap()[0] =
        serde_json::from_value(json!({"name": "root", "containerDisk": {"image": "other"}}))
            .unwrap();
    assert_eq!(
        check(&old, &changed).as_deref(),
        Some("permanent volume root, changed")
    );
    let mut disk = old.clone();
    disk.spec.domain.devices.disks.as_mut().unwrap()[0] =
        serde_json::from_value(json!({"name": "root", "disk": {"bus": "sata"}})).unwrap();
    assert_eq!(
        check(&old, &disk).as_deref(),
        Some("permanent disk root, changed")
    );
    let mut removed = old.clone();
    removed.spec.volumes = Some(vec![]);
    removed.spec.domain.devices.disks = Some(vec![]);
    assert_eq!(
        check(&old, &removed).as_deref(),
        Some("Number of permanent volumes has changed")
    );
}

#[test]
fn an_attached_hotplug_volume_does_not_change() {
    let old = running(
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data", "scsi")]),
    );
    let other_claim = running(
        json!([hot_volume("data", "c2")]),
        json!([hot_disk("data", "scsi")]),
    );
    assert_eq!(
        check(&old, &other_claim).as_deref(),
        Some("hotplug volume data, changed")
    );
    let other_disk = running(
        json!([hot_volume("data", "c1")]),
        json!([hot_disk("data", "virtio")]),
    );
    assert_eq!(
        check(&old, &other_disk).as_deref(),
        Some("hotplug disk data, changed")
    );
}
