//! Carrying out a [`NetPlan`] inside the pod's namespace (on the namespace thread).
//!
//! Each [`LinkSpec`] is converged, not replayed: a link that exists is inspected and only what
//! differs is changed, so applying a plan to a pod that already has it changes nothing. A link
//! is taken down only when it must be renamed or get a new MAC, and brought back up after, as
//! KubeVirt's nmstate layer does.

use super::facts::{IfAddr, PodLink};
use super::names;
use super::plan::{LinkKind, LinkSpec, MacSpec, NetPlan, Sysctl};
use super::rtnl::Rtnl;
use super::tools;
use crate::error::NodeError;

/// Applies the links, sysctls and NAT of `plan` in the current thread's namespace.
pub(crate) async fn apply_in_current_netns(plan: &NetPlan) -> Result<(), NodeError> {
    let rtnl = Rtnl::connect()?;
    for spec in &plan.links {
        converge_link(&rtnl, spec).await?;
    }
    for s in &plan.sysctls {
        write_sysctl(s)?;
    }
    if let Some(script) = &plan.nft_script {
        tools::nft_apply(script)?;
    }
    Ok(())
}

async fn converge_link(rtnl: &Rtnl, spec: &LinkSpec) -> Result<(), NodeError> {
    let name = spec.name.as_str();
    let links = rtnl.links().await?;
    let existing = match spec.existing_index {
        // The renamed link may already carry its new name (a second run).
        Some(i) => links
            .iter()
            .find(|l| l.index == i)
            .or_else(|| links.iter().find(|l| l.name == name)),
        None => links.iter().find(|l| l.name == name),
    };
    let cur = match existing {
        Some(l) => {
            check_kind(l, spec, &links)?;
            l.clone()
        }
        None => {
            create(rtnl, spec).await?;
            rtnl.link(name).await?.ok_or_else(|| {
                NodeError::netlink(name, "create", "link not found after creating it")
            })?
        }
    };
    let index = cur.index;
    let want_mac = match &spec.mac {
        MacSpec::Keep => None,
        MacSpec::Set(m) => Some(*m),
        MacSpec::CopyFrom(other) => {
            let src = links.iter().find(|l| l.name == *other).and_then(|l| l.mac);
            Some(src.ok_or_else(|| {
                NodeError::netlink(
                    name,
                    format!("copy mac from {other}"),
                    "source link has no MAC",
                )
            })?)
        }
    };
    let rename = cur.name != name;
    let mac_change = want_mac.is_some_and(|m| cur.mac != Some(m));
    let cycle = cur.up && (rename || mac_change);
    if cycle {
        rtnl.set_up(index, &cur.name, false).await?;
    }
    if rename {
        rtnl.rename(index, name).await?;
    }
    if let (Some(mac), true) = (want_mac, mac_change) {
        rtnl.set_mac(index, name, mac).await?;
    }
    if let Some(mtu) = spec.mtu.filter(|m| *m != cur.mtu) {
        rtnl.set_mtu(index, name, mtu).await?;
    }
    if let Some(ctrl) = &spec.controller {
        let ctrl_index = links
            .iter()
            .find(|l| l.name == *ctrl)
            .map(|l| l.index)
            .ok_or_else(|| {
                NodeError::netlink(name, format!("set master {ctrl}"), "bridge not found")
            })?;
        if cur.controller != Some(ctrl_index) {
            rtnl.set_controller(index, name, ctrl_index).await?;
        }
    }
    if let Some(want) = &spec.addresses {
        converge_addresses(rtnl, index, name, &cur.addresses, want).await?;
    }
    if (spec.up && !cur.up) || cycle {
        rtnl.set_up(index, name, true).await?;
    }
    if spec.learning_off {
        rtnl.learning_off(index, name).await?;
    }
    Ok(())
}

fn check_kind(link: &PodLink, spec: &LinkSpec, links: &[PodLink]) -> Result<(), NodeError> {
    let want = match &spec.kind {
        None => return Ok(()),
        Some(LinkKind::Bridge) => "bridge",
        Some(LinkKind::Dummy) if is_dummy_stand_in(link, links) => return Ok(()),
        Some(LinkKind::Dummy) => "dummy",
        Some(LinkKind::Tap(_)) => "tun",
    };
    match link.kind.as_deref() {
        Some(k) if k == want => Ok(()),
        other => Err(NodeError::netlink(
            &spec.name,
            "check type",
            format!(
                "exists as {}, wanted {want}",
                other.unwrap_or("a plain link")
            ),
        )),
    }
}

/// Whether `link` is the veth a previous run created in place of a dummy: a veth whose
/// placeholder peer sits beside it. The pod's own (CNI) veth never has that peer in the pod.
fn is_dummy_stand_in(link: &PodLink, links: &[PodLink]) -> bool {
    let peer = names::placeholder_peer(&link.name);
    link.kind.as_deref() == Some("veth")
        && links
            .iter()
            .any(|l| l.name == peer && l.kind.as_deref() == Some("veth"))
}

async fn create(rtnl: &Rtnl, spec: &LinkSpec) -> Result<(), NodeError> {
    match &spec.kind {
        None => Err(NodeError::PodInterface {
            iface: spec.name.clone(),
            reason: "pod link is missing".into(),
        }),
        Some(LinkKind::Bridge) => rtnl.create_bridge(&spec.name).await,
        Some(LinkKind::Dummy) => {
            if rtnl.create_dummy(&spec.name).await? {
                return Ok(());
            }
            // A kernel without dummy links (no CONFIG_DUMMY, e.g. a minimal VM kernel) would
            // otherwise fail every bridge-bound VMI. A veth pair left down is what a dummy is
            // here: a carrier-less link that holds the pod's MAC, MTU and addresses.
            let peer = names::placeholder_peer(&spec.name);
            tracing::warn!(
                link = %spec.name,
                %peer,
                "the kernel has no dummy links: a veth pair, both ends down, holds the pod \
                 interface's addresses instead"
            );
            rtnl.create_veth(&spec.name, &peer).await
        }
        Some(LinkKind::Tap(tap)) => tools::create_tap(&spec.name, tap),
    }
}

async fn converge_addresses(
    rtnl: &Rtnl,
    index: u32,
    name: &str,
    have: &[IfAddr],
    want: &[IfAddr],
) -> Result<(), NodeError> {
    for a in have {
        if !want.contains(a) && !a.is_ipv6_link_local() {
            rtnl.del_addr(index, name, *a).await?;
        }
    }
    for a in want {
        if !have.contains(a) {
            rtnl.add_addr(index, name, *a).await?;
        }
    }
    Ok(())
}

fn write_sysctl(s: &Sysctl) -> Result<(), NodeError> {
    let path = format!("/proc/sys/{}", s.key);
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current.trim() == s.value {
        return Ok(());
    }
    std::fs::write(&path, &s.value).map_err(|e| NodeError::Sysctl {
        key: s.key.clone(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(index: u32, name: &str, kind: &str) -> PodLink {
        PodLink {
            index,
            name: name.into(),
            kind: Some(kind.into()),
            mtu: 1500,
            mac: None,
            controller: None,
            up: false,
            addresses: Vec::new(),
        }
    }

    fn dummy_spec() -> LinkSpec {
        LinkSpec {
            name: "eth0".into(),
            kind: Some(LinkKind::Dummy),
            existing_index: None,
            mac: MacSpec::Keep,
            mtu: None,
            controller: None,
            addresses: None,
            up: false,
            learning_off: false,
        }
    }

    #[test]
    fn a_veth_passes_for_the_dummy_only_beside_its_placeholder_peer() {
        let stand_in = link(5, "eth0", "veth");
        let peer = link(6, "eth0-ph", "veth");
        let links = [stand_in.clone(), peer];
        assert!(check_kind(&stand_in, &dummy_spec(), &links).is_ok());
        // The pod's own (CNI) veth still named eth0 is not a dummy: never take it for one.
        let cni = link(2, "eth0", "veth");
        let err = check_kind(&cni, &dummy_spec(), std::slice::from_ref(&cni)).unwrap_err();
        assert!(
            err.to_string().contains("exists as veth, wanted dummy"),
            "{err}"
        );
        let real = link(5, "eth0", "dummy");
        assert!(check_kind(&real, &dummy_spec(), std::slice::from_ref(&real)).is_ok());
    }
}
