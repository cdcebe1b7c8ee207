use serde_json::{Value, json};

use super::*;

const NOW: Now = Now::from_unix(1_700_000_000);

/// A VM with a container disk `root` and the PVC volume `data` in its template, Ready as
/// `ready` says, with `requests` in its status.
fn vm(requests: Value) -> VirtualMachine {
    serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "ns"},
        "spec": {
            "runStrategy": "Always",
            "template": {"spec": {
                "domain": {
                    "devices": {"disks": [
                        {"name": "root", "disk": {"bus": "virtio"}},
                        {"name": "data", "disk": {"bus": "virtio"}},
                    ]},
                    "resources": {"requests": {"memory": "128Mi"}},
                },
                "volumes": [
                    {"name": "root", "containerDisk": {"image": "img"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
                ],
            }},
        },
        "status": {"ready": true, "volumeRequests": requests},
    }))
    .unwrap()
}

/// The VM's running VMI (its spec the template's), with `status`.
fn vmi(status: Value) -> VirtualMachineInstance {
    let template = serde_json::to_value(vm(json!([])).spec.template.spec).unwrap();
    serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "ns"},
        "spec": template,
        "status": status,
    }))
    .unwrap()
}

fn add(name: &str, claim: &str, bus: &str) -> Value {
    json!({"addVolumeOptions": {
        "name": name,
        "disk": {"name": name, "disk": {"bus": bus}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}},
    }})
}

fn remove(name: &str) -> Value {
    json!({"removeVolumeOptions": {"name": name}})
}

fn check(requests: Value, running: Option<&VirtualMachineInstance>) -> Vec<Cause> {
    validate_volume_requests(&vm(requests), running, &ClusterConfig::default(), NOW)
}

/// The one cause KubeVirt returns, as (type, field, message).
fn only(causes: Vec<Cause>) -> (&'static str, String, String) {
    assert_eq!(causes.len(), 1, "{causes:?}");
    let c = causes.into_iter().next().unwrap();
    (c.kind.as_str(), c.field, c.message)
}

fn invalid(message: &str) -> (&'static str, String, String) {
    (
        "FieldValueInvalid",
        "Status.volumeRequests".into(),
        message.into(),
    )
}

#[test]
fn no_requests_and_valid_requests_are_admitted() {
    assert!(check(json!([]), None).is_empty());
    let running = vmi(json!({}));
    let requests = json!([add("hot", "hot-claim", "scsi"), remove("data")]);
    assert!(check(requests.clone(), None).is_empty());
    assert!(check(requests, Some(&running)).is_empty());
    // An add and a remove of the same name are two different requests.
    assert!(check(json!([add("hot", "c", "virtio"), remove("hot")]), None).is_empty());
}

#[test]
fn both_or_neither_options_are_refused() {
    let mut both = add("hot", "c", "scsi");
    both["removeVolumeOptions"] = json!({"name": "hot"});
    assert_eq!(
        only(check(json!([both]), None)),
        invalid(
            "VolumeRequests require either addVolumeOptions or removeVolumeOptions to be set, not both"
        )
    );
    assert_eq!(
        only(check(json!([{}]), None)),
        invalid(
            "VolumeRequests require one of either addVolumeOptions or removeVolumeOptions to be set"
        )
    );
}

#[test]
fn duplicate_requests_are_refused_with_kubevirts_spelling() {
    let twice = json!([add("hot", "c1", "scsi"), add("hot", "c2", "scsi")]);
    assert_eq!(
        only(check(twice, None)),
        invalid("AddVolume request for [hot] aleady exists")
    );
    let twice = json!([remove("data"), remove("data")]);
    assert_eq!(
        only(check(twice, None)),
        invalid("RemoveVolume request for [data] aleady exists")
    );
}

#[test]
fn the_hotplug_disk_configuration_is_checked() {
    assert_eq!(
        only(check(json!([add("hot", "c", "sata")]), None)),
        invalid(
            "AddVolume request for disk [hot] requires bus to be 'scsi' or 'virtio'. [sata] is not permitted."
        )
    );
    let mut cdrom = add("hot", "c", "scsi");
    cdrom["addVolumeOptions"]["disk"] = json!({"name": "hot", "cdrom": {"bus": "scsi"}});
    assert_eq!(
        only(check(json!([cdrom]), None)),
        invalid(
            "AddVolume request for [hot] requires diskDevice of type 'disk' or 'lun' to be used."
        )
    );
    let mut lun = add("hot", "c", "scsi");
    lun["addVolumeOptions"]["disk"] = json!({"name": "hot", "lun": {"bus": "virtio"}});
    assert_eq!(
        only(check(json!([lun]), None)),
        invalid(
            "AddVolume request for LUN [hot] requires bus to be 'scsi'. [virtio] is not permitted."
        )
    );
    let mut io = add("hot", "c", "scsi");
    io["addVolumeOptions"]["disk"]["dedicatedIOThread"] = json!(true);
    assert_eq!(
        only(check(json!([io]), None)),
        invalid("AddVolume request for [hot] requires virtio bus for IOThreads.")
    );
    let mut boot = add("hot", "c", "virtio");
    boot["addVolumeOptions"]["disk"]["bootOrder"] = json!(0);
    assert_eq!(
        only(check(json!([boot]), None)),
        (
            "FieldValueInvalid",
            "spec.domain.devices.disks[1].bootOrder".into(),
            "spec.domain.devices.disks[1] must have a boot order > 0, if supplied".into()
        )
    );
}

#[test]
fn an_add_conflicting_with_a_template_volume_is_refused() {
    assert_eq!(
        only(check(json!([add("data", "other-claim", "scsi")]), None)),
        invalid(
            "AddVolume request for [data] conflicts with an existing volume of the same name on the vmi template."
        )
    );
    // The same volume as the template's (already applied) is no conflict.
    let mut same = add("data", "data-claim", "scsi");
    same["addVolumeOptions"]["volumeSource"]["persistentVolumeClaim"]["hotpluggable"] =
        json!(false);
    assert!(check(json!([same]), None).is_empty());
}

#[test]
fn an_add_conflicting_with_the_running_vmis_volume_is_refused() {
    let mut running = vmi(json!({}));
    running.spec.volumes.as_mut().unwrap().push(
        serde_json::from_value(json!({"name": "hot", "dataVolume": {"name": "dv"}})).unwrap(),
    );
    assert_eq!(
        only(check(json!([add("hot", "c", "scsi")]), Some(&running))),
        invalid(
            "AddVolume request for [hot] conflicts with an existing volume of the same name on currently running vmi"
        )
    );
    // Without the VMI (VM not Ready) the same request is fine.
    assert!(check(json!([add("hot", "c", "scsi")]), None).is_empty());
}

#[test]
fn the_template_with_the_requests_applied_is_validated_as_a_vmi_spec() {
    // Two hotplugged disks with the same boot order are refused by the VMI rules.
    let mut a = add("a", "ca", "virtio");
    a["addVolumeOptions"]["disk"]["bootOrder"] = json!(1);
    let mut b = add("b", "cb", "virtio");
    b["addVolumeOptions"]["disk"]["bootOrder"] = json!(1);
    let field = "spec.template.spec.domain.devices.disks[3].bootOrder";
    assert_eq!(
        only(check(json!([a, b]), None)),
        (
            "FieldValueInvalid",
            field.into(),
            format!("Boot order for {field} already set for a different device.")
        )
    );
    // The running VMI is checked too: its own disk with boot order 1 clashes with the added one.
    let mut running = vmi(json!({}));
    running.spec.domain.devices.disks.as_mut().unwrap()[0].boot_order = Some(1);
    let mut one = add("a", "ca", "virtio");
    one["addVolumeOptions"]["disk"]["bootOrder"] = json!(1);
    assert!(check(json!([one.clone()]), None).is_empty());
    let field = "spec.template.spec.domain.devices.disks[2].bootOrder";
    assert_eq!(
        only(check(json!([one]), Some(&running))),
        (
            "FieldValueInvalid",
            field.into(),
            format!("Boot order for {field} already set for a different device.")
        )
    );
}

#[test]
fn requests_during_a_migration_are_refused() {
    let migrating = vmi(json!({"migrationState": {"startTimestamp": "2023-11-14T22:00:00Z"}}));
    let (kind, field, message) = only(check(json!([remove("data")]), Some(&migrating)));
    assert_eq!(
        (kind, field.as_str(), message.as_str()),
        (
            "FieldValueNotSupported",
            "spec",
            "Cannot handle volume requests while VMI migration is in progress"
        )
    );
    let ended = vmi(json!({"migrationState": {
        "startTimestamp": "2023-11-14T22:00:00Z", "endTimestamp": "2023-11-14T22:05:00Z"}}));
    assert!(check(json!([remove("data")]), Some(&ended)).is_empty());
    // A start after `now` has not begun yet.
    let later = vmi(json!({"migrationState": {"startTimestamp": "2030-01-01T00:00:00Z"}}));
    assert!(check(json!([remove("data")]), Some(&later)).is_empty());
    // Without the VMI nothing is known about a migration.
    assert!(check(json!([remove("data")]), None).is_empty());
}
