//! The masquerade subnet between the pod and the guest: the gateway is the subnet's first host
//! address (on the in-pod bridge), the guest gets the next one (through the launcher's DHCP).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// KubeVirt's default IPv4 masquerade subnet.
pub const DEFAULT_VM_CIDR: &str = "10.0.2.0/24";
/// KubeVirt's default IPv6 masquerade subnet.
pub const DEFAULT_VM_IPV6_CIDR: &str = "fd10:0:2::/120";

/// The gateway (bridge) and guest addresses of a masquerade subnet, with its prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MasqueradeSubnet {
    /// The bridge's address, the guest's default gateway.
    pub gateway: IpAddr,
    /// The guest's address.
    pub guest: IpAddr,
    /// The subnet's prefix length.
    pub prefix_len: u8,
}

/// Parses `cidr` (`a.b.c.d/n` or an IPv6 CIDR) into the gateway and guest addresses, as
/// KubeVirt does: host bits are dropped, at least two host addresses are required.
pub fn masquerade_subnet(cidr: &str) -> Result<MasqueradeSubnet, String> {
    let (addr, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| format!("{cidr:?} is not a CIDR"))?;
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("{cidr:?}: {addr:?} is not an IP address"))?;
    let prefix_len: u8 = prefix
        .parse()
        .map_err(|_| format!("{cidr:?}: {prefix:?} is not a prefix length"))?;
    let bits: u8 = if ip.is_ipv4() { 32 } else { 128 };
    if prefix_len > bits {
        return Err(format!("{cidr:?}: prefix length above {bits}"));
    }
    if prefix_len > bits - 2 {
        return Err(format!(
            "VM CIDR subnet is too small, at least 2 host addresses are required: {cidr}"
        ));
    }
    let (gateway, guest) = match ip {
        IpAddr::V4(v4) => {
            let mask = if prefix_len == 0 {
                0
            } else {
                u32::MAX << (32 - prefix_len)
            };
            let net = u32::from(v4) & mask;
            (
                IpAddr::V4(Ipv4Addr::from(net + 1)),
                IpAddr::V4(Ipv4Addr::from(net + 2)),
            )
        }
        IpAddr::V6(v6) => {
            let mask = if prefix_len == 0 {
                0
            } else {
                u128::MAX << (128 - prefix_len)
            };
            let net = u128::from(v6) & mask;
            (
                IpAddr::V6(Ipv6Addr::from(net + 1)),
                IpAddr::V6(Ipv6Addr::from(net + 2)),
            )
        }
    };
    Ok(MasqueradeSubnet {
        gateway,
        guest,
        prefix_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn defaults() {
        let v4 = masquerade_subnet(DEFAULT_VM_CIDR).unwrap();
        assert_eq!(v4.gateway.to_string(), "10.0.2.1");
        assert_eq!(v4.guest.to_string(), "10.0.2.2");
        assert_eq!(v4.prefix_len, 24);
        let v6 = masquerade_subnet(DEFAULT_VM_IPV6_CIDR).unwrap();
        assert_eq!(v6.gateway.to_string(), "fd10:0:2::1");
        assert_eq!(v6.guest.to_string(), "fd10:0:2::2");
        assert_eq!(v6.prefix_len, 120);
    }

    #[test]
    fn custom_cidr_drops_host_bits_and_rejects_tiny_subnets() {
        let s = masquerade_subnet("192.168.7.77/28").unwrap();
        assert_eq!(s.gateway.to_string(), "192.168.7.65");
        assert_eq!(s.guest.to_string(), "192.168.7.66");
        assert!(masquerade_subnet("10.1.1.0/31").is_err());
        assert!(masquerade_subnet("10.1.1.0").is_err());
        assert!(masquerade_subnet("10.1.1.0/33").is_err());
        assert!(masquerade_subnet("nope/24").is_err());
    }

    proptest! {
        #[test]
        fn gateway_and_guest_are_inside_the_subnet(a in any::<u32>(), p in 0u8..=30) {
            let cidr = format!("{}/{p}", Ipv4Addr::from(a));
            let s = masquerade_subnet(&cidr).unwrap();
            let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
            let (IpAddr::V4(gw), IpAddr::V4(guest)) = (s.gateway, s.guest) else { panic!() };
            prop_assert_eq!(u32::from(gw) & mask, a & mask);
            prop_assert_eq!(u32::from(guest) & mask, a & mask);
            prop_assert_eq!(u32::from(guest), u32::from(gw) + 1);
        }
    }
}
