//! What one DHCP server hands out: KubeVirt's `cache.DHCPConfig`. Masquerade builds it in the
//! launcher from the pod NIC and the VM network CIDRs (IPv4 and, on a pod with IPv6, IPv6);
//! bridge binding reads what the handler cached (see [`super::vif_cache`]), IPv4 only as in
//! KubeVirt.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::network::error::NetworkError;

/// The VM network of a masquerade interface without `pod.vmNetworkCIDR`.
pub const DEFAULT_VM_CIDR: &str = "10.0.2.0/24";
/// The IPv6 VM network of a masquerade interface without `pod.vmIPv6NetworkCIDR`.
pub const DEFAULT_VM_IPV6_CIDR: &str = "fd10:0:2::/120";

/// One route for option 121.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination network and prefix length; `None` is the default route.
    pub dst: Option<(Ipv4Addr, u8)>,
    /// Gateway; `None` for an on-link route.
    pub gw: Option<Ipv4Addr>,
}

/// The lease of one guest NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpConfig {
    /// The pod interface this lease belongs to (names the marker file and errors).
    pub name: String,
    /// The guest's address and subnet mask; `None`: no DHCPv4 server (no IPv4 on the pod NIC).
    pub ip: Option<(Ipv4Addr, Ipv4Addr)>,
    /// The guest's IPv6 address; `None`: no DHCPv6 server (no IPv6 on the pod NIC, or bridge
    /// binding).
    pub ipv6: Option<Ipv6Addr>,
    /// Only this client is answered; `None` answers any (masquerade: the bridge has one guest).
    pub mac: Option<[u8; 6]>,
    /// The server identifier (and the address replies come from).
    pub server_ip: Ipv4Addr,
    /// The guest's default gateway.
    pub gateway: Option<Ipv4Addr>,
    /// Routes for option 121.
    pub routes: Vec<Route>,
    /// The MTU the guest NIC gets.
    pub mtu: u16,
    /// The handler found no IP management on the pod NIC: no server at all.
    pub ipam_disabled: bool,
    /// `spec.subdomain`, for the search list.
    pub subdomain: String,
}

/// A prefix length as a mask (`24` → 255.255.255.0).
pub fn prefix_mask(prefix: u8) -> Ipv4Addr {
    let p = u32::from(prefix.min(32));
    Ipv4Addr::from(u32::MAX.checked_shl(32 - p).unwrap_or(0))
}

/// The masquerade gateway and guest addresses of a VM network: the second and third addresses
/// of the CIDR (10.0.2.1 and 10.0.2.2 for 10.0.2.0/24), with the CIDR's prefix. A network of
/// fewer than four addresses is refused, as KubeVirt refuses it.
pub fn masquerade_addresses(cidr: &str) -> Result<(Ipv4Addr, Ipv4Addr, u8), String> {
    let (ip, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| format!("VM network CIDR {cidr:?} has no prefix length"))?;
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|_| format!("VM network CIDR {cidr:?} is not an IPv4 network"))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 32)
        .ok_or_else(|| format!("VM network CIDR {cidr:?} has an invalid prefix length"))?;
    if prefix > 30 {
        return Err(format!(
            "VM network CIDR {cidr:?}: less than 4 addresses on network"
        ));
    }
    let net = u32::from(ip) & u32::from(prefix_mask(prefix));
    Ok((Ipv4Addr::from(net + 1), Ipv4Addr::from(net + 2), prefix))
}

/// The pod NIC facts a masquerade lease needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNic {
    /// Its name (`eth0`).
    pub name: String,
    /// Its MTU.
    pub mtu: u32,
    /// It has a global unicast IPv4 address (otherwise the pod is IPv6-only: no DHCPv4).
    pub has_ipv4: bool,
    /// It has a global unicast IPv6 address (then the guest gets IPv6 over DHCPv6).
    pub has_ipv6: bool,
}

/// The masquerade gateway and guest addresses of an IPv6 VM network: its second and third
/// addresses (`fd10:0:2::1` and `fd10:0:2::2` for `fd10:0:2::/120`). A network of fewer than
/// four addresses is refused, as KubeVirt refuses it.
pub fn masquerade_addresses_v6(cidr: &str) -> Result<(Ipv6Addr, Ipv6Addr, u8), String> {
    let (ip, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| format!("VM IPv6 network CIDR {cidr:?} has no prefix length"))?;
    let ip: Ipv6Addr = ip
        .parse()
        .map_err(|_| format!("VM IPv6 network CIDR {cidr:?} is not an IPv6 network"))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 128)
        .ok_or_else(|| format!("VM IPv6 network CIDR {cidr:?} has an invalid prefix length"))?;
    if prefix > 126 {
        return Err(format!(
            "VM IPv6 network CIDR {cidr:?}: less than 4 addresses on network"
        ));
    }
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    let net = u128::from(ip) & mask;
    Ok((Ipv6Addr::from(net + 1), Ipv6Addr::from(net + 2), prefix))
}

/// An MTU as the 16-bit option value (saturating: no Ethernet MTU comes near the limit).
pub fn mtu16(mtu: u32) -> u16 {
    u16::try_from(mtu).unwrap_or(u16::MAX)
}

/// KubeVirt's masquerade lease: the guest gets the CIDR's third address, the gateway (also the
/// server) its second, and the pod NIC's MTU.
pub fn masquerade(
    iface: &str,
    nic: &PodNic,
    vm_cidr: Option<&str>,
    vm_ipv6_cidr: Option<&str>,
    subdomain: &str,
) -> Result<DhcpConfig, NetworkError> {
    let mut cfg = DhcpConfig {
        name: nic.name.clone(),
        ip: None,
        ipv6: None,
        mac: None,
        server_ip: Ipv4Addr::UNSPECIFIED,
        gateway: None,
        routes: Vec::new(),
        mtu: mtu16(nic.mtu),
        ipam_disabled: false,
        subdomain: subdomain.to_string(),
    };
    if nic.has_ipv4 {
        let cidr = vm_cidr.filter(|c| !c.is_empty()).unwrap_or(DEFAULT_VM_CIDR);
        let (gw, vm, prefix) =
            masquerade_addresses(cidr).map_err(|reason| NetworkError::config(iface, reason))?;
        cfg.ip = Some((vm, prefix_mask(prefix)));
        cfg.server_ip = gw;
        cfg.gateway = Some(gw);
    }
    if nic.has_ipv6 {
        let cidr = vm_ipv6_cidr
            .filter(|c| !c.is_empty())
            .unwrap_or(DEFAULT_VM_IPV6_CIDR);
        let (_, vm, _) =
            masquerade_addresses_v6(cidr).map_err(|reason| NetworkError::config(iface, reason))?;
        cfg.ipv6 = Some(vm);
    }
    Ok(cfg)
}

/// The address the bridge-binding server answers from: a link-local address per interface
/// index (`169.254.75.1<index>`), never seen outside the pod.
pub fn bridge_server_ip(iface: &str, index: usize) -> Result<Ipv4Addr, NetworkError> {
    format!("169.254.75.1{index}").parse().map_err(|_| {
        NetworkError::config(
            iface,
            format!("interface index {index} has no fake bridge address"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_vm_network_gives_kubevirts_addresses() {
        let (gw, vm, prefix) = masquerade_addresses(DEFAULT_VM_CIDR).unwrap();
        assert_eq!(
            (gw, vm, prefix),
            (Ipv4Addr::new(10, 0, 2, 1), Ipv4Addr::new(10, 0, 2, 2), 24)
        );
        assert_eq!(
            masquerade_addresses("192.168.7.9/28").unwrap().1,
            Ipv4Addr::new(192, 168, 7, 2)
        );
        assert!(masquerade_addresses("10.0.0.0/31").is_err());
        assert!(masquerade_addresses("fd10::/64").is_err());
        assert!(masquerade_addresses("10.0.0.0").is_err());
    }

    #[test]
    fn masks_follow_the_prefix() {
        assert_eq!(prefix_mask(24), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(prefix_mask(0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(prefix_mask(32), Ipv4Addr::BROADCAST);
    }

    #[test]
    fn an_ipv6_only_pod_gets_no_ipv4_lease() {
        let nic = PodNic {
            name: "eth0".into(),
            mtu: 1450,
            has_ipv4: false,
            has_ipv6: true,
        };
        let cfg = masquerade("default", &nic, None, None, "").unwrap();
        assert_eq!((cfg.ip, cfg.mtu), (None, 1450));
        assert_eq!(cfg.ipv6, Some("fd10:0:2::2".parse().unwrap()));
    }

    #[test]
    fn ipv6_vm_networks_give_the_third_address() {
        assert_eq!(
            masquerade_addresses_v6(DEFAULT_VM_IPV6_CIDR).unwrap(),
            (
                "fd10:0:2::1".parse().unwrap(),
                "fd10:0:2::2".parse().unwrap(),
                120
            )
        );
        assert_eq!(
            masquerade_addresses_v6("fd00:abcd::17/64").unwrap().1,
            "fd00:abcd::2".parse::<Ipv6Addr>().unwrap()
        );
        assert!(masquerade_addresses_v6("fd00::/127").is_err());
        assert!(masquerade_addresses_v6("10.0.2.0/24").is_err());
    }

    #[test]
    fn bridge_servers_use_the_link_local_fake_address() {
        assert_eq!(
            bridge_server_ip("default", 0).unwrap(),
            Ipv4Addr::new(169, 254, 75, 10)
        );
        assert_eq!(
            bridge_server_ip("b", 12).unwrap(),
            Ipv4Addr::new(169, 254, 75, 112)
        );
        assert!(bridge_server_ip("b", 60).is_ok());
        assert!(bridge_server_ip("b", 260).is_err());
    }
}
