//! KubeVirt's masquerade NAT as an nft script.
//!
//! KubeVirt runs one `nft add ...` command per table, chain and rule; the same commands, in the
//! same order, fed to one `nft -f -` make one atomic transaction: either the whole NAT exists
//! or none of it, which is what lets a restarted handler tell "done" from "not done" by the
//! presence of the `KUBEVIRT_PREINBOUND` chain.
//!
//! Not reproduced (documented gaps): the Istio variant (sidecar ports, the `127.0.0.6` source)
//! and the legacy migration-port exclusions (49152/49153) — kvrs neither injects Istio nor
//! migrates over the pod network's legacy ports; `portRanges` are KubeVirt-gated
//! (`PortRangesSpec`) and treated as gate-off, i.e. ignored, as KubeVirt does by default.

use std::fmt::Write as _;
use std::net::IpAddr;

/// The NAT table name.
pub const NAT_TABLE: &str = "nat";
/// The chain inbound traffic jumps to before DNAT to the guest.
pub const PREINBOUND: &str = "KUBEVIRT_PREINBOUND";
/// The chain traffic towards the guest jumps to for SNAT to the gateway.
pub const POSTINBOUND: &str = "KUBEVIRT_POSTINBOUND";

/// One forwarded port of the interface's `ports` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedPort {
    /// Lower-case protocol (`tcp`, `udp`, `sctp`).
    pub protocol: String,
    /// Port number.
    pub port: u16,
}

/// The NAT of one address family for one masquerade interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyNat {
    /// The pod interface (`eth0`).
    pub pod_iface: String,
    /// The in-pod bridge (`k6t-eth0`).
    pub bridge: String,
    /// The bridge's address, the guest's gateway.
    pub gateway: IpAddr,
    /// The guest's address.
    pub guest: IpAddr,
    /// Forwarded ports; empty forwards everything.
    pub ports: Vec<ForwardedPort>,
}

/// The nft script for `nat` (one family): table, base chains, KubeVirt chains, rules.
pub fn nat_script(nat: &FamilyNat) -> String {
    let (family, loopback) = match nat.gateway {
        IpAddr::V4(_) => ("ip", "127.0.0.1"),
        IpAddr::V6(_) => ("ip6", "::1"),
    };
    let t = NAT_TABLE;
    let guest = nat.guest;
    let gw = nat.gateway;
    let mut s = String::new();
    let mut line = |text: String| {
        let _ = writeln!(s, "{text}");
    };
    line(format!("add table {family} {t}"));
    for (chain, hook, prio) in [
        ("prerouting", "prerouting", -100),
        ("input", "input", 100),
        ("output", "output", -100),
        ("postrouting", "postrouting", 100),
    ] {
        line(format!(
            "add chain {family} {t} {chain} {{ type nat hook {hook} priority {prio}; }}"
        ));
    }
    line(format!("add chain {family} {t} {PREINBOUND}"));
    line(format!("add chain {family} {t} {POSTINBOUND}"));
    line(format!(
        "add rule {family} {t} postrouting {family} saddr {guest} counter masquerade"
    ));
    line(format!(
        "add rule {family} {t} prerouting iifname {} counter jump {PREINBOUND}",
        nat.pod_iface
    ));
    line(format!(
        "add rule {family} {t} postrouting oifname {} counter jump {POSTINBOUND}",
        nat.bridge
    ));
    for p in &nat.ports {
        let (proto, port) = (&p.protocol, p.port);
        line(format!(
            "add rule {family} {t} {PREINBOUND} {proto} dport {{ {port} }} counter dnat to {guest}"
        ));
        line(format!(
            "add rule {family} {t} {POSTINBOUND} {proto} dport {port} {family} saddr {{ {loopback} }} counter snat to {gw}"
        ));
        line(format!(
            "add rule {family} {t} output {family} daddr {{ {loopback} }} {proto} dport {port} counter dnat to {guest}"
        ));
    }
    if nat.ports.is_empty() {
        line(format!(
            "add rule {family} {t} {PREINBOUND} counter dnat to {guest}"
        ));
        line(format!(
            "add rule {family} {t} {POSTINBOUND} {family} saddr {{ {loopback} }} counter snat to {gw}"
        ));
        line(format!(
            "add rule {family} {t} output {family} daddr {{ {loopback} }} counter dnat to {guest}"
        ));
    }
    s
}
