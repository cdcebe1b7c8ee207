//! `<memory>` and `<maxMemory>`: guest memory, with a hotplug ceiling when `maxGuest` is larger.

use super::Configurator;
use crate::domain::{Domain, MaxMemory, Memory as DomMemory};
use crate::error::ConvertError;
use crate::topology::{quantity_to_bytes, virtual_memory};
use kvrs_api::VirtualMachineInstance;

/// Writes guest memory.
pub struct Memory;

impl Configurator for Memory {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let mem = vmi.spec.domain.memory.as_ref();
        let max = mem.and_then(|m| m.max_guest.as_ref());
        let guest = mem.and_then(|m| m.guest.as_ref());
        let path = "spec.domain.memory.guest";
        match (max, guest) {
            (Some(max), Some(guest)) => {
                let max_b = quantity_to_bytes(max, "spec.domain.memory.maxGuest")?;
                let guest_b = quantity_to_bytes(guest, path)?;
                if max_b == guest_b {
                    domain.memory = DomMemory {
                        value: guest_b,
                        unit: "b".into(),
                    };
                } else {
                    domain.max_memory = Some(MaxMemory {
                        value: max_b,
                        unit: "b".into(),
                        slots: 0,
                    });
                    domain.memory = DomMemory {
                        value: guest_b,
                        unit: "b".into(),
                    };
                }
            }
            (Some(_), None) => {
                return Err(ConvertError::new(
                    path,
                    "maxGuest is set without guest memory",
                ));
            }
            (None, _) => {
                let q = virtual_memory(vmi);
                let b = match q {
                    Some(q) => quantity_to_bytes(q, path)?,
                    None => 0,
                };
                domain.memory = DomMemory {
                    value: b,
                    unit: "b".into(),
                };
            }
        }
        Ok(())
    }
}
