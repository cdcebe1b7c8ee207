//! What the node found in the pod's network namespace before changing it: plain data, so the
//! planner is a pure function and tests can feed it any pod.

use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr};

/// An address on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct IfAddr {
    /// The address.
    pub ip: IpAddr,
    /// Its prefix length.
    pub prefix_len: u8,
}

impl IfAddr {
    /// An address with its prefix length.
    pub fn new(ip: IpAddr, prefix_len: u8) -> Self {
        IfAddr { ip, prefix_len }
    }

    /// Whether this is a global unicast address in Go's sense (`net.IP.IsGlobalUnicast`): not
    /// unspecified, loopback, multicast, link-local or the IPv4 broadcast address. KubeVirt
    /// decides which families a pod has from these.
    pub fn is_global_unicast(&self) -> bool {
        match self.ip {
            IpAddr::V4(v4) => {
                !(v4.is_unspecified()
                    || v4.is_loopback()
                    || v4.is_multicast()
                    || v4.is_link_local()
                    || v4 == Ipv4Addr::BROADCAST)
            }
            IpAddr::V6(v6) => {
                !(v6.is_unspecified()
                    || v6.is_loopback()
                    || v6.is_multicast()
                    || (v6.segments()[0] & 0xffc0) == 0xfe80)
            }
        }
    }

    /// Whether this is an IPv6 link-local address (which the kernel adds by itself on link up).
    pub fn is_ipv6_link_local(&self) -> bool {
        matches!(self.ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
    }
}

impl std::fmt::Display for IfAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix_len)
    }
}

/// A link in the pod's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodLink {
    /// Interface index.
    pub index: u32,
    /// Name.
    pub name: String,
    /// The rtnetlink kind (`bridge`, `tun`, `dummy`, `veth`, ...), if the kernel reports one.
    pub kind: Option<String>,
    /// MTU.
    pub mtu: u32,
    /// Hardware address.
    pub mac: Option<[u8; 6]>,
    /// Index of the bridge it is enslaved to.
    pub controller: Option<u32>,
    /// Whether the link is administratively up.
    pub up: bool,
    /// Its addresses, as the kernel lists them.
    pub addresses: Vec<IfAddr>,
}

/// An IPv4 route of the main table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Route4 {
    /// Destination; `None` for the default route.
    pub destination: Option<(Ipv4Addr, u8)>,
    /// Next hop.
    pub gateway: Option<Ipv4Addr>,
    /// Outgoing interface index.
    pub oif: Option<u32>,
}

/// Everything the planner needs to know about the pod's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PodFacts {
    /// All links.
    pub links: Vec<PodLink>,
    /// The IPv4 routes of the main table.
    pub routes4: Vec<Route4>,
    /// Whether KubeVirt's NAT chains already exist, per family (`ip`, `ip6`): the ruleset is
    /// applied in one nft transaction, so their presence means a previous run completed it.
    pub nat_present_v4: bool,
    /// As [`PodFacts::nat_present_v4`], for `ip6`.
    pub nat_present_v6: bool,
}

impl PodFacts {
    /// The link named `name`.
    pub fn link(&self, name: &str) -> Option<&PodLink> {
        self.links.iter().find(|l| l.name == name)
    }

    /// The link with index `index`.
    pub fn link_by_index(&self, index: u32) -> Option<&PodLink> {
        self.links.iter().find(|l| l.index == index)
    }
}
