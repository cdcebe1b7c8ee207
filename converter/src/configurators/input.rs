//! `<input>`: the VMI's tablets, plus the keyboard / tablet other architectures need for VNC.

use super::Configurator;
use crate::context::Arch;
use crate::domain::{Alias, Domain, Few, Input};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the input devices.
pub(super) struct InputDevices {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::{Value, json};

    fn inputs_on(arch: Arch, devices: Value) -> Result<Vec<Input>, ConvertError> {
        let vmi = vmi(json!({"domain": {"devices": devices}}));
        Ok(run(&InputDevices { arch }, &vmi)?.devices.inputs.to_vec())
    }

    /// `type:bus:model` of each input, in order.
    fn described(inputs: &[Input]) -> Vec<String> {
        inputs
            .iter()
            .map(|i| format!("{}:{}:{}", i.kind, i.bus, i.model.as_deref().unwrap_or("")))
            .collect()
    }

    #[test]
    fn the_vmis_tablets_keep_their_bus_and_virtio_ones_get_the_virtio_model() {
        let tablets = json!({"autoattachGraphicsDevice": false, "inputs": [
            {"name": "t0", "type": "tablet"},
            {"name": "t1", "type": "tablet", "bus": "usb"},
            {"name": "t2", "type": "tablet", "bus": "virtio"},
        ]});
        for arch in [Arch::Amd64, Arch::Arm64, Arch::S390x] {
            let inputs = inputs_on(arch, tablets.clone()).unwrap();
            assert_eq!(
                described(&inputs),
                ["tablet:usb:", "tablet:usb:", "tablet:virtio:virtio"]
            );
            assert_eq!(inputs[0].alias, Some(Alias::user("t0")));
        }
    }

    #[test]
    fn another_bus_or_type_is_refused_naming_the_input() {
        let err = inputs_on(
            Arch::Amd64,
            json!({"inputs": [{"name": "k", "type": "tablet", "bus": "ps2"}]}),
        )
        .unwrap_err();
        assert_eq!(err.path, "spec.domain.devices.inputs[0].bus");
        assert_eq!(err.reason, "input contains unsupported bus ps2");
        let err = inputs_on(
            Arch::Amd64,
            json!({"inputs": [{"name": "k", "type": "keyboard"}]}),
        )
        .unwrap_err();
        assert_eq!(err.path, "spec.domain.devices.inputs[0].type");
        assert_eq!(err.reason, "input contains unsupported type keyboard");
    }

    #[test]
    fn vnc_on_arm64_and_s390x_needs_its_own_keyboard_and_on_arm64_a_tablet() {
        for devices in [json!({}), json!({"autoattachGraphicsDevice": true})] {
            assert!(inputs_on(Arch::Amd64, devices.clone()).unwrap().is_empty());
            let arm = inputs_on(Arch::Arm64, devices.clone()).unwrap();
            assert_eq!(described(&arm), ["tablet:usb:", "keyboard:usb:"]);
            let s390x = inputs_on(Arch::S390x, devices).unwrap();
            assert_eq!(described(&s390x), ["keyboard:virtio:"]);
        }
    }

    #[test]
    fn arm64_adds_no_second_tablet_to_the_vmis_own() {
        let own = json!({"inputs": [{"name": "t", "type": "tablet", "bus": "virtio"}]});
        let arm = inputs_on(Arch::Arm64, own).unwrap();
        assert_eq!(described(&arm), ["tablet:virtio:virtio", "keyboard:usb:"]);
    }

    #[test]
    fn without_graphics_no_input_is_added() {
        for arch in [Arch::Amd64, Arch::Arm64, Arch::S390x] {
            let inputs = inputs_on(arch, json!({"autoattachGraphicsDevice": false})).unwrap();
            assert!(inputs.is_empty());
        }
    }
}
