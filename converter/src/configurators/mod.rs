//! The configurators: one small builder per part of the domain, applied in KubeVirt v1.9.0's order.
//!
//! Each file is named after the device or section it writes. [`pipeline`] returns them in the
//! order KubeVirt's `Convert_v1_VirtualMachineInstance_To_api_Domain` lists them; disks and
//! volumes follow in [`crate::disks`].

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
mod tpm;
mod usb_redirect;
pub(crate) mod util;
mod virtiofs;
mod vsock;
mod watchdog;

pub use network::{AttachedElsewhere, UnrenderedInterface, check_rendered_interfaces};

pub use balloon::Balloon;
pub use channels::Channels;
pub use clock::Clock;
pub use console::Console;
pub use controllers::Controllers;
pub use cpu::Cpu;
pub use graphics::Graphics;
pub use host_devices::HostDevices;
pub use hypervisor::Hypervisor;
pub use hypervisor_features::HypervisorFeatures;
pub use input::InputDevices;
pub use iommufd::Iommufd;
pub use iothreads::IoThreads;
pub use launch_security::LaunchSecurity;
pub use memory::Memory;
pub use metadata::Metadata;
pub use network::Network;
pub use network::pci_address as network_pci_address;
pub use os::Os;
pub use panic::PanicDevices;
pub use qemu_cmd::QemuCmd;
pub use reboot_policy::RebootPolicy;
pub use rng::Rng;
pub use sound::Sound;
pub use sysinfo::SysInfo;
pub use tpm::Tpm;
pub use usb_redirect::UsbRedirect;
pub use virtiofs::Virtiofs;
pub use vsock::Vsock;
pub use watchdog::Watchdog;

/// One step of the conversion: writes its part of the domain from the VMI.
pub trait Configurator {
    /// Adds or sets this configurator's part of `domain`.
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError>;
}

/// Per-conversion facts every configurator may need, derived once from VMI + context.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
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

/// Applies the 29 configurators in KubeVirt v1.9.0's order.
pub fn run_pipeline(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let ctx = env.ctx;
    Metadata.configure(vmi, domain)?;
    Network { env }.configure(vmi, domain)?;
    Tpm.configure(vmi, domain)?;
    Vsock {
        default_cid: ctx.default_vsock_cid,
    }
    .configure(vmi, domain)?;
    LaunchSecurity { arch: env.arch }.configure(vmi, domain)?;
    Channels.configure(vmi, domain)?;
    Clock.configure(vmi, domain)?;
    Rng { env }.configure(vmi, domain)?;
    InputDevices { arch: env.arch }.configure(vmi, domain)?;
    Balloon { env }.configure(vmi, domain)?;
    Graphics { env }.configure(vmi, domain)?;
    Sound.configure(vmi, domain)?;
    HostDevices { ctx }.configure(vmi, domain)?;
    Watchdog { arch: env.arch }.configure(vmi, domain)?;
    Console { ctx }.configure(vmi, domain)?;
    PanicDevices.configure(vmi, domain)?;
    HypervisorFeatures { env }.configure(vmi, domain)?;
    SysInfo {
        smbios: ctx.smbios.as_ref(),
    }
    .configure(vmi, domain)?;
    Os { env }.configure(vmi, domain)?;
    Virtiofs.configure(vmi, domain)?;
    UsbRedirect.configure(vmi, domain)?;
    Controllers { env }.configure(vmi, domain)?;
    QemuCmd { arch: env.arch }.configure(vmi, domain)?;
    Cpu { env }.configure(vmi, domain)?;
    IoThreads.configure(vmi, domain)?;
    Memory.configure(vmi, domain)?;
    RebootPolicy.configure(vmi, domain)?;
    Iommufd {
        enabled: ctx.iommufd_enabled,
    }
    .configure(vmi, domain)?;
    Hypervisor { ctx }.configure(vmi, domain)?;
    Ok(())
}

/// The names of the configurators in pipeline order (for documentation and tests).
pub const ORDER: [&str; 29] = [
    "metadata",
    "network",
    "tpm",
    "vsock",
    "launch_security",
    "channels",
    "clock",
    "rng",
    "input",
    "balloon",
    "graphics",
    "sound",
    "host_devices",
    "watchdog",
    "console",
    "panic",
    "hypervisor_features",
    "sysinfo",
    "os",
    "virtiofs",
    "usb_redirect",
    "controllers",
    "qemu_cmd",
    "cpu",
    "iothreads",
    "memory",
    "reboot_policy",
    "iommufd",
    "hypervisor",
];
