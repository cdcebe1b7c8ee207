//! Bridge binding in a real network namespace: the pod interface handed to the guest, a dummy
//! (a veth pair left down on a kernel without dummy links) keeping the pod's address, and the
//! DHCP cache the launcher reads.

mod common;

use common::PodNetns;
use kvrs_api::VirtualMachineInstance;
use kvrs_node::network::BindingPlugins;
use kvrs_node::network::dhcp_cache::read_cache_file;
use kvrs_node::setup_pod_network;
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

fn vmi() -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}]}},
            "networks": [{"name": "default", "pod": {}}],
        },
        "status": {"runtimeUser": 107},
    }))
    .expect("fixture")
}

#[test]
fn bridge_binding_rewires_the_pod_and_writes_the_dhcp_cache_idempotently() {
    let ns = PodNetns::new();
    let root = tempfile::tempdir().expect("tempdir");
    let pod = ns.pod(&root);
    let (pod_mac, eth0_index) = ns.eth0_identity();
    let has_dummy = common::dummy_links_or_note();
    let done = setup_pod_network(&pod, &vmi(), &BindingPlugins::default()).expect("setup");
    let i = &done.interfaces[0];
    assert_eq!(
        (i.bridge.as_str(), i.tap.as_str(), i.mtu),
        ("k6t-eth0", "tap0", 1450)
    );
    assert_eq!(
        i.guest_ipv4.map(|a| a.to_string()),
        Some(format!("{}/24", ns.pod_ip()))
    );

    let check = |ns: &PodNetns| {
        let br = ns.link("k6t-eth0");
        assert_eq!(br["linkinfo"]["info_kind"], "bridge");
        assert!(
            ns.addrs("k6t-eth0")
                .contains(&"169.254.75.10/32".to_string())
        );

        let nic = ns.link("eth0-nic");
        assert_eq!(nic["ifindex"], eth0_index, "the pod's own link, renamed");
        assert_eq!(nic["master"], "k6t-eth0");
        // The pod link took the bridge's MAC, so the pod's own MAC is the guest's alone. A
        // bridge without an administratively set MAC then follows its lowest port MAC, which
        // may be the tap's (random) one.
        assert_ne!(nic["address"], pod_mac.as_str());
        let tap_mac = ns.link("tap0")["address"]
            .as_str()
            .expect("mac")
            .to_string();
        let nic_mac = nic["address"].as_str().expect("mac").to_string();
        assert_eq!(
            br["address"].as_str(),
            Some(nic_mac.min(tap_mac).as_str()),
            "the bridge has the lowest of its ports' MACs, the pod link's being the bridge's"
        );
        assert_eq!(nic["linkinfo"]["info_slave_data"]["learning"], false);
        assert!(
            ns.addrs("eth0-nic").iter().all(|a| a.starts_with("fe80")),
            "{:?}",
            ns.addrs("eth0-nic")
        );

        let dummy = ns.link("eth0");
        if has_dummy {
            assert_eq!(dummy["linkinfo"]["info_kind"], "dummy");
        } else {
            assert_eq!(dummy["linkinfo"]["info_kind"], "veth");
            let peer = ns.link("eth0-ph");
            assert_eq!(peer["linkinfo"]["info_kind"], "veth");
            assert_eq!(peer["link"], "eth0", "eth0's own peer");
            for l in [&dummy, &peer] {
                assert!(
                    !l["flags"]
                        .as_array()
                        .expect("flags")
                        .iter()
                        .any(|f| f == "UP"),
                    "{l}"
                );
            }
        }
        assert_eq!(dummy["address"], pod_mac.as_str());
        assert_eq!(dummy["mtu"], 1450);
        assert!(ns.addrs("eth0").contains(&format!("{}/24", ns.pod_ip())));

        let tap = ns.link("tap0");
        assert_eq!(tap["master"], "k6t-eth0");
        assert_eq!(tap["mtu"], 1450);
        assert_eq!(tap["linkinfo"]["info_data"]["user"], 107);

        assert_eq!(ns.sysctl("net/ipv4/conf/all/arp_ignore"), "1");
    };
    check(&ns);

    let cache = read_cache_file(root.path(), "eth0").expect("dhcp cache");
    let ipnet = cache.ip.ipnet.as_ref().expect("ip");
    assert_eq!(ipnet.ip.to_string(), ns.pod_ip());
    assert_eq!(ipnet.mask, vec![255, 255, 255, 0]);
    assert_eq!(cache.gateway.map(|g| g.to_string()), Some(ns.pod_gw()));
    let mac: Vec<String> = cache
        .mac
        .as_ref()
        .expect("mac")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(mac.join(":"), pod_mac);
    assert!(!cache.ipam_disabled);
    let routes = cache.routes.as_ref().expect("routes");
    assert_eq!(
        routes.len(),
        1,
        "only the default route: the on-link subnet is dropped"
    );
    assert_eq!(routes[0].dst, None);
    let file = root
        .path()
        .join("var/run/kubevirt-private/vif-cache-eth0.json");
    let meta = std::fs::metadata(&file).expect("cache file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o604);
    // The launcher (107:107) reads it as its owner: in a pod whose fsGroup makes the private
    // directory setgid 107, the empty group bits would refuse it otherwise.
    assert_eq!(
        (meta.uid(), meta.gid()),
        (107, 107),
        "owned by the launcher's user"
    );
    let first_bytes = std::fs::read(&file).expect("read");

    let again = setup_pod_network(&pod, &vmi(), &BindingPlugins::default()).expect("second setup");
    assert_eq!(
        again.interfaces[0].guest_ipv4,
        done.interfaces[0].guest_ipv4
    );
    check(&ns);
    assert_eq!(
        std::fs::read(&file).expect("read"),
        first_bytes,
        "the cache is kept"
    );
    assert!(
        ns.nft_ruleset()["nftables"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["table"].is_null())
    );
}
