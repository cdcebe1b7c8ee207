//! The launcher's DHCP servers for tap-attached interfaces (DHCPv4, and DHCPv6 for masquerade
//! on a pod with IPv6), started once per pod interface:
//! KubeVirt records a started server as `dhcp_started-<pod interface>` in the private directory,
//! so a second SyncVMI (or a restarted sync after a failed define) does not start a second one.
//!
//! Messages and options are coded by `dhcproto`. What these modules keep is KubeVirt's server,
//! which no DHCP crate has: one client and one fixed answer per NIC, which messages get which
//! answer ([`server`], [`v6`]), which options with which values and lease times ([`options`],
//! [`config`], [`resolv`], [`vif_cache`]), and where options go in a reply ([`packet`]). The
//! replies are byte for byte what the hand-written coder sent, but for the domain search list,
//! which dhcproto compresses (see [`options`]).

pub mod config;
pub mod options;
pub mod packet;
pub mod resolv;
pub mod server;
pub mod v6;
pub mod vif_cache;

#[cfg(test)]
mod netns_tests;

use std::path::{Path, PathBuf};

use kvrs_api::api::DHCPOptions;

use crate::log;
use crate::network::error::NetworkError;
use config::DhcpConfig;
use resolv::Resolver;
use server::Lease;

/// Where the server's facts come from (the pod's files outside tests).
#[derive(Debug, Clone)]
pub struct DhcpEnv {
    /// `/var/run/kubevirt-private`: marker files and the handler's vif caches.
    pub private_dir: PathBuf,
    /// `/etc/resolv.conf`.
    pub resolv_conf: PathBuf,
    /// The pod's host name; `None` reads it from the kernel.
    pub hostname: Option<String>,
    /// The server port (67 outside tests).
    pub port: u16,
    /// The DHCPv6 server port (547 outside tests).
    pub port_v6: u16,
}

impl DhcpEnv {
    /// The pod's own files.
    pub fn pod() -> DhcpEnv {
        DhcpEnv {
            private_dir: PathBuf::from("/var/run/kubevirt-private"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            hostname: None,
            port: server::SERVER_PORT,
            port_v6: v6::SERVER_PORT,
        }
    }

    fn marker(&self, pod_iface: &str) -> PathBuf {
        self.private_dir.join(format!("dhcp_started-{pod_iface}"))
    }
}

/// The lease of `cfg`, with the pod's resolver settings and host name; `None` without IPv4.
pub fn lease(
    cfg: &DhcpConfig,
    resolver: &Resolver,
    hostname: &str,
    custom: Option<&DHCPOptions>,
) -> Result<Option<Lease>, options::OptionsError> {
    let Some((client_ip, mask)) = cfg.ip else {
        return Ok(None);
    };
    let search = resolver.search_with_subdomain(&cfg.subdomain);
    let options = options::build(&options::OptionInputs {
        mask: Some(mask),
        router: cfg.gateway,
        dns: &resolver.ipv4,
        routes: &cfg.routes,
        search: &search,
        mtu: cfg.mtu,
        hostname,
        custom,
    })?;
    Ok(Some(Lease {
        server_ip: cfg.server_ip,
        client_ip,
        client_mac: cfg.mac,
        options,
    }))
}

fn hostname(env: &DhcpEnv) -> Result<String, String> {
    match &env.hostname {
        Some(h) => Ok(h.clone()),
        None => nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .map_err(|e| format!("reading the pod's hostname failed: {e}")),
    }
}

fn read_resolver(path: &Path) -> Result<Resolver, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("failed to get DNS servers from {}: {e}", path.display()))?;
    Ok(Resolver::parse(&text))
}

/// Starts the server of VMI interface `iface` (pod interface `cfg.name`) on `bridge`, unless it
/// runs already or the handler found no IP management.
pub fn ensure_started(
    env: &DhcpEnv,
    iface: &str,
    bridge: &str,
    cfg: &DhcpConfig,
    custom: Option<&DHCPOptions>,
) -> Result<(), NetworkError> {
    if cfg.ipam_disabled {
        return Ok(());
    }
    let marker = env.marker(&cfg.name);
    if marker.exists() {
        return Ok(());
    }
    let start_err = |reason: String| NetworkError::DhcpStart {
        iface: iface.to_string(),
        bridge: bridge.to_string(),
        reason,
    };
    // The marker must be writable before a server starts: a server without its marker would
    // be started again by the next sync.
    std::fs::create_dir_all(&env.private_dir)
        .map_err(|e| start_err(format!("create {}: {e}", env.private_dir.display())))?;
    let resolver = read_resolver(&env.resolv_conf).map_err(start_err)?;
    let host = hostname(env).map_err(start_err)?;
    let lease = lease(cfg, &resolver, &host, custom)
        .map_err(|e| NetworkError::config(iface, e.to_string()))?;
    if let Some(lease) = lease {
        let socket = server::bind_socket(bridge, env.port).map_err(start_err)?;
        log::info(format_args!(
            "Starting DHCP server for interface {iface} on {bridge}: {} for {}",
            lease.client_ip,
            lease.client_mac.map_or("any client".to_string(), |m| {
                crate::network::link::format_mac(&m)
            }),
        ));
        server::spawn(iface, socket, lease).map_err(|e| start_err(format!("thread: {e}")))?;
    }
    if let Some(client_ip) = cfg.ipv6 {
        let link = crate::network::link::by_name(bridge)
            .map_err(|e| start_err(format!("bridge {bridge}: {e}")))?;
        let server_mac = <[u8; 6]>::try_from(link.mac.as_slice())
            .map_err(|_| start_err(format!("bridge {bridge} has no Ethernet address")))?;
        let socket = v6::bind_socket(bridge, link.index, env.port_v6).map_err(start_err)?;
        log::info(format_args!(
            "Starting DHCPv6 server for interface {iface} on {bridge}: {client_ip}"
        ));
        let lease = v6::Lease6 {
            client_ip,
            server_mac,
            dns: resolver.ipv6.clone(),
        };
        v6::spawn(iface, socket, lease).map_err(|e| start_err(format!("thread: {e}")))?;
    }
    if cfg.ip.is_none() && cfg.ipv6.is_none() {
        log::warn(format_args!(
            "interface {iface}: pod interface {} has no IP address; no DHCP server",
            cfg.name
        ));
    }
    std::fs::File::create(&marker)
        .map_err(|e| start_err(format!("create {}: {e}", marker.display())))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::dhcp::config::{PodNic, masquerade};
    use crate::network::dhcp::packet::{self, MessageType, Request};
    use dhcproto::v4::{DhcpOption, Message, borrowed};
    use dhcproto::{Encodable, Encoder};
    use std::net::Ipv4Addr;

    /// A client's message of type `kind` from MAC 02:00:00:00:00:01, as it goes on the wire.
    fn client_message(kind: MessageType) -> Vec<u8> {
        let mut message = Message::new_with_id(
            1,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &[2, 0, 0, 0, 0, 1],
        );
        message.opts_mut().insert(DhcpOption::MessageType(kind));
        let mut wire = Vec::new();
        message.encode(&mut Encoder::new(&mut wire)).unwrap();
        wire
    }

    const RESOLV: &str = include_str!("../../../testdata/resolv.conf");

    #[test]
    fn a_masquerade_offer_carries_kubevirts_options() {
        let nic = PodNic {
            name: "eth0".into(),
            mtu: 1450,
            has_ipv4: true,
            has_ipv6: false,
        };
        let cfg = masquerade("default", &nic, None, None, "").unwrap();
        let lease = lease(&cfg, &Resolver::parse(RESOLV), "vm-1", None)
            .unwrap()
            .unwrap();
        let wire = client_message(MessageType::Discover);
        let offer = lease.reply(&Request::parse(&wire).unwrap()).unwrap();
        let wire = packet::encode(offer).unwrap();
        let offer = packet::decode(&wire).unwrap();
        assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
        assert_eq!(offer.yiaddr(), Ipv4Addr::new(10, 0, 2, 2));
        // Each option's value as it went out.
        let view = borrowed::Message::new(&wire).unwrap();
        let opt = |c: u8| {
            view.opts()
                .find(|o| u8::from(o.code()) == c)
                .map(|o| o.data().to_vec())
        };
        assert_eq!(opt(54).unwrap(), [10, 0, 2, 1]); // server id
        assert_eq!(opt(3).unwrap(), [10, 0, 2, 1]); // router
        assert_eq!(opt(1).unwrap(), [255, 255, 255, 0]); // subnet mask
        assert_eq!(opt(26).unwrap(), 1450u16.to_be_bytes()); // MTU
        assert_eq!(opt(6).unwrap(), [10, 96, 0, 10, 10, 96, 0, 11]); // name servers
        assert_eq!(opt(51).unwrap(), 86_313_600u32.to_be_bytes()); // lease time
        assert_eq!(opt(12).unwrap(), b"vm-1"); // host name
        assert_eq!(opt(15).unwrap(), b"default.svc.cluster.local"); // domain name
        // The search list, compressed by dhcproto: the second and third names point into the
        // first (KubeVirt sends the three names in full).
        assert_eq!(
            opt(119).unwrap(),
            b"\x07default\x03svc\x07cluster\x05local\x00\xc0\x08\xc0\x0c"
        );
        assert_eq!(opt(121), None); // no classless routes
        // Option order on the wire: type, server id, lease time, then by code.
        assert_eq!(
            packet::option_order(&wire),
            [53, 54, 51, 1, 3, 6, 12, 15, 26, 119]
        );
    }

    /// An empty value goes out as KubeVirt's library writes it: the code, length 0.
    #[test]
    fn a_pod_without_ipv4_name_servers_sends_an_empty_name_server_option() {
        let nic = PodNic {
            name: "eth0".into(),
            mtu: 1450,
            has_ipv4: true,
            has_ipv6: false,
        };
        let cfg = masquerade("default", &nic, None, None, "").unwrap();
        let resolver = Resolver::parse("nameserver fd00::a\n");
        let lease = lease(&cfg, &resolver, "vm-1", None).unwrap().unwrap();
        let wire = client_message(MessageType::Request);
        let ack = lease.reply(&Request::parse(&wire).unwrap()).unwrap();
        let wire = packet::encode(ack).unwrap();
        let view = borrowed::Message::new(&wire).unwrap();
        let dns = view.opts().find(|o| u8::from(o.code()) == 6);
        assert!(dns.is_some_and(|o| o.is_empty()), "option 6 with length 0");
        assert_eq!(
            packet::decode(&wire).unwrap().opts().msg_type(),
            Some(MessageType::Ack)
        );
    }
}
