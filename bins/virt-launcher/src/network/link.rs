//! Facts about the pod's links, read over rtnetlink in the calling thread's network namespace
//! (the launcher's, which is the pod's). Not from `/sys/class/net`: sysfs shows the namespace it
//! was mounted in, which is not necessarily the caller's.
//!
//! The `RTM_GETLINK` request and the kernel's answer are coded by netlink-packet-route and sent
//! over netlink-sys's socket: the crates rtnetlink (bins/node) is built on, at the versions its
//! 0.17 uses. Not rtnetlink itself: its requests are futures driven by a connection task, and
//! the callers here are synchronous, inside the launcher's gRPC runtime, where a nested runtime
//! cannot block. One request, one answer, on the calling thread (so in its namespace). The two
//! message types are their own netlink payloads ([`GetLink`], [`NewLink`]) rather than
//! `RouteNetlinkMessage`, whose coders for every rtnetlink message (routes, neighbours, traffic
//! control) would otherwise be linked into the size-built launcher for one link look-up.

use std::net::Ipv4Addr;

use netlink_packet_core::{
    NLM_F_REQUEST, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage, LinkMessageBuffer};
use netlink_packet_utils::{DecodeError, Emitable, Parseable};
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{Socket, SocketAddr};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::{TimeVal, TimeValLike};

/// rtnetlink message types (`linux/rtnetlink.h`).
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
/// A netlink answer that has not come by then never will.
const TIMEOUT_SECS: i64 = 5;
/// Big enough for one link's `RTM_NEWLINK` (all its attributes).
const RECV_BUFFER: usize = 32 * 1024;

/// One link's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// MTU.
    pub mtu: u32,
    /// Hardware address (empty for links without one).
    pub mac: Vec<u8>,
}

/// Why a link could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// No link of that name in this namespace.
    #[error("no such link")]
    NotFound,
    /// Netlink failed.
    #[error("netlink: {0}")]
    Netlink(String),
}

fn nl(e: impl std::fmt::Display) -> LinkError {
    LinkError::Netlink(e.to_string())
}

/// The request: `RTM_GETLINK` with a link message.
struct GetLink(LinkMessage);

impl NetlinkSerializable for GetLink {
    fn message_type(&self) -> u16 {
        RTM_GETLINK
    }

    fn buffer_len(&self) -> usize {
        self.0.buffer_len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        self.0.emit(buffer);
    }
}

/// The answer: `RTM_NEWLINK` with the link (errors are netlink's own payload).
struct NewLink(LinkMessage);

impl NetlinkDeserializable for NewLink {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<NewLink, DecodeError> {
        if header.message_type != RTM_NEWLINK {
            return Err(format!("message type {} is not RTM_NEWLINK", header.message_type).into());
        }
        let buffer = LinkMessageBuffer::new_checked(&payload)?;
        Ok(NewLink(LinkMessage::parse(&buffer)?))
    }
}

/// `RTM_GETLINK` for the link called `name` (any family, any index: look up by name).
fn request(name: &str, seq: u32) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.attributes
        .push(LinkAttribute::IfName(name.to_string()));
    let mut msg = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::InnerMessage(GetLink(link)),
    );
    msg.header.flags = NLM_F_REQUEST;
    msg.header.sequence_number = seq;
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// The kernel's answer: the link, or an error (`ENODEV`: no such link).
fn parse_reply(b: &[u8]) -> Result<Link, LinkError> {
    let msg = NetlinkMessage::<NewLink>::deserialize(b).map_err(nl)?;
    match msg.payload {
        NetlinkPayload::InnerMessage(NewLink(link)) => {
            let mut out = Link {
                index: link.header.index,
                mtu: 0,
                mac: Vec::new(),
            };
            for attr in link.attributes {
                match attr {
                    LinkAttribute::Mtu(mtu) => out.mtu = mtu,
                    LinkAttribute::Address(mac) => out.mac = mac,
                    _ => {}
                }
            }
            Ok(out)
        }
        NetlinkPayload::Error(e) => match e.code.map(|c| Errno::from_raw(-c.get())) {
            Some(Errno::ENODEV) | None => Err(LinkError::NotFound),
            Some(errno) => Err(nl(errno)),
        },
        _ => Err(LinkError::NotFound),
    }
}

/// The link called `name` in this thread's network namespace.
pub fn by_name(name: &str) -> Result<Link, LinkError> {
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err(LinkError::NotFound);
    }
    let socket = Socket::new(NETLINK_ROUTE).map_err(nl)?;
    setsockopt(
        &socket,
        sockopt::ReceiveTimeout,
        &TimeVal::seconds(TIMEOUT_SECS),
    )
    .map_err(nl)?;
    socket
        .send_to(&request(name, 1), &SocketAddr::new(0, 0), 0)
        .map_err(nl)?;
    // Without NLM_F_ACK the kernel answers with exactly one message: the link or an error.
    let mut buf = vec![0u8; RECV_BUFFER];
    let n = socket.recv(&mut &mut buf[..], 0).map_err(nl)?;
    parse_reply(&buf[..n.min(buf.len())])
}

/// The link exists.
pub fn exists(name: &str) -> Result<bool, LinkError> {
    match by_name(name) {
        Ok(_) => Ok(true),
        Err(LinkError::NotFound) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `name` carries an IPv4 address that is global unicast in Go's sense (not unspecified,
/// loopback, multicast, link-local or the broadcast address) — KubeVirt serves DHCPv4 to a
/// masquerade guest only then.
pub fn has_ipv4_global_unicast(name: &str) -> Result<bool, LinkError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(nl)?;
    Ok(addrs
        .filter(|a| a.interface_name == name)
        .filter_map(|a| a.address?.as_sockaddr_in().map(|s| s.ip()))
        .any(is_global_unicast))
}

/// Whether `name` has a global unicast IPv6 address (KubeVirt's `HasIPv6GlobalUnicastAddress`:
/// a pod with one gets IPv6 masquerade and the DHCPv6 server).
pub fn has_ipv6_global_unicast(name: &str) -> Result<bool, LinkError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(nl)?;
    Ok(addrs
        .filter(|a| a.interface_name == name)
        .filter_map(|a| a.address?.as_sockaddr_in6().map(|s| s.ip()))
        .any(|ip| {
            !(ip.is_unspecified()
                || ip.is_loopback()
                || ip.is_multicast()
                || ip.is_unicast_link_local())
        }))
}

fn is_global_unicast(ip: Ipv4Addr) -> bool {
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.is_link_local()
        || ip.is_broadcast())
}

/// `aa:bb:cc:dd:ee:ff`, as Go prints a hardware address.
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_read_from_netlink() {
        let lo = by_name("lo").unwrap();
        assert_eq!(lo.index, 1);
        assert!(lo.mtu > 0);
        assert_eq!(by_name("kvrs-nope0"), Err(LinkError::NotFound));
        assert_eq!(exists("kvrs-nope0"), Ok(false));
        assert!(!has_ipv4_global_unicast("lo").unwrap());
    }

    #[test]
    fn garbage_replies_do_not_panic() {
        for n in 0..64 {
            let _ = parse_reply(&vec![0xff; n]);
            let _ = parse_reply(&request("eth0", 1)[..n.min(36)]);
        }
    }

    /// The request is the one the hand-written encoder sent: header, empty `ifinfomsg`,
    /// `IFLA_IFNAME` with the NUL-terminated name.
    #[test]
    fn the_request_names_the_link() {
        let req = request("eth0", 1);
        assert_eq!(req.len(), 16 + 16 + 12);
        assert_eq!(u32::from_ne_bytes(req[0..4].try_into().unwrap()), 44);
        assert_eq!(u16::from_ne_bytes(req[4..6].try_into().unwrap()), 18); // RTM_GETLINK
        assert_eq!(u16::from_ne_bytes(req[6..8].try_into().unwrap()), 1); // NLM_F_REQUEST
        assert_eq!(req[16..32], [0; 16]);
        assert_eq!(u16::from_ne_bytes(req[32..34].try_into().unwrap()), 9);
        assert_eq!(u16::from_ne_bytes(req[34..36].try_into().unwrap()), 3); // IFLA_IFNAME
        assert_eq!(&req[36..41], b"eth0\0");
    }

    #[test]
    fn macs_print_like_go() {
        assert_eq!(format_mac(&[2, 0, 0, 0, 0, 0xab]), "02:00:00:00:00:ab");
    }

    #[test]
    fn only_global_unicast_counts() {
        assert!(is_global_unicast(Ipv4Addr::new(10, 244, 0, 5)));
        assert!(!is_global_unicast(Ipv4Addr::new(169, 254, 1, 1)));
        assert!(!is_global_unicast(Ipv4Addr::new(127, 0, 0, 1)));
    }
}
