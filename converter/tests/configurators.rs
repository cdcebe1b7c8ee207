//! The whole conversion through the public API: the domain of the all-devices fixture and of an
//! admitted Fedora VMI, and what the context changes. Each configurator's own tests (and its
//! snapshot on the all-devices fixture) are beside it, in `src/configurators/`.

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::ConverterContext;

fn fixture() -> VirtualMachineInstance {
    let text = include_str!("../../fixtures/vmi/conv-all-devices.yaml");
    serde_norway::from_str(text).expect("fixture parses")
}

#[test]
fn whole_domain_of_the_fixture() {
    let vmi = fixture();
    let xml = kvrs_converter::convert_to_xml(&vmi, &ConverterContext::default()).unwrap();
    insta::assert_snapshot!(xml);
}

#[test]
fn no_hypervisor_device_means_qemu_or_error() {
    let vmi = fixture();
    let ctx = ConverterContext {
        hypervisor_device_available: false,
        ..ConverterContext::default()
    };
    assert_eq!(kvrs_converter::convert(&vmi, &ctx).unwrap().kind, "qemu");
    let ctx = ConverterContext {
        allow_emulation: false,
        ..ctx
    };
    let err = kvrs_converter::convert(&vmi, &ctx).unwrap_err();
    assert!(err.reason.contains("emulation is not allowed"), "{err}");
}

#[test]
fn block_pvc_becomes_block_disk() {
    let vmi = fixture();
    let ctx = ConverterContext {
        block_pvcs: ["data".to_string()].into(),
        ..ConverterContext::default()
    };
    let d = kvrs_converter::convert(&vmi, &ctx).unwrap();
    let disk = d
        .devices
        .disks
        .iter()
        .find(|d| d.alias.as_ref().unwrap().name == "ua-data")
        .unwrap();
    assert_eq!(disk.kind, "block");
    assert_eq!(disk.source.dev.as_deref(), Some("/dev/data"));
}

fn vmi_from(v: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(v).expect("vmi")
}

#[test]
fn passt_without_pod_interface_name_is_an_error_naming_the_interface() {
    let vmi = vmi_from(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "passtBinding": {}}]}},
                 "networks": [{"name": "default", "pod": {}}]}
    }));
    let err = kvrs_converter::convert(&vmi, &ConverterContext::default()).unwrap_err();
    assert_eq!(err.path, "spec.domain.devices.interfaces[0]");
}

#[test]
fn dedicated_cpus_with_isolated_emulator_pin_io_thread_to_emulator_cpu() {
    let vmi = vmi_from(serde_json::json!({
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {
            "architecture": "amd64",
            "domain": {
                "cpu": {"cores": 2, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true},
                "ioThreadsPolicy": "shared",
                "resources": {"requests": {"memory": "1Gi"}},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}
            },
            "volumes": [{"name": "root", "containerDisk": {"image": "x"}}]
        }
    }));
    let d = kvrs_converter::convert(&vmi, &ConverterContext::default()).unwrap();
    let tune = d.cputune.unwrap();
    let pins: Vec<_> = tune.vcpupin.iter().map(|p| p.cpuset.as_ref()).collect();
    assert_eq!(pins, ["0", "1"]);
    assert_eq!(tune.emulatorpin.unwrap().cpuset, "2");
    assert_eq!(tune.iothreadpin.len(), 1);
    assert_eq!(tune.iothreadpin[0].cpuset, "2");
    assert_eq!(
        d.devices.disks[0].driver.as_ref().unwrap().iothread,
        Some(1)
    );
}

#[test]
fn whole_domain_of_the_admitted_fedora_fixture() {
    let text = include_str!("../../fixtures/vmi/conv-fedora-two-nics.yaml");
    let vmi: VirtualMachineInstance = serde_norway::from_str(text).unwrap();
    let vmi = kvrs_admission::admit(vmi, &kvrs_admission::ClusterConfig::default()).unwrap();
    let xml = kvrs_converter::convert_to_xml(&vmi, &ConverterContext::default()).unwrap();
    insta::assert_snapshot!(xml);
}
