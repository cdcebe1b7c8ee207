//! `<memory>` and `<maxMemory>`: guest memory, with a hotplug ceiling when `maxGuest` is larger.

use super::Configurator;
use crate::domain::{Domain, MaxMemory, Memory as DomMemory};
use crate::error::ConvertError;
use crate::topology::{quantity_to_bytes, virtual_memory};
use kvrs_api::VirtualMachineInstance;

/// Writes guest memory.
pub(super) struct Memory;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::{Value, json};

    fn memory(domain_spec: Value) -> Result<Domain, ConvertError> {
        run(&Memory, &vmi(json!({"domain": domain_spec})))
    }

    fn guest_bytes(quantity: &str) -> u64 {
        let d = memory(json!({"devices": {}, "memory": {"guest": quantity}})).unwrap();
        assert_eq!(d.memory.unit, "b");
        d.memory.value
    }

    #[test]
    fn memory_is_written_in_bytes() {
        assert_eq!(guest_bytes("64M"), 64_000_000);
        assert_eq!(guest_bytes("64Mi"), 64 << 20);
        assert_eq!(guest_bytes("3G"), 3_000_000_000);
        assert_eq!(guest_bytes("3Gi"), 3 << 30);
        assert_eq!(guest_bytes("2780Gi"), 2780 << 30);
        assert_eq!(guest_bytes("451231"), 451_231);
        // Fractions of a byte are dropped.
        assert_eq!(guest_bytes("2222222200m"), 2_222_222);
    }

    #[test]
    fn a_negative_size_is_refused_naming_the_field() {
        let err = memory(json!({"devices": {}, "memory": {"guest": "-64Mi"}})).unwrap_err();
        assert_eq!(err.path, "spec.domain.memory.guest");
    }

    #[test]
    fn max_guest_above_guest_memory_sets_the_hotplug_ceiling() {
        let d =
            memory(json!({"devices": {}, "memory": {"guest": "1Gi", "maxGuest": "4Gi"}})).unwrap();
        assert_eq!(d.memory.value, 1 << 30);
        let max = d.max_memory.expect("a ceiling");
        assert_eq!((max.value, max.unit.as_ref(), max.slots), (4 << 30, "b", 0));
        for same_or_unset in [
            json!({"guest": "1Gi", "maxGuest": "1Gi"}),
            json!({"guest": "1Gi"}),
        ] {
            let d = memory(json!({"devices": {}, "memory": same_or_unset})).unwrap();
            assert_eq!((d.memory.value, d.max_memory), (1 << 30, None));
        }
    }

    #[test]
    fn max_guest_without_guest_memory_is_refused() {
        let err = memory(json!({"devices": {}, "memory": {"maxGuest": "4Gi"}})).unwrap_err();
        assert_eq!(err.path, "spec.domain.memory.guest");
        assert_eq!(err.reason, "maxGuest is set without guest memory");
    }

    #[test]
    fn guest_memory_comes_first_then_the_request_then_the_limit() {
        let bytes = |domain_spec: Value| memory(domain_spec).unwrap().memory.value;
        let resources = json!({"requests": {"memory": "2Gi"}, "limits": {"memory": "3Gi"}});
        assert_eq!(
            bytes(json!({"devices": {}, "memory": {"guest": "1Gi"}, "resources": resources})),
            1 << 30
        );
        assert_eq!(
            bytes(json!({"devices": {}, "resources": resources})),
            2 << 30
        );
        let limit_only = json!({"limits": {"memory": "3Gi"}});
        assert_eq!(
            bytes(json!({"devices": {}, "resources": limit_only})),
            3 << 30
        );
        assert_eq!(bytes(json!({"devices": {}})), 0);
    }
}
