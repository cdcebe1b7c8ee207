//! The link names KubeVirt gives the pieces of a pod network: they are what the launcher's
//! domain XML and DHCP server refer to, so they are part of the handler↔launcher contract.

use sha2::{Digest, Sha256};

/// The pod interface of the primary (pod or default multus) network.
pub const PRIMARY_POD_IFACE: &str = "eth0";
/// The tap of the primary network.
pub const PRIMARY_TAP: &str = "tap0";
/// The prefix of hashed secondary pod interface names.
const HASHED_PREFIX: &str = "pod";
/// Hex digits of the hash kept in a secondary name (15 kernel chars minus `-nic`).
const HASHED_LEN: usize = 11;

/// The pod interface Multus gives a secondary network under the hashed scheme:
/// `pod` + the first 11 hex digits of the SHA-256 of the network name.
pub fn hashed_pod_iface(network: &str) -> String {
    let digest = Sha256::digest(network.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{HASHED_PREFIX}{}", &hex[..HASHED_LEN])
}

/// The pod interface of the `n`th (1-based) secondary network under the ordinal scheme.
pub fn ordinal_pod_iface(n: usize) -> String {
    format!("net{n}")
}

/// Whether a pod link name is of the ordinal scheme (`net1`, `net2`, ...), which pods created
/// before the hashed scheme carry.
pub fn is_ordinal(name: &str) -> bool {
    name.strip_prefix("net")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The tap of a network: `tap0` for the primary network, else `tap` + the pod interface name
/// without its first three characters (`pod1a2b..` -> `tap1a2b..`, `net1` -> `tap1`).
pub fn tap_name(pod_iface: &str, secondary: bool) -> String {
    if secondary {
        let rest = pod_iface.get(3..).unwrap_or("");
        format!("tap{rest}")
    } else {
        PRIMARY_TAP.to_string()
    }
}

/// The in-pod bridge: `k6t-` + the pod interface name without a `pod` prefix.
pub fn bridge_name(pod_iface: &str) -> String {
    format!(
        "k6t-{}",
        pod_iface.strip_prefix(HASHED_PREFIX).unwrap_or(pod_iface)
    )
}

/// The name a bridge-bound pod interface is renamed to: its name without a `pod` prefix + `-nic`.
pub fn bridged_pod_iface(pod_iface: &str) -> String {
    format!(
        "{}-nic",
        pod_iface.strip_prefix(HASHED_PREFIX).unwrap_or(pod_iface)
    )
}

/// The peer of the veth pair that stands in for a bridge-bound pod interface's dummy on a
/// kernel without dummy links (no `CONFIG_DUMMY`): the pod interface name without a `pod`
/// prefix + `-ph` (placeholder). Derived from the pod interface, so a second run finds it.
pub fn placeholder_peer(pod_iface: &str) -> String {
    format!(
        "{}-ph",
        pod_iface.strip_prefix(HASHED_PREFIX).unwrap_or(pod_iface)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn primary_names() {
        assert_eq!(tap_name("eth0", false), "tap0");
        assert_eq!(bridge_name("eth0"), "k6t-eth0");
        assert_eq!(bridged_pod_iface("eth0"), "eth0-nic");
        assert_eq!(placeholder_peer("eth0"), "eth0-ph");
    }

    #[test]
    fn secondary_names() {
        let pod = hashed_pod_iface("blue");
        assert_eq!(pod, "pod16477688c0e");
        assert_eq!(tap_name(&pod, true), "tap16477688c0e");
        assert_eq!(bridge_name(&pod), "k6t-16477688c0e");
        assert_eq!(bridged_pod_iface(&pod), "16477688c0e-nic");
        assert_eq!(tap_name("net1", true), "tap1");
        assert!(is_ordinal("net12") && !is_ordinal("net") && !is_ordinal("eth0"));
    }

    proptest! {
        #[test]
        fn derived_names_fit_the_kernel_limit(network in "\\PC{1,60}") {
            let pod = hashed_pod_iface(&network);
            for name in [pod.clone(), tap_name(&pod, true), bridge_name(&pod), bridged_pod_iface(&pod), placeholder_peer(&pod)] {
                prop_assert!(name.len() <= 15, "{name}");
            }
        }
    }
}
