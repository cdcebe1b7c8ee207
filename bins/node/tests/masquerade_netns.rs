//! Masquerade setup in a real network namespace, checked with `ip -j` and `nft -j`.

mod common;

use common::PodNetns;
use kvrs_api::VirtualMachineInstance;
use kvrs_node::network::BindingPlugins;
use kvrs_node::{PodRef, setup_pod_network};
use serde_json::{Value, json};

fn vmi(ports: Option<Value>) -> VirtualMachineInstance {
    let mut iface = json!({"name": "default", "masquerade": {}});
    if let Some(p) = ports {
        iface["ports"] = p;
    }
    serde_json::from_value(json!({
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {
            "domain": {"devices": {"interfaces": [iface]}},
            "networks": [{"name": "default", "pod": {}}],
        },
        "status": {"runtimeUser": 107},
    }))
    .expect("fixture")
}

/// (chain, type, hook, prio, rule count) of table `ip nat`.
fn nat_chains(ruleset: &Value) -> Vec<(String, String, String, i64, usize)> {
    let items = ruleset["nftables"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for item in &items {
        let c = &item["chain"];
        if c.is_null() || c["table"] != "nat" || c["family"] != "ip" {
            continue;
        }
        let name = c["name"].as_str().unwrap_or("").to_string();
        let rules = items
            .iter()
            .filter(|i| i["rule"]["chain"] == name.as_str() && i["rule"]["table"] == "nat")
            .count();
        out.push((
            name,
            c["type"].as_str().unwrap_or("").to_string(),
            c["hook"].as_str().unwrap_or("").to_string(),
            c["prio"].as_i64().unwrap_or(0),
            rules,
        ));
    }
    out.sort();
    out
}

#[test]
fn masquerade_builds_kubevirts_bridge_tap_and_nat_and_is_idempotent() {
    let ns = PodNetns::new();
    let root = tempfile::tempdir().expect("tempdir");
    let vmi = vmi(None);

    let done = setup_pod_network(&ns.pod(&root), &vmi, &BindingPlugins::default()).expect("setup");
    let i = &done.interfaces[0];
    assert_eq!(
        (i.bridge.as_str(), i.tap.as_str(), i.mtu),
        ("k6t-eth0", "tap0", 1450)
    );
    assert_eq!(
        i.guest_ipv4.map(|a| a.to_string()).as_deref(),
        Some("10.0.2.2/24")
    );
    assert_eq!(
        i.gateway_ipv4.map(|a| a.to_string()).as_deref(),
        Some("10.0.2.1")
    );

    let check = |ns: &PodNetns| {
        let br = ns.link("k6t-eth0");
        assert_eq!(br["linkinfo"]["info_kind"], "bridge");
        assert_eq!(br["address"], "02:00:00:00:00:00");
        assert_eq!(br["mtu"], 1450);
        assert!(
            br["flags"].as_array().unwrap().contains(&json!("UP")),
            "{br}"
        );
        let br_addrs = ns.addrs("k6t-eth0");
        assert!(
            br_addrs.contains(&"10.0.2.1/24".to_string()),
            "{br_addrs:?}"
        );
        assert_eq!(
            br_addrs.iter().filter(|a| !a.starts_with("fe80")).count(),
            1,
            "{br_addrs:?}"
        );

        let tap = ns.link("tap0");
        let data = &tap["linkinfo"]["info_data"];
        assert_eq!(tap["linkinfo"]["info_kind"], "tun");
        assert_eq!(data["type"], "tap");
        assert_eq!(data["persist"], true);
        assert_eq!(data["multi_queue"], false);
        assert_eq!(
            data["pi"], true,
            "KubeVirt's single-queue flags keep packet info"
        );
        assert_eq!(data["vnet_hdr"], false);
        assert_eq!(data["user"], 107);
        let group_107 = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(107))
            .ok()
            .flatten()
            .map(|g| g.name);
        assert!(
            data["group"] == 107
                || Some(data["group"].as_str().unwrap_or("")) == group_107.as_deref(),
            "tap group: {}",
            data["group"]
        );
        assert_eq!(tap["master"], "k6t-eth0");
        assert_eq!(tap["mtu"], 1450);
        assert!(
            tap["flags"].as_array().unwrap().contains(&json!("UP")),
            "{tap}"
        );

        // The pod interface is left as the CNI made it.
        assert!(ns.addrs("eth0").contains(&format!("{}/24", ns.pod_ip())));
        assert!(ns.link("eth0")["master"].is_null());

        assert_eq!(ns.sysctl("net/ipv4/ip_forward"), "1");
        assert_eq!(ns.sysctl("net/ipv4/conf/k6t-eth0/route_localnet"), "1");

        let chains = nat_chains(&ns.nft_ruleset());
        let expect = |n: &str, t: &str, h: &str, p: i64, r: usize| {
            (n.to_string(), t.to_string(), h.to_string(), p, r)
        };
        assert_eq!(
            chains,
            vec![
                expect("KUBEVIRT_POSTINBOUND", "", "", 0, 1),
                expect("KUBEVIRT_PREINBOUND", "", "", 0, 1),
                expect("input", "nat", "input", 100, 0),
                expect("output", "nat", "output", -100, 1),
                expect("postrouting", "nat", "postrouting", 100, 2),
                expect("prerouting", "nat", "prerouting", -100, 1),
            ]
        );
        insta::assert_snapshot!("masquerade_nat_table", ns.nat_table_text("ip"));
    };
    check(&ns);

    // A restarted handler runs the setup again: nothing is duplicated, nothing fails.
    let again =
        setup_pod_network(&ns.pod(&root), &vmi, &BindingPlugins::default()).expect("second setup");
    assert_eq!(again, done);
    check(&ns);
}

#[test]
fn masquerade_forwards_only_the_listed_ports() {
    let ns = PodNetns::new();
    let root = tempfile::tempdir().expect("tempdir");
    let vmi = vmi(Some(json!([{"port": 22}, {"port": 53, "protocol": "UDP"}])));
    setup_pod_network(&ns.pod(&root), &vmi, &BindingPlugins::default()).expect("setup");
    setup_pod_network(&ns.pod(&root), &vmi, &BindingPlugins::default()).expect("second setup");
    insta::assert_snapshot!("masquerade_ports_nat_table", ns.nat_table_text("ip"));
}

#[test]
fn missing_netns_is_a_netns_enter_error() {
    let root = tempfile::tempdir().expect("tempdir");
    let pod = PodRef {
        netns: "/run/netns/kvrs-node-test-does-not-exist".into(),
        root: root.path().to_path_buf(),
    };
    let err =
        setup_pod_network(&pod, &vmi(None), &BindingPlugins::default()).expect_err("no netns");
    assert_eq!(err.label(), "netns_enter");
    assert!(
        err.to_string().contains("kvrs-node-test-does-not-exist"),
        "{err}"
    );
}
