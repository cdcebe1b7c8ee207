//! One snapshot per configurator: each runs alone on an empty domain for the all-devices fixture,
//! so its snapshot shows exactly what that configurator writes.

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::configurators::*;
use kvrs_converter::{ConverterContext, Domain, Env};

fn fixture() -> VirtualMachineInstance {
    let text = include_str!("../../fixtures/vmi/conv-all-devices.yaml");
    serde_yaml::from_str(text).expect("fixture parses")
}

fn run(c: &dyn Configurator, vmi: &VirtualMachineInstance) -> String {
    let mut d = Domain::default();
    c.configure(vmi, &mut d).expect("configures");
    d.to_xml().expect("writes")
}

macro_rules! snap {
    ($name:ident, |$env:ident, $ctx:ident| $c:expr) => {
        #[test]
        fn $name() {
            let vmi = fixture();
            let $ctx = ConverterContext::default();
            let $env = Env::new(&vmi, &$ctx);
            let _ = (&$env, &$ctx);
            insta::assert_snapshot!(run(&$c, &vmi));
        }
    };
}

snap!(metadata, |env, ctx| Metadata);
snap!(network, |env, ctx| Network { env: &env });
snap!(tpm, |env, ctx| Tpm);
snap!(vsock, |env, ctx| Vsock {
    default_cid: ctx.default_vsock_cid
});
snap!(launch_security, |env, ctx| LaunchSecurity {
    arch: env.arch
});
snap!(channels, |env, ctx| Channels);
snap!(clock, |env, ctx| Clock);
snap!(rng, |env, ctx| Rng { env: &env });
snap!(input, |env, ctx| InputDevices { arch: env.arch });
snap!(balloon, |env, ctx| Balloon { env: &env });
snap!(graphics, |env, ctx| Graphics { env: &env });
snap!(sound, |env, ctx| Sound);
snap!(host_devices, |env, ctx| HostDevices { ctx: &ctx });
snap!(watchdog, |env, ctx| Watchdog { arch: env.arch });
snap!(console, |env, ctx| Console { ctx: &ctx });
snap!(panic, |env, ctx| PanicDevices);
snap!(hypervisor_features, |env, ctx| HypervisorFeatures {
    env: &env
});
snap!(sysinfo, |env, ctx| SysInfo {
    smbios: ctx.smbios.as_ref()
});
snap!(os, |env, ctx| Os { env: &env });
snap!(virtiofs, |env, ctx| Virtiofs);
snap!(usb_redirect, |env, ctx| UsbRedirect);
snap!(controllers, |env, ctx| Controllers { env: &env });
snap!(qemu_cmd, |env, ctx| QemuCmd { arch: env.arch });
snap!(cpu, |env, ctx| Cpu { env: &env });
snap!(iothreads, |env, ctx| IoThreads);
snap!(memory, |env, ctx| Memory);
snap!(reboot_policy, |env, ctx| RebootPolicy);
snap!(iommufd, |env, ctx| Iommufd { enabled: true });
snap!(hypervisor, |env, ctx| Hypervisor { ctx: &ctx });

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

#[test]
fn pipeline_lists_29_configurators() {
    assert_eq!(ORDER.len(), 29);
}

fn vmi_from(v: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(v).expect("vmi")
}

#[test]
fn passt_interface_forwards_declared_ports() {
    let vmi = vmi_from(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "passtBinding": {},
                "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}]}},
            "networks": [{"name": "default", "pod": {}}]
        },
        "status": {"interfaces": [{"name": "default", "podInterfaceName": "eth0"}]}
    }));
    let ctx = ConverterContext::default();
    let env = Env::new(&vmi, &ctx);
    let mut d = Domain::default();
    Network { env: &env }.configure(&vmi, &mut d).unwrap();
    let iface = &d.devices.interfaces[0];
    assert_eq!(iface.kind, "vhostuser");
    assert_eq!(iface.source.dev.as_deref(), Some("eth0"));
    let fwd: Vec<(String, Vec<u32>)> = iface
        .port_forward
        .iter()
        .map(|p| (p.proto.clone(), p.ranges.iter().map(|r| r.start).collect()))
        .collect();
    assert_eq!(
        fwd,
        vec![("tcp".into(), vec![80]), ("udp".into(), vec![53])]
    );
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
    let vmi: VirtualMachineInstance = serde_yaml::from_str(text).unwrap();
    let vmi = kvrs_admission::admit(vmi, &kvrs_admission::ClusterConfig::default()).unwrap();
    let xml = kvrs_converter::convert_to_xml(&vmi, &ConverterContext::default()).unwrap();
    insta::assert_snapshot!(xml);
}

/// The EFI firmware paths follow the context's OVMF directory: the launcher image's own
/// directory (whose paths the converter keeps as constants) and any other one give the same
/// `dir/file` text, for the loader and the NVRAM template alike.
#[test]
fn efi_firmware_paths_follow_the_ovmf_dir() {
    let mut vmi = fixture();
    let firmware = vmi
        .spec
        .domain
        .firmware
        .get_or_insert_with(Default::default);
    firmware.bootloader = serde_json::from_value(serde_json::json!({"efi": {"secureBoot": false}}))
        .expect("bootloader parses");
    for dir in [
        "/usr/share/edk2/ovmf",
        "/opt/firmware",
        "/usr/share/edk2/ovmf/",
    ] {
        let ctx = ConverterContext {
            ovmf_dir: dir.to_string(),
            ..ConverterContext::default()
        };
        let env = Env::new(&vmi, &ctx);
        let mut d = Domain::default();
        Os { env: &env }
            .configure(&vmi, &mut d)
            .expect("configures");
        let loader = d.os.loader.as_ref().expect("an EFI VMI has a loader");
        assert_eq!(loader.path, format!("{dir}/OVMF_CODE.secboot.fd"));
        assert_eq!(loader.secure.as_deref(), Some("no"));
        let template = d.os.nvram.as_ref().and_then(|n| n.template.as_deref());
        assert_eq!(template, Some(format!("{dir}/OVMF_VARS.fd").as_str()));
    }
}
