//! The names KubeVirt gives the links of one VMI interface inside the pod, and the MAC notation
//! it accepts in the VMI. The handler creates the links under these names; the launcher finds
//! them by the same rule.

use sha2::Digest;

/// The primary pod interface (the pod network's NIC).
pub const PRIMARY_POD_IFACE: &str = "eth0";
/// The tap of the primary pod interface.
const PRIMARY_TAP: &str = "tap0";
/// Prefix of hashed secondary-network pod interface names (`pod<hash>`).
const HASHED_PREFIX: &str = "pod";

/// The tap the domain attaches to: `tap0` for the pod network, `tap<hash>` (the pod interface
/// name without its `pod` prefix) for a secondary Multus network.
pub fn tap_name(pod_iface: &str, secondary_multus: bool) -> String {
    match pod_iface.get(3..) {
        Some(rest) if secondary_multus => format!("tap{rest}"),
        _ => PRIMARY_TAP.to_string(),
    }
}

/// Hex digits of the hash kept in a hashed name (15 kernel characters less `-nic`).
const HASHED_LEN: usize = 11;

/// The two names a secondary Multus network's pod interface may have, in the order KubeVirt's
/// launcher looks for them: the hashed one (`pod` + the first 11 hex digits of the SHA-256 of
/// the network name) and the ordinal one (`net<N>`, N counting the secondary networks from 1),
/// which pods created before the hashed scheme carry. `None` for a network that is not a
/// secondary one.
pub fn secondary_pod_iface_candidates(
    networks: &[kvrs_api::api::Network],
    name: &str,
) -> Option<[String; 2]> {
    let ordinal = networks
        .iter()
        .filter(|n| is_secondary_multus(n))
        .position(|n| n.name == name)?;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some([
        format!("{HASHED_PREFIX}{}", &hex[..HASHED_LEN]),
        format!("net{}", ordinal + 1),
    ])
}

/// A Multus network that is not the pod's default one.
pub fn is_secondary_multus(network: &kvrs_api::api::Network) -> bool {
    network
        .multus
        .as_ref()
        .is_some_and(|m| m.default != Some(true))
}

fn trimmed(pod_iface: &str) -> &str {
    pod_iface.strip_prefix(HASHED_PREFIX).unwrap_or(pod_iface)
}

/// The in-pod bridge between the pod NIC (or NAT) and the tap: `k6t-eth0`.
pub fn bridge_name(pod_iface: &str) -> String {
    format!("k6t-{}", trimmed(pod_iface))
}

/// What bridge binding renames the original pod NIC to: `eth0-nic`.
pub fn bridged_nic_name(pod_iface: &str) -> String {
    format!("{}-nic", trimmed(pod_iface))
}

/// A 6-byte MAC in any notation Go's `net.ParseMAC` accepts for it: `aa:bb:..`, `aa-bb-..` or
/// `aabb.ccdd.eeff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let hex: String = if s.len() == 14 && s.as_bytes().get(4) == Some(&b'.') {
        let groups: Vec<&str> = s.split('.').collect();
        if groups.len() != 3 || groups.iter().any(|g| g.len() != 4) {
            return None;
        }
        groups.concat()
    } else {
        let sep = if s.contains('-') { '-' } else { ':' };
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.len() != 6 || parts.iter().any(|p| p.len() != 2) {
            return None;
        }
        parts.concat()
    };
    let mut mac = [0u8; 6];
    for (i, byte) in mac.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secondary_network_has_kubevirts_hashed_and_ordinal_names() {
        let nets: Vec<kvrs_api::api::Network> = serde_json::from_value(serde_json::json!([
            {"name": "default", "pod": {}},
            {"name": "blue", "multus": {"networkName": "blue-nad"}},
            {"name": "secondary", "multus": {"networkName": "sec"}},
            {"name": "main", "multus": {"networkName": "m", "default": true}},
        ]))
        .unwrap();
        // `printf secondary | sha256sum` starts c0f69e19ba2...
        assert_eq!(
            secondary_pod_iface_candidates(&nets, "secondary"),
            Some(["podc0f69e19ba2".to_string(), "net2".to_string()])
        );
        assert_eq!(
            secondary_pod_iface_candidates(&nets, "blue").map(|c| c[1].clone()),
            Some("net1".to_string())
        );
        assert_eq!(secondary_pod_iface_candidates(&nets, "default"), None);
        assert_eq!(secondary_pod_iface_candidates(&nets, "main"), None);
        assert_eq!(tap_name("podc0f69e19ba2", true), "tapc0f69e19ba2");
        assert_eq!(bridge_name("podc0f69e19ba2"), "k6t-c0f69e19ba2");
    }

    #[test]
    fn names_follow_kubevirts_rules() {
        assert_eq!(tap_name("eth0", false), "tap0");
        assert_eq!(tap_name("pod16477688c0e", true), "tap16477688c0e");
        assert_eq!(bridge_name("eth0"), "k6t-eth0");
        assert_eq!(bridge_name("pod16477688c0e"), "k6t-16477688c0e");
        assert_eq!(bridged_nic_name("eth0"), "eth0-nic");
    }

    #[test]
    fn macs_parse_in_gos_notations() {
        let want = Some([0xde, 0xad, 0x00, 0x00, 0xbe, 0xaf]);
        assert_eq!(parse_mac("de:ad:00:00:be:af"), want);
        assert_eq!(parse_mac("DE-AD-00-00-BE-AF"), want);
        assert_eq!(parse_mac("dead.0000.beaf"), want);
        for bad in [
            "",
            "de:ad:00:00:be",
            "de:ad:00:00:be:zz",
            "dead0000beaf",
            "d:ead:00:00:be:af",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }
}
