//! The `Reference` policy's decisions: which ControllerRevisions a sync creates and how it
//! patches the VM's status.

use kvrs_api::VirtualMachine;
use kvrs_instancetype::revision::{RevisionError, store_plan};
use serde_json::{Value, json};

fn vm(v: Value) -> VirtualMachine {
    serde_json::from_value(v).unwrap()
}

fn u1() -> Value {
    json!({
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClusterInstancetype",
        "metadata": {"name": "u1.medium", "uid": "it-uid", "generation": 3,
                     "labels": {"a": "b"}, "annotations": {"c": "d"},
                     "managedFields": [{"manager": "kubectl"}], "resourceVersion": "77"},
        "spec": {"cpu": {"guest": 1}, "memory": {"guest": "4Gi"}},
    })
}

fn fedora() -> Value {
    json!({"kind": "VirtualMachineClusterPreference",
           "metadata": {"name": "fedora", "uid": "p-uid", "generation": 1},
           "spec": {"devices": {"preferredDiskBus": "virtio"}}})
}

fn the_vm(status: Value) -> VirtualMachine {
    vm(json!({
        "metadata": {"name": "web", "namespace": "prod", "uid": "vm-uid"},
        "spec": {"instancetype": {"name": "u1.medium"}, "preference": {"name": "fedora"},
                 "template": {"spec": {"domain": {"devices": {}}}}},
        "status": status,
    }))
}

#[test]
fn a_first_sync_stores_both_objects_and_names_them_in_the_status() {
    let plan = store_plan(&the_vm(json!({})), Some(&u1()), Some(&fedora())).unwrap();
    assert_eq!(plan.create.len(), 2);
    let it = &plan.create[0];
    assert_eq!(it["metadata"]["name"], "web-u1.medium-v1beta1-it-uid-3");
    assert_eq!(it["metadata"]["namespace"], "prod");
    assert_eq!(it["metadata"]["ownerReferences"][0]["uid"], "vm-uid");
    assert_eq!(it["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        it["metadata"]["labels"]["instancetype.kubevirt.io/object-name"],
        "u1.medium"
    );
    assert_eq!(
        it["metadata"]["labels"]["instancetype.kubevirt.io/object-generation"],
        "3"
    );
    assert_eq!(
        it["metadata"]["labels"]["instancetype.kubevirt.io/object-kind"],
        "VirtualMachineClusterInstancetype"
    );
    let data_meta = it["data"]["metadata"].as_object().unwrap();
    assert!(!data_meta.contains_key("labels") && !data_meta.contains_key("annotations"));
    assert!(!data_meta.contains_key("managedFields"));
    assert_eq!(
        data_meta["resourceVersion"], "77",
        "the rest of the metadata is kept"
    );
    assert_eq!(it["data"]["spec"]["memory"]["guest"], "4Gi");
    assert_eq!(
        plan.status_patch,
        vec![
            json!({"op": "add", "path": "/status/instancetypeRef", "value": {
                "name": "u1.medium", "controllerRevisionRef": {"name": "web-u1.medium-v1beta1-it-uid-3"}}}),
            json!({"op": "add", "path": "/status/preferenceRef", "value": {
                "name": "fedora", "controllerRevisionRef": {"name": "web-fedora-v1beta1-p-uid-1"}}}),
        ]
    );
}

#[test]
fn a_synced_vm_needs_nothing_and_a_renamed_reference_a_new_revision() {
    let status = json!({
        "instancetypeRef": {"name": "u1.medium", "controllerRevisionRef": {"name": "web-u1.medium-v1beta1-it-uid-3"}},
        "preferenceRef": {"name": "fedora", "controllerRevisionRef": {"name": "web-fedora-v1beta1-p-uid-1"}},
    });
    let plan = store_plan(&the_vm(status.clone()), None, None).unwrap();
    assert!(
        plan.create.is_empty() && plan.status_patch.is_empty(),
        "steady state writes nothing"
    );

    let mut renamed = the_vm(status);
    renamed.spec.instancetype.as_mut().unwrap().name = Some("u1.large".into());
    let large = json!({"kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "u1.large", "uid": "l", "generation": 1},
                       "spec": {"cpu": {"guest": 2}, "memory": {"guest": "8Gi"}}});
    let plan = store_plan(&renamed, Some(&large), None).unwrap();
    assert_eq!(plan.create.len(), 1);
    assert_eq!(plan.status_patch.len(), 1);
    assert_eq!(
        plan.status_patch[0]["value"]["controllerRevisionRef"]["name"],
        "web-u1.large-v1beta1-l-1"
    );
    assert!(matches!(
        store_plan(&renamed, None, None),
        Err(RevisionError::MissingObject { .. })
    ));
}

#[test]
fn a_matchers_revision_name_is_adopted_and_conflicts_store_nothing() {
    let mut pinned = the_vm(json!({}));
    pinned.spec.instancetype.as_mut().unwrap().revision_name = Some("kept-rev".into());
    pinned.spec.preference = None;
    let plan = store_plan(&pinned, None, None).unwrap();
    assert!(plan.create.is_empty());
    assert_eq!(
        plan.status_patch[0]["value"]["controllerRevisionRef"]["name"],
        "kept-rev"
    );

    let mut conflicting = the_vm(json!({}));
    conflicting.spec.template.spec.as_mut().unwrap().domain.cpu =
        Some(serde_json::from_value(json!({"cores": 2})).unwrap());
    let err = store_plan(&conflicting, Some(&u1()), Some(&fedora())).unwrap_err();
    assert_eq!(
        err.to_string(),
        "VM field(s) spec.template.spec.domain.cpu.cores conflicts with selected instance type"
    );
}
