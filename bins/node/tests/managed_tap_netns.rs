//! A `managedTap` binding plugin's pod side in a real network namespace: the bridge binding's
//! rewiring without the bridge's address and without a DHCP cache, and a guest NIC on the bridge
//! reaching the pod's network through the renamed pod link.

mod common;

use common::{PodNetns, run};
use kvrs_api::VirtualMachineInstance;
use kvrs_node::network::BindingPlugins;
use kvrs_node::setup_pod_network;
use serde_json::{Value, json};
use std::process::Command;

fn vmi() -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "binding": {"name": "mtap"}}]}},
            "networks": [{"name": "default", "pod": {}}],
        },
        "status": {"runtimeUser": 107},
    }))
    .expect("fixture")
}

fn plugins() -> BindingPlugins {
    BindingPlugins::from_iter([("mtap", "managedTap")])
}

/// A namespace of the test's own, deleted on drop.
struct ExtraNetns(String);

impl ExtraNetns {
    fn new(role: &str) -> Self {
        let name = format!("kvrs-mtap-{role}-{}", std::process::id());
        run("ip", &["netns", "add", &name]);
        run("ip", &["-n", &name, "link", "set", "lo", "up"]);
        ExtraNetns(name)
    }
}

impl Drop for ExtraNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn is_up(link: &Value) -> bool {
    link["flags"]
        .as_array()
        .expect("flags")
        .iter()
        .any(|f| f == "UP")
}

#[test]
fn managed_tap_rewires_the_pod_without_address_or_dhcp_and_the_guest_reaches_the_pod_network() {
    let ns = PodNetns::new();
    let root = tempfile::tempdir().expect("tempdir");
    let pod = ns.pod(&root);
    let (pod_mac, eth0_index) = ns.eth0_identity();
    let has_dummy = common::dummy_links_or_note();

    let done = setup_pod_network(&pod, &vmi(), &plugins()).expect("setup");
    let i = &done.interfaces[0];
    assert_eq!(
        (i.bridge.as_str(), i.tap.as_str(), i.mtu),
        ("k6t-eth0", "tap0", 1450)
    );
    assert_eq!(i.guest_ipv4, None, "the node serves this guest no address");

    let check = |ns: &PodNetns| {
        let br = ns.link("k6t-eth0");
        assert_eq!(br["linkinfo"]["info_kind"], "bridge");
        assert!(is_up(&br));
        let br_addrs = ns.addrs("k6t-eth0");
        assert!(
            br_addrs.iter().all(|a| a.starts_with("fe80")),
            "the bridge has no address of its own: {br_addrs:?}"
        );

        let nic = ns.link("eth0-nic");
        assert_eq!(nic["ifindex"], eth0_index, "the pod's own link, renamed");
        assert_eq!(nic["master"], "k6t-eth0");
        assert!(is_up(&nic));
        assert_ne!(
            nic["address"],
            pod_mac.as_str(),
            "the pod's MAC is the guest's"
        );
        assert_eq!(nic["linkinfo"]["info_slave_data"]["learning"], false);
        let nic_addrs = ns.addrs("eth0-nic");
        assert!(
            nic_addrs.iter().all(|a| a.starts_with("fe80")),
            "{nic_addrs:?}"
        );
        // The pod link took the bridge's MAC; a bridge without an administratively set MAC
        // then follows its lowest port MAC, which may be the tap's (random) one.
        let tap = ns.link("tap0");
        let tap_mac = tap["address"].as_str().expect("mac").to_string();
        let nic_mac = nic["address"].as_str().expect("mac").to_string();
        assert_eq!(br["address"].as_str(), Some(nic_mac.min(tap_mac).as_str()));

        assert_eq!(tap["linkinfo"]["info_kind"], "tun");
        assert_eq!(tap["master"], "k6t-eth0");
        assert_eq!(tap["mtu"], 1450, "the pod interface's MTU");
        // Numbers from sysfs: `ip` prints a user or group by name when the host has one.
        for attr in ["owner", "group"] {
            let path = format!("/sys/class/net/tap0/{attr}");
            let id = run("ip", &["netns", "exec", &ns.name, "cat", &path]);
            assert_eq!(id.trim(), "107", "tap0 {attr}");
        }

        let dummy = ns.link("eth0");
        if has_dummy {
            assert_eq!(dummy["linkinfo"]["info_kind"], "dummy");
        } else {
            assert_eq!(dummy["linkinfo"]["info_kind"], "veth");
            assert_eq!(ns.link("eth0-ph")["link"], "eth0", "eth0's own peer");
            assert!(!is_up(&dummy), "{dummy}");
        }
        assert_eq!(dummy["address"], pod_mac.as_str());
        assert_eq!(dummy["mtu"], 1450);
        assert!(ns.addrs("eth0").contains(&format!("{}/24", ns.pod_ip())));

        assert_eq!(ns.sysctl("net/ipv4/conf/all/arp_ignore"), "1");
        assert!(
            !root
                .path()
                .join("var/run/kubevirt-private/vif-cache-eth0.json")
                .exists(),
            "no DHCP cache: the launcher serves no DHCP for a plugin's tap"
        );
        assert!(
            ns.nft_ruleset()["nftables"]
                .as_array()
                .expect("nftables")
                .iter()
                .all(|i| i["table"].is_null()),
            "no NAT"
        );
    };
    check(&ns);

    let again = setup_pod_network(&pod, &vmi(), &plugins()).expect("second setup");
    assert_eq!(again, done);
    check(&ns);

    // The guest's side: a veth on the bridge stands in for the VM's NIC (QEMU would hold the
    // tap; a tap nobody opened has no carrier), with the pod's MAC and address as the plugin
    // would give the guest. The pod's gateway lives in a namespace of its own at the other end
    // of the pod's veth pair.
    let outer = ExtraNetns::new("out");
    let guest = ExtraNetns::new("guest");
    run("ip", &["link", "set", &ns.host_end, "netns", &outer.0]);
    let gw = format!("{}/24", ns.pod_gw());
    run(
        "ip",
        &["-n", &outer.0, "addr", "add", &gw, "dev", &ns.host_end],
    );
    run("ip", &["-n", &outer.0, "link", "set", &ns.host_end, "up"]);
    ns.ip(&[
        "link", "add", "vmnic", "type", "veth", "peer", "name", "guest0", "netns", &guest.0,
    ]);
    ns.ip(&["link", "set", "vmnic", "master", "k6t-eth0", "up"]);
    let guest_ip = format!("{}/24", ns.pod_ip());
    for args in [
        vec!["link", "set", "guest0", "address", pod_mac.as_str()],
        vec!["addr", "add", guest_ip.as_str(), "dev", "guest0"],
        vec!["link", "set", "guest0", "up"],
    ] {
        let mut full = vec!["-n", guest.0.as_str()];
        full.extend(args);
        run("ip", &full);
    }
    let ping = Command::new("ip")
        .args(["netns", "exec", &guest.0, "ping", "-c", "3", "-W", "2"])
        .arg(ns.pod_gw())
        .output()
        .expect("ping runs");
    assert!(
        ping.status.success(),
        "the guest reaches the pod's gateway through k6t-eth0 and eth0-nic: {}{}",
        String::from_utf8_lossy(&ping.stdout),
        String::from_utf8_lossy(&ping.stderr)
    );
}

/// A plugin the cluster registers with `tap` (or without an attachment type) is the plugin's:
/// the pod is left exactly as it was.
#[test]
fn a_tap_plugin_leaves_the_pod_alone() {
    let ns = PodNetns::new();
    let root = tempfile::tempdir().expect("tempdir");
    let pod = ns.pod(&root);
    let before = ns.ip(&["-j", "-d", "link", "show"]);
    let tap = BindingPlugins::from_iter([("mtap", "tap")]);
    let done = setup_pod_network(&pod, &vmi(), &tap).expect("setup");
    assert!(done.interfaces.is_empty());
    assert_eq!(ns.ip(&["-j", "-d", "link", "show"]), before);
    assert_eq!(ns.sysctl("net/ipv4/conf/all/arp_ignore"), "0");
}
