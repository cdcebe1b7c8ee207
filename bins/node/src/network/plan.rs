//! The pod network as a value: what links, addresses, knobs and NAT a VMI needs in its pod.
//!
//! [`plan`] is pure: the VMI and the [`PodFacts`] discovered in the namespace go in, a
//! [`NetPlan`] comes out. The executor ([`super::apply`]) only carries a plan out, and every
//! step of it is "make it so" rather than "do it", so running the same plan twice — or
//! planning again on a pod already set up — changes nothing the second time.

use super::dhcp_cache::DhcpConfig;
use super::facts::{IfAddr, PodFacts};
use super::spec::{Binding, BindingPlugins, WiredIface, wired_ifaces};
use super::{bridge, managed_tap, masquerade};
use crate::error::NodeError;
use kvrs_api::VirtualMachineInstance;
use serde::Serialize;
use std::net::IpAddr;

/// Everything to do in the pod's network namespace, in order: DHCP caches, links, sysctls, NAT.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NetPlan {
    /// DHCP cache files to write for the launcher (bridge binding), before the pod interface
    /// loses its address.
    pub dhcp_caches: Vec<DhcpCacheFile>,
    /// Links to make exist as described, in this order.
    pub links: Vec<LinkSpec>,
    /// `/proc/sys/net` knobs to set, after the links.
    pub sysctls: Vec<Sysctl>,
    /// The nft script to feed `nft -f -`, if NAT is needed and not already there.
    pub nft_script: Option<String>,
    /// What the setup amounts to, per interface (returned to the caller).
    pub interfaces: Vec<InterfaceSetup>,
}

/// A link as it must end up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LinkSpec {
    /// Its name.
    pub name: String,
    /// What to create when it does not exist; `None` for a link that must already exist.
    pub kind: Option<LinkKind>,
    /// An existing link (by index) to turn into this one, renaming it if needed.
    pub existing_index: Option<u32>,
    /// Its hardware address.
    pub mac: MacSpec,
    /// Its MTU, if it must be set.
    pub mtu: Option<u32>,
    /// The bridge it must be enslaved to.
    pub controller: Option<String>,
    /// Its addresses: `None` leaves them alone, `Some` makes them exactly these (IPv6
    /// link-local addresses the kernel manages are never removed).
    pub addresses: Option<Vec<IfAddr>>,
    /// Whether it must be up (links that need not be are left as they are).
    pub up: bool,
    /// Whether MAC learning must be off on its bridge port.
    pub learning_off: bool,
}

/// The kinds of link the node creates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// A Linux bridge.
    Bridge,
    /// A dummy link (holds the pod's addresses for bridge binding); a veth pair left down
    /// where the kernel has no dummy links.
    Dummy,
    /// A persistent tap for QEMU.
    Tap(TapSpec),
}

/// How a tap is made: the flags KubeVirt's `create-tap` passes to `TUNSETIFF`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TapSpec {
    /// Owner and group (107 for non-root VMIs, else 0).
    pub owner: u32,
    /// Multi-queue (`IFF_MULTI_QUEUE | IFF_NO_PI`) when the VMI asks for more than one queue;
    /// else KubeVirt's single-queue defaults (`IFF_TUN_EXCL | IFF_ONE_QUEUE`, so packet info
    /// stays on and `vnet_hdr` off — libvirt sets its own flags when it opens the tap).
    pub multi_queue: bool,
}

/// A link's hardware address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MacSpec {
    /// Leave it.
    Keep,
    /// Exactly this one.
    Set(#[serde(serialize_with = "ser_mac")] [u8; 6]),
    /// The one the named link has (when this one is set up).
    CopyFrom(String),
}

/// A `/proc/sys` knob under `net/`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sysctl {
    /// The key, e.g. `net/ipv4/ip_forward`.
    pub key: String,
    /// The value to write.
    pub value: String,
}

/// A DHCP cache file for the launcher.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DhcpCacheFile {
    /// The pod interface it is about (the file is `vif-cache-<pod_iface>.json`).
    pub pod_iface: String,
    /// Its content.
    #[serde(skip)]
    pub config: DhcpConfig,
}

/// What was (or will be) set up for one VMI interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InterfaceSetup {
    /// The VMI interface / network name.
    pub network: String,
    /// Its binding.
    pub binding: Binding,
    /// The pod interface (`eth0`).
    pub pod_iface: String,
    /// The in-pod bridge (`k6t-eth0`).
    pub bridge: String,
    /// The tap QEMU attaches to (`tap0`).
    pub tap: String,
    /// The MTU of the tap (the pod interface's).
    pub mtu: u32,
    /// Whether the tap is multi-queue.
    pub multi_queue: bool,
    /// The guest's IPv4 address (masquerade: the subnet's second host; bridge: the pod's;
    /// `managedTap`: none, the plugin gives the guest its address).
    pub guest_ipv4: Option<IfAddr>,
    /// The guest's IPv4 gateway.
    pub gateway_ipv4: Option<IpAddr>,
    /// The guest's IPv6 address (masquerade only).
    pub guest_ipv6: Option<IfAddr>,
    /// The guest's IPv6 gateway (masquerade only).
    pub gateway_ipv6: Option<IpAddr>,
}

/// Plans the pod network of `vmi` for a pod that looks like `facts`, in a cluster whose network
/// binding plugins are `plugins`.
pub fn plan(
    vmi: &VirtualMachineInstance,
    facts: &PodFacts,
    plugins: &BindingPlugins,
) -> Result<NetPlan, NodeError> {
    let ifaces = wired_ifaces(vmi, facts, plugins)?;
    let ctx = PlanContext::of(vmi);
    let mut plan = NetPlan::default();
    let mut nat_done = false;
    for w in &ifaces {
        match w.binding {
            Binding::Masquerade => {
                // KubeVirt sets up NAT for the first masquerade interface only (there can be
                // only one: masquerade is allowed on the pod network alone).
                let with_nat = !nat_done;
                nat_done = true;
                masquerade::plan_iface(&ctx, w, facts, with_nat, &mut plan)?;
            }
            Binding::Bridge => bridge::plan_iface(&ctx, w, facts, &mut plan)?,
            Binding::ManagedTap => managed_tap::plan_iface(&ctx, w, facts, &mut plan)?,
        }
    }
    dedup_sysctls(&mut plan.sysctls);
    Ok(plan)
}

/// VMI-wide inputs of the per-interface planners.
pub(crate) struct PlanContext<'a> {
    pub vmi: &'a VirtualMachineInstance,
    /// Owner of the taps (KubeVirt: 107 for non-root VMIs, 0 for root ones).
    pub tap_owner: u32,
    /// Queues per virtio tap (0 when multi-queue is off).
    pub queues: u32,
}

impl<'a> PlanContext<'a> {
    fn of(vmi: &'a VirtualMachineInstance) -> Self {
        let non_root = vmi
            .status
            .as_ref()
            .and_then(|s| s.runtime_user)
            .is_some_and(|u| u != 0)
            || vmi
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("kubevirt.io/nonroot"));
        let multiqueue = vmi.spec.domain.devices.network_interface_multiqueue == Some(true);
        // KubeVirt caps tap queues at 256.
        let queues = if multiqueue {
            kvrs_converter::topology::vcpu_count(vmi).min(256)
        } else {
            0
        };
        PlanContext {
            vmi,
            tap_owner: if non_root {
                crate::devices::QEMU_UID
            } else {
                0
            },
            queues,
        }
    }

    /// Whether the tap of `w` is multi-queue: only virtio NICs get queues.
    pub fn multi_queue(&self, w: &WiredIface<'_>) -> bool {
        let virtio = matches!(w.iface.model.as_deref(), None | Some("") | Some("virtio"));
        virtio && self.queues > 1
    }
}

fn dedup_sysctls(sysctls: &mut Vec<Sysctl>) {
    let mut seen = std::collections::HashSet::new();
    sysctls.retain(|s| seen.insert(s.key.clone()));
}

fn ser_mac<S: serde::Serializer>(mac: &[u8; 6], s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_mac(mac))
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (or `-` separated), as Go's `net.ParseMAC` does for 6 bytes.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = text.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(parts) {
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    Some(mac)
}
