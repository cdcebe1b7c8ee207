//! Domain type: `kvm` with a hypervisor device, `qemu` (software emulation) otherwise, including
//! cross-architecture guests. KubeVirt's MSHV configurator takes the same decision for `/dev/mshv`.

use super::Configurator;
use crate::context::ConverterContext;
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Decides the domain type.
pub struct Hypervisor<'a> {
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
