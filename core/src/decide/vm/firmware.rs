//! The stable firmware UUID of a VM.
//!
//! A VM whose template names no firmware UUID still needs the same SMBIOS UUID on every start
//! (guests key licences and machine IDs on it). KubeVirt derives it from the VM name as a
//! name-based (version 5, SHA-1) UUID in a fixed namespace, so the same name always yields the
//! same UUID, also across a kvrs/KubeVirt switch. The derivation lives in
//! [`crate::template::firmware_uuid_for_vm`]; this is the VM controller's name for it.

/// The firmware UUID for a VM named `name`, in canonical lower-case 8-4-4-4-12 form.
pub fn legacy_firmware_uuid(name: &str) -> String {
    crate::template::firmware_uuid_for_vm(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_for_vm1_matches_kubevirt() {
        // The value KubeVirt v1.9.0 patched into VM "vm1" (oracle case vm-no-firmware-uuid).
        assert_eq!(legacy_firmware_uuid("vm1"), "133bf63e-9459-5126-9b21-b56e9b3d17b3");
    }
}
