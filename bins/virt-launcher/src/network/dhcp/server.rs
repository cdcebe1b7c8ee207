//! The single-client DHCPv4 server of one guest NIC: it answers DISCOVER with OFFER and REQUEST
//! with ACK, always with the same address and options, and ignores everything else — KubeVirt's
//! behaviour (no lease database, no NAK: the guest NIC can only ever have this one address).
//!
//! The socket is bound to `0.0.0.0:67` and to the bridge device with `SO_BINDTODEVICE`, so only
//! the guest's broadcasts on that bridge reach it and broadcast replies leave through it.
//! KubeVirt filters on the arrival interface with `IP_PKTINFO` instead; the device binding does
//! the same with less code and needs no privilege since Linux 5.7 (an unbound socket may bind to
//! a device without `CAP_NET_RAW`; checked as UID 107 on 6.18). Port 67 itself needs
//! `CAP_NET_BIND_SERVICE` or `net.ipv4.ip_unprivileged_port_start=0` in the pod's network
//! namespace.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrIn, bind, setsockopt, socket, sockopt,
};

use super::options::code;
use super::packet::{BOOT_REPLY, MessageType, Packet};
use crate::log;

/// The server port.
pub const SERVER_PORT: u16 = 67;
/// KubeVirt's "infinite" lease: 999 days.
pub const LEASE_SECONDS: u32 = 999 * 24 * 60 * 60;
/// Big enough for any DHCP message on an Ethernet link.
const RECV_BUFFER: usize = 1500;
/// Pause after a socket error, so a persistent one cannot spin the thread.
const ERROR_BACKOFF: Duration = Duration::from_millis(200);
/// The server thread does little; a small stack keeps its memory small.
const STACK_SIZE: usize = 128 * 1024;

/// The one answer this server gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Server identifier (option 54).
    pub server_ip: Ipv4Addr,
    /// The address the guest gets.
    pub client_ip: Ipv4Addr,
    /// Only this client is answered; `None` answers any.
    pub client_mac: Option<[u8; 6]>,
    /// Everything else the guest gets, by option code.
    pub options: BTreeMap<u8, Vec<u8>>,
}

impl Lease {
    /// The reply to `req`, or `None` for a message this server ignores (not from its client,
    /// not a DISCOVER or REQUEST).
    pub fn reply(&self, req: &Packet) -> Option<Packet> {
        if let Some(mac) = self.client_mac
            && req.client_hardware_address() != mac
        {
            return None;
        }
        let kind = match req.message_type()? {
            MessageType::Discover => MessageType::Offer,
            MessageType::Request => MessageType::Ack,
            _ => return None,
        };
        let mut options = Vec::with_capacity(self.options.len() + 3);
        options.push((super::packet::OPT_MESSAGE_TYPE, vec![kind as u8]));
        options.push((code::SERVER_ID, self.server_ip.octets().to_vec()));
        options.push((code::LEASE_TIME, LEASE_SECONDS.to_be_bytes().to_vec()));
        options.extend(self.options.iter().map(|(c, v)| (*c, v.clone())));
        Some(Packet {
            op: BOOT_REPLY,
            htype: 1,
            hlen: req.hlen,
            xid: req.xid,
            flags: req.flags,
            yiaddr: self.client_ip,
            giaddr: req.giaddr,
            chaddr: req.chaddr,
            options,
            ..Packet::default()
        })
    }
}

/// Where a reply goes: broadcast when the client has no address yet or asked for it, else back
/// to the sender.
pub fn destination(req: &Packet, from: SocketAddrV4) -> SocketAddrV4 {
    if from.ip().is_unspecified() || req.wants_broadcast() {
        SocketAddrV4::new(Ipv4Addr::BROADCAST, from.port())
    } else {
        from
    }
}

/// The server socket on `bridge`, port `port` ([`SERVER_PORT`] outside tests).
pub fn bind_socket(bridge: &str, port: u16) -> Result<UdpSocket, String> {
    let fd: OwnedFd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| format!("socket: {e}"))?;
    setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    setsockopt(&fd, sockopt::Broadcast, &true).map_err(|e| format!("SO_BROADCAST: {e}"))?;
    setsockopt(
        &fd,
        sockopt::BindToDevice,
        &std::ffi::OsString::from(bridge),
    )
    .map_err(|e| format!("SO_BINDTODEVICE {bridge}: {e}"))?;
    let addr = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr).map_err(|e| match e {
        nix::errno::Errno::EACCES => format!(
            "bind 0.0.0.0:{port}: {e} (needs CAP_NET_BIND_SERVICE or net.ipv4.ip_unprivileged_port_start=0)"
        ),
        e => format!("bind 0.0.0.0:{port}: {e}"),
    })?;
    Ok(UdpSocket::from(fd))
}

/// Answers one datagram; `None` when nothing is sent back. Bad packets are logged, not fatal.
fn answer(lease: &Lease, bytes: &[u8], from: SocketAddr) -> Option<(Vec<u8>, SocketAddrV4)> {
    let SocketAddr::V4(from) = from else {
        return None;
    };
    let req = match Packet::parse(bytes) {
        Ok(p) => p,
        Err(e) => {
            log::warn(format_args!("DHCP: ignoring a message from {from}: {e}"));
            return None;
        }
    };
    let reply = lease.reply(&req)?;
    Some((reply.encode(), destination(&req, from)))
}

/// Serves `lease` on `socket` until the process ends, on its own thread.
pub fn spawn(
    iface: &str,
    socket: UdpSocket,
    lease: Lease,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    spawn_server(format!("dhcp-{iface}"), socket, move |bytes, from| {
        answer(&lease, bytes, from).map(|(b, to)| (b, SocketAddr::V4(to)))
    })
}

/// A thread named `name` answering each datagram on `socket` with what `answer` returns (the
/// DHCPv4 and DHCPv6 servers differ only there); receive errors back off, send errors are
/// logged.
pub(super) fn spawn_server(
    name: String,
    socket: UdpSocket,
    answer: impl Fn(&[u8], SocketAddr) -> Option<(Vec<u8>, SocketAddr)> + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .stack_size(STACK_SIZE)
        .spawn(move || {
            let mut buf = [0u8; RECV_BUFFER];
            loop {
                let (n, from) = match socket.recv_from(&mut buf) {
                    Ok(r) => r,
                    Err(e) => {
                        log::error(format_args!("{name}: receive failed: {e}"));
                        std::thread::sleep(ERROR_BACKOFF);
                        continue;
                    }
                };
                if let Some((bytes, to)) = answer(&buf[..n], from)
                    && let Err(e) = socket.send_to(&bytes, to)
                {
                    log::error(format_args!("{name}: reply to {to} failed: {e}"));
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(mac: Option<[u8; 6]>) -> Lease {
        Lease {
            server_ip: Ipv4Addr::new(10, 0, 2, 1),
            client_ip: Ipv4Addr::new(10, 0, 2, 2),
            client_mac: mac,
            options: BTreeMap::from([(code::MTU, vec![5, 0xaa])]),
        }
    }

    fn request(kind: u8, mac: [u8; 6]) -> Packet {
        let mut p = Packet {
            xid: 42,
            ..Packet::default()
        };
        p.chaddr[..6].copy_from_slice(&mac);
        p.options.push((53, vec![kind]));
        p
    }

    #[test]
    fn discover_gets_an_offer_and_request_an_ack() {
        let l = lease(None);
        let offer = l.reply(&request(1, [2; 6])).unwrap();
        assert_eq!(offer.message_type(), Some(MessageType::Offer));
        assert_eq!((offer.op, offer.xid), (BOOT_REPLY, 42));
        assert_eq!(offer.yiaddr, Ipv4Addr::new(10, 0, 2, 2));
        assert_eq!(offer.option(code::SERVER_ID), Some(vec![10, 0, 2, 1]));
        assert_eq!(
            offer.option(code::LEASE_TIME),
            Some(86_313_600u32.to_be_bytes().to_vec())
        );
        assert_eq!(offer.client_hardware_address(), &[2; 6]);
        let ack = l.reply(&request(3, [2; 6])).unwrap();
        assert_eq!(ack.message_type(), Some(MessageType::Ack));
        for ignored in [4, 7, 8, 0, 9] {
            assert_eq!(l.reply(&request(ignored, [2; 6])), None);
        }
    }

    #[test]
    fn only_the_configured_client_is_answered() {
        let l = lease(Some([2, 0, 0, 0, 0, 9]));
        assert!(l.reply(&request(1, [2, 0, 0, 0, 0, 9])).is_some());
        assert!(l.reply(&request(1, [2, 0, 0, 0, 0, 8])).is_none());
    }

    #[test]
    fn replies_are_broadcast_until_the_client_has_an_address() {
        let req = request(1, [2; 6]);
        let anon = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68);
        assert_eq!(
            destination(&req, anon),
            SocketAddrV4::new(Ipv4Addr::BROADCAST, 68)
        );
        let renewing = SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 2), 68);
        assert_eq!(destination(&req, renewing), renewing);
        let mut bcast = req.clone();
        bcast.flags = 0x8000;
        assert_eq!(destination(&bcast, renewing).ip(), &Ipv4Addr::BROADCAST);
    }

    #[test]
    fn garbage_is_ignored() {
        let from: SocketAddr = "0.0.0.0:68".parse().unwrap();
        assert!(answer(&lease(None), &[1, 2, 3], from).is_none());
        assert!(answer(&lease(None), &[0; 300], from).is_none());
    }
}
