//! The configurators: one small builder per part of the domain, applied in KubeVirt v1.9.0's order.
//!
//! Each file is named after the device or section it writes, as KubeVirt's are, and holds one
//! [`Configurator`]: a small pure builder that reads the VMI (and the few host facts in [`Env`])
//! and writes its part of the domain, with its own tests beside it. [`PIPELINE`] lists them in
//! the order KubeVirt's `Convert_v1_VirtualMachineInstance_To_api_Domain` does; memory backing,
//! disks and volumes follow in [`crate::disks`], dedicated CPUs and the libvirt defaults after.

use crate::context::{Arch, ConverterContext};
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

mod balloon;
mod channels;
mod clock;
mod console;
mod controllers;
mod cpu;
mod graphics;
mod host_devices;
mod hypervisor;
mod hypervisor_features;
mod input;
mod iommufd;
mod iothreads;
mod launch_security;
mod memory;
mod metadata;
mod network;
mod os;
mod panic;
mod qemu_cmd;
mod reboot_policy;
mod rng;
mod sound;
mod sysinfo;
#[cfg(test)]
mod testing;
mod tpm;
mod usb_redirect;
pub(crate) mod util;
mod virtiofs;
mod vsock;
mod watchdog;

pub(crate) use network::pci_address as network_pci_address;
pub use network::{
    AttachedElsewhere, UnrenderedInterface, check_rendered_interfaces,
    domain_attachment_by_interface_name,
};

use balloon::Balloon;
use channels::Channels;
use clock::Clock;
use console::Console;
use controllers::Controllers;
use cpu::Cpu;
use graphics::Graphics;
use host_devices::HostDevices;
use hypervisor::Hypervisor;
use hypervisor_features::HypervisorFeatures;
use input::InputDevices;
use iommufd::Iommufd;
use iothreads::IoThreads;
use launch_security::LaunchSecurity;
use memory::Memory;
use metadata::Metadata;
use network::Network;
use os::Os;
use panic::PanicDevices;
use qemu_cmd::QemuCmd;
use reboot_policy::RebootPolicy;
use rng::Rng;
use sound::Sound;
use sysinfo::SysInfo;
use tpm::Tpm;
use usb_redirect::UsbRedirect;
use virtiofs::Virtiofs;
use vsock::Vsock;
use watchdog::Watchdog;

/// One step of the conversion: writes its part of the domain from the VMI.
pub(crate) trait Configurator {
    /// Adds or sets this configurator's part of `domain`.
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError>;
}

/// Per-conversion facts every configurator may need, derived once from VMI + context.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Env<'a> {
    /// The context.
    pub ctx: &'a ConverterContext,
    /// Effective architecture.
    pub arch: Arch,
    /// `virtio`, `virtio-transitional` or `virtio-non-transitional`.
    pub virtio_model: &'static str,
    /// SEV / SEV-ES / SNP.
    pub sev: bool,
    /// TDX.
    pub tdx: bool,
    /// IBM Secure Execution.
    pub pv: bool,
}

/// One configurator as the pipeline runs it: the file it lives in and how it is built from the
/// conversion's environment and applied.
#[derive(Clone, Copy)]
pub(crate) struct Step {
    /// The configurator's file name (`balloon`, `host_devices`).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the tests name the order and the snapshots by it")
    )]
    pub(crate) name: &'static str,
    /// Builds the configurator from the environment and writes its part of the domain.
    pub(crate) run: fn(&Env<'_>, &VirtualMachineInstance, &mut Domain) -> Result<(), ConvertError>,
}

/// The configurators in the order KubeVirt v1.9.0's `Convert_v1_VirtualMachineInstance_To_api_Domain`
/// lists them. This is the only list: [`run_pipeline`] runs it and the tests read the names from
/// it, so a configurator added here is run and named at once. The order is KubeVirt's so that a
/// VMI with several faults reports the same first error as KubeVirt does.
pub(crate) const PIPELINE: &[Step] = &[
    Step {
        name: "metadata",
        run: |_, vmi, d| Metadata.configure(vmi, d),
    },
    Step {
        name: "network",
        run: |env, vmi, d| Network { env }.configure(vmi, d),
    },
    Step {
        name: "tpm",
        run: |_, vmi, d| Tpm.configure(vmi, d),
    },
    Step {
        name: "vsock",
        run: |env, vmi, d| {
            Vsock {
                default_cid: env.ctx.default_vsock_cid,
            }
            .configure(vmi, d)
        },
    },
    Step {
        name: "launch_security",
        run: |env, vmi, d| LaunchSecurity { arch: env.arch }.configure(vmi, d),
    },
    Step {
        name: "channels",
        run: |_, vmi, d| Channels.configure(vmi, d),
    },
    Step {
        name: "clock",
        run: |_, vmi, d| Clock.configure(vmi, d),
    },
    Step {
        name: "rng",
        run: |env, vmi, d| Rng { env }.configure(vmi, d),
    },
    Step {
        name: "input",
        run: |env, vmi, d| InputDevices { arch: env.arch }.configure(vmi, d),
    },
    Step {
        name: "balloon",
        run: |env, vmi, d| Balloon { env }.configure(vmi, d),
    },
    Step {
        name: "graphics",
        run: |env, vmi, d| Graphics { env }.configure(vmi, d),
    },
    Step {
        name: "sound",
        run: |_, vmi, d| Sound.configure(vmi, d),
    },
    Step {
        name: "host_devices",
        run: |env, vmi, d| HostDevices { ctx: env.ctx }.configure(vmi, d),
    },
    Step {
        name: "watchdog",
        run: |env, vmi, d| Watchdog { arch: env.arch }.configure(vmi, d),
    },
    Step {
        name: "console",
        run: |env, vmi, d| Console { ctx: env.ctx }.configure(vmi, d),
    },
    Step {
        name: "panic",
        run: |_, vmi, d| PanicDevices.configure(vmi, d),
    },
    Step {
        name: "hypervisor_features",
        run: |env, vmi, d| HypervisorFeatures { env }.configure(vmi, d),
    },
    Step {
        name: "sysinfo",
        run: |env, vmi, d| {
            SysInfo {
                smbios: env.ctx.smbios.as_ref(),
            }
            .configure(vmi, d)
        },
    },
    Step {
        name: "os",
        run: |env, vmi, d| Os { env }.configure(vmi, d),
    },
    Step {
        name: "virtiofs",
        run: |_, vmi, d| Virtiofs.configure(vmi, d),
    },
    Step {
        name: "usb_redirect",
        run: |_, vmi, d| UsbRedirect.configure(vmi, d),
    },
    Step {
        name: "controllers",
        run: |env, vmi, d| Controllers { env }.configure(vmi, d),
    },
    Step {
        name: "qemu_cmd",
        run: |_, vmi, d| QemuCmd.configure(vmi, d),
    },
    Step {
        name: "cpu",
        run: |env, vmi, d| Cpu { env }.configure(vmi, d),
    },
    Step {
        name: "iothreads",
        run: |_, vmi, d| IoThreads.configure(vmi, d),
    },
    Step {
        name: "memory",
        run: |_, vmi, d| Memory.configure(vmi, d),
    },
    Step {
        name: "reboot_policy",
        run: |_, vmi, d| RebootPolicy.configure(vmi, d),
    },
    Step {
        name: "iommufd",
        run: |env, vmi, d| {
            Iommufd {
                enabled: env.ctx.iommufd_enabled,
            }
            .configure(vmi, d)
        },
    },
    Step {
        name: "hypervisor",
        run: |env, vmi, d| Hypervisor { ctx: env.ctx }.configure(vmi, d),
    },
];

/// Applies the configurators of [`PIPELINE`] in order; the first error stops the conversion.
pub(crate) fn run_pipeline(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    for step in PIPELINE {
        (step.run)(env, vmi, domain)?;
    }
    Ok(())
}

impl<'a> Env<'a> {
    /// Derives the per-conversion environment from VMI and context.
    pub(crate) fn new(vmi: &VirtualMachineInstance, ctx: &'a ConverterContext) -> Env<'a> {
        let guest = vmi.spec.architecture.as_deref().and_then(Arch::parse);
        let arch = match guest {
            Some(g) if ctx.allow_cross_arch_emulation && g != ctx.architecture => g,
            _ => ctx.architecture,
        };
        let transitional = vmi.spec.domain.devices.use_virtio_transitional == Some(true);
        let virtio_model = match (arch, transitional) {
            (Arch::S390x, _) => "virtio",
            (_, true) => "virtio-transitional",
            (_, false) => "virtio-non-transitional",
        };
        let ls = vmi.spec.domain.launch_security.as_ref();
        Env {
            ctx,
            arch,
            virtio_model,
            sev: ls.is_some_and(|l| l.sev.is_some() || l.snp.is_some()),
            tdx: ls.is_some_and(|l| l.tdx.is_some()),
            pv: ls.is_some() && vmi.spec.architecture.as_deref() == Some("s390x"),
        }
    }

    /// The architecture allows disabling the NIC option ROM.
    pub(crate) fn rom_tuning(&self) -> bool {
        self.arch != Arch::S390x
    }

    /// SCSI controller model.
    pub(crate) fn scsi_model(&self) -> &'static str {
        if self.arch == Arch::S390x {
            "virtio-scsi"
        } else {
            self.virtio_model
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pipeline's order is KubeVirt v1.9.0's: each step beside the Go configurator
    /// `Convert_v1_VirtualMachineInstance_To_api_Domain` puts in the same place.
    #[test]
    fn configurators_run_in_kubevirt_v1_9_0_order() {
        let kubevirt = [
            ("metadata", "metadata.DomainConfigurator"),
            ("network", "network.NewDomainConfigurator"),
            ("tpm", "compute.TPMDomainConfigurator"),
            ("vsock", "compute.VSOCKDomainConfigurator"),
            (
                "launch_security",
                "compute.NewLaunchSecurityDomainConfigurator",
            ),
            ("channels", "compute.ChannelsDomainConfigurator"),
            ("clock", "compute.ClockDomainConfigurator"),
            ("rng", "compute.NewRNGDomainConfigurator"),
            ("input", "compute.NewInputDeviceDomainConfigurator"),
            ("balloon", "compute.NewBalloonDomainConfigurator"),
            ("graphics", "compute.NewGraphicsDomainConfigurator"),
            ("sound", "compute.SoundDomainConfigurator"),
            ("host_devices", "compute.NewHostDeviceDomainConfigurator"),
            ("watchdog", "compute.NewWatchdogDomainConfigurator"),
            ("console", "compute.NewConsoleDomainConfigurator"),
            ("panic", "compute.PanicDevicesDomainConfigurator"),
            (
                "hypervisor_features",
                "compute.NewHypervisorFeaturesDomainConfigurator",
            ),
            ("sysinfo", "compute.NewSysInfoDomainConfigurator"),
            ("os", "compute.NewOSDomainConfigurator"),
            ("virtiofs", "storage.NewVirtiofsConfigurator"),
            (
                "usb_redirect",
                "compute.UsbRedirectDeviceDomainConfigurator",
            ),
            ("controllers", "compute.NewControllersDomainConfigurator"),
            ("qemu_cmd", "compute.NewQemuCmdDomainConfigurator"),
            ("cpu", "compute.NewCPUDomainConfigurator"),
            ("iothreads", "compute.NewIOThreadsDomainConfigurator"),
            ("memory", "compute.MemoryConfigurator"),
            ("reboot_policy", "compute.RebootPolicyDomainConfigurator"),
            ("iommufd", "compute.NewIOMMUFDConfigurator"),
            (
                "hypervisor",
                "kvm.NewKvmDomainConfigurator (mshv.NewMshvDomainConfigurator)",
            ),
        ];
        let ours: Vec<&str> = PIPELINE.iter().map(|step| step.name).collect();
        let theirs: Vec<&str> = kubevirt.iter().map(|(name, _)| *name).collect();
        assert_eq!(ours, theirs);
    }

    /// Each configurator alone on an empty domain, for the VMI that touches them all: its
    /// snapshot shows exactly what that configurator writes (`iommufd` with a descriptor, so it
    /// writes something).
    #[test]
    fn each_configurator_alone_on_the_all_devices_vmi() {
        let vmi = testing::all_devices();
        let ctx = ConverterContext {
            iommufd_enabled: true,
            ..ConverterContext::default()
        };
        let env = Env::new(&vmi, &ctx);
        for step in PIPELINE {
            let mut domain = Domain::default();
            (step.run)(&env, &vmi, &mut domain).expect(step.name);
            insta::assert_snapshot!(step.name, domain.to_xml().expect("writes"));
        }
    }
}
