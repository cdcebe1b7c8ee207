//! `<input>`: the VMI's tablets, plus the keyboard / tablet other architectures need for VNC.

use super::Configurator;
use crate::context::Arch;
use crate::domain::{Alias, Domain, Few, Input};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the input devices.
pub struct InputDevices {
    /// Effective architecture.
    pub arch: Arch,
}

impl Configurator for InputDevices {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let devices = &vmi.spec.domain.devices;
        if let Some(inputs) = &devices.inputs {
            let mut out = Few::with_capacity(inputs.len());
            for (i, input) in inputs.iter().enumerate() {
                let bus = match input.bus.as_deref().unwrap_or("") {
                    "" | "usb" => "usb",
                    "virtio" => "virtio",
                    other => {
                        return Err(ConvertError::new(
                            format!("spec.domain.devices.inputs[{i}].bus"),
                            format!("input contains unsupported bus {other}"),
                        ));
                    }
                };
                if input.r#type != "tablet" {
                    return Err(ConvertError::new(
                        format!("spec.domain.devices.inputs[{i}].type"),
                        format!("input contains unsupported type {}", input.r#type),
                    ));
                }
                out.push(Input {
                    // Checked above: always `tablet`, so the constant (no copy).
                    kind: "tablet".into(),
                    bus: bus.into(),
                    alias: Some(Alias::user(&input.name)),
                    address: None,
                    model: (bus == "virtio").then(|| "virtio".into()),
                });
            }
            domain.devices.inputs = out;
        }
        if devices.autoattach_graphics_device.unwrap_or(true) {
            let plain = |kind: &'static str, bus: &'static str| Input {
                kind: kind.into(),
                bus: bus.into(),
                ..Input::default()
            };
            match self.arch {
                Arch::Amd64 => {}
                Arch::Arm64 => {
                    let has_tablet = devices
                        .inputs
                        .as_ref()
                        .is_some_and(|v| v.iter().any(|i| i.r#type == "tablet"));
                    if !has_tablet {
                        domain.devices.inputs.push(plain("tablet", "usb"));
                    }
                    domain.devices.inputs.push(plain("keyboard", "usb"));
                }
                Arch::S390x => domain.devices.inputs.push(plain("keyboard", "virtio")),
            }
        }
        Ok(())
    }
}
