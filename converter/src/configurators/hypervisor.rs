//! Domain type: `kvm` with a hypervisor device, `qemu` (software emulation) otherwise, including
//! cross-architecture guests. KubeVirt's MSHV configurator takes the same decision for `/dev/mshv`.

use super::Configurator;
use crate::context::ConverterContext;
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Decides the domain type.
pub(super) struct Hypervisor<'a> {
    /// The context.
    pub ctx: &'a ConverterContext,
}

fn emulator_path(arch: &str) -> Option<&'static str> {
    match arch {
        "arm64" | "aarch64" => Some("/usr/bin/qemu-system-aarch64"),
        "amd64" | "x86_64" => Some("/usr/bin/qemu-system-x86_64"),
        "s390x" => Some("/usr/bin/qemu-system-s390x"),
        _ => None,
    }
}

impl Configurator for Hypervisor<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let ctx = self.ctx;
        let guest = vmi.spec.architecture.as_deref().unwrap_or("");
        let host = ctx.architecture.name();
        if ctx.hypervisor_name != "hyperv-direct"
            && !guest.is_empty()
            && guest != host
            && ctx.allow_cross_arch_emulation
        {
            domain.kind = "qemu".into();
            let path = emulator_path(guest).ok_or_else(|| {
                ConvertError::new(
                    "spec.architecture",
                    format!(
                        "unsupported guest architecture for cross-architecture emulation: {guest}"
                    ),
                )
            })?;
            domain.devices.emulator = Some(path.into());
            return Ok(());
        }
        if !ctx.hypervisor_device_available {
            if !ctx.allow_emulation {
                return Err(ConvertError::new(
                    "spec",
                    format!(
                        "{} not present and emulation is not allowed",
                        ctx.hypervisor_name
                    ),
                ));
            }
            domain.kind = "qemu".into();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use crate::context::Arch;
    use serde_json::{Value, json};

    fn on(ctx: &ConverterContext, spec: Value) -> Result<Domain, ConvertError> {
        run(&Hypervisor { ctx }, &vmi(spec))
    }

    fn plain() -> Value {
        json!({"domain": {"devices": {}}})
    }

    fn guest(arch: &str) -> Value {
        json!({"architecture": arch, "domain": {"devices": {}}})
    }

    fn cross(host: Arch) -> ConverterContext {
        ConverterContext {
            architecture: host,
            allow_cross_arch_emulation: true,
            ..ConverterContext::default()
        }
    }

    #[test]
    fn with_kvm_the_domain_type_is_left_to_the_defaults() {
        let kvm = ConverterContext::default();
        assert_eq!(on(&kvm, plain()).unwrap().kind, "");
        let kvm_no_emulation = ConverterContext {
            allow_emulation: false,
            ..kvm
        };
        assert_eq!(on(&kvm_no_emulation, plain()).unwrap().kind, "");
    }

    #[test]
    fn without_kvm_the_domain_is_emulated_if_allowed_and_refused_otherwise() {
        let no_kvm = ConverterContext {
            hypervisor_device_available: false,
            ..ConverterContext::default()
        };
        assert_eq!(on(&no_kvm, plain()).unwrap().kind, "qemu");
        let refused = ConverterContext {
            allow_emulation: false,
            ..no_kvm
        };
        let err = on(&refused, plain()).unwrap_err();
        assert_eq!(err.path, "spec");
        assert_eq!(err.reason, "kvm not present and emulation is not allowed");
    }

    #[test]
    fn a_foreign_guest_is_emulated_with_its_own_qemu_binary() {
        let d = on(&cross(Arch::Amd64), guest("arm64")).unwrap();
        assert_eq!(d.kind, "qemu");
        assert_eq!(
            d.devices.emulator.as_deref(),
            Some("/usr/bin/qemu-system-aarch64")
        );
        let d = on(&cross(Arch::Arm64), guest("amd64")).unwrap();
        assert_eq!(
            d.devices.emulator.as_deref(),
            Some("/usr/bin/qemu-system-x86_64")
        );
        let d = on(&cross(Arch::Amd64), guest("s390x")).unwrap();
        assert_eq!(
            d.devices.emulator.as_deref(),
            Some("/usr/bin/qemu-system-s390x")
        );
    }

    #[test]
    fn cross_architecture_emulation_does_not_need_emulation_allowed() {
        let ctx = ConverterContext {
            allow_emulation: false,
            hypervisor_device_available: false,
            ..cross(Arch::Amd64)
        };
        assert_eq!(on(&ctx, guest("arm64")).unwrap().kind, "qemu");
    }

    #[test]
    fn no_cross_emulation_without_the_gate_for_the_hosts_own_or_an_unset_architecture() {
        let gate_off = ConverterContext::default();
        let d = on(&gate_off, guest("arm64")).unwrap();
        assert_eq!((d.kind.as_ref(), d.devices.emulator.is_none()), ("", true));
        for spec in [guest("amd64"), plain()] {
            let d = on(&cross(Arch::Amd64), spec).unwrap();
            assert_eq!((d.kind.as_ref(), d.devices.emulator.is_none()), ("", true));
        }
    }

    #[test]
    fn an_unknown_guest_architecture_is_refused() {
        let err = on(&cross(Arch::Amd64), guest("riscv64")).unwrap_err();
        assert_eq!(err.path, "spec.architecture");
        assert!(err.reason.contains("riscv64"), "{err}");
    }

    #[test]
    fn hyperv_direct_never_emulates_another_architecture() {
        let ctx = ConverterContext {
            hypervisor_name: "hyperv-direct".into(),
            ..cross(Arch::Amd64)
        };
        let d = on(&ctx, guest("arm64")).unwrap();
        assert_eq!((d.kind.as_ref(), d.devices.emulator.is_none()), ("", true));
        let no_device = ConverterContext {
            hypervisor_device_available: false,
            allow_emulation: false,
            ..ctx
        };
        let err = on(&no_device, plain()).unwrap_err();
        assert_eq!(
            err.reason,
            "hyperv-direct not present and emulation is not allowed"
        );
    }
}
