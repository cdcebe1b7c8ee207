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
pub(super) const DISABLE_PCI_HOLE64: &str = "kubevirt.io/disablePCIHole64";

/// Writes the controllers.
pub(super) struct Controllers<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

/// The bus of a disk, whatever kind it is.
pub(super) fn disk_bus(d: &Disk) -> &str {
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
pub(super) fn usb_needed(vmi: &VirtualMachineInstance, arch: Arch) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{annotated, node, run, vmi};
    use crate::context::ConverterContext;
    use serde_json::{Value, json};

    fn controllers_of(vmi: &VirtualMachineInstance, ctx: &ConverterContext) -> Vec<Controller> {
        let env = Env::new(vmi, ctx);
        run(&Controllers { env: &env }, vmi)
            .unwrap()
            .devices
            .controllers
    }

    fn controllers(domain: Value) -> Vec<Controller> {
        controllers_of(
            &vmi(json!({"domain": domain})),
            &ConverterContext::default(),
        )
    }

    /// `type=model` of each controller, in order.
    fn kinds(controllers: &[Controller]) -> Vec<String> {
        let model = |c: &Controller| c.model.as_deref().unwrap_or("").to_string();
        controllers
            .iter()
            .map(|c| format!("{}={}", c.kind, model(c)))
            .collect()
    }

    fn scsi(controllers: &[Controller]) -> Option<&Controller> {
        controllers.iter().find(|c| c.kind == "scsi")
    }

    #[test]
    fn default_vmi_gets_no_usb_a_scsi_controller_for_hotplug_and_virtio_serial() {
        assert_eq!(
            kinds(&controllers(json!({"devices": {}}))),
            [
                "usb=none",
                "scsi=virtio-non-transitional",
                "virtio-serial=virtio-non-transitional"
            ]
        );
    }

    #[test]
    fn usb_is_needed_for_usb_inputs_and_disks_and_client_passthrough_on_amd64() {
        let usb = |devices: Value| controllers(json!({"devices": devices}))[0].model.clone();
        assert_eq!(usb(json!({})).as_deref(), Some("none"));
        for devices in [
            json!({"inputs": [{"name": "t", "type": "tablet"}]}),
            json!({"inputs": [{"name": "t", "type": "tablet", "bus": "usb"}]}),
            json!({"disks": [{"name": "d", "disk": {"bus": "usb"}}]}),
            json!({"clientPassthrough": {}}),
        ] {
            assert_eq!(
                usb(devices.clone()).as_deref(),
                Some("qemu-xhci"),
                "{devices}"
            );
        }
        let virtio_input = json!({"inputs": [{"name": "t", "type": "tablet", "bus": "virtio"}]});
        assert_eq!(usb(virtio_input).as_deref(), Some("none"));
    }

    #[test]
    fn arm64_always_needs_usb_and_s390x_never() {
        let tablet = json!({"domain": {"devices": {"inputs": [{"name": "t", "type": "tablet"}]}}});
        let arm = controllers_of(&vmi(json!({"domain": {"devices": {}}})), &node(Arch::Arm64));
        assert_eq!(arm[0].model.as_deref(), Some("qemu-xhci"));
        let s390x = controllers_of(&vmi(tablet), &node(Arch::S390x));
        assert_eq!(
            kinds(&s390x),
            ["usb=none", "scsi=virtio-scsi", "virtio-serial=virtio"]
        );
    }

    #[test]
    fn without_hotplug_the_scsi_controller_is_there_only_for_scsi_disks() {
        let no_hotplug = controllers(json!({"devices": {"disableHotplug": true}}));
        assert_eq!(scsi(&no_hotplug), None);
        let with_scsi_disk = controllers(json!({"devices": {"disableHotplug": true,
            "disks": [{"name": "d", "disk": {"bus": "scsi"}}]}}));
        assert!(scsi(&with_scsi_disk).is_some());
        let lun = controllers(json!({"devices": {"disableHotplug": true,
            "disks": [{"name": "d", "lun": {"bus": "scsi"}}]}}));
        assert!(scsi(&lun).is_some());
    }

    /// A VMI with the `auto` IO thread policy on `cpus` CPUs and the given disks.
    fn auto_threads(cpus: u32, disks: Value) -> Value {
        json!({"ioThreadsPolicy": "auto", "devices": {"disks": disks},
            "resources": {"requests": {"cpu": cpus.to_string()}}})
    }

    fn scsi_thread(domain: Value) -> Option<(Option<u32>, Option<u32>)> {
        let controllers = controllers(domain);
        let driver = scsi(&controllers)?.driver.as_ref()?;
        Some((driver.iothread, driver.queues))
    }

    #[test]
    fn a_dedicated_scsi_disk_puts_the_controller_on_the_next_shared_io_thread() {
        let dedicated_scsi =
            json!({"name": "s", "disk": {"bus": "scsi"}, "dedicatedIOThread": true});
        let virtio = |name: &str| json!({"name": name, "disk": {"bus": "virtio"}});
        let sata = json!({"name": "c", "disk": {"bus": "sata"}});
        // Two CPUs: four threads at most, one dedicated, so the two other disks get one shared
        // thread each; the controller starts after the threads the virtio disks take, and its
        // queues are the vCPUs.
        let one = auto_threads(2, json!([dedicated_scsi, virtio("v1"), sata]));
        assert_eq!(scsi_thread(one), Some((Some(2), Some(2))));
        // Past the last shared thread it rolls over to the first.
        let two = auto_threads(2, json!([dedicated_scsi, virtio("v1"), virtio("v2")]));
        assert_eq!(scsi_thread(two), Some((Some(1), Some(2))));
    }

    #[test]
    fn the_scsi_controller_gets_no_io_thread_without_shared_threads_or_dedicated_scsi_disks() {
        let dedicated_scsi =
            json!({"name": "s", "disk": {"bus": "scsi"}, "dedicatedIOThread": true});
        // No policy: the dedicated disk's own thread is the only one.
        let no_shared = json!({"devices": {"disks": [dedicated_scsi]}});
        assert_eq!(scsi_thread(no_shared), None);
        let shared_scsi = auto_threads(2, json!([{"name": "s", "disk": {"bus": "scsi"}}]));
        assert_eq!(scsi_thread(shared_scsi), None);
    }

    #[test]
    fn the_pci_hole_annotation_disables_the_64_bit_hole_on_amd64_only() {
        let spec = json!({"domain": {"devices": {}}});
        let pci = |value: &str, ctx: &ConverterContext| {
            let vmi = annotated(json!({DISABLE_PCI_HOLE64: value}), spec.clone());
            let controllers = controllers_of(&vmi, ctx);
            controllers.into_iter().find(|c| c.kind == "pci")
        };
        let amd64 = ConverterContext::default();
        let hole = pci("true", &amd64).expect("a pcie-root controller");
        assert_eq!(hole.model.as_deref(), Some("pcie-root"));
        assert_eq!(
            hole.pcihole64,
            Some(PciHole64 {
                value: 0,
                unit: Some("KiB".into())
            })
        );
        assert!(
            pci("True", &amd64).is_some(),
            "the value is compared ignoring case"
        );
        assert_eq!(pci("false", &amd64), None);
        assert_eq!(pci("true", &node(Arch::Arm64)), None);
        assert!(
            controllers_of(&vmi(spec.clone()), &amd64)
                .iter()
                .all(|c| c.kind != "pci")
        );
    }

    #[test]
    fn virtio_serial_follows_the_serial_console() {
        let has = |devices: Value| {
            let controllers = controllers(json!({"devices": devices}));
            controllers.iter().any(|c| c.kind == "virtio-serial")
        };
        assert!(has(json!({})));
        assert!(has(json!({"autoattachSerialConsole": true})));
        assert!(!has(json!({"autoattachSerialConsole": false})));
    }

    #[test]
    fn sev_puts_scsi_and_virtio_serial_behind_the_iommu() {
        let controllers = controllers(json!({"devices": {}, "launchSecurity": {"sev": {}}}));
        let iommu: Vec<_> = controllers
            .iter()
            .map(|c| c.driver.as_ref().and_then(|d| d.iommu.as_deref()))
            .collect();
        assert_eq!(iommu, [None, Some("on"), Some("on")]);
    }
}
