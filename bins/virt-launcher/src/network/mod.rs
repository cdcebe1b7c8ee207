//! Network phase 2, the launcher's half of pod networking (KubeVirt runs it before defining the
//! domain): the handler has already built the pod side (bridge `k6t-eth0`, `tap0`, NAT or the
//! bridged pod NIC, and for bridge binding the vif cache); the launcher completes each
//! tap-attached domain interface from what it finds in the pod and starts the DHCP server that
//! gives the guest its address.
//!
//! Pod networks and secondary (Multus) networks: a secondary network's pod interface is found
//! as KubeVirt's launcher finds it (the hashed name, else the ordinal `net<N>`), and its domain
//! interface attaches to that network's tap. Other non-pod networks are skipped with a warning.
//! A VMI without interfaces does nothing here.

pub mod dhcp;
pub mod domain_iface;
pub mod error;
pub mod link;
pub mod names;

use std::collections::HashMap;

use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::{Interface, Network};
use kvrs_converter::Domain;

use crate::log;
use dhcp::DhcpEnv;
use dhcp::config::{self as dhcp_config, DhcpConfig, PodNic};
use domain_iface::TapAttachment;
use error::NetworkError;

/// The handler's domain attachment for tap-attached interfaces.
const TAP: &str = "tap";

/// The interface's domain attachment is a tap: the handler's word when it sent the map (as
/// KubeVirt's handler always does), else the converter's own rule (masquerade or bridge).
fn is_tap(iface: &Interface, attachments: &HashMap<String, String>) -> bool {
    if attachments.is_empty() {
        iface.masquerade.is_some() || iface.bridge.is_some()
    } else {
        attachments.get(&iface.name).is_some_and(|a| a == TAP)
    }
}

fn link_err(iface: &str, link: &str, e: link::LinkError) -> NetworkError {
    NetworkError::Link {
        iface: iface.to_string(),
        link: link.to_string(),
        reason: e.to_string(),
    }
}

/// Completes the domain's tap-attached interfaces and starts their DHCP servers.
pub fn setup_phase2(
    vmi: &VirtualMachineInstance,
    attachments: &HashMap<String, String>,
    domain: &mut Domain,
    env: &DhcpEnv,
) -> Result<(), NetworkError> {
    let ifaces = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    let live = |i: &&Interface| i.state.as_deref() != Some("absent");
    for network in vmi.spec.networks.iter().flatten() {
        let Some((index, iface)) = ifaces
            .iter()
            .enumerate()
            .find(|(_, i)| i.name == network.name)
        else {
            continue; // KubeVirt sets up only networks with a (non-absent) interface
        };
        if !live(&iface) || !is_tap(iface, attachments) {
            continue;
        }
        let networks = vmi.spec.networks.as_deref().unwrap_or_default();
        let pod_iface = if network.pod.is_some() {
            PodIface::primary()
        } else if let Some(candidates) =
            names::secondary_pod_iface_candidates(networks, &network.name)
        {
            match find_link(&iface.name, &candidates)? {
                Some(name) => PodIface {
                    name,
                    secondary: true,
                },
                // As KubeVirt's launcher: no pod interface found, nothing to complete.
                None => {
                    log::warn(format_args!(
                        "interface {}: no pod interface {} or {} for network {}",
                        iface.name, candidates[0], candidates[1], network.name
                    ));
                    continue;
                }
            }
        } else {
            log::warn(format_args!(
                "interface {}: tap attachment on network {} (neither the pod network nor a \
                 secondary Multus network) is not set up by kvrs's launcher",
                iface.name, network.name
            ));
            continue;
        };
        setup_pod_iface(vmi, index, iface, network, &pod_iface, domain, env)
            .inspect_err(|e| log::error(format_args!("network phase 2 failed: {e}")))?;
    }
    Ok(())
}

/// The pod interface a network's domain interface is completed from.
struct PodIface {
    name: String,
    /// A secondary Multus network's (its tap is `tap<hash>`, not `tap0`).
    secondary: bool,
}

impl PodIface {
    fn primary() -> PodIface {
        PodIface {
            name: names::PRIMARY_POD_IFACE.to_string(),
            secondary: false,
        }
    }
}

/// The first of `candidates` that is a link in the pod.
fn find_link(iface: &str, candidates: &[String; 2]) -> Result<Option<String>, NetworkError> {
    for name in candidates {
        if link::exists(name).map_err(|e| link_err(iface, name, e))? {
            return Ok(Some(name.clone()));
        }
    }
    Ok(None)
}

fn setup_pod_iface(
    vmi: &VirtualMachineInstance,
    index: usize,
    iface: &Interface,
    network: &Network,
    pod: &PodIface,
    domain: &mut Domain,
    env: &DhcpEnv,
) -> Result<(), NetworkError> {
    let pod_iface = pod.name.as_str();
    let pod_link = link::by_name(pod_iface).map_err(|e| link_err(&iface.name, pod_iface, e))?;
    // As KubeVirt, a domain interface that cannot be completed is logged and left as converted;
    // the DHCP set-up below then reports what is missing.
    match attachment(iface, pod_iface, pod.secondary, &pod_link) {
        Ok(att) => {
            domain_iface::apply(domain, &iface.name, &att);
        }
        Err(e) => log::error(format_args!("failed to create libvirt configuration: {e}")),
    }
    let subdomain = vmi.spec.subdomain.as_deref().unwrap_or_default();
    let cfg = if iface.bridge.is_some() {
        bridge_config(index, iface, pod_iface, subdomain, env)?
    } else if iface.masquerade.is_none() {
        // KubeVirt's launcher serves DHCP for bridge and masquerade bindings only: a binding
        // plugin's tap (e.g. `managedTap`) gets its address from the plugin's own means.
        return Ok(());
    } else {
        let nic = PodNic {
            name: pod_iface.to_string(),
            mtu: pod_link.mtu,
            has_ipv4: link::has_ipv4_global_unicast(pod_iface)
                .map_err(|e| link_err(&iface.name, pod_iface, e))?,
            has_ipv6: link::has_ipv6_global_unicast(pod_iface)
                .map_err(|e| link_err(&iface.name, pod_iface, e))?,
        };
        let pod = network.pod.as_ref();
        let cidr = pod.and_then(|p| p.vm_network_cidr.as_deref());
        let cidr_v6 = pod.and_then(|p| p.vm_i_pv6_network_cidr.as_deref());
        dhcp_config::masquerade(&iface.name, &nic, cidr, cidr_v6, subdomain)?
    };
    let bridge = names::bridge_name(pod_iface);
    dhcp::ensure_started(env, &iface.name, &bridge, &cfg, iface.dhcp_options.as_ref())
}

/// Target, MTU and MAC of the domain interface.
fn attachment(
    iface: &Interface,
    pod_iface: &str,
    secondary: bool,
    pod_link: &link::Link,
) -> Result<TapAttachment, NetworkError> {
    let mac = match iface.mac_address.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => names::parse_mac(m)
            .map(|b| link::format_mac(&b))
            .ok_or_else(|| {
                NetworkError::config(&iface.name, format!("invalid MAC address {m:?}"))
            })?,
        None => link::format_mac(&pod_link.mac),
    };
    let tap = names::tap_name(pod_iface, secondary);
    let target = match link::exists(&tap) {
        Ok(true) => tap,
        Ok(false) => pod_iface.to_string(),
        Err(e) => return Err(link_err(&iface.name, &tap, e)),
    };
    Ok(TapAttachment {
        target,
        mtu: pod_link.mtu,
        mac,
    })
}

/// Bridge binding: the handler's cached lease, served from the fake link-local address with the
/// MTU of the renamed pod NIC.
fn bridge_config(
    index: usize,
    iface: &Interface,
    pod_iface: &str,
    subdomain: &str,
    env: &DhcpEnv,
) -> Result<DhcpConfig, NetworkError> {
    let mut cfg = dhcp::vif_cache::read(&env.private_dir, &iface.name, pod_iface)?;
    if cfg.ipam_disabled {
        return Ok(cfg);
    }
    cfg.name = pod_iface.to_string();
    cfg.server_ip = dhcp_config::bridge_server_ip(&iface.name, index)?;
    let nic = names::bridged_nic_name(pod_iface);
    let nic_link = link::by_name(&nic).map_err(|e| link_err(&iface.name, &nic, e))?;
    cfg.mtu = dhcp_config::mtu16(nic_link.mtu);
    cfg.subdomain = subdomain.to_string();
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "n", "namespace": "default"},
            "spec": spec
        }))
        .unwrap()
    }

    fn env(dir: &std::path::Path) -> DhcpEnv {
        DhcpEnv {
            private_dir: dir.to_path_buf(),
            resolv_conf: dir.join("resolv.conf"),
            hostname: Some("n".into()),
            port: 0,
            port_v6: 0,
        }
    }

    #[test]
    fn a_vmi_without_interfaces_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let v = vmi(serde_json::json!({
            "domain": {"devices": {"autoattachPodInterface": false}},
        }));
        let mut d = Domain::default();
        assert_eq!(
            setup_phase2(&v, &HashMap::new(), &mut d, &env(dir.path())),
            Ok(())
        );
        assert_eq!(d, Domain::default());
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn only_tap_attached_pod_interfaces_are_set_up() {
        let dir = tempfile::tempdir().unwrap();
        // Nothing here may touch the host's links: every interface is skipped.
        let v = vmi(serde_json::json!({
            "domain": {"devices": {"interfaces": [
                {"name": "absent", "masquerade": {}, "state": "absent"},
                {"name": "multus", "bridge": {}},
                {"name": "sriov", "sriov": {}},
            ]}},
            "networks": [
                {"name": "absent", "pod": {}},
                {"name": "multus", "multus": {"networkName": "br"}},
                {"name": "sriov", "multus": {"networkName": "sr"}},
                {"name": "orphan", "pod": {}},
            ]
        }));
        let mut d = Domain::default();
        assert_eq!(
            setup_phase2(&v, &HashMap::new(), &mut d, &env(dir.path())),
            Ok(())
        );
    }

    #[test]
    fn the_handlers_attachment_map_wins() {
        let iface: Interface =
            serde_json::from_value(serde_json::json!({"name": "default", "masquerade": {}}))
                .unwrap();
        assert!(is_tap(&iface, &HashMap::new()));
        let map = HashMap::from([("other".to_string(), TAP.to_string())]);
        assert!(!is_tap(&iface, &map));
        let map = HashMap::from([("default".to_string(), TAP.to_string())]);
        assert!(is_tap(&iface, &map));
    }

    fn masquerade_cfg() -> DhcpConfig {
        let nic = PodNic {
            name: "eth0".into(),
            mtu: 1500,
            has_ipv4: true,
            has_ipv6: false,
        };
        dhcp_config::masquerade("default", &nic, None, None, "").unwrap()
    }

    #[test]
    fn a_server_that_cannot_start_names_the_interface() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("resolv.conf"), "nameserver 10.96.0.10\n").unwrap();
        let err = dhcp::ensure_started(
            &env(dir.path()),
            "default",
            "kvrs-nobr0",
            &masquerade_cfg(),
            None,
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("interface default: failed to start DHCP server on kvrs-nobr0: "),
            "{msg}"
        );
        assert!(!dir.path().join("dhcp_started-eth0").exists());
        let no_resolv = dhcp::ensure_started(
            &env(&dir.path().join("sub")),
            "default",
            "kvrs-nobr0",
            &masquerade_cfg(),
            None,
        )
        .unwrap_err();
        assert!(no_resolv.to_string().contains("resolv.conf"), "{no_resolv}");
    }

    #[test]
    fn a_started_marker_means_no_second_server() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("dhcp_started-eth0"), "").unwrap();
        // The bridge does not exist: only skipping the start can succeed.
        let r = dhcp::ensure_started(
            &env(dir.path()),
            "default",
            "kvrs-nobr0",
            &masquerade_cfg(),
            None,
        );
        assert_eq!(r, Ok(()));
    }
}
