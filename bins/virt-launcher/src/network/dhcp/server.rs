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

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::Duration;

use dhcproto::v4::{DhcpOption, DhcpOptions, HType, Message, Opcode};
use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrIn, bind, setsockopt, socket, sockopt,
};

use super::packet::{self, MessageType, Request};
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
    pub options: DhcpOptions,
}

impl Lease {
    /// The reply to `req`, or `None` for a message this server ignores (not from its client,
    /// not a DISCOVER or REQUEST).
    pub fn reply(&self, req: &Request<'_>) -> Option<Message> {
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
        let r = req.message();
        let mut reply = Message::new_with_id(
            r.xid(),
            Ipv4Addr::UNSPECIFIED,
            self.client_ip,
            Ipv4Addr::UNSPECIFIED,
            r.giaddr(),
            req.client_hardware_address(),
        );
        reply
            .set_opcode(Opcode::BootReply)
            .set_htype(HType::Eth)
            .set_flags(r.flags());
        let mut options = self.options.clone();
        options.insert(DhcpOption::MessageType(kind));
        options.insert(DhcpOption::ServerIdentifier(self.server_ip));
        options.insert(DhcpOption::AddressLeaseTime(LEASE_SECONDS));
        reply.set_opts(options);
        Some(reply)
    }
}

/// Where a reply goes: broadcast when the client has no address yet or asked for it, else back
/// to the sender.
pub fn destination(req: &Request<'_>, from: SocketAddrV4) -> SocketAddrV4 {
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
    let req = match Request::parse(bytes) {
        Ok(p) => p,
        Err(e) => {
            log::warn(format_args!("DHCP: ignoring a message from {from}: {e}"));
            return None;
        }
    };
    let reply = lease.reply(&req)?;
    match packet::encode(reply) {
        Ok(bytes) => Some((bytes, destination(&req, from))),
        Err(e) => {
            log::error(format_args!("DHCP: cannot encode the reply to {from}: {e}"));
            None
        }
    }
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
    use dhcproto::v4::{Flags, OptionCode};
    use dhcproto::{Encodable, Encoder};

    fn lease(mac: Option<[u8; 6]>) -> Lease {
        let mut options = DhcpOptions::new();
        options.insert(DhcpOption::InterfaceMtu(1450));
        Lease {
            server_ip: Ipv4Addr::new(10, 0, 2, 1),
            client_ip: Ipv4Addr::new(10, 0, 2, 2),
            client_mac: mac,
            options,
        }
    }

    /// A client's message of type `kind` (option 53 as it comes: any byte) from `mac`.
    fn request(kind: u8, mac: [u8; 6]) -> Vec<u8> {
        let mut m = Message::new_with_id(
            42,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &mac,
        );
        m.opts_mut()
            .insert(DhcpOption::MessageType(MessageType::from(kind)));
        let mut out = Vec::new();
        m.encode(&mut Encoder::new(&mut out)).unwrap();
        out
    }

    fn reply(l: &Lease, req: &[u8]) -> Option<Message> {
        l.reply(&Request::parse(req).unwrap())
    }

    #[test]
    fn discover_gets_an_offer_and_request_an_ack() {
        let l = lease(None);
        let offer = reply(&l, &request(1, [2; 6])).unwrap();
        assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
        assert_eq!((offer.opcode(), offer.xid()), (Opcode::BootReply, 42));
        assert_eq!(offer.yiaddr(), Ipv4Addr::new(10, 0, 2, 2));
        assert_eq!(
            offer.opts().get(OptionCode::ServerIdentifier),
            Some(&DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 2, 1)))
        );
        assert_eq!(
            offer.opts().get(OptionCode::AddressLeaseTime),
            Some(&DhcpOption::AddressLeaseTime(86_313_600))
        );
        assert_eq!(offer.chaddr(), &[2; 6]);
        let ack = reply(&l, &request(3, [2; 6])).unwrap();
        assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
        for ignored in [4, 7, 8, 0, 9] {
            assert_eq!(reply(&l, &request(ignored, [2; 6])), None);
        }
    }

    #[test]
    fn only_the_configured_client_is_answered() {
        let l = lease(Some([2, 0, 0, 0, 0, 9]));
        assert!(reply(&l, &request(1, [2, 0, 0, 0, 0, 9])).is_some());
        assert!(reply(&l, &request(1, [2, 0, 0, 0, 0, 8])).is_none());
    }

    #[test]
    fn replies_are_broadcast_until_the_client_has_an_address() {
        let wire = request(1, [2; 6]);
        let req = Request::parse(&wire).unwrap();
        let anon = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68);
        assert_eq!(
            destination(&req, anon),
            SocketAddrV4::new(Ipv4Addr::BROADCAST, 68)
        );
        let renewing = SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 2), 68);
        assert_eq!(destination(&req, renewing), renewing);
        let mut bcast = wire.clone();
        bcast[10..12].copy_from_slice(&u16::from(Flags::default().set_broadcast()).to_be_bytes());
        let bcast = Request::parse(&bcast).unwrap();
        assert_eq!(destination(&bcast, renewing).ip(), &Ipv4Addr::BROADCAST);
    }

    #[test]
    fn garbage_is_ignored() {
        let from: SocketAddr = "0.0.0.0:68".parse().unwrap();
        assert!(answer(&lease(None), &[1, 2, 3], from).is_none());
        assert!(answer(&lease(None), &[0; 300], from).is_none());
    }
}
