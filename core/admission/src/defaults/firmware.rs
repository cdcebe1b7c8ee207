//! Firmware defaults and the stable firmware UUID KubeVirt's VM controller derives from a name.

use crate::api::{Firmware, VirtualMachineInstance};

use super::uuid;

/// The namespace UUID KubeVirt's VM controller hashes VM names in (its "legacy" firmware UUID).
const FIRMWARE_UUID_NAMESPACE: &str = "6a1a24a1-4061-4607-8bf4-a3963d0c5895";

/// The firmware UUID KubeVirt gives the VMI of a VirtualMachine called `name`: the version 5
/// UUID of `name` in KubeVirt's firmware namespace. It depends on the name only, so the guest
/// sees the same SMBIOS UUID across restarts of the VM (and in any namespace).
///
/// KubeVirt v1.9.0 has only this ("legacy") derivation: the VM controller patches it into a VM
/// template that has none and gives it to the VMIs it creates, snapshot restore uses it too.
/// It is the single implementation in kvrs; [`crate::template::firmware_uuid_for_vm`] is the
/// same function under the name the VM-side callers use.
pub fn legacy_uuid_for_name(name: &str) -> String {
    // The namespace is a valid constant; parsing it cannot fail.
    let ns = uuid::parse(FIRMWARE_UUID_NAMESPACE).unwrap_or_default();
    uuid::v5(&ns, name.as_bytes())
}

/// The UUID kvrs gives a VMI that has none. KubeVirt picks a random one here; kvrs's pure
/// defaulting takes no randomness, so it uses the name-derived UUID the VM controller would use
/// for a VM of the same name. Deterministic, and different for differently named VMIs.
pub fn stable_uuid_for(vmi: &VirtualMachineInstance) -> String {
    let name = vmi.metadata.name.as_deref().unwrap_or("");
    legacy_uuid_for_name(name)
}

/// `spec.domain.firmware` always exists after defaulting, with a UUID.
pub(super) fn set_firmware(vmi: &mut VirtualMachineInstance) {
    let missing = vmi
        .spec
        .domain
        .firmware
        .as_ref()
        .is_none_or(|f| f.uuid.as_deref().unwrap_or("").is_empty());
    let uuid = missing.then(|| stable_uuid_for(vmi));
    let firmware = vmi
        .spec
        .domain
        .firmware
        .get_or_insert_with(Firmware::default);
    if let Some(uuid) = uuid {
        firmware.uuid = Some(uuid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_for_vm1_matches_kubevirt() {
        // The value KubeVirt v1.9.0 patched into VM "vm1" (oracle case vm-no-firmware-uuid).
        assert_eq!(
            legacy_uuid_for_name("vm1"),
            "133bf63e-9459-5126-9b21-b56e9b3d17b3"
        );
    }
}
