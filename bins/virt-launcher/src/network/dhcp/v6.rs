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
//!
//! Messages and options are dhcproto's, decoded and encoded by it. What stays here is that rule
//! and the order of the options in an answer, KubeVirt's (client id, rapid commit, IA_NA,
//! server id, name servers): dhcproto keeps a message's options in code order, so the answer
//! is its header followed by each option dhcproto encodes.

use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::os::fd::OwnedFd;

use dhcproto::v6::{DhcpOption, HType, IAAddr, IANA, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
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
/// DUID-LL (RFC 8415 §11.4).
const DUID_LL: u16 = 3;

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

/// A client's message, or `None` when it is none: too short, or an option dhcproto cannot
/// decode. dhcproto 0.15 subtracts a fixed size from the length of some options (status code,
/// vendor class and options, authentication) without checking it first: with overflow checks
/// (test and debug builds) a guest's short option would panic this thread, so that counts as
/// undecodable too. The release and launcher profiles have no overflow checks; there the
/// subtraction wraps and dhcproto reports the option as too long.
fn decode(bytes: &[u8]) -> Option<Message> {
    if bytes.len() < 4 {
        return None;
    }
    std::panic::catch_unwind(|| Message::decode(&mut Decoder::new(bytes)))
        .ok()?
        .ok()
}

/// The answer to the message `bytes`, or `None` when KubeVirt's server sends none (a message
/// type it cannot reply to, no client DUID, a malformed message).
pub fn answer(lease: &Lease6, bytes: &[u8]) -> Option<Vec<u8>> {
    let req = decode(bytes)?;
    let rapid = req.opts().get(OptionCode::RapidCommit).is_some();
    let kind = req.msg_type();
    let reply_kind = match kind {
        MessageType::Solicit if rapid => MessageType::Reply,
        MessageType::Solicit => MessageType::Advertise,
        MessageType::Request
        | MessageType::Confirm
        | MessageType::Renew
        | MessageType::Rebind
        | MessageType::Release
        | MessageType::InformationRequest => MessageType::Reply,
        _ => return None,
    };
    let Some(DhcpOption::ClientId(client_id)) = req.opts().get(OptionCode::ClientId) else {
        return None;
    };
    // The client's IAID, when it sent an IA_NA.
    let iaid = match req.opts().get(OptionCode::IANA) {
        Some(DhcpOption::IANA(ia)) => ia.id,
        _ => 0,
    };

    let mut options = vec![DhcpOption::ClientId(client_id.clone())];
    if kind == MessageType::Solicit && rapid {
        options.push(DhcpOption::RapidCommit);
    }
    let mut ia = IANA {
        id: iaid,
        t1: 0, // T1, T2: the client chooses
        t2: 0,
        opts: Default::default(),
    };
    ia.opts.insert(DhcpOption::IAAddr(IAAddr {
        addr: lease.client_ip,
        preferred_life: LEASE_SECONDS,
        valid_life: LEASE_SECONDS,
        opts: Default::default(),
    }));
    options.push(DhcpOption::IANA(ia));
    options.push(DhcpOption::ServerId(server_duid(lease.server_mac)));
    if !lease.dns.is_empty() {
        options.push(DhcpOption::DomainNameServers(lease.dns.clone()));
    }

    let mut out = Vec::with_capacity(128);
    let mut e = Encoder::new(&mut out);
    let encoded = Message::new_with_id(reply_kind, req.xid())
        .encode(&mut e)
        .and_then(|()| options.iter().try_for_each(|o| o.encode(&mut e)));
    if let Err(err) = encoded {
        log::error(format_args!("DHCPv6: cannot encode an answer: {err}"));
        return None;
    }
    Some(out)
}

/// The server's DUID: link-layer, Ethernet, the bridge's MAC (dhcproto's `Duid::link_layer`
/// takes a 16-byte address).
fn server_duid(mac: [u8; 6]) -> Vec<u8> {
    let mut duid = Vec::with_capacity(10);
    duid.extend_from_slice(&DUID_LL.to_be_bytes());
    duid.extend_from_slice(&u16::from(HType::Eth).to_be_bytes());
    duid.extend_from_slice(&mac);
    duid
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
    use proptest::prelude::*;

    fn lease() -> Lease6 {
        Lease6 {
            client_ip: "fd10:0:2::2".parse().unwrap(),
            server_mac: [2, 0, 0, 0, 0, 0],
            dns: vec!["fd00::a".parse().unwrap()],
        }
    }

    /// A client message: type, transaction id 0xabcdef, client DUID, IA_NA with IAID 7.
    fn message(kind: u8, rapid: bool) -> Vec<u8> {
        let mut m = Message::new_with_id(MessageType::from(kind), [0xab, 0xcd, 0xef]);
        let opts = m.opts_mut();
        opts.insert(DhcpOption::ClientId(vec![0, 3, 0, 1, 1, 2, 3, 4, 5, 6]));
        opts.insert(DhcpOption::IANA(IANA {
            id: 7,
            t1: 0,
            t2: 0,
            opts: Default::default(),
        }));
        if rapid {
            opts.insert(DhcpOption::RapidCommit);
        }
        let mut out = Vec::new();
        m.encode(&mut Encoder::new(&mut out)).unwrap();
        out
    }

    /// The option codes of an answer, in wire order.
    fn codes(mut b: &[u8]) -> Vec<u16> {
        let mut out = Vec::new();
        while b.len() >= 4 {
            let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
            out.push(u16::from_be_bytes([b[0], b[1]]));
            b = &b[4 + len..];
        }
        out
    }

    #[test]
    fn a_solicit_gets_an_advertise_with_the_address_the_iaid_and_the_server_duid() {
        let out = answer(&lease(), &message(1, false)).unwrap();
        assert_eq!(&out[..4], &[2, 0xab, 0xcd, 0xef]);
        // KubeVirt's order: client id, IA_NA, server id, name servers.
        assert_eq!(codes(&out[4..]), [1, 3, 2, 23]);
        // Byte for byte what the hand-written encoder wrote.
        let mut want = vec![2, 0xab, 0xcd, 0xef];
        want.extend_from_slice(&[0, 1, 0, 10, 0, 3, 0, 1, 1, 2, 3, 4, 5, 6]);
        want.extend_from_slice(&[0, 3, 0, 40, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 5, 0, 24]);
        want.extend_from_slice(&"fd10:0:2::2".parse::<Ipv6Addr>().unwrap().octets());
        want.extend_from_slice(&86_313_600u32.to_be_bytes());
        want.extend_from_slice(&86_313_600u32.to_be_bytes());
        want.extend_from_slice(&[0, 2, 0, 10, 0, 3, 0, 1, 2, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 23, 0, 16]);
        want.extend_from_slice(&"fd00::a".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(out, want);
        let decoded = decode(&out).unwrap();
        assert_eq!(decoded.msg_type(), MessageType::Advertise);
    }

    #[test]
    fn rapid_commit_and_requests_get_a_reply() {
        let out = answer(&lease(), &message(1, true)).unwrap();
        assert_eq!(out[0], 7);
        assert_eq!(codes(&out[4..]), [1, 14, 3, 2, 23]);
        for kind in [3, 4, 5, 6, 8, 11] {
            assert_eq!(answer(&lease(), &message(kind, false)).unwrap()[0], 7);
        }
    }

    #[test]
    fn no_answer_without_a_client_id_for_server_messages_or_for_garbage() {
        let mut no_id = message(1, false);
        no_id.drain(4..18); // the client id option
        assert_eq!(codes(&no_id[4..]), [3]);
        assert!(answer(&lease(), &no_id).is_none());
        assert!(answer(&lease(), &message(2, false)).is_none());
        assert!(answer(&lease(), &message(9, false)).is_none());
        assert!(answer(&lease(), &[1, 1]).is_none());
        // An option claiming more bytes than there are.
        assert!(answer(&lease(), &[1, 1, 2, 3, 0, 1, 0xff, 0xff, 0]).is_none());
        // A status code too short for its own status (dhcproto underflows on it).
        assert!(answer(&lease(), &[1, 1, 2, 3, 0, 13, 0, 0, 0, 0]).is_none());
        let no_dns = Lease6 {
            dns: vec![],
            ..lease()
        };
        let out = answer(&no_dns, &message(3, false)).unwrap();
        assert_eq!(codes(&out[4..]), [1, 3, 2]);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = answer(&lease(), &bytes);
        }

        #[test]
        fn arbitrary_options_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut m = message(1, false);
            m.extend_from_slice(&tail);
            let _ = answer(&lease(), &m);
        }
    }
}
