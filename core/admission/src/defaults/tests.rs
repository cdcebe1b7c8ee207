//! Unit tests of the defaulting steps, each on a small hand-made VMI.

use serde_json::json;

use super::apply_defaults;
use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;

fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": spec,
    }))
    .unwrap()
}

fn defaulted(spec: serde_json::Value) -> serde_json::Value {
    let mut v = vmi(spec);
    apply_defaults(&mut v, &ClusterConfig::default());
    serde_json::to_value(v).unwrap()
}

#[test]
fn an_empty_vmi_gets_every_basic_default() {
    let out = defaulted(json!({"domain": {"devices": {}}}));
    let spec = &out["spec"];
    assert_eq!(spec["architecture"], "amd64");
    assert_eq!(spec["domain"]["machine"]["type"], "q35");
    assert_eq!(spec["evictionStrategy"], "None");
    assert_eq!(
        spec["domain"]["cpu"],
        json!({"cores": 1, "sockets": 1, "threads": 1, "maxSockets": 4, "model": "host-model"})
    );
    assert_eq!(
        spec["domain"]["features"],
        json!({"acpi": {"enabled": true}})
    );
    assert_eq!(
        spec["domain"]["memory"],
        json!({}),
        "no memory to copy, no hotplug"
    );
    assert_eq!(spec["domain"]["resources"], json!({}));
    assert_eq!(spec["networks"], json!([{"name": "default", "pod": {}}]));
    assert_eq!(
        spec["domain"]["devices"]["interfaces"],
        json!([{"name": "default", "bridge": {}}])
    );
    assert_eq!(
        out["metadata"]["finalizers"],
        json!(["kubevirt.io/foregroundDeleteVirtualMachine"])
    );
    assert_eq!(
        out["metadata"]["annotations"]["kubevirt.io/pci-topology-version"],
        "v3"
    );
    assert_eq!(out["status"]["phase"], "Pending");
    assert_eq!(out["status"]["runtimeUser"], 107);
    assert_eq!(out["status"]["guestOSInfo"], json!({}));
    let uuid = spec["domain"]["firmware"]["uuid"].as_str().unwrap();
    assert_eq!(uuid, super::firmware::legacy_uuid_for_name("t"));
}

#[test]
fn cpu_limit_becomes_request_and_sockets() {
    let out =
        defaulted(json!({"domain": {"devices": {}, "resources": {"limits": {"cpu": "1500m"}}}}));
    let d = &out["spec"]["domain"];
    assert_eq!(d["resources"]["requests"]["cpu"], "1500m");
    assert_eq!(d["cpu"]["sockets"], 2, "rounded up");
    assert_eq!(d["cpu"]["maxSockets"], 8);
}

#[test]
fn max_sockets_never_exceeds_512_vcpus() {
    let out = defaulted(
        json!({"domain": {"devices": {}, "cpu": {"sockets": 4, "cores": 64, "threads": 1}}}),
    );
    assert_eq!(out["spec"]["domain"]["cpu"]["maxSockets"], 8);
    let out = defaulted(
        json!({"domain": {"devices": {}, "cpu": {"sockets": 16, "cores": 64, "threads": 1}}}),
    );
    assert_eq!(
        out["spec"]["domain"]["cpu"]["maxSockets"], 16,
        "never below sockets"
    );
}

#[test]
fn guest_memory_comes_from_request_then_limit_then_hugepage() {
    let from_req = defaulted(json!({"domain": {"devices": {}, "resources": {
        "requests": {"memory": "2Gi"}, "limits": {"memory": "3Gi"}}}}));
    assert_eq!(
        from_req["spec"]["domain"]["memory"],
        json!({"guest": "2Gi", "maxGuest": "8Gi"})
    );
    let from_limit =
        defaulted(json!({"domain": {"devices": {}, "resources": {"limits": {"memory": "3Gi"}}}}));
    assert_eq!(from_limit["spec"]["domain"]["memory"]["guest"], "3Gi");
    let from_page =
        defaulted(json!({"domain": {"devices": {}, "memory": {"hugepages": {"pageSize": "1Gi"}}}}));
    assert_eq!(from_page["spec"]["domain"]["memory"]["guest"], "1Gi");
    assert_eq!(from_page["status"]["memory"]["guestAtBoot"], "1Gi");
}

#[test]
fn memory_hotplug_needs_alignment_size_and_plain_cpus() {
    let small = defaulted(json!({"domain": {"devices": {}, "memory": {"guest": "512Mi"}}}));
    assert!(small["spec"]["domain"]["memory"].get("maxGuest").is_none());
    let odd = defaulted(json!({"domain": {"devices": {}, "memory": {"guest": "1000M"}}}));
    assert!(odd["spec"]["domain"]["memory"].get("maxGuest").is_none());
    assert_eq!(
        odd["spec"]["domain"]["memory"]["guest"], "1G",
        "written canonically"
    );
    let rt = defaulted(json!({"domain": {"devices": {}, "memory": {"guest": "2Gi"},
        "cpu": {"cores": 2, "realtime": {}}}}));
    assert!(rt["spec"]["domain"]["memory"].get("maxGuest").is_none());
    let ok = defaulted(json!({"domain": {"devices": {}, "memory": {"guest": "1536Mi"}}}));
    assert_eq!(ok["spec"]["domain"]["memory"]["maxGuest"], "6Gi");
}

#[test]
fn disks_get_targets_buses_and_cdrom_defaults() {
    let out = defaulted(json!({
        "domain": {"devices": {"disks": [
            {"name": "a"}, {"name": "b", "cdrom": {}}, {"name": "c", "disk": {"bus": "virtio"}}]}},
        "volumes": [
            {"name": "a", "containerDisk": {"image": "quay.io/x/y"}},
            {"name": "b", "containerDisk": {"image": "quay.io/x/y:1"}},
            {"name": "c", "containerDisk": {"image": "quay.io/x/y:latest"}},
            {"name": "d", "emptyDisk": {"capacity": "1Gi"}}]
    }));
    let disks = &out["spec"]["domain"]["devices"]["disks"];
    assert_eq!(disks[0], json!({"name": "a", "disk": {"bus": "sata"}}));
    assert_eq!(
        disks[1],
        json!({"name": "b", "cdrom": {"bus": "sata", "readonly": true, "tray": "closed"}})
    );
    assert_eq!(disks[2], json!({"name": "c", "disk": {"bus": "virtio"}}));
    assert_eq!(
        disks[3],
        json!({"name": "d", "disk": {"bus": "sata"}}),
        "bare volume gets a disk"
    );
    let vols = &out["spec"]["volumes"];
    assert_eq!(vols[0]["containerDisk"]["imagePullPolicy"], "Always");
    assert_eq!(vols[1]["containerDisk"]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(vols[2]["containerDisk"]["imagePullPolicy"], "Always");
}

#[test]
fn hyperv_dependencies_are_switched_on_unless_switched_off() {
    let out = defaulted(json!({"domain": {"devices": {}, "features": {"hyperv": {
        "synictimer": {}, "ipi": {}, "evmcs": {}}}}}));
    let h = &out["spec"]["domain"]["features"]["hyperv"];
    for f in ["synic", "vpindex", "vapic", "ipi", "evmcs"] {
        assert_eq!(h[f]["enabled"], true, "{f}");
    }
    assert_eq!(
        out["spec"]["domain"]["cpu"]["features"],
        json!([{"name": "vmx", "policy": "require"}])
    );
    let off = defaulted(json!({"domain": {"devices": {}, "features": {"hyperv": {
        "synic": {}, "vpindex": {"enabled": false}}}}}));
    assert_eq!(
        off["spec"]["domain"]["features"]["hyperv"]["vpindex"]["enabled"],
        false
    );
}

#[test]
fn spinlocks_get_4096_retries_and_timers_are_present() {
    let out = defaulted(json!({"domain": {"devices": {},
        "features": {"hyperv": {"spinlocks": {}}},
        "clock": {"timer": {"hpet": {"present": false}, "rtc": {}}}}}));
    let d = &out["spec"]["domain"];
    assert_eq!(
        d["features"]["hyperv"]["spinlocks"],
        json!({"enabled": true, "spinlocks": 4096})
    );
    assert_eq!(d["clock"]["timer"]["hpet"]["present"], false);
    assert_eq!(d["clock"]["timer"]["rtc"]["present"], true);
}

#[test]
fn arm64_guests_boot_efi_on_virtio_with_passthrough_cpus_and_no_hotplug() {
    let out = defaulted(
        json!({"architecture": "arm64", "domain": {"devices": {"disks": [{"name": "a"}]},
        "memory": {"guest": "2Gi"}}, "volumes": [{"name": "a", "containerDisk": {"image": "x:1"}}]}),
    );
    let d = &out["spec"]["domain"];
    assert_eq!(d["machine"]["type"], "virt");
    assert_eq!(d["cpu"]["model"], "host-passthrough");
    assert!(d["cpu"].get("maxSockets").is_none());
    assert!(d["memory"].get("maxGuest").is_none());
    assert_eq!(
        d["firmware"]["bootloader"],
        json!({"efi": {"secureBoot": false}})
    );
    assert_eq!(d["devices"]["disks"][0]["disk"]["bus"], "virtio");
}

#[test]
fn a_non_q35_machine_gets_no_pci_topology_annotation() {
    let out = defaulted(json!({"domain": {"devices": {}, "machine": {"type": "pc-i440fx-8.0"}}}));
    assert!(out["metadata"].get("annotations").is_none());
}

#[test]
fn autoattach_false_or_given_networks_add_no_default_interface() {
    let out = defaulted(json!({"domain": {"devices": {"autoattachPodInterface": false}}}));
    assert!(out["spec"].get("networks").is_none());
    let out = defaulted(
        json!({"domain": {"devices": {"interfaces": [{"name": "x", "bridge": {}}]}},
        "networks": [{"name": "x", "multus": {"networkName": "n"}}]}),
    );
    assert_eq!(out["spec"]["networks"].as_array().unwrap().len(), 1);
}

#[test]
fn probes_inputs_and_watchdogs_get_their_defaults() {
    let out = defaulted(json!({
        "domain": {"devices": {"inputs": [{"name": "t", "type": ""}], "watchdog": {"name": "w"}}},
        "readinessProbe": {"exec": {"command": ["true"]}}
    }));
    assert_eq!(
        out["spec"]["domain"]["devices"]["inputs"][0],
        json!({"name": "t", "type": "tablet", "bus": "usb"})
    );
    assert_eq!(
        out["spec"]["domain"]["devices"]["watchdog"]["i6300esb"]["action"],
        "reset"
    );
    let p = &out["spec"]["readinessProbe"];
    assert_eq!(
        (p["timeoutSeconds"].clone(), p["periodSeconds"].clone()),
        (json!(1), json!(10))
    );
    assert_eq!(
        (p["successThreshold"].clone(), p["failureThreshold"].clone()),
        (json!(1), json!(3))
    );
}

#[test]
fn the_root_gate_keeps_the_runtime_user_unset() {
    let mut v = vmi(json!({"domain": {"devices": {}}}));
    apply_defaults(&mut v, &ClusterConfig::with_feature_gates("Root"));
    assert_eq!(v.status.unwrap().runtime_user, None);
}

#[test]
fn defaulting_twice_changes_nothing() {
    let mut v = vmi(
        json!({"domain": {"devices": {"disks": [{"name": "a", "cdrom": {}}]},
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
        "features": {"hyperv": {"synictimer": {"direct": {}}}}},
        "volumes": [{"name": "a", "containerDisk": {"image": "img"}}, {"name": "b", "emptyDisk": {"capacity": "1G"}}]}),
    );
    apply_defaults(&mut v, &ClusterConfig::default());
    let once = v.clone();
    apply_defaults(&mut v, &ClusterConfig::default());
    assert_eq!(once, v);
}
