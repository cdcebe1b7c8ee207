//! A small rtnetlink client for the namespace thread: list links, addresses and routes, and
//! change links one attribute at a time. The socket is opened on the thread that already
//! entered the pod's namespace, so every request is about the pod.

use super::facts::{IfAddr, PodLink, Route4};
use crate::error::NodeError;
use futures::TryStreamExt as _;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{
    InfoBridgePort, InfoKind, InfoPortData, InfoPortKind, LinkAttribute, LinkFlags, LinkInfo,
    LinkMessage,
};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteHeader};
use rtnetlink::{Handle, LinkBridge, LinkDummy, LinkUnspec, LinkVeth, RouteMessageBuilder};
use std::net::{IpAddr, Ipv4Addr};

/// A connection to the rtnetlink of the current thread's namespace.
pub(crate) struct Rtnl {
    handle: Handle,
}

impl Rtnl {
    /// Opens the socket and spawns its driver on the current (thread-local) runtime.
    pub fn connect() -> Result<Self, NodeError> {
        let (conn, handle, _) =
            rtnetlink::new_connection().map_err(|e| NodeError::netlink("-", "open socket", e))?;
        tokio::spawn(conn);
        Ok(Rtnl { handle })
    }

    /// All links, with their addresses.
    pub async fn links(&self) -> Result<Vec<PodLink>, NodeError> {
        let msgs: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| NodeError::netlink("-", "list links", e))?;
        let addrs = self.addresses(None).await?;
        Ok(msgs
            .iter()
            .map(|m| {
                let mut link = to_link(m);
                link.addresses = addrs
                    .iter()
                    .filter(|a| a.header.index == link.index)
                    .filter_map(to_ifaddr)
                    .collect();
                link
            })
            .collect())
    }

    /// The link named `name`, if any.
    pub async fn link(&self, name: &str) -> Result<Option<PodLink>, NodeError> {
        Ok(self.links().await?.into_iter().find(|l| l.name == name))
    }

    async fn addresses(&self, index: Option<u32>) -> Result<Vec<AddressMessage>, NodeError> {
        let mut req = self.handle.address().get();
        if let Some(i) = index {
            req = req.set_link_index_filter(i);
        }
        req.execute()
            .try_collect()
            .await
            .map_err(|e| NodeError::netlink("-", "list addresses", e))
    }

    /// The IPv4 routes of the main table, in the kernel's order.
    pub async fn routes4(&self) -> Result<Vec<Route4>, NodeError> {
        let msgs: Vec<_> = self
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .map_err(|e| NodeError::netlink("-", "list routes", e))?;
        let mut out = Vec::new();
        for m in msgs {
            let table = m
                .attributes
                .iter()
                .find_map(|a| match a {
                    RouteAttribute::Table(t) => Some(*t),
                    _ => None,
                })
                .unwrap_or(u32::from(m.header.table));
            if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
                continue;
            }
            let mut r = Route4 {
                destination: None,
                gateway: None,
                oif: None,
            };
            for a in &m.attributes {
                match a {
                    RouteAttribute::Destination(RouteAddress::Inet(ip)) => {
                        r.destination = Some((*ip, m.header.destination_prefix_length));
                    }
                    RouteAttribute::Gateway(RouteAddress::Inet(ip)) => r.gateway = Some(*ip),
                    RouteAttribute::Oif(i) => r.oif = Some(*i),
                    _ => {}
                }
            }
            if r.destination.is_none() && m.header.destination_prefix_length != 0 {
                continue;
            }
            out.push(r);
        }
        Ok(out)
    }

    /// Creates a bridge named `name`.
    pub async fn create_bridge(&self, name: &str) -> Result<(), NodeError> {
        self.handle
            .link()
            .add(LinkBridge::new(name).build())
            .execute()
            .await
            .map_err(|e| NodeError::netlink(name, "create bridge", e))
    }

    /// Creates a dummy named `name`. `Ok(false)` when the kernel has no dummy driver: it
    /// answers `EOPNOTSUPP` ("Unknown device type") when built without `CONFIG_DUMMY` and no
    /// module can be loaded, which the caller can work around; any other failure is an error.
    pub async fn create_dummy(&self, name: &str) -> Result<bool, NodeError> {
        match self
            .handle
            .link()
            .add(LinkDummy::new(name).build())
            .execute()
            .await
        {
            Ok(()) => Ok(true),
            Err(rtnetlink::Error::NetlinkError(m))
                if m.raw_code() == -(nix::errno::Errno::EOPNOTSUPP as i32) =>
            {
                Ok(false)
            }
            Err(e) => Err(NodeError::netlink(name, "create dummy", e)),
        }
    }

    /// Creates the veth pair `name` / `peer`, both ends down.
    pub async fn create_veth(&self, name: &str, peer: &str) -> Result<(), NodeError> {
        self.handle
            .link()
            .add(LinkVeth::new(name, peer).build())
            .execute()
            .await
            .map_err(|e| NodeError::netlink(name, format!("create veth (peer {peer})"), e))
    }

    async fn set(&self, name: &str, op: &str, msg: LinkMessage) -> Result<(), NodeError> {
        self.handle
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(|e| NodeError::netlink(name, op, e))
    }

    /// Renames link `index` to `name` (the link must be down).
    pub async fn rename(&self, index: u32, name: &str) -> Result<(), NodeError> {
        let msg = LinkUnspec::new_with_index(index)
            .name(name.to_string())
            .build();
        self.set(name, "rename", msg).await
    }

    /// Sets the hardware address.
    pub async fn set_mac(&self, index: u32, name: &str, mac: [u8; 6]) -> Result<(), NodeError> {
        let msg = LinkUnspec::new_with_index(index)
            .address(mac.to_vec())
            .build();
        self.set(name, "set mac", msg).await
    }

    /// Sets the MTU.
    pub async fn set_mtu(&self, index: u32, name: &str, mtu: u32) -> Result<(), NodeError> {
        let msg = LinkUnspec::new_with_index(index).mtu(mtu).build();
        self.set(name, "set mtu", msg).await
    }

    /// Enslaves to bridge `controller`.
    pub async fn set_controller(
        &self,
        index: u32,
        name: &str,
        controller: u32,
    ) -> Result<(), NodeError> {
        let msg = LinkUnspec::new_with_index(index)
            .controller(controller)
            .build();
        self.set(name, "set master", msg).await
    }

    /// Sets the link up or down.
    pub async fn set_up(&self, index: u32, name: &str, up: bool) -> Result<(), NodeError> {
        let b = LinkUnspec::new_with_index(index);
        let (msg, op) = if up {
            (b.up().build(), "set up")
        } else {
            (b.down().build(), "set down")
        };
        self.set(name, op, msg).await
    }

    /// Turns MAC learning off on the link's bridge port.
    pub async fn learning_off(&self, index: u32, name: &str) -> Result<(), NodeError> {
        let msg = LinkUnspec::new_with_index(index)
            .set_port_kind(InfoPortKind::Bridge)
            .set_port_data(InfoPortData::BridgePort(vec![InfoBridgePort::Learning(
                false,
            )]))
            .build();
        self.handle
            .link()
            .set_port(msg)
            .execute()
            .await
            .map_err(|e| NodeError::netlink(name, "set learning off", e))
    }

    /// Adds an address.
    pub async fn add_addr(&self, index: u32, name: &str, addr: IfAddr) -> Result<(), NodeError> {
        self.handle
            .address()
            .add(index, addr.ip, addr.prefix_len)
            .execute()
            .await
            .map_err(|e| NodeError::netlink(name, format!("add address {addr}"), e))
    }

    /// Removes an address.
    pub async fn del_addr(&self, index: u32, name: &str, addr: IfAddr) -> Result<(), NodeError> {
        for m in self.addresses(Some(index)).await? {
            if m.header.index == index && to_ifaddr(&m) == Some(addr) {
                self.handle
                    .address()
                    .del(m)
                    .execute()
                    .await
                    .map_err(|e| NodeError::netlink(name, format!("delete address {addr}"), e))?;
            }
        }
        Ok(())
    }
}

fn to_link(m: &LinkMessage) -> PodLink {
    let mut link = PodLink {
        index: m.header.index,
        name: String::new(),
        kind: None,
        mtu: 0,
        mac: None,
        controller: None,
        up: m.header.flags.contains(LinkFlags::Up),
        addresses: Vec::new(),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => link.name = n.clone(),
            LinkAttribute::Mtu(v) => link.mtu = *v,
            LinkAttribute::Address(b) => link.mac = <[u8; 6]>::try_from(b.as_slice()).ok(),
            LinkAttribute::Controller(c) => link.controller = Some(*c),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        link.kind = Some(kind_name(k));
                    }
                }
            }
            _ => {}
        }
    }
    link
}

fn kind_name(k: &InfoKind) -> String {
    match k {
        InfoKind::Bridge => "bridge".into(),
        InfoKind::Dummy => "dummy".into(),
        InfoKind::Tun => "tun".into(),
        InfoKind::Veth => "veth".into(),
        other => other.to_string(),
    }
}

fn to_ifaddr(m: &AddressMessage) -> Option<IfAddr> {
    let mut local = None;
    let mut address = None;
    for a in &m.attributes {
        match a {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            _ => {}
        }
    }
    let ip: IpAddr = match m.header.family {
        AddressFamily::Inet => local.or(address)?,
        _ => address.or(local)?,
    };
    Some(IfAddr::new(ip, m.header.prefix_len))
}
