//! Unit tests of the validation checks: one common user error each, rejected with the field
//! path KubeVirt names.

use serde_json::json;

use super::validate;
use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;
use crate::defaults::apply_defaults;

/// A valid VMI (one container disk, 1Gi) with `patch` merged into its spec.
fn vmi_with(patch: serde_json::Value) -> VirtualMachineInstance {
    let mut doc = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                       "resources": {"requests": {"memory": "1Gi"}}},
            "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/x/y:1"}}]
        }
    });
    merge(&mut doc["spec"], patch);
    let mut vmi: VirtualMachineInstance = serde_json::from_value(doc).unwrap();
    apply_defaults(&mut vmi, &ClusterConfig::default());
    vmi
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// The fields of the causes validation reports for `patch`.
fn rejected_fields(patch: serde_json::Value) -> Vec<String> {
    match validate(&vmi_with(patch), &ClusterConfig::default()) {
        Ok(()) => vec![],
        Err(e) => e.causes.into_iter().map(|c| c.field).collect(),
    }
}

#[test]
fn a_plain_vmi_is_valid() {
    assert_eq!(rejected_fields(json!({})), Vec::<String>::new());
}

#[test]
fn unknown_and_ide_buses_are_rejected() {
    let f = rejected_fields(
        json!({"domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "ide"}}]}}}),
    );
    assert_eq!(f, ["spec.domain.devices.disks[0].disk.bus"]);
    let f = rejected_fields(
        json!({"domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "nvme"}}]}}}),
    );
    assert_eq!(f, ["spec.domain.devices.disks[0].disk.bus"]);
    let f = rejected_fields(
        json!({"domain": {"devices": {"disks": [{"name": "root", "cdrom": {"bus": "virtio"}}]}}}),
    );
    assert_eq!(f, ["spec.domain.devices.disks[0].cdrom.bus"]);
}

#[test]
fn a_disk_without_volume_and_a_volume_without_disk_are_rejected() {
    let f = rejected_fields(json!({"domain": {"devices": {"disks": [
        {"name": "root"}, {"name": "data"}]}}}));
    assert_eq!(f, ["spec.domain.devices.disks[1].name"]);
    let mut vmi = vmi_with(json!({}));
    vmi.spec.domain.devices.disks = Some(vec![]);
    let err = validate(&vmi, &ClusterConfig::default()).unwrap_err();
    assert_eq!(err.causes[0].field, "spec.domain.volumes[0].name");
}

#[test]
fn duplicate_names_are_rejected() {
    let f = rejected_fields(json!({"volumes": [
        {"name": "root", "containerDisk": {"image": "a:1"}},
        {"name": "root", "containerDisk": {"image": "b:1"}}]}));
    assert!(f.contains(&"spec.volumes[1].name".to_string()), "{f:?}");
}

#[test]
fn a_volume_needs_exactly_one_source() {
    let f = rejected_fields(json!({"volumes": [{"name": "root"}]}));
    assert_eq!(f, ["spec.volumes[0]"]);
}

#[test]
fn memory_must_be_requested() {
    let mut vmi = vmi_with(json!({}));
    vmi.spec.domain.resources = Some(Default::default());
    vmi.spec.domain.memory = Some(Default::default());
    let err = validate(&vmi, &ClusterConfig::default()).unwrap_err();
    assert_eq!(err.causes[0].field, "spec.domain.memory.guest");
    assert!(err.to_string().contains("no memory requested"), "{err}");
}

#[test]
fn requests_above_limits_are_rejected() {
    let f = rejected_fields(json!({"domain": {"resources": {
        "requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}}));
    assert_eq!(
        f,
        [
            "spec.domain.resources.requests.memory",
            "spec.domain.resources.requests.cpu"
        ]
    );
}

#[test]
fn dedicated_cpus_need_whole_equal_cpus() {
    let f = rejected_fields(json!({"domain": {"cpu": {"dedicatedCpuPlacement": true},
        "resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": "1500m", "memory": "1Gi"}}}}));
    assert_eq!(
        f,
        [
            "spec.domain.resources.requests.cpu",
            "spec.domain.resources.limits.cpu"
        ]
    );
    let f = rejected_fields(json!({"domain": {"cpu": {"isolateEmulatorThread": true}}}));
    assert_eq!(f, ["spec.domain.cpu.isolateEmulatorThread"]);
}

#[test]
fn gated_features_need_their_gate() {
    let hostdisk = json!({"domain": {"devices": {"disks": [{"name": "root"}, {"name": "h"}]}},
        "volumes": [{"name": "root", "containerDisk": {"image": "a:1"}},
                    {"name": "h", "hostDisk": {"path": "/d.img", "type": "Disk"}}]});
    assert_eq!(rejected_fields(hostdisk.clone()), ["spec.volumes[1]"]);
    assert!(
        validate(
            &vmi_with(hostdisk),
            &ClusterConfig::with_feature_gates("HostDisk")
        )
        .is_ok()
    );
    let vsock = json!({"domain": {"devices": {"autoattachVSOCK": true}}});
    assert_eq!(
        rejected_fields(vsock.clone()),
        ["spec.domain.devices.autoattachVSOCK"]
    );
    assert!(
        validate(
            &vmi_with(vsock),
            &ClusterConfig::with_feature_gates("VSOCK")
        )
        .is_ok()
    );
    let mut sidecar = vmi_with(json!({}));
    sidecar
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            "hooks.kubevirt.io/hookSidecars".into(),
            "[{\"image\": \"x\"}]".into(),
        );
    let err = validate(&sidecar, &ClusterConfig::default()).unwrap_err();
    assert_eq!(err.causes[0].field, "metadata.annotations");
    assert!(validate(&sidecar, &ClusterConfig::with_feature_gates("Sidecar")).is_ok());
}

#[test]
fn networks_and_interfaces_must_match() {
    let f = rejected_fields(
        json!({"domain": {"devices": {"interfaces": [{"name": "a", "masquerade": {}}]}},
        "networks": [{"name": "b", "pod": {}}]}),
    );
    assert_eq!(
        f,
        [
            "spec.networks[0].name",
            "spec.domain.devices.interfaces[0].name",
            "spec.domain.devices.interfaces[0].name"
        ]
    );
    let f = rejected_fields(
        json!({"domain": {"devices": {"interfaces": [{"name": "a"}]}},
        "networks": [{"name": "a", "pod": {}}]}),
    );
    assert_eq!(f, ["spec.domain.devices.interfaces[0]"], "no binding");
    let f = rejected_fields(
        json!({"domain": {"devices": {"interfaces": [{"name": "a", "bridge": {}, "model": "rtl9999"}]}},
        "networks": [{"name": "a", "pod": {}}]}),
    );
    assert_eq!(f, ["spec.domain.devices.interfaces[0].model"]);
}

#[test]
fn discontinued_bindings_are_rejected() {
    let f = rejected_fields(
        json!({"domain": {"devices": {"interfaces": [{"name": "a", "slirp": {}}]}},
        "networks": [{"name": "a", "pod": {}}]}),
    );
    assert_eq!(f, ["spec.domain.devices.interfaces[0].slirp"]);
}

#[test]
fn secure_boot_needs_smm() {
    let f = rejected_fields(json!({"domain": {"firmware": {"bootloader": {"efi": {}}}}}));
    assert_eq!(f, ["spec.domain"]);
    let f = rejected_fields(
        json!({"domain": {"firmware": {"bootloader": {"efi": {}}}, "features": {"smm": {}}}}),
    );
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn hyperv_prerequisites_switched_off_are_reported() {
    let f = rejected_fields(
        json!({"domain": {"features": {"hyperv": {"synic": {}, "vpindex": {"enabled": false}}}}}),
    );
    assert_eq!(f, ["spec.domain.features.hyperv.synic"]);
}

#[test]
fn probes_need_one_handler_and_http_needs_the_pod_network() {
    let f = rejected_fields(json!({"readinessProbe": {}}));
    assert_eq!(f, ["spec.readinessProbe"]);
    let f = rejected_fields(
        json!({"domain": {"devices": {"autoattachPodInterface": false}},
        "livenessProbe": {"httpGet": {"port": 80}}}),
    );
    assert_eq!(f, ["spec.livenessProbe.httpGet"]);
}

#[test]
fn bad_names_and_enumerations_are_rejected() {
    let f = rejected_fields(
        json!({"hostname": "Not_A_Label", "evictionStrategy": "Sometimes",
        "startStrategy": "Later", "architecture": "riscv64"}),
    );
    assert_eq!(
        f,
        [
            "spec.startStrategy",
            "spec.evictionStrategy",
            "spec.hostname",
            "spec.architecture"
        ]
    );
}

#[test]
fn cloud_init_needs_data_within_limits() {
    let f = rejected_fields(
        json!({"domain": {"devices": {"disks": [{"name": "root"}, {"name": "ci"}]}},
        "volumes": [{"name": "root", "containerDisk": {"image": "a:1"}},
                    {"name": "ci", "cloudInitNoCloud": {}}]}),
    );
    assert_eq!(f, ["spec.volumes[1].cloudInitNoCloud"]);
    let big = "x".repeat(3000);
    let f = rejected_fields(
        json!({"domain": {"devices": {"disks": [{"name": "root"}, {"name": "ci"}]}},
        "volumes": [{"name": "root", "containerDisk": {"image": "a:1"}},
                    {"name": "ci", "cloudInitNoCloud": {"userData": big}}]}),
    );
    assert_eq!(f, ["spec.volumes[1].cloudInitNoCloud"]);
}

#[test]
fn the_error_message_lists_every_cause_with_its_field() {
    let err = validate(
        &vmi_with(
            json!({"domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "ide"}}]}}}),
        ),
        &ClusterConfig::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.domain.devices.disks[0].disk.bus: IDE bus is not supported"
    );
}

#[test]
fn arm64_guests_refuse_what_arm64_cannot_emulate() {
    let f = rejected_fields(json!({"architecture": "arm64", "domain": {
        "cpu": {"model": "host-model"},
        "devices": {"disks": [{"name": "root", "disk": {"bus": "sata"}}], "watchdog": {"name": "w"}}}}));
    assert_eq!(
        f,
        [
            "spec.domain.cpu.model",
            "spec.domain.devices.disks[0].disk.bus",
            "spec.domain.devices.watchdog"
        ]
    );
    let f = rejected_fields(json!({"architecture": "arm64"}));
    assert!(f.is_empty(), "a plain arm64 guest is valid: {f:?}");
}

#[test]
fn amd64_video_and_watchdog_models_are_checked() {
    let f = rejected_fields(
        json!({"domain": {"devices": {"video": {"type": "qxl"}, "watchdog": {"name": "w", "diag288": {}}}}}),
    );
    assert_eq!(
        f,
        [
            "spec.domain.devices.video.type",
            "spec.domain.devices.watchdog"
        ]
    );
}

fn vm(doc: serde_json::Value) -> crate::api::VirtualMachine {
    serde_json::from_value(doc).unwrap()
}

fn vm_fields(doc: serde_json::Value) -> Vec<String> {
    match super::validate_vm(&vm(doc), &ClusterConfig::default()) {
        Ok(()) => vec![],
        Err(e) => e.causes.into_iter().map(|c| c.field).collect(),
    }
}

#[test]
fn vm_run_strategy_must_be_one_known_value() {
    let t = json!({"spec": {"domain": {"devices": {}}}});
    assert!(
        vm_fields(
            json!({"metadata": {"name": "v"}, "spec": {"runStrategy": "Always", "template": t}})
        )
        .is_empty()
    );
    assert_eq!(
        vm_fields(json!({"metadata": {"name": "v"}, "spec": {"template": t}})),
        ["spec.running"]
    );
    assert_eq!(
        vm_fields(
            json!({"metadata": {"name": "v"}, "spec": {"running": true, "runStrategy": "Always", "template": t}})
        ),
        ["spec.running"]
    );
    assert_eq!(
        vm_fields(
            json!({"metadata": {"name": "v"}, "spec": {"runStrategy": "Sometimes", "template": t}})
        ),
        ["spec.runStrategy"]
    );
    assert_eq!(
        vm_fields(
            json!({"metadata": {"name": "v"}, "spec": {"runStrategy": "WaitAsReceiver", "template": t}})
        ),
        ["spec.runStrategy"]
    );
}

#[test]
fn vm_data_volume_templates_must_be_used_and_sized() {
    let doc = json!({"metadata": {"name": "v"}, "spec": {"runStrategy": "Always",
        "dataVolumeTemplates": [
            {"metadata": {"name": "used"}, "spec": {"storage": {}}},
            {"metadata": {"name": "unused"}, "spec": {"storage": {}}},
            {"metadata": {"name": "nosize"}, "spec": {}}],
        "template": {"spec": {"domain": {"devices": {}}, "volumes": [
            {"name": "root", "dataVolume": {"name": "used"}},
            {"name": "x", "dataVolume": {"name": "nosize"}}]}}}});
    assert_eq!(
        vm_fields(doc),
        [
            "spec.dataVolumeTemplate[1]",
            "spec.dataVolumeTemplate[2].PVC.Storage"
        ]
    );
}

#[test]
fn vm_max_guest_must_fit_the_guest() {
    let doc = json!({"metadata": {"name": "v"}, "spec": {"runStrategy": "Always",
        "template": {"spec": {"domain": {"devices": {}, "memory": {"guest": "4Gi", "maxGuest": "2Gi"}}}}}});
    assert_eq!(vm_fields(doc), ["spec.template.spec.domain.memory.guest"]);
    let ok = json!({"metadata": {"name": "v"}, "spec": {"runStrategy": "Always",
        "template": {"spec": {"domain": {"devices": {}, "memory": {"guest": "2Gi", "maxGuest": "8Gi"}}}}}});
    assert!(vm_fields(ok).is_empty());
}

#[test]
fn access_credentials_need_a_source_a_method_and_its_volume() {
    let f = rejected_fields(json!({"accessCredentials": [
        {"sshPublicKey": {"source": {"secret": {"secretName": "keys"}},
                          "propagationMethod": {"noCloud": {}}}},
        {"sshPublicKey": {"source": {}, "propagationMethod": {"qemuGuestAgent": {"users": ["fedora"]}}}}]}));
    assert_eq!(
        f,
        [
            "spec.accessCredentials[0].sshPublicKey.propagationMethod",
            "spec.accessCredentials[1].sshPublicKey.source"
        ]
    );
}

#[test]
fn encrypted_guests_need_uefi_without_secure_boot() {
    let f = rejected_fields(json!({"domain": {"launchSecurity": {"sev": {}}}}));
    assert_eq!(f, ["spec.domain.launchSecurity"]);
    let f = rejected_fields(json!({"domain": {"launchSecurity": {"sev": {}},
        "firmware": {"bootloader": {"efi": {"secureBoot": false}}}}}));
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn the_service_account_must_be_a_valid_name() {
    let f = rejected_fields(json!({"serviceAccountName": "Bad_Name"}));
    assert_eq!(f, ["spec.serviceAccountName"]);
}

/// The whole rejection message for `patch` (empty when valid).
fn rejection(patch: serde_json::Value) -> String {
    validate(&vmi_with(patch), &ClusterConfig::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn vcpu_counts_are_bounded_where_quantities_become_counts() {
    // issue 17: 65536 x 65536 became `<vcpu>4294967295</vcpu>` and a 256 GiB allocation.
    assert_eq!(
        rejection(json!({"domain": {"cpu": {"sockets": 65536, "cores": 65536}}})),
        "spec.domain.cpu.sockets: 65536 sockets x 65536 cores x 1 threads is 4294967296 vCPUs, \
         more than the 1024 vCPUs a guest can have"
    );
    assert_eq!(
        rejection(json!({"domain": {"cpu": {"threads": 2000}}})),
        "spec.domain.cpu.threads: 1 sockets x 1 cores x 2000 threads is 2000 vCPUs, more than \
         the 1024 vCPUs a guest can have"
    );
    // The sockets defaulting took from the CPU limit: the cause names the limit.
    assert_eq!(
        rejection(json!({"domain": {"resources": {"limits": {"cpu": "100000"}}}})),
        "spec.domain.resources.limits.cpu: 100000 vCPUs (the sockets of a VMI whose \
         spec.domain.cpu gives no topology), more than the 1024 vCPUs a guest can have"
    );
    assert_eq!(
        rejection(json!({"domain": {"resources": {"limits": {"cpu": "7Ei"}}}})),
        "spec.domain.resources.requests.cpu: quantity \"7Ei\" is too large; \
         spec.domain.resources.limits.cpu: quantity \"7Ei\" is too large; \
         spec.domain.resources.limits.cpu: 8070450532247928832 vCPUs (the sockets of a VMI \
         whose spec.domain.cpu gives no topology), more than the 1024 vCPUs a guest can have"
    );
    assert_eq!(
        rejection(json!({"domain": {"cpu": {"sockets": 2, "maxSockets": 2000}}})),
        "spec.domain.cpu.maxSockets: 2000 sockets x 1 cores x 1 threads is 2000 hot-pluggable \
         vCPUs, more than the 1024 vCPUs a guest can have (when not set, maxSockets is sockets \
         x the cluster's maxHotplugRatio)"
    );
    // The default hotplug room (4 x sockets) counts too: QEMU would refuse the domain.
    assert_eq!(
        rejection(json!({"domain": {"cpu": {"sockets": 1024}}})),
        "spec.domain.cpu.maxSockets: 4096 sockets x 1 cores x 1 threads is 4096 hot-pluggable \
         vCPUs, more than the 1024 vCPUs a guest can have (when not set, maxSockets is sockets \
         x the cluster's maxHotplugRatio)"
    );
    // At the bound: valid.
    assert_eq!(
        rejection(json!({"domain": {"cpu": {"sockets": 1024, "maxSockets": 1024}}})),
        ""
    );
    assert_eq!(rejection(json!({"domain": {"cpu": {"sockets": 256}}})), "");
    assert_eq!(
        rejection(json!({"domain": {"resources": {"limits": {"cpu": "1024"}}}})),
        ""
    );
}

#[test]
fn quantities_beyond_64_bits_are_refused_with_their_field() {
    // issue 17: `8Ei` CPUs overflowed to "no value" and converted with one vCPU.
    assert_eq!(
        rejection(json!({"domain": {"resources": {"limits": {"cpu": "8Ei"}}}})),
        "spec.domain.resources.requests.cpu: quantity \"8Ei\" is too large; \
         spec.domain.resources.limits.cpu: quantity \"8Ei\" is too large"
    );
    assert_eq!(
        rejection(json!({"domain": {"resources": {"requests": {"memory": "9Ei"}}}})),
        "spec.domain.resources.requests.memory: quantity \"9Ei\" is too large"
    );
    // A tiny quantity is not "too large": it rounds up to 1n (one millicore).
    assert_eq!(
        rejection(json!({"domain": {"resources": {"requests": {"cpu": "1e-400"}}}})),
        ""
    );
}

#[test]
fn device_and_volume_lists_are_bounded_as_the_crd_bounds_them() {
    // issue 17 (item 4): thousands of disks rendered hundreds of MB of XML.
    let disks: Vec<_> = (0..257)
        .map(|i| json!({"name": format!("d{i}"), "disk": {"bus": "virtio"}}))
        .collect();
    let volumes: Vec<_> = (0..257)
        .map(|i| json!({"name": format!("d{i}"), "emptyDisk": {"capacity": "1Mi"}}))
        .collect();
    let err = validate(
        &vmi_with(json!({"domain": {"devices": {"disks": disks}}, "volumes": volumes})),
        &ClusterConfig::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.causes[..2]
            .iter()
            .map(|c| (c.kind.as_str(), c.to_string()))
            .collect::<Vec<_>>(),
        vec![
            (
                "FieldValueTooMany",
                "spec.domain.devices.disks: Too many: 257: must have at most 256 items".to_string()
            ),
            (
                "FieldValueTooMany",
                "spec.volumes: Too many: 257: must have at most 256 items".to_string()
            ),
        ]
    );
    let disks: Vec<_> = (0..256)
        .map(|i| json!({"name": format!("d{i}"), "disk": {"bus": "virtio"}}))
        .collect();
    let volumes: Vec<_> = (0..256)
        .map(|i| json!({"name": format!("d{i}"), "emptyDisk": {"capacity": "1Mi"}}))
        .collect();
    assert_eq!(
        rejection(json!({"domain": {"devices": {"disks": disks}}, "volumes": volumes})),
        ""
    );
}

/// The rejection message of a VMI with `meta` as its metadata (empty when valid).
fn metadata_rejection(meta: serde_json::Value) -> String {
    let mut vmi = vmi_with(json!({}));
    let mut doc = serde_json::to_value(&vmi).unwrap();
    doc["metadata"] = meta;
    vmi = serde_json::from_value(doc).unwrap();
    validate(&vmi, &ClusterConfig::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn object_metadata_is_validated_as_the_apiserver_does() {
    // issue 17: `../` in names, namespaces and UIDs reached host paths (sockets, ISO, NVRAM).
    assert_eq!(
        metadata_rejection(json!({"name": "../../etc", "namespace": "ns"})),
        "metadata.name: Invalid value: \"../../etc\": a lowercase RFC 1123 subdomain must \
         consist of lower case alphanumeric characters, '-' or '.', and must start and end with \
         an alphanumeric character (e.g. 'example.com', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    assert_eq!(
        metadata_rejection(json!({"name": "vm", "namespace": "a/../b"})),
        "metadata.namespace: Invalid value: \"a/../b\": a lowercase RFC 1123 label must consist \
         of lower case alphanumeric characters or '-', and must start and end with an \
         alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    );
    assert_eq!(
        metadata_rejection(json!({"name": "vm", "namespace": "ns", "uid": "../x"})),
        "metadata.uid: Invalid value: \"../x\": must not contain '/', '..' or control characters"
    );
    assert_eq!(
        metadata_rejection(json!({"name": "x".repeat(254), "namespace": "ns"})),
        format!(
            "metadata.name: Invalid value: {:?}: must be no more than 253 characters",
            "x".repeat(254)
        )
    );
    assert_eq!(
        metadata_rejection(json!({"generateName": "Vm-", "namespace": "ns"})),
        "metadata.generateName: Invalid value: \"Vm-\": a lowercase RFC 1123 subdomain must \
         consist of lower case alphanumeric characters, '-' or '.', and must start and end with \
         an alphanumeric character (e.g. 'example.com', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    // What the apiserver accepts, kvrs accepts.
    assert_eq!(
        metadata_rejection(json!({"name": "my.vm-1", "namespace": "ns-1", "uid": "0f1e-22"})),
        ""
    );
    assert_eq!(
        metadata_rejection(json!({"generateName": "vm-", "namespace": "ns"})),
        ""
    );
}

#[test]
fn virtiofs_filesystem_names_must_be_plain_names() {
    assert_eq!(
        rejected_fields(json!({"domain": {"devices": {"filesystems": [
            {"name": "../up", "virtiofs": {}}]}}}))
        .first()
        .map(String::as_str),
        Some("spec.domain.devices.filesystems[0].name")
    );
}

#[test]
fn machine_types_outside_the_architectures_list_are_refused_with_kubevirts_message() {
    let vmi = vmi_with(json!({"domain": {"machine": {"type": "pc-i440fx-9.0"}}}));
    let err = validate(&vmi, &ClusterConfig::default()).unwrap_err();
    assert!(
        err.to_string().contains(
            "spec.domain.machine.type is not supported: pc-i440fx-9.0 (allowed values: [q35* pc-q35*])"
        ),
        "{err}"
    );
    for ok in ["q35", "pc-q35-rhel9.4.0", "pc-q35-10.0"] {
        let vmi = vmi_with(json!({"domain": {"machine": {"type": ok}}}));
        assert!(validate(&vmi, &ClusterConfig::default()).is_ok(), "{ok}");
    }
    // The cluster's list decides (the deprecated cluster-wide list wins).
    let config = ClusterConfig {
        legacy_emulated_machines: Some(vec!["pc-i440fx*".into()]),
        ..ClusterConfig::default()
    };
    let vmi = vmi_with(json!({"domain": {"machine": {"type": "pc-i440fx-9.0"}}}));
    assert!(validate(&vmi, &config).is_ok());
}
