//! The pure planner: VMI + pod facts -> NetPlan, pinned with snapshots.

use kvrs_api::VirtualMachineInstance;
use kvrs_node::NodeError;
use kvrs_node::network::{
    self, BindingPlugins, IfAddr, LinkKind, MacSpec, NetPlan, PodFacts, PodLink, Route4, TapSpec,
};
use proptest::prelude::*;
use serde_json::json;

/// The plan in a cluster without network binding plugins.
fn plan(vmi: &VirtualMachineInstance, facts: &PodFacts) -> Result<NetPlan, NodeError> {
    network::plan(vmi, facts, &BindingPlugins::default())
}

fn vmi(interfaces: serde_json::Value, networks: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {
            "domain": {"devices": {"interfaces": interfaces}},
            "networks": networks,
        },
        "status": {"runtimeUser": 107},
    }))
    .expect("fixture VMI")
}

fn masquerade_vmi() -> VirtualMachineInstance {
    vmi(
        json!([{"name": "default", "masquerade": {}}]),
        json!([{"name": "default", "pod": {}}]),
    )
}

fn eth0(addrs: &[&str]) -> PodLink {
    PodLink {
        index: 2,
        name: "eth0".into(),
        kind: Some("veth".into()),
        mtu: 1450,
        mac: Some([0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x07]),
        controller: None,
        up: true,
        addresses: addrs
            .iter()
            .map(|a| {
                let (ip, p) = a.split_once('/').expect("cidr");
                IfAddr::new(ip.parse().expect("ip"), p.parse().expect("prefix"))
            })
            .collect(),
    }
}

fn facts(links: Vec<PodLink>) -> PodFacts {
    PodFacts {
        links,
        routes4: vec![
            Route4 {
                destination: None,
                gateway: Some("10.244.1.1".parse().unwrap()),
                oif: Some(2),
            },
            Route4 {
                destination: Some(("10.244.1.0".parse().unwrap(), 24)),
                gateway: None,
                oif: Some(2),
            },
        ],
        ..Default::default()
    }
}

/// [`ipv4_pod`] after a bridged binding rewired it: `eth0-nic` without addresses, and the
/// pod's addresses on a dummy `eth0`, down.
fn rewired_pod() -> PodFacts {
    let mut nic = eth0(&[]);
    nic.name = "eth0-nic".into();
    let mut dummy = eth0(&["10.244.1.7/24", "fe80::858:aff:fef4:107/64"]);
    dummy.index = 5;
    dummy.kind = Some("dummy".into());
    dummy.up = false;
    facts(vec![nic, dummy])
}

fn ipv4_pod() -> PodFacts {
    facts(vec![eth0(&["10.244.1.7/24", "fe80::858:aff:fef4:107/64"])])
}

fn summary(p: &NetPlan) -> serde_json::Value {
    json!({
        "links": p.links,
        "sysctls": p.sysctls,
        "interfaces": p.interfaces,
        "dhcp_caches": p.dhcp_caches.iter().map(|c| json!({
            "pod_iface": c.pod_iface,
            "json": serde_json::to_value(&c.config).expect("json"),
        })).collect::<Vec<_>>(),
    })
}

#[test]
fn masquerade_default_subnet() {
    let p = plan(&masquerade_vmi(), &ipv4_pod()).expect("plan");
    insta::assert_yaml_snapshot!(summary(&p));
    insta::assert_snapshot!(p.nft_script.expect("nat"));
}

#[test]
fn masquerade_ports_custom_cidr_and_dual_stack() {
    let v = vmi(
        json!([{"name": "default", "masquerade": {}, "ports": [
            {"port": 22}, {"name": "dns", "port": 53, "protocol": "UDP"}
        ]}]),
        json!([{"name": "default", "pod": {"vmNetworkCIDR": "192.168.50.0/24"}}]),
    );
    let f = facts(vec![eth0(&["10.244.1.7/24", "fd00:10:244:1::7/64"])]);
    let p = plan(&v, &f).expect("plan");
    insta::assert_yaml_snapshot!(summary(&p));
    insta::assert_snapshot!(p.nft_script.expect("nat"));
}

#[test]
fn masquerade_nat_already_present_is_not_planned_again() {
    let mut f = ipv4_pod();
    f.nat_present_v4 = true;
    let p = plan(&masquerade_vmi(), &f).expect("plan");
    assert_eq!(p.nft_script, None);
    assert_eq!(p.links.len(), 2);
}

#[test]
fn multiqueue_taps_for_virtio_only() {
    let mut v = masquerade_vmi();
    v.spec.domain.devices.network_interface_multiqueue = Some(true);
    v.spec.domain.cpu = serde_json::from_value(json!({"cores": 4})).ok();
    let p = plan(&v, &ipv4_pod()).expect("plan");
    assert!(p.interfaces[0].multi_queue);
    let ifaces = v.spec.domain.devices.interfaces.as_mut().expect("ifaces");
    ifaces[0].model = Some("e1000".into());
    let p = plan(&v, &ipv4_pod()).expect("plan");
    assert!(!p.interfaces[0].multi_queue);
}

#[test]
fn bridge_binding_rewires_the_pod_interface() {
    let v = vmi(
        json!([{"name": "default", "bridge": {}}]),
        json!([{"name": "default", "pod": {}}]),
    );
    let p = plan(&v, &ipv4_pod()).expect("plan");
    insta::assert_yaml_snapshot!(summary(&p));
    assert_eq!(p.nft_script, None);
}

#[test]
fn bridge_binding_on_a_rewired_pod_keeps_the_cache_and_the_end_state() {
    let v = vmi(
        json!([{"name": "default", "bridge": {}}]),
        json!([{"name": "default", "pod": {}}]),
    );
    let first = plan(&v, &ipv4_pod()).expect("plan");
    let again = plan(&v, &rewired_pod()).expect("plan");
    assert!(again.dhcp_caches.is_empty());
    assert_eq!(again.links, first.links);
}

#[test]
fn secondary_bridge_network_uses_hashed_names() {
    let v = vmi(
        json!([{"name": "default", "masquerade": {}}, {"name": "blue", "bridge": {}}]),
        json!([{"name": "default", "pod": {}}, {"name": "blue", "multus": {"networkName": "br"}}]),
    );
    let mut sec = eth0(&[]);
    sec.index = 3;
    sec.name = "pod16477688c0e".into();
    let f = facts(vec![eth0(&["10.244.1.7/24"]), sec]);
    let p = plan(&v, &f).expect("plan");
    let names: Vec<_> = p.links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "k6t-eth0",
            "tap0",
            "k6t-16477688c0e",
            "16477688c0e-nic",
            "tap16477688c0e",
            "pod16477688c0e"
        ]
    );
    // No IPv4 on the secondary: no placeholder address, no DHCP.
    assert!(p.dhcp_caches[0].config.ipam_disabled);
}

#[test]
fn unsupported_bindings_name_the_interface() {
    for (binding, label) in [
        (json!({"passtBinding": {}}), "passt"),
        (json!({"sriov": {}}), "sriov"),
        (json!({"slirp": {}}), "slirp"),
    ] {
        let mut iface = binding.clone();
        iface["name"] = json!("default");
        let v = vmi(json!([iface]), json!([{"name": "default", "pod": {}}]));
        let err = plan(&v, &ipv4_pod()).expect_err("unsupported");
        assert_eq!(err.label(), "unsupported");
        let msg = err.to_string();
        assert!(
            msg.starts_with("spec.domain.devices.interfaces[0]: "),
            "{msg}"
        );
        assert!(msg.contains(label), "{msg}");
    }
}

/// The cluster's plugins of the tests below: `mtap` is managedTap, `plaintap` a `tap` plugin
/// (its CNI plugin makes the tap), `passt` has no domain attachment (absent from the map, as
/// the handler's configuration leaves it).
fn cluster_plugins() -> BindingPlugins {
    BindingPlugins::from_iter([("mtap", "managedTap"), ("plaintap", "tap")])
}

/// KubeVirt's virt-handler prepares nothing in the pod for a binding plugin's interface unless
/// the plugin is `managedTap` (the plugin's sidecar and CNI plugin do): no link, address,
/// sysctl or DHCP for a `tap` plugin, one without an attachment type or one the cluster does
/// not register, while a masquerade interface beside it is planned as usual.
#[test]
fn binding_plugin_interfaces_are_left_to_the_plugin_unless_managed_tap() {
    for name in ["passt", "plaintap", "unregistered"] {
        let alone = vmi(
            json!([{"name": "default", "binding": {"name": name}}]),
            json!([{"name": "default", "pod": {}}]),
        );
        for plugins in [BindingPlugins::default(), cluster_plugins()] {
            let p = network::plan(&alone, &ipv4_pod(), &plugins).expect("a plugin interface plans");
            assert_eq!(
                p,
                NetPlan::default(),
                "nothing to do for {name}'s interface"
            );
        }
        let beside = vmi(
            json!([
                {"name": "default", "masquerade": {}},
                {"name": "plugged", "binding": {"name": name}}
            ]),
            json!([
                {"name": "default", "pod": {}},
                {"name": "plugged", "multus": {"networkName": "nad"}}
            ]),
        );
        let with_masquerade =
            network::plan(&beside, &ipv4_pod(), &cluster_plugins()).expect("plans");
        let masquerade_only = plan(&masquerade_vmi(), &ipv4_pod()).expect("plans");
        assert_eq!(with_masquerade, masquerade_only);
    }
    // Without the cluster saying `mtap` is managedTap, its interface is a plugin's like any.
    let mtap = managed_tap_vmi();
    assert_eq!(plan(&mtap, &ipv4_pod()).expect("plans"), NetPlan::default());
}

fn managed_tap_vmi() -> VirtualMachineInstance {
    vmi(
        json!([{"name": "default", "binding": {"name": "mtap"}}]),
        json!([{"name": "default", "pod": {}}]),
    )
}

/// A managedTap plugin's pod side, as KubeVirt's `managedTapSpec`: bridge `k6t-eth0` without
/// any address, `eth0` renamed `eth0-nic` and enslaved with the bridge's MAC, no addresses and
/// learning off, the tap `tap0` (owner 107, the pod's MTU) on the bridge, a dummy `eth0` with
/// the pod's MAC, MTU and addresses, `arp_ignore=1`; no DHCP cache and no NAT.
#[test]
fn managed_tap_plugin_gets_bridge_tap_and_dummy_without_dhcp() {
    let p = network::plan(&managed_tap_vmi(), &ipv4_pod(), &cluster_plugins()).expect("plan");
    insta::assert_yaml_snapshot!(summary(&p));
    let pod = eth0(&["10.244.1.7/24", "fe80::858:aff:fef4:107/64"]);
    let names: Vec<_> = p.links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["k6t-eth0", "eth0-nic", "tap0", "eth0"]);
    let [bridge, nic, tap, dummy] = &p.links[..] else {
        unreachable!()
    };
    assert_eq!(bridge.kind, Some(LinkKind::Bridge));
    assert_eq!(bridge.addresses, Some(vec![]), "the bridge has no address");
    assert_eq!(nic.existing_index, Some(pod.index), "the pod's own link");
    assert_eq!(nic.mac, MacSpec::CopyFrom("k6t-eth0".into()));
    assert_eq!(nic.controller.as_deref(), Some("k6t-eth0"));
    assert_eq!(nic.addresses, Some(vec![]));
    assert!(nic.learning_off && nic.up);
    assert_eq!(
        tap.kind,
        Some(LinkKind::Tap(TapSpec {
            owner: 107,
            multi_queue: false
        }))
    );
    assert_eq!(tap.controller.as_deref(), Some("k6t-eth0"));
    assert_eq!(tap.mtu, Some(pod.mtu));
    assert_eq!(dummy.kind, Some(LinkKind::Dummy));
    assert_eq!(dummy.mac, MacSpec::Set(pod.mac.expect("mac")));
    assert_eq!(dummy.mtu, Some(pod.mtu));
    assert_eq!(dummy.addresses.as_ref(), Some(&pod.addresses));
    assert_eq!(p.sysctls.len(), 1);
    assert_eq!(
        (p.sysctls[0].key.as_str(), p.sysctls[0].value.as_str()),
        ("net/ipv4/conf/all/arp_ignore", "1")
    );
    assert!(
        p.dhcp_caches.is_empty(),
        "the launcher serves no DHCP for it"
    );
    assert_eq!(p.nft_script, None);
    let i = &p.interfaces[0];
    assert_eq!(
        serde_json::to_value(i.binding).expect("json"),
        json!("managedTap")
    );
    assert_eq!((i.guest_ipv4, i.gateway_ipv4), (None, None));

    // The bridge binding's links are the same but for the bridge's placeholder address.
    let bridged = vmi(
        json!([{"name": "default", "bridge": {}}]),
        json!([{"name": "default", "pod": {}}]),
    );
    let b = plan(&bridged, &ipv4_pod()).expect("plan");
    assert_eq!(b.links[1..], p.links[1..]);
    assert_eq!(b.sysctls, p.sysctls);
}

/// A second run on a pod already rewired (`eth0-nic` and the dummy `eth0` exist) plans the same
/// end state.
#[test]
fn managed_tap_on_a_rewired_pod_plans_the_same_end_state() {
    let first = network::plan(&managed_tap_vmi(), &ipv4_pod(), &cluster_plugins()).expect("plan");
    let again =
        network::plan(&managed_tap_vmi(), &rewired_pod(), &cluster_plugins()).expect("plan");
    assert_eq!(again, first);
}

/// On a secondary network without IPv4: hashed names, no `arp_ignore`, and multi-queue as
/// for any virtio tap; a root VMI's tap is root's.
#[test]
fn managed_tap_on_a_secondary_network() {
    let mut v = vmi(
        json!([{"name": "default", "masquerade": {}}, {"name": "blue", "binding": {"name": "mtap"}}]),
        json!([{"name": "default", "pod": {}}, {"name": "blue", "multus": {"networkName": "br"}}]),
    );
    v.status = None;
    v.spec.domain.devices.network_interface_multiqueue = Some(true);
    v.spec.domain.cpu = serde_json::from_value(json!({"cores": 2})).ok();
    let mut sec = eth0(&["fe80::1/64"]);
    sec.index = 3;
    sec.name = "pod16477688c0e".into();
    sec.mtu = 9000;
    let f = facts(vec![eth0(&["10.244.1.7/24"]), sec]);
    let p = network::plan(&v, &f, &cluster_plugins()).expect("plan");
    let names: Vec<_> = p.links[2..].iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "k6t-16477688c0e",
            "16477688c0e-nic",
            "tap16477688c0e",
            "pod16477688c0e"
        ]
    );
    assert_eq!(
        p.links[4].kind,
        Some(LinkKind::Tap(TapSpec {
            owner: 0,
            multi_queue: true
        }))
    );
    assert_eq!(p.links[4].mtu, Some(9000));
    assert!(
        p.sysctls.iter().all(|s| !s.key.contains("arp_ignore")),
        "{:?}",
        p.sysctls
    );
    assert_eq!(p.dhcp_caches.len(), 0);
    assert_eq!(p.interfaces[1].network, "blue");
}

/// A managedTap interface whose pod link is not there fails with KubeVirt's message, naming
/// the interface.
#[test]
fn managed_tap_missing_pod_link_is_kubevirts_error() {
    let err = network::plan(&managed_tap_vmi(), &PodFacts::default(), &cluster_plugins())
        .expect_err("missing");
    assert_eq!(err.label(), "pod_link_missing");
    assert_eq!(
        err.to_string(),
        "spec.domain.devices.interfaces[0]: pod link (eth0) is missing"
    );
    let v = vmi(
        json!([{"name": "default", "masquerade": {}}, {"name": "blue", "binding": {"name": "mtap"}}]),
        json!([{"name": "default", "pod": {}}, {"name": "blue", "multus": {"networkName": "br"}}]),
    );
    let err = network::plan(&v, &ipv4_pod(), &cluster_plugins()).expect_err("missing");
    assert_eq!(
        err.to_string(),
        "spec.domain.devices.interfaces[1]: pod link (pod16477688c0e) is missing"
    );
}

#[test]
fn missing_pod_interface_and_bad_cidr_are_errors() {
    let err = plan(&masquerade_vmi(), &PodFacts::default()).expect_err("missing");
    assert_eq!(err.label(), "pod_link_missing");
    assert_eq!(
        err.to_string(),
        "spec.domain.devices.interfaces[0]: pod link (eth0) is missing"
    );
    let v = vmi(
        json!([{"name": "default", "masquerade": {}}]),
        json!([{"name": "default", "pod": {"vmNetworkCIDR": "10.0.0.0/31"}}]),
    );
    let err = plan(&v, &ipv4_pod()).expect_err("cidr");
    assert_eq!(err.label(), "invalid_spec");
    assert!(
        err.to_string()
            .starts_with("spec.networks[0].pod.vmNetworkCIDR: "),
        "{err}"
    );
}

proptest! {
    /// Whatever the pod's MTU and address, the plan keeps the MTU on bridge and tap, the
    /// guest on the subnet's second host, and the NAT pointed at it.
    #[test]
    fn masquerade_plan_follows_the_pod(mtu in 576u32..9001, host in 2u8..250, port in proptest::option::of(1u16..)) {
        let mut v = masquerade_vmi();
        if let Some(port) = port {
            v.spec.domain.devices.interfaces.as_mut().unwrap()[0].ports =
                serde_json::from_value(json!([{"port": port}])).ok();
        }
        let mut link = eth0(&[&format!("10.244.3.{host}/24")]);
        link.mtu = mtu;
        let p = plan(&v, &facts(vec![link])).unwrap();
        prop_assert_eq!(p.links[0].mtu, Some(mtu));
        prop_assert_eq!(p.links[1].mtu, Some(mtu));
        prop_assert_eq!(p.interfaces[0].guest_ipv4.unwrap().to_string(), "10.0.2.2/24");
        let nat = p.nft_script.unwrap();
        prop_assert!(nat.contains("dnat to 10.0.2.2"));
        if let Some(port) = port {
            let needle = format!("tcp dport {{ {port} }}");
            prop_assert!(nat.contains(&needle));
        }
    }
}
