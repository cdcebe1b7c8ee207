//! The launcher's DHCPv6 server for a masquerade interface on a pod with IPv6: KubeVirt's
//! single-client server, which gives the guest its one address (`fd10:0:2::2` by default) with
//! an infinite lease and the pod's IPv6 name servers.
//!
//! KubeVirt answers every message it can reply to (it has one client per bridge): a Solicit
//! gets an Advertise, or a Reply with rapid commit when the client asked for it; Request,
//! Confirm, Renew, Rebind, Release and Information-Request get a Reply. Each answer carries
//! the client's DUID, the server's DUID-LL (the bridge's MAC), the IA_NA with the client's
//! IAID and the address, and the name servers when there are any. [`answer`] is that rule as
//! a plain function; the thread around it only receives and sends.

use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::os::fd::OwnedFd;

use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrIn6, bind, setsockopt, socket, sockopt,
};

use crate::log;

/// DHCPv6 servers listen on UDP 547, clients on 546.
pub const SERVER_PORT: u16 = 547;
/// `All_DHCP_Relay_Agents_and_Servers`.
const ALL_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);
/// KubeVirt's "infinite" lease: 999 days, in seconds.
const LEASE_SECONDS: u32 = 999 * 24 * 3600;

/// Message types (RFC 8415 §7.3).
mod msg {
    pub const SOLICIT: u8 = 1;
    pub const ADVERTISE: u8 = 2;
    pub const REQUEST: u8 = 3;
    pub const CONFIRM: u8 = 4;
    pub const RENEW: u8 = 5;
    pub const REBIND: u8 = 6;
    pub const REPLY: u8 = 7;
    pub const RELEASE: u8 = 8;
    pub const INFORMATION_REQUEST: u8 = 11;
}

/// Option codes (RFC 8415 §21, RFC 3646).
mod opt {
    pub const CLIENTID: u16 = 1;
    pub const SERVERID: u16 = 2;
    pub const IA_NA: u16 = 3;
    pub const IAADDR: u16 = 5;
    pub const RAPID_COMMIT: u16 = 14;
    pub const DNS_SERVERS: u16 = 23;
}

/// What the server hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease6 {
    /// The guest's address.
    pub client_ip: Ipv6Addr,
    /// The bridge's MAC: the server's DUID-LL.
    pub server_mac: [u8; 6],
    /// The pod's IPv6 name servers.
    pub dns: Vec<Ipv6Addr>,
}

/// One option as it came: code and bytes.
struct Opt<'a> {
    code: u16,
    data: &'a [u8],
}

/// The options of a message body; `None` when an option runs past the end.
fn options(mut b: &[u8]) -> Option<Vec<Opt<'_>>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let code = u16::from_be_bytes([*b.first()?, *b.get(1)?]);
        let len = usize::from(u16::from_be_bytes([*b.get(2)?, *b.get(3)?]));
        let data = b.get(4..4 + len)?;
        out.push(Opt { code, data });
        b = &b[4 + len..];
    }
    Some(out)
}

fn push_opt(out: &mut Vec<u8>, code: u16, data: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    // Every option built here is a few dozen bytes.
    out.extend_from_slice(&u16::try_from(data.len()).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(data);
}

/// The answer to the message `bytes`, or `None` when KubeVirt's server sends none (a message
/// type it cannot reply to, no client DUID, a malformed message).
pub fn answer(lease: &Lease6, bytes: &[u8]) -> Option<Vec<u8>> {
    let (&kind, rest) = bytes.split_first()?;
    let txid = rest.get(..3)?;
    let opts = options(&rest[3..])?;
    let find = |code| opts.iter().find(|o| o.code == code);
    let rapid = find(opt::RAPID_COMMIT).is_some();
    let reply_kind = match kind {
        msg::SOLICIT if rapid => msg::REPLY,
        msg::SOLICIT => msg::ADVERTISE,
        msg::REQUEST
        | msg::CONFIRM
        | msg::RENEW
        | msg::REBIND
        | msg::RELEASE
        | msg::INFORMATION_REQUEST => msg::REPLY,
        _ => return None,
    };
    let client_id = find(opt::CLIENTID)?;
    // The client's IAID, when it sent an IA_NA (its first four bytes).
    let iaid = find(opt::IA_NA)
        .and_then(|o| o.data.get(..4))
        .map_or([0; 4], |b| [b[0], b[1], b[2], b[3]]);

    let mut out = vec![reply_kind];
    out.extend_from_slice(txid);
    push_opt(&mut out, opt::CLIENTID, client_id.data);
    if kind == msg::SOLICIT && rapid {
        push_opt(&mut out, opt::RAPID_COMMIT, &[]);
    }
    let mut addr = Vec::with_capacity(24);
    addr.extend_from_slice(&lease.client_ip.octets());
    addr.extend_from_slice(&LEASE_SECONDS.to_be_bytes()); // preferred
    addr.extend_from_slice(&LEASE_SECONDS.to_be_bytes()); // valid
    let mut ia = Vec::with_capacity(40);
    ia.extend_from_slice(&iaid);
    ia.extend_from_slice(&[0; 8]); // T1, T2: the client chooses
    push_opt(&mut ia, opt::IAADDR, &addr);
    push_opt(&mut out, opt::IA_NA, &ia);
    let mut duid = vec![0, 3, 0, 1]; // DUID-LL, hardware type Ethernet
    duid.extend_from_slice(&lease.server_mac);
    push_opt(&mut out, opt::SERVERID, &duid);
    if !lease.dns.is_empty() {
        let dns: Vec<u8> = lease.dns.iter().flat_map(|a| a.octets()).collect();
        push_opt(&mut out, opt::DNS_SERVERS, &dns);
    }
    Some(out)
}

/// A UDP socket on `[::]:port` bound to `bridge` and joined to the servers' multicast group
/// there, so it hears only that bridge's guest.
pub fn bind_socket(bridge: &str, bridge_index: u32, port: u16) -> Result<UdpSocket, String> {
    let fd: OwnedFd = socket(
        AddressFamily::Inet6,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| format!("socket: {e}"))?;
    setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &true).map_err(|e| format!("IPV6_V6ONLY: {e}"))?;
    setsockopt(
        &fd,
        sockopt::BindToDevice,
        &std::ffi::OsString::from(bridge),
    )
    .map_err(|e| format!("SO_BINDTODEVICE {bridge}: {e}"))?;
    let addr = SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr)
        .map_err(|e| format!("bind [::]:{port}: {e}"))?;
    let socket = UdpSocket::from(fd);
    socket
        .join_multicast_v6(&ALL_SERVERS, bridge_index)
        .map_err(|e| format!("join {ALL_SERVERS} on {bridge}: {e}"))?;
    Ok(socket)
}

/// Serves `lease` on `socket` from a thread of its own, for the life of the launcher.
pub fn spawn(
    iface: &str,
    socket: UdpSocket,
    lease: Lease6,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let name = format!("dhcp6-{iface}");
    let log_name = name.clone();
    super::server::spawn_server(name, socket, move |bytes, from| {
        let reply = answer(&lease, bytes);
        if reply.is_none() {
            log::warn(format_args!(
                "{log_name}: no answer to a {}-byte message from {from}",
                bytes.len()
            ));
        }
        Some((reply?, from))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> Lease6 {
        Lease6 {
            client_ip: "fd10:0:2::2".parse().unwrap(),
            server_mac: [2, 0, 0, 0, 0, 0],
            dns: vec!["fd00::a".parse().unwrap()],
        }
    }

    /// A client message: type, transaction id 0xabcdef, client DUID, IA_NA with IAID 7.
    fn message(kind: u8, rapid: bool) -> Vec<u8> {
        let mut m = vec![kind, 0xab, 0xcd, 0xef];
        push_opt(&mut m, opt::CLIENTID, &[0, 3, 0, 1, 1, 2, 3, 4, 5, 6]);
        push_opt(&mut m, opt::IA_NA, &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0]);
        if rapid {
            push_opt(&mut m, opt::RAPID_COMMIT, &[]);
        }
        m
    }

    #[test]
    fn a_solicit_gets_an_advertise_with_the_address_the_iaid_and_the_server_duid() {
        let out = answer(&lease(), &message(msg::SOLICIT, false)).unwrap();
        assert_eq!(&out[..4], &[msg::ADVERTISE, 0xab, 0xcd, 0xef]);
        let opts = options(&out[4..]).unwrap();
        let codes: Vec<u16> = opts.iter().map(|o| o.code).collect();
        assert_eq!(
            codes,
            [opt::CLIENTID, opt::IA_NA, opt::SERVERID, opt::DNS_SERVERS]
        );
        assert_eq!(opts[0].data, &[0, 3, 0, 1, 1, 2, 3, 4, 5, 6]);
        let ia = opts[1].data;
        assert_eq!(&ia[..12], &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0]);
        let addr = options(&ia[12..]).unwrap();
        assert_eq!(addr[0].code, opt::IAADDR);
        assert_eq!(
            Ipv6Addr::from(<[u8; 16]>::try_from(&addr[0].data[..16]).unwrap()),
            "fd10:0:2::2".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(&addr[0].data[16..20], &86_313_600u32.to_be_bytes());
        assert_eq!(opts[2].data, &[0, 3, 0, 1, 2, 0, 0, 0, 0, 0]);
        assert_eq!(opts[3].data.len(), 16);
    }

    #[test]
    fn rapid_commit_and_requests_get_a_reply() {
        let out = answer(&lease(), &message(msg::SOLICIT, true)).unwrap();
        assert_eq!(out[0], msg::REPLY);
        let codes: Vec<u16> = options(&out[4..]).unwrap().iter().map(|o| o.code).collect();
        assert_eq!(codes[1], opt::RAPID_COMMIT);
        for kind in [
            msg::REQUEST,
            msg::RENEW,
            msg::REBIND,
            msg::INFORMATION_REQUEST,
        ] {
            assert_eq!(
                answer(&lease(), &message(kind, false)).unwrap()[0],
                msg::REPLY
            );
        }
    }

    #[test]
    fn no_answer_without_a_client_id_for_server_messages_or_for_garbage() {
        let mut no_id = vec![msg::SOLICIT, 1, 2, 3];
        push_opt(&mut no_id, opt::IA_NA, &[0; 12]);
        assert!(answer(&lease(), &no_id).is_none());
        assert!(answer(&lease(), &message(msg::ADVERTISE, false)).is_none());
        assert!(answer(&lease(), &[msg::SOLICIT, 1]).is_none());
        // An option claiming more bytes than there are.
        assert!(answer(&lease(), &[msg::SOLICIT, 1, 2, 3, 0, 1, 0xff, 0xff, 0]).is_none());
        let no_dns = Lease6 {
            dns: vec![],
            ..lease()
        };
        let out = answer(&no_dns, &message(msg::REQUEST, false)).unwrap();
        assert!(
            options(&out[4..])
                .unwrap()
                .iter()
                .all(|o| o.code != opt::DNS_SERVERS)
        );
    }
}
