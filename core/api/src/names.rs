//! The well-known labels, annotations and finalizers KubeVirt's components agree on.
//!
//! They are part of the API as much as the structs are: virt-controller finds a VMI's launcher
//! pod by [`labels::CREATED_BY`], virt-handler watches its node's VMIs by [`labels::NODE_NAME`],
//! and a VM's finalizer is what keeps its VMI from being garbage-collected under it. One place
//! for them keeps the controllers, the handler and the tests spelling them the same way.
//!
//! [`path_component`] is the rule for the names that become a directory or file name on the node
//! (the VMI's name, namespace and UID, volume and virtiofs filesystem names).

use std::fmt::Display;

/// A VMI-supplied name that cannot be one component of a host path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PathComponentError {
    /// The VMI field the name came from, e.g. `metadata.uid` or
    /// `spec.domain.devices.filesystems[0].name`.
    pub field: String,
    /// What is wrong, quoting the value.
    pub reason: String,
}

/// `value` as one component of a host path: refused when it is empty, `.` or `..`, or contains
/// `/` or NUL, so that joining it under a directory can neither climb out of that directory nor
/// name the directory itself.
///
/// In a cluster the API server's validation keeps such names out (and assigns the UID); library
/// callers of the converter and the pod renderer may skip admission, so every path built from a
/// VMI-supplied name goes through here. `field` is formatted only on error (a `&str` or
/// `format_args!("spec.volumes[{i}].name")`).
///
/// ```
/// use kvrs_api::names::path_component;
/// assert_eq!(path_component("metadata.uid", "1234-abcd"), Ok("1234-abcd"));
/// let err = path_component("metadata.name", "../x").unwrap_err();
/// assert_eq!(err.to_string(), r#"metadata.name: "../x" is not a plain name (one path component): it contains '/'"#);
/// assert!(path_component("metadata.uid", "..").is_err());
/// assert!(path_component("metadata.uid", "").is_err());
/// ```
pub fn path_component(field: impl Display, value: &str) -> Result<&str, PathComponentError> {
    let why = if value.is_empty() {
        "it is empty"
    } else if value == "." || value == ".." {
        "it names a directory, not an entry in one"
    } else if !has_slash_or_nul(value.as_bytes()) {
        return Ok(value);
    } else if value.contains('/') {
        "it contains '/'"
    } else {
        "it contains NUL"
    };
    Err(PathComponentError {
        field: field.to_string(),
        reason: format!("{value:?} is not a plain name (one path component): {why}"),
    })
}

/// Whether `s` holds a `/` or a NUL byte, eight bytes at a time: names and UIDs (36 bytes) are
/// checked several times per conversion, and a byte loop was ~2% of one.
fn has_slash_or_nul(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const SLASHES: u64 = u64::from_ne_bytes([b'/'; 8]);
    // Nonzero exactly when some byte of `x` is zero (a borrow can mark bytes above a zero
    // byte too, never a word without one).
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let mut words = s.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        let x = u64::from_ne_bytes(b);
        if has_zero(x) || has_zero(x ^ SLASHES) {
            return true;
        }
    }
    words.remainder().iter().any(|&b| b == b'/' || b == 0)
}

/// Labels.
pub mod labels {
    /// On launcher pods: `virt-launcher`; the controller's pod informer selects on it.
    pub const APP: &str = "kubevirt.io";
    /// The value of [`APP`] on launcher pods.
    pub const APP_LAUNCHER: &str = "virt-launcher";
    /// On launcher pods: the UID of the VMI the pod runs.
    pub const CREATED_BY: &str = "kubevirt.io/created-by";
    /// On VMIs and launcher pods: the node the VMI runs on; virt-handler selects on it.
    pub const NODE_NAME: &str = "kubevirt.io/nodeName";
    /// On launcher pods: the VMI's name (`vm.kubevirt.io/name`).
    pub const VM_NAME: &str = "vm.kubevirt.io/name";
    /// On nodes: the node can run VMIs (set by virt-handler).
    pub const SCHEDULABLE: &str = "kubevirt.io/schedulable";
    /// On a migration target VMI: the node it is handed to; until it is set, the VMI controller
    /// leaves a decentralized migration's target VMI alone.
    pub const MIGRATION_TARGET_NODE_NAME: &str = "kubevirt.io/migrationTargetNodeName";
}

/// Annotations.
pub mod annotations {
    /// The newest API version the controllers have seen the object in.
    pub const LATEST_OBSERVED_API_VERSION: &str = "kubevirt.io/latest-observed-api-version";
    /// The API version the object is stored in.
    pub const STORAGE_OBSERVED_API_VERSION: &str = "kubevirt.io/storage-observed-api-version";
    /// On launcher pods: the domain name the launcher defines.
    pub const DOMAIN: &str = "kubevirt.io/domain";
    /// On VMIs: the VMI is the receiving end of a migration.
    pub const CREATE_MIGRATION_TARGET: &str = "kubevirt.io/create-migration-target";
    /// On nodes: virt-handler's heartbeat, an RFC 3339 timestamp refreshed periodically.
    pub const HEARTBEAT: &str = "kubevirt.io/heartbeat";
}

/// Finalizers.
pub mod finalizers {
    /// On VMs and the VMIs they own: the VM controller's hold, released only once it has
    /// accounted for the VMI (a VM is not gone before its guest is).
    pub const VM_CONTROLLER: &str = "kubevirt.io/virtualMachineControllerFinalize";
    /// On VMIs: deleting a VMI stops its pod first (foreground deletion of the guest).
    pub const FOREGROUND_DELETE_VM: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
}

#[cfg(test)]
mod tests {
    use super::{has_slash_or_nul, path_component};
    use proptest::prelude::*;

    proptest! {
        /// The word-at-a-time scan answers as a byte loop does, wherever the `/` or NUL sits
        /// (in a full word, across words, in the tail) and around bytes such as 0x80 and 0x2F
        /// neighbours that a sloppy zero-byte test would confuse.
        #[test]
        fn slash_or_nul_scan_agrees_with_a_byte_loop(
            bytes in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(b'/'), Just(b'.'), Just(0x80u8), Just(0x2Eu8),
                    Just(0x30u8), Just(0xFFu8), Just(0x01u8), any::<u8>()],
                0..40,
            )
        ) {
            let expected = bytes.iter().any(|&b| b == b'/' || b == 0);
            prop_assert_eq!(has_slash_or_nul(&bytes), expected);
        }
    }

    #[test]
    fn only_plain_names_are_path_components() {
        for ok in [
            "vm", "a.b", "...", "a..b", ".hidden", "default", "ns_vm", "a b", "ü",
        ] {
            assert_eq!(path_component("f", ok), Ok(ok));
        }
        for bad in [
            "", ".", "..", "../x", "x/..", "/", "a/b", "/abs", "a\0b", "\0",
        ] {
            let err = path_component(format_args!("spec.volumes[{}].name", 3), bad).expect_err(bad);
            assert_eq!(err.field, "spec.volumes[3].name", "{bad:?}");
            assert!(
                err.reason.starts_with(&format!("{bad:?} ")),
                "{}",
                err.reason
            );
        }
    }
}
