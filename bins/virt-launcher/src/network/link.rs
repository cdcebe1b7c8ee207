//! Facts about the pod's links, read over rtnetlink in the calling thread's network namespace
//! (the launcher's, which is the pod's). Not from `/sys/class/net`: sysfs shows the namespace it
//! was mounted in, which is not necessarily the caller's.

use std::net::Ipv4Addr;

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
    setsockopt, socket, sockopt,
};
use nix::sys::time::{TimeVal, TimeValLike};
use std::os::fd::AsRawFd;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const NLMSG_HDR: usize = 16;
const IFINFOMSG: usize = 16;
/// A netlink answer that has not come by then never will.
const TIMEOUT_SECS: i64 = 5;

/// One link's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: i32,
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

fn align4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Linux interface names are at most 15 bytes (`IFNAMSIZ` - 1).
const IFNAME_MAX: usize = 15;

/// `RTM_GETLINK` for `name` (at most [`IFNAME_MAX`] bytes, so every length fits its field).
fn request(name: &str, seq: u32) -> Vec<u8> {
    let name = &name.as_bytes()[..name.len().min(IFNAME_MAX)];
    let attr_len: u16 = 4 + 1 + u16::from(u8::try_from(name.len()).unwrap_or(15));
    let total = NLMSG_HDR + IFINFOMSG + align4(usize::from(attr_len));
    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(&u32::from(u16::try_from(total).unwrap_or(u16::MAX)).to_ne_bytes());
    b.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    b.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&[0; IFINFOMSG]); // AF_UNSPEC, any index: look up by name
    b.extend_from_slice(&attr_len.to_ne_bytes());
    b.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
    b.extend_from_slice(name);
    b.resize(total, 0);
    b
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parses the kernel's answer: a `RTM_NEWLINK` message or an error.
fn parse_reply(b: &[u8]) -> Result<Option<Link>, LinkError> {
    let mut at = 0;
    while at + NLMSG_HDR <= b.len() {
        let len = u32_at(b, at).unwrap_or(0) as usize;
        let kind = u16_at(b, at + 4).unwrap_or(0);
        if len < NLMSG_HDR || at + len > b.len() {
            return Err(nl("truncated message"));
        }
        let msg = &b[at + NLMSG_HDR..at + len];
        match kind {
            NLMSG_ERROR => {
                // nlmsgerr.error is a C int.
                let errno = u32_at(msg, 0).map_or(0, u32::cast_signed);
                return match -errno {
                    0 => Ok(None),
                    19 => Err(LinkError::NotFound), // ENODEV
                    e => Err(nl(nix::errno::Errno::from_raw(e))),
                };
            }
            RTM_NEWLINK if msg.len() >= IFINFOMSG => {
                // ifi_index is a C int.
                let index = u32_at(msg, 4).map_or(0, u32::cast_signed);
                let mut link = Link {
                    index,
                    mtu: 0,
                    mac: Vec::new(),
                };
                let mut a = IFINFOMSG;
                while a + 4 <= msg.len() {
                    let alen = usize::from(u16_at(msg, a).unwrap_or(0));
                    let atype = u16_at(msg, a + 2).unwrap_or(0) & 0x3fff;
                    if alen < 4 || a + alen > msg.len() {
                        break;
                    }
                    let val = &msg[a + 4..a + alen];
                    match atype {
                        IFLA_MTU => link.mtu = u32_at(val, 0).unwrap_or(0),
                        IFLA_ADDRESS => link.mac = val.to_vec(),
                        _ => {}
                    }
                    a += align4(alen);
                }
                return Ok(Some(link));
            }
            _ => {}
        }
        at += align4(len);
    }
    Ok(None)
}

/// The link called `name` in this thread's network namespace.
pub fn by_name(name: &str) -> Result<Link, LinkError> {
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err(LinkError::NotFound);
    }
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(nl)?;
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &TimeVal::seconds(TIMEOUT_SECS),
    )
    .map_err(nl)?;
    let kernel = NetlinkAddr::new(0, 0);
    sendto(
        fd.as_raw_fd(),
        &request(name, 1),
        &kernel,
        MsgFlags::empty(),
    )
    .map_err(nl)?;
    // Without NLM_F_ACK the kernel answers with exactly one message: the link or an error.
    let mut buf = vec![0u8; 32 * 1024];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(nl)?;
    parse_reply(&buf[..n])?.ok_or(LinkError::NotFound)
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
