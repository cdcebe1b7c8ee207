//! Behaviour of the application, the checks and the finder on small, readable cases (the
//! differential test, tests/instancetype_differential.rs, compares them with KubeVirt's code).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::{VirtualMachine, VirtualMachineInstanceSpec};
use kvrs_instancetype::vm::{controller_apply, webhook_apply};
use kvrs_instancetype::{
    Catalog, FindError, InstancetypeSpec, PreferenceSpec, apply, check_requirements, check_spread,
};
use serde_json::json;

fn it(v: serde_json::Value) -> InstancetypeSpec {
    serde_json::from_value(v).unwrap()
}
fn pref(v: serde_json::Value) -> PreferenceSpec {
    serde_json::from_value(v).unwrap()
}
fn spec(v: serde_json::Value) -> VirtualMachineInstanceSpec {
    serde_json::from_value(v).unwrap()
}
fn vm(v: serde_json::Value) -> VirtualMachine {
    serde_json::from_value(v).unwrap()
}

#[test]
fn an_instancetype_sizes_the_vm_and_a_preference_fills_what_is_unset() {
    let u1 = it(json!({"cpu": {"guest": 2}, "memory": {"guest": "4Gi"}}));
    let fedora = pref(json!({
        "devices": {"preferredDiskBus": "virtio", "preferredInterfaceModel": "virtio"},
        "features": {"preferredAcpi": {"enabled": true}, "preferredSmm": {}},
        "firmware": {"preferredEfi": {"secureBoot": true}},
    }));
    let template = spec(json!({"domain": {
        "features": {"acpi": {"enabled": false}},
        "devices": {"disks": [{"name": "a"}, {"name": "b", "disk": {"bus": "sata"}}, {"name": "c", "cdrom": {}}]}}}));
    let out = apply(
        "spec.template.spec",
        &template,
        &ObjectMeta::default(),
        Some(&u1),
        Some(&fedora),
    )
    .unwrap();
    let cpu = out.spec.domain.cpu.as_ref().unwrap();
    assert_eq!(
        (cpu.sockets, cpu.cores, cpu.threads),
        (Some(2), Some(1), Some(1)),
        "sockets by default"
    );
    assert_eq!(
        out.spec.domain.memory.unwrap().guest.unwrap().as_str(),
        "4Gi"
    );
    let disks = out.spec.domain.devices.disks.unwrap();
    assert_eq!(
        disks[0].disk.as_ref().unwrap().bus.as_deref(),
        Some("virtio"),
        "a bare disk becomes a virtio disk"
    );
    assert_eq!(
        disks[1].disk.as_ref().unwrap().bus.as_deref(),
        Some("sata"),
        "the VM's own bus stays"
    );
    assert!(
        disks[2].cdrom.as_ref().unwrap().bus.is_none(),
        "a CD-ROM takes the CD-ROM preference only"
    );
    let features = out.spec.domain.features.unwrap();
    assert_eq!(
        features.acpi.unwrap().enabled,
        Some(true),
        "ACPI is the one feature the preference overrides"
    );
    assert!(features.smm.is_some());
    let boot = out.spec.domain.firmware.unwrap().bootloader.unwrap();
    assert_eq!(boot.efi.unwrap().secure_boot, Some(true));
}

#[test]
fn fields_the_instancetype_owns_conflict_with_kubevirts_message() {
    let u1 =
        it(json!({"cpu": {"guest": 1}, "memory": {"guest": "1Gi"}, "annotations": {"a": "1"}}));
    let template = spec(json!({"domain": {
        "cpu": {"sockets": 2, "cores": 0},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "devices": {}}}));
    let meta = ObjectMeta {
        annotations: Some([("a".to_string(), "2".to_string())].into()),
        ..Default::default()
    };
    let err = apply("spec.template.spec", &template, &meta, Some(&u1), None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "VM field(s) spec.template.spec.domain.resources.requests.cpu, \
         spec.template.spec.domain.cpu.sockets, spec.template.spec.domain.resources.requests.memory, \
         annotations.a conflicts with selected instance type",
        "cores: 0 is unset as in Go; only the first memory conflict is reported"
    );
}

#[test]
fn overcommit_lowers_the_pod_request_in_the_guests_format() {
    let o1 = it(json!({"cpu": {"guest": 1}, "memory": {"guest": "4Gi", "overcommitPercent": 50}}));
    let out = apply(
        "spec",
        &spec(json!({"domain": {"devices": {}}})),
        &ObjectMeta::default(),
        Some(&o1),
        None,
    )
    .unwrap();
    let requests = out.spec.domain.resources.unwrap().requests.unwrap();
    assert_eq!(requests["memory"].as_str(), "2Gi");
}

#[test]
fn spread_topologies_split_vcpus_or_are_refused() {
    let eight = it(json!({"cpu": {"guest": 8}, "memory": {"guest": "1Gi"}}));
    let spread = pref(
        json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": {"across": "SocketsCoresThreads"}}}),
    );
    let out = apply(
        "spec",
        &spec(json!({"domain": {"devices": {}}})),
        &ObjectMeta::default(),
        Some(&eight),
        Some(&spread),
    )
    .unwrap();
    let cpu = out.spec.domain.cpu.unwrap();
    assert_eq!(
        (cpu.sockets, cpu.cores, cpu.threads),
        (Some(2), Some(2), Some(2))
    );

    let three = it(json!({"cpu": {"guest": 3}, "memory": {"guest": "1Gi"}}));
    let c = check_spread(Some(&three), Some(&spread)).unwrap();
    assert_eq!(c.path, "instancetype.spec.cpu.guest");
    assert_eq!(
        c.to_string(),
        "3 vCPUs provided by the instance type are not divisible by the number of threads per core 2 \
         and Spec.PreferSpreadSocketToCoreRatio or Spec.CPU.PreferSpreadOptions.Ratio of 2"
    );
    let zero =
        pref(json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": {"ratio": 0}}}));
    assert!(
        check_spread(Some(&eight), Some(&zero)).is_some(),
        "a zero ratio is refused, not a panic"
    );
}

#[test]
fn preference_requirements_are_checked_against_the_instancetype_or_the_vm() {
    let windows = pref(json!({"requirements": {"cpu": {"guest": 2}, "memory": {"guest": "4Gi"}}}));
    let small = it(json!({"cpu": {"guest": 1}, "memory": {"guest": "4Gi"}}));
    let e = check_requirements(
        Some(&small),
        Some(&windows),
        &VirtualMachineInstanceSpec::default(),
    )
    .unwrap_err();
    assert_eq!(e.fields.paths(), "spec.instancetype");
    assert_eq!(
        e.message,
        "insufficient CPU resources of 1 vCPU provided by instance type, preference requires 2 vCPU"
    );

    let vm_spec = spec(
        json!({"domain": {"cpu": {"sockets": 2}, "memory": {"guest": "2048Mi"}, "devices": {}}}),
    );
    let e = check_requirements(None, Some(&windows), &vm_spec).unwrap_err();
    assert_eq!(e.fields.paths(), "spec.template.spec.domain.memory");
    assert_eq!(
        e.message,
        "insufficient Memory resources of 2Gi provided by VirtualMachine, preference requires 4Gi"
    );
}

#[test]
fn the_webhook_refuses_and_the_controller_annotates() {
    let the_vm = vm(json!({
        "metadata": {"name": "v", "namespace": "ns"},
        "spec": {"instancetype": {"name": "small", "kind": "VirtualMachineInstancetype"},
                 "preference": {"name": "p"},
                 "template": {"spec": {"domain": {"cpu": {"threads": 2}, "devices": {}}}}}
    }));
    let small = it(json!({"cpu": {"guest": 1}, "memory": {"guest": "1Gi"}}));
    let refusal = webhook_apply(&the_vm, Some(&small), None).unwrap_err();
    assert_eq!(
        refusal.causes[0].field,
        "spec.template.spec.domain.cpu.threads"
    );

    let ok_vm = vm(json!({"metadata": {"name": "v"}, "spec": {
        "instancetype": {"name": "small", "kind": "virtualmachineinstancetypes"},
        "preference": {"name": "p"}, "template": {"spec": {"domain": {"devices": {}}}}}}));
    let mut s = ok_vm.spec.template.spec.clone().unwrap();
    let mut meta = ObjectMeta::default();
    controller_apply(
        &ok_vm,
        Some(&small),
        Some(&PreferenceSpec::default()),
        &mut s,
        &mut meta,
    )
    .unwrap();
    let a = meta.annotations.unwrap();
    assert_eq!(a["kubevirt.io/instancetype-name"], "small");
    assert_eq!(
        a["kubevirt.io/cluster-preference-name"], "p",
        "an empty kind is the cluster kind"
    );
}

#[test]
fn references_are_found_by_kind_name_namespace_and_revision() {
    let mut catalog = Catalog::default();
    for doc in [
        json!({"kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "u1"}, "spec": {"cpu": {"guest": 1}, "memory": {"guest": "1Gi"}}}),
        json!({"kind": "VirtualMachineInstancetype", "metadata": {"name": "u1", "namespace": "a"}, "spec": {"cpu": {"guest": 2}, "memory": {"guest": "1Gi"}}}),
        json!({"kind": "ControllerRevision", "metadata": {"name": "vm-u1-rev", "namespace": "a"},
               "data": {"kind": "VirtualMachineInstancetype", "spec": {"cpu": {"guest": 7}, "memory": {"guest": "1Gi"}}}}),
    ] {
        catalog.add(doc).unwrap();
    }
    let find = |v: serde_json::Value| catalog.find_instancetype(&vm(v));
    let guest = |r: Result<Option<InstancetypeSpec>, FindError>| r.unwrap().unwrap().cpu.guest;
    assert_eq!(
        guest(find(
            json!({"metadata": {"namespace": "a"}, "spec": {"instancetype": {"name": "u1"}, "template": {}}})
        )),
        1
    );
    assert_eq!(
        guest(find(
            json!({"metadata": {"namespace": "a"}, "spec": {"instancetype": {"name": "u1", "kind": "VIRTUALMACHINEINSTANCETYPE"}, "template": {}}})
        )),
        2
    );
    assert_eq!(
        guest(find(
            json!({"metadata": {"namespace": "a"}, "spec": {"instancetype": {"name": "u1", "revisionName": "vm-u1-rev"}, "template": {}}})
        )),
        7
    );
    let e = find(json!({"metadata": {"namespace": "b"}, "spec": {"instancetype": {"name": "u1", "kind": "VirtualMachineInstancetype"}, "template": {}}})).unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"spec.instancetype.name: VirtualMachineInstancetype "u1" not found in namespace "b""#
    );
    let e =
        find(json!({"spec": {"instancetype": {"name": "u1", "kind": "Flavor"}, "template": {}}}))
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "spec.instancetype.kind: got unexpected kind in InstancetypeMatcher: Flavor"
    );
    let e = find(
        json!({"spec": {"instancetype": {"name": "u1", "revisionName": "gone"}, "template": {}}}),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(r#"spec.instancetype.revisionName: ControllerRevision "gone" not found"#),
        "{e}"
    );
    let bad = catalog.add(json!({"kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "x"}, "spec": {"cpu": {"guest": 1}, "memory": {"guest": "4GB"}}}));
    let bad = bad.unwrap_err().to_string();
    assert!(
        bad.starts_with("spec.memory.guest: "),
        "a bad quantity names its field: {bad}"
    );
}
