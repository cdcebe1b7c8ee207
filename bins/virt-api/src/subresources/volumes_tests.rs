use serde_json::{Value, json};

use super::*;

const DECLARATIVE: Gates = Gates {
    hotplug_volumes: false,
    declarative: true,
};
const LEGACY: Gates = Gates {
    hotplug_volumes: true,
    declarative: true,
};

fn add_body(name: &str, claim: &str) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"name": name, "disk": {"disk": {"bus": "scsi"}, "serial": name},
        "volumeSource": {"persistentVolumeClaim": {"claimName": claim}}}),
    )
    .unwrap()
}

fn add(name: &str, claim: &str) -> VolumeRequest {
    VolumeRequest::read("addvolume", "PUT", &add_body(name, claim), DECLARATIVE)
        .unwrap()
        .unwrap()
}

fn remove(name: &str) -> VolumeRequest {
    let body = serde_json::to_vec(&json!({ "name": name })).unwrap();
    VolumeRequest::read("removevolume", "PUT", &body, DECLARATIVE)
        .unwrap()
        .unwrap()
}

fn vm_with(volumes: Value, disks: Value) -> Value {
    json!({"metadata": {"name": "vm1", "namespace": "ns"},
        "spec": {"template": {"spec": {"domain": {"devices": {"disks": disks}}, "volumes": volumes}}}})
}

fn root_vm() -> Value {
    vm_with(
        json!([{"name": "root", "containerDisk": {"image": "img"}}]),
        json!([{"name": "root", "disk": {"bus": "virtio"}}]),
    )
}

fn read_err(sub: &str, method: &str, body: &[u8], gates: Gates) -> ApiError {
    VolumeRequest::read(sub, method, body, gates)
        .unwrap()
        .unwrap_err()
}

#[test]
fn other_subresources_are_not_volume_requests() {
    assert!(VolumeRequest::read("start", "PUT", b"", DECLARATIVE).is_none());
}

#[test]
fn refusals_before_anything_is_read() {
    assert_eq!(read_err("addvolume", "GET", b"", DECLARATIVE).code, 405);
    let off = read_err("addvolume", "PUT", &add_body("a", "c"), Gates::default());
    assert_eq!((off.code, off.message.as_str()), (400, NOT_ENABLED));
    let off = read_err("removevolume", "PUT", br#"{"name":"a"}"#, Gates::default());
    assert_eq!((off.code, off.message.as_str()), (400, NOT_ENABLED));
    let garbage = read_err("addvolume", "PUT", b"{x", DECLARATIVE);
    assert_eq!(garbage.code, 400);
    assert!(
        garbage
            .message
            .starts_with("Can not unmarshal Request body to struct")
    );
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "addvolume",
            br#"{"disk":{},"volumeSource":{}}"#,
            "AddVolumeOptions requires name to be set",
        ),
        (
            "addvolume",
            br#"{"name":"v","volumeSource":{}}"#,
            "AddVolumeOptions requires disk to not be nil",
        ),
        (
            "addvolume",
            br#"{"name":"v","disk":{}}"#,
            "AddVolumeOptions requires VolumeSource to not be nil",
        ),
        (
            "removevolume",
            b"",
            "RemoveVolumeOptions requires name to be set",
        ),
        (
            "removevolume",
            br#"{"name":""}"#,
            "RemoveVolumeOptions requires name to be set",
        ),
    ];
    for (sub, body, message) in cases {
        let e = read_err(sub, "PUT", body, DECLARATIVE);
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, message),
            "{sub} {body:?}"
        );
    }
    assert_eq!(
        read_err(
            "addvolume",
            "PUT",
            br#"{"name":"v","disk":3,"volumeSource":{}}"#,
            DECLARATIVE
        )
        .code,
        400
    );
}

#[test]
fn an_added_volume_is_named_and_hotpluggable() {
    let VolumeRequest::Add(o) = add("data", "claim1") else {
        panic!("not an add")
    };
    assert_eq!(o.disk.as_ref().unwrap()["name"], "data");
    assert_eq!(
        o.volume_source.as_ref().unwrap()["persistentVolumeClaim"]["hotpluggable"],
        true
    );
}

#[test]
fn vm_addvolume_patches_the_template_with_tests() {
    let vm = root_vm();
    let op = vm_patch(&vm, &add("data", "claim1"), DECLARATIVE).unwrap();
    assert_eq!(op.target, Target::Vm);
    let spec = &vm["spec"]["template"]["spec"];
    assert_eq!(
        op.patch,
        json!([
            {"op": "test", "path": "/spec/template/spec/volumes", "value": spec["volumes"]},
            {"op": "test", "path": "/spec/template/spec/domain/devices/disks", "value": spec["domain"]["devices"]["disks"]},
            {"op": "replace", "path": "/spec/template/spec/volumes", "value": [
                spec["volumes"][0],
                {"name": "data", "persistentVolumeClaim": {"claimName": "claim1", "hotpluggable": true}}]},
            {"op": "replace", "path": "/spec/template/spec/domain/devices/disks", "value": [
                spec["domain"]["devices"]["disks"][0],
                {"name": "data", "serial": "data", "disk": {"bus": "scsi"}}]},
        ])
    );
}

#[test]
fn the_first_volume_is_added_and_an_absent_list_tested_as_null() {
    let vm = json!({"metadata": {"name": "vm1"}, "spec": {"template": {"spec": {"domain": {"devices": {}}}}}});
    let op = vm_patch(&vm, &add("data", "claim1"), DECLARATIVE).unwrap();
    assert_eq!(op.patch[0]["value"], Value::Null);
    assert_eq!(op.patch[2]["op"], "add");
    assert_eq!(op.patch[3]["op"], "add");
    assert_eq!(op.patch[3]["value"][0]["name"], "data");
}

#[test]
fn an_attached_name_or_source_is_a_conflict() {
    let vm = root_vm();
    let (attached, _) = apply(
        vm["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap(),
        &[],
        &add("data", "claim1"),
    );
    let vm = vm_with(Value::Array(attached), json!([]));
    let same_name = vm_patch(&vm, &add("data", "claim2"), DECLARATIVE).unwrap_err();
    assert_eq!(same_name.code, 409);
    assert_eq!(
        same_name.message,
        "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": Unable to add volume [data] because volume with that name already exists"
    );
    let same_claim = vm_patch(&vm, &add("other", "claim1"), DECLARATIVE).unwrap_err();
    assert_eq!(
        same_claim.message,
        "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": Unable to add volume source [claim1] because it already exists"
    );
}

#[test]
fn remove_needs_an_existing_hotpluggable_volume() {
    let vm = root_vm();
    let absent = vm_patch(&vm, &remove("data"), DECLARATIVE).unwrap_err();
    assert_eq!(absent.code, 409);
    assert!(
        absent
            .message
            .ends_with("Unable to remove volume [data] because it does not exist")
    );
    let fixed = vm_patch(&vm, &remove("root"), DECLARATIVE).unwrap_err();
    assert!(
        fixed
            .message
            .ends_with("Unable to remove volume [root] because it is not hotpluggable")
    );
}

#[test]
fn remove_drops_the_volume_and_its_disk_by_name() {
    let vm = root_vm();
    let added = vm_patch(&vm, &add("data", "claim1"), DECLARATIVE).unwrap();
    let vm = vm_with(
        added.patch[2]["value"].clone(),
        added.patch[3]["value"].clone(),
    );
    let op = vm_patch(&vm, &remove("data"), DECLARATIVE).unwrap();
    assert_eq!(
        op.patch[2]["value"],
        root_vm()["spec"]["template"]["spec"]["volumes"]
    );
    assert_eq!(
        op.patch[3]["value"],
        root_vm()["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
    );
    // Found by its claim's name (KubeVirt's check), but removed by name only: nothing changes.
    let by_claim = vm_patch(&vm, &remove("claim1"), DECLARATIVE).unwrap();
    assert_eq!(
        by_claim.patch[2]["value"],
        vm["spec"]["template"]["spec"]["volumes"]
    );
}

#[test]
fn legacy_gate_writes_volume_requests_to_the_status() {
    let vm = root_vm();
    let request = add("data", "claim1");
    let op = vm_patch(&vm, &request, LEGACY).unwrap();
    assert_eq!(op.target, Target::VmStatus);
    assert_eq!(
        op.patch[0],
        json!({"op": "test", "path": "/status/volumeRequests", "value": null})
    );
    assert_eq!(op.patch[1]["op"], "add");
    let entry = &op.patch[1]["value"][0]["addVolumeOptions"];
    assert_eq!(entry["name"], "data");
    assert_eq!(
        entry["volumeSource"]["persistentVolumeClaim"]["hotpluggable"],
        true
    );

    let mut pending = vm.clone();
    pending["status"] = json!({"volumeRequests": op.patch[1]["value"]});
    let again = vm_patch(&pending, &request, LEGACY).unwrap_err();
    assert!(
        again
            .message
            .ends_with("add volume request for volume [data] already exists")
    );
    // A remove of a pending add replaces it; the add is gone from the list.
    let mut with_volume = pending.clone();
    with_volume["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "persistentVolumeClaim": {"claimName": "claim1", "hotpluggable": true}}));
    let op = vm_patch(&with_volume, &remove("data"), LEGACY).unwrap();
    assert_eq!(op.patch[1]["op"], "replace");
    assert_eq!(
        op.patch[1]["value"],
        json!([{"removeVolumeOptions": {"name": "data"}}])
    );
    with_volume["status"]["volumeRequests"] = op.patch[1]["value"].clone();
    let twice = vm_patch(&with_volume, &remove("data"), LEGACY).unwrap_err();
    assert!(twice.message.ends_with(
        "a remove volume request for volume [data] already exists and is still being processed"
    ));
    let add_back = vm_patch(
        &root_vm_with_status(&with_volume),
        &add("data", "claim9"),
        LEGACY,
    );
    assert!(add_back.unwrap_err().message.ends_with(
        "unable to add volume since a remove volume request for volume [data] already exists and is still being processed"
    ));
}

fn root_vm_with_status(vm: &Value) -> Value {
    let mut v = root_vm();
    v["status"] = vm["status"].clone();
    v
}

fn vmi(phase: &str, owned: bool) -> Value {
    let mut v = json!({"metadata": {"name": "vmi1", "namespace": "ns"},
        "spec": {"domain": {"devices": {"disks": [{"name": "root", "disk": {}}]}},
            "volumes": [{"name": "root", "containerDisk": {"image": "i"}}]},
        "status": {"phase": phase}});
    if owned {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine", "name": "vmi1", "uid": "u", "controller": true}]);
    }
    v
}

#[test]
fn vmi_addvolume_patches_the_vmi_spec() {
    let op = vmi_patch(&vmi("Running", false), &add("data", "claim1"), DECLARATIVE).unwrap();
    assert_eq!(op.target, Target::Vmi);
    assert_eq!(op.patch[0]["path"], "/spec/volumes");
    assert_eq!(op.patch[3]["path"], "/spec/domain/devices/disks");
    assert_eq!(
        op.patch[2]["value"][1]["persistentVolumeClaim"]["hotpluggable"],
        true
    );
}

#[test]
fn vmi_refusals() {
    let owned = vmi_patch(&vmi("Running", true), &add("data", "c"), DECLARATIVE).unwrap_err();
    assert_eq!(
        (owned.code, owned.message.as_str()),
        (400, "VMI ns/vmi1 is owned by a VM")
    );
    assert!(vmi_patch(&vmi("Running", true), &add("data", "c"), LEGACY).is_ok());
    let stopped = vmi_patch(&vmi("Scheduled", false), &add("data", "c"), DECLARATIVE).unwrap_err();
    assert_eq!(
        (stopped.code, stopped.message.as_str()),
        (
            409,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vmi1\": VMI is not running"
        )
    );
    let fixed = vmi_patch(&vmi("Running", false), &remove("root"), DECLARATIVE).unwrap_err();
    assert_eq!(fixed.code, 409);
}

#[test]
fn dry_run_reads_the_first_entry() {
    let body = br#"{"name":"a","dryRun":["All"]}"#;
    let r = VolumeRequest::read("removevolume", "PUT", body, DECLARATIVE)
        .unwrap()
        .unwrap();
    assert!(r.dry_run());
    assert!(!remove("a").dry_run());
}

#[test]
fn patch_failures_are_kubevirts() {
    assert_eq!(patch_failure(Target::Vm, 422, "bad").code, 422);
    let e = patch_failure(Target::Vmi, 409, "test failed");
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            500,
            "Internal error occurred: unable to patch vmi: test failed"
        )
    );
}
