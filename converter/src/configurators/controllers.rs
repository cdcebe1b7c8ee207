//! `<controller>`: USB (xhci or none), SCSI for hotplug, PCIe root without the 64-bit hole, and
//! virtio-serial for the console and agent.

use super::{Configurator, Env, util};
use crate::context::Arch;
use crate::domain::{Controller, ControllerDriver, Domain, PciHole64};
use crate::error::ConvertError;
use crate::iothreads::{has_dedicated, has_io_threads, io_thread_counts};
use crate::topology::vcpu_count;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::Disk;

/// Annotation disabling the 64-bit PCI hole.
pub const DISABLE_PCI_HOLE64: &str = "kubevirt.io/disablePCIHole64";

/// Writes the controllers.
pub struct Controllers<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

/// The bus of a disk, whatever kind it is.
pub fn disk_bus(d: &Disk) -> &str {
    let b = if let Some(l) = &d.lun {
        l.bus.as_deref()
    } else if let Some(x) = &d.disk {
        x.bus.as_deref()
    } else if let Some(c) = &d.cdrom {
        c.bus.as_deref()
    } else {
        None
    };
    b.unwrap_or("")
}

/// amd64's rule for needing a USB controller.
pub fn usb_needed(vmi: &VirtualMachineInstance, arch: Arch) -> bool {
    let dev = &vmi.spec.domain.devices;
    if arch == Arch::S390x {
        return false;
    }
    if arch == Arch::Arm64 {
        return true;
    }
    dev.inputs
        .iter()
        .flatten()
        .any(|i| matches!(i.bus.as_deref(), None | Some("") | Some("usb")))
        || dev
            .disks
            .iter()
            .flatten()
            .any(|d| d.disk.as_ref().and_then(|t| t.bus.as_deref()) == Some("usb"))
        || dev.client_passthrough.is_some()
}

impl Configurator for Controllers<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let dev = &vmi.spec.domain.devices;
        let driver = (self.env.sev || self.env.pv).then(|| ControllerDriver {
            iommu: Some("on".into()),
            ..Default::default()
        });
        let usb = usb_needed(vmi, self.env.arch);
        // usb, scsi, pci and virtio-serial at most: one allocation.
        domain.devices.controllers.reserve_exact(4);
        domain.devices.controllers.push(Controller {
            kind: "usb".into(),
            index: "0".into(),
            model: Some(if usb { "qemu-xhci" } else { "none" }.into()),
            ..Controller::default()
        });
        let disks = dev.disks.as_deref().unwrap_or(&[]);
        let needs_scsi =
            !dev.disable_hotplug.unwrap_or(false) || disks.iter().any(|d| disk_bus(d) == "scsi");
        if needs_scsi {
            let mut drv = driver.clone();
            let auto = if has_io_threads(vmi) {
                io_thread_counts(vmi).1
            } else {
                0
            };
            if auto != 0
                && disks
                    .iter()
                    .any(|d| disk_bus(d) == "scsi" && has_dedicated(d))
            {
                let mut thread = 1u32;
                for d in disks {
                    if disk_bus(d) == "virtio" && !has_dedicated(d) {
                        thread = (thread % auto) + 1;
                    }
                }
                let d = drv.get_or_insert_with(ControllerDriver::default);
                d.iothread = Some(thread);
                d.queues = Some(vcpu_count(vmi));
            }
            domain.devices.controllers.push(Controller {
                kind: "scsi".into(),
                index: "0".into(),
                model: Some(self.env.scsi_model().into()),
                driver: drv,
                ..Controller::default()
            });
        }
        if self.env.arch == Arch::Amd64
            && util::annotation(vmi, DISABLE_PCI_HOLE64)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            domain.devices.controllers.push(Controller {
                kind: "pci".into(),
                index: "0".into(),
                model: Some("pcie-root".into()),
                pcihole64: Some(PciHole64 {
                    value: 0,
                    unit: Some("KiB".into()),
                }),
                ..Controller::default()
            });
        }
        if dev.autoattach_serial_console.unwrap_or(true) {
            domain.devices.controllers.push(Controller {
                kind: "virtio-serial".into(),
                index: "0".into(),
                model: Some(self.env.virtio_model.into()),
                driver,
                ..Controller::default()
            });
        }
        Ok(())
    }
}
