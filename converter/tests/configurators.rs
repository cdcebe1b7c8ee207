//! One snapshot per configurator: each runs alone on an empty domain for the all-devices fixture,
//! so its snapshot shows exactly what that configurator writes.

use kvrs_converter::configurators::*;
use kvrs_converter::{ConverterContext, Domain, Env};
use kvrs_core::VirtualMachineInstance;

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
