//! The network configurator's tests: tap interfaces, passt, and what is left out of the domain.

use super::*;
use crate::configurators::testing::{annotated, element, run, vmi, vmi_from};
use serde_json::{Value, json};

fn network_of(
    vmi: &VirtualMachineInstance,
    ctx: &ConverterContext,
) -> Result<Domain, ConvertError> {
    let env = Env::new(vmi, ctx);
    run(&Network { env: &env }, vmi)
}

/// The interfaces of a VMI with these interfaces, each on a pod network of its name.
fn interfaces(ifaces: Value) -> Vec<Interface> {
    let vmi = on_networks(ifaces, json!({}));
    let d = network_of(&vmi, &ConverterContext::default()).expect("configures");
    d.devices.interfaces.to_vec()
}

/// A VMI with `ifaces`, a pod network named after each, and `domain` merged into its domain.
fn on_networks(ifaces: Value, domain: Value) -> VirtualMachineInstance {
    let names: Vec<Value> = ifaces
        .as_array()
        .unwrap()
        .iter()
        .map(|i| json!({"name": i["name"], "pod": {}}))
        .collect();
    let mut domain_spec = json!({"devices": {"interfaces": ifaces}});
    for (k, v) in domain.as_object().unwrap() {
        if k == "devices" {
            for (dk, dv) in v.as_object().unwrap() {
                domain_spec["devices"][dk] = dv.clone();
            }
        } else {
            domain_spec[k] = v.clone();
        }
    }
    vmi(json!({"domain": domain_spec, "networks": names}))
}

fn aliases(ifaces: &[Interface]) -> Vec<String> {
    let name = |i: &Interface| i.alias.as_ref().map(|a| a.name.clone()).unwrap_or_default();
    ifaces.iter().map(name).collect()
}

#[test]
fn nothing_for_absent_sriov_or_plugin_interfaces() {
    assert!(interfaces(json!([])).is_empty());
    let none_rendered = interfaces(json!([
        {"name": "gone", "masquerade": {}, "state": "absent"},
        {"name": "vf", "sriov": {}},
        {"name": "plugged", "binding": {"name": "plugin"}},
    ]));
    assert!(none_rendered.is_empty());
}

#[test]
fn an_interface_without_its_network_is_refused() {
    let vmi = vmi(json!({"domain": {"devices": {"interfaces": [
        {"name": "default", "masquerade": {}}]}}}));
    let err = network_of(&vmi, &ConverterContext::default()).unwrap_err();
    assert_eq!(err.path, "spec.domain.devices.interfaces[0]");
    assert_eq!(err.reason, "failed to find network default");
}

#[test]
fn bridge_and_masquerade_are_tap_interfaces_without_option_rom() {
    let ifaces = interfaces(json!([
        {"name": "default", "masquerade": {}},
        {"name": "br", "bridge": {}},
    ]));
    assert_eq!(aliases(&ifaces), ["ua-default", "ua-br"]);
    assert!(
        ifaces
            .iter()
            .all(|i| i.kind == "ethernet" && i.rom.is_some())
    );
    let vmi = on_networks(
        json!([{"name": "br", "bridge": {}, "macAddress": "02:00:00:00:00:01", "acpiIndex": 3}]),
        json!({}),
    );
    let d = network_of(&vmi, &ConverterContext::default()).unwrap();
    insta::assert_snapshot!(element(&d, "interface"), @r#"
    <interface type="ethernet">
    	<source/>
    	<model type="virtio-non-transitional"/>
    	<mac address="02:00:00:00:00:01"/>
    	<alias name="ua-br"/>
    	<rom enabled="no"/>
    	<acpi index="3"/>
    </interface>
    "#);
}

#[test]
fn a_boot_order_keeps_the_option_rom_unless_launch_security_needs_it_off() {
    let boot = json!([{"name": "default", "masquerade": {}, "bootOrder": 1}]);
    let iface = &interfaces(boot.clone())[0];
    assert_eq!(
        (iface.boot.as_ref().map(|b| b.order), iface.rom.as_ref()),
        (Some(1), None)
    );
    let sev = on_networks(boot, json!({"launchSecurity": {"sev": {}}}));
    let d = network_of(&sev, &ConverterContext::default()).unwrap();
    let iface = &d.devices.interfaces[0];
    assert_eq!(iface.rom.as_ref().map(|r| r.enabled.as_ref()), Some("no"));
    let iommu = iface.driver.as_ref().and_then(|d| d.iommu.as_deref());
    assert_eq!(iommu, Some("on"));
}

#[test]
fn s390x_never_turns_the_option_rom_off() {
    let vmi = on_networks(json!([{"name": "default", "bridge": {}}]), json!({}));
    let d = network_of(
        &vmi,
        &crate::configurators::testing::node(crate::context::Arch::S390x),
    )
    .unwrap();
    assert_eq!(d.devices.interfaces[0].rom, None);
}

#[test]
fn state_down_writes_the_link_down() {
    let ifaces = interfaces(json!([
        {"name": "up", "bridge": {}, "state": "up"},
        {"name": "down", "bridge": {}, "state": "down"},
    ]));
    let links: Vec<_> = ifaces
        .iter()
        .map(|i| i.link.as_ref().map(|l| l.state.to_string()))
        .collect();
    assert_eq!(links, [None, Some("down".to_string())]);
}

#[test]
fn multi_queue_gives_virtio_interfaces_a_queue_per_vcpu() {
    let ifaces = json!([
        {"name": "v", "bridge": {}},
        {"name": "e", "bridge": {}, "model": "e1000e"},
    ]);
    let vmi = on_networks(
        ifaces.clone(),
        json!({"devices": {"networkInterfaceMultiqueue": true}, "cpu": {"cores": 3}}),
    );
    let d = network_of(&vmi, &ConverterContext::default()).unwrap();
    let driver = |i: usize| d.devices.interfaces[i].driver.clone();
    assert_eq!(
        driver(0),
        Some(InterfaceDriver {
            name: "vhost".into(),
            queues: Some(3),
            iommu: None
        })
    );
    assert_eq!(driver(1), None, "only virtio interfaces have queues");
    let model = d.devices.interfaces[1]
        .model
        .as_ref()
        .map(|m| m.kind.as_ref());
    assert_eq!(model, Some("e1000e"));
    assert!(interfaces(ifaces).iter().all(|i| i.driver.is_none()));
}

#[test]
fn a_pci_address_is_parsed_or_refused() {
    let iface = &interfaces(json!([{"name": "n", "bridge": {}, "pciAddress": "0000:81:01.2"}]))[0];
    let a = iface.address.as_deref().unwrap();
    assert_eq!(
        (
            a.domain.as_deref(),
            a.bus.as_deref(),
            a.slot.as_deref(),
            a.function.as_deref()
        ),
        (Some("0x0000"), Some("0x81"), Some("0x01"), Some("0x2"))
    );
    let vmi = on_networks(
        json!([{"name": "n", "bridge": {}, "pciAddress": "0000:81:01"}]),
        json!({}),
    );
    let err = network_of(&vmi, &ConverterContext::default()).unwrap_err();
    assert_eq!(err.path, "spec.domain.devices.interfaces[0].pciAddress");
    assert_eq!(
        err.reason,
        "failed to configure interface n: invalid PCI address 0000:81:01"
    );
}

#[test]
fn the_handlers_attachment_map_decides_what_is_tap() {
    let vmi = on_networks(
        json!([{"name": "plugged", "binding": {"name": "plugin"}}, {"name": "br", "bridge": {}}]),
        json!({}),
    );
    let ctx = ConverterContext {
        domain_attachment_by_interface_name: [("plugged".to_string(), "tap".to_string())].into(),
        ..ConverterContext::default()
    };
    // With a map, only the interfaces it names as `tap` are tap interfaces.
    let d = network_of(&vmi, &ctx).unwrap();
    let kinds: Vec<_> = d
        .devices
        .interfaces
        .iter()
        .map(|i| i.kind.to_string())
        .collect();
    assert_eq!(kinds, ["ethernet", ""]);
}

/// A VMI with one passt interface `default` (its JSON merged with `extra`), the pod
/// interface in the status, and annotations.
fn passt(extra: Value, status: Value, annotations: Value) -> VirtualMachineInstance {
    let mut iface = json!({"name": "default", "passtBinding": {}});
    for (k, v) in extra.as_object().unwrap() {
        iface[k] = v.clone();
    }
    let mut vmi = annotated(
        annotations,
        json!({"domain": {"devices": {"interfaces": [iface]}},
            "networks": [{"name": "default", "pod": {}}]}),
    );
    vmi.status = serde_json::from_value(json!({"interfaces": status})).unwrap();
    vmi
}

fn eth0() -> Value {
    json!([{"name": "default", "podInterfaceName": "eth0"}])
}

/// (protocol, [(port, excluded)]) of each forward.
fn forwards(vmi: &VirtualMachineInstance) -> Vec<(String, Vec<(u32, bool)>)> {
    let d = network_of(vmi, &ConverterContext::default()).unwrap();
    let iface = &d.devices.interfaces[0];
    iface
        .port_forward
        .iter()
        .map(|p| {
            let ranges = p
                .ranges
                .iter()
                .map(|r| (r.start, r.exclude.is_some()))
                .collect();
            (p.proto.to_string(), ranges)
        })
        .collect()
}

#[test]
fn passt_is_a_vhost_user_interface_on_the_pod_interface() {
    let vmi = passt(json!({}), eth0(), json!({}));
    let d = network_of(&vmi, &ConverterContext::default()).unwrap();
    insta::assert_snapshot!(element(&d, "interface"), @r#"
    <interface type="vhostuser">
    	<source dev="eth0"/>
    	<model type="virtio-non-transitional"/>
    	<alias name="ua-default"/>
    	<backend type="passt" logFile="/var/run/kubevirt/passt.log"/>
    	<portForward proto="tcp"/>
    	<portForward proto="udp"/>
    </interface>
    "#);
}

#[test]
fn passt_forwards_the_declared_ports_by_protocol() {
    let ports = json!({"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"},
        {"port": 443, "protocol": "tcp"}]});
    assert_eq!(
        forwards(&passt(ports, eth0(), json!({}))),
        [
            ("tcp".to_string(), vec![(80, false), (443, false)]),
            ("udp".to_string(), vec![(53, false)])
        ]
    );
    let udp_only = json!({"ports": [{"port": 53, "protocol": "UDP"}]});
    assert_eq!(
        forwards(&passt(udp_only, eth0(), json!({}))),
        [("udp".to_string(), vec![(53, false)])]
    );
}

#[test]
fn passt_under_istio_keeps_envoys_ports_out() {
    let vmi = passt(
        json!({}),
        eth0(),
        json!({"sidecar.istio.io/inject": "true"}),
    );
    let fwd = forwards(&vmi);
    assert_eq!(fwd[0].0, "tcp");
    let excluded: Vec<u32> = fwd[0]
        .1
        .iter()
        .filter(|(_, x)| *x)
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(excluded, ISTIO_RESERVED_PORTS);
    assert_eq!(
        fwd.len(),
        1,
        "no udp forward when only exclusions are listed"
    );
}

#[test]
fn passt_needs_the_pod_interface_name_from_the_status() {
    let cases = [
        json!([]),
        json!([{"name": "other", "podInterfaceName": "eth0"}]),
        json!([{"name": "default", "podInterfaceName": ""}]),
    ];
    for status in cases {
        let vmi = passt(json!({}), status.clone(), json!({}));
        let err = network_of(&vmi, &ConverterContext::default()).unwrap_err();
        assert_eq!(err.path, "spec.domain.devices.interfaces[0]", "{status}");
        assert_eq!(
            err.reason,
            "pod interface name not found in vmi vm status, for interface default"
        );
    }
}

#[test]
fn the_first_status_of_a_name_wins() {
    let vmi = vmi_from(json!({
        "metadata": {"name": "vm", "namespace": "demo"},
        "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "passtBinding": {}}]}},
            "networks": [{"name": "default", "pod": {}}]},
        "status": {"interfaces": [
            {"podInterfaceName": "nameless"},
            {"name": "default", "podInterfaceName": "eth0"},
            {"name": "default", "podInterfaceName": "eth1"},
        ]},
    }));
    let d = network_of(&vmi, &ConverterContext::default()).unwrap();
    assert_eq!(d.devices.interfaces[0].source.dev.as_deref(), Some("eth0"));
}

#[test]
fn transitional_virtio_changes_the_model_of_virtio_interfaces() {
    let vmi = on_networks(
        json!([{"name": "default", "bridge": {}}]),
        json!({"devices": {"useVirtioTransitional": true}}),
    );
    let d = network_of(&vmi, &ConverterContext::default()).unwrap();
    let model = d.devices.interfaces[0]
        .model
        .as_ref()
        .map(|m| m.kind.to_string());
    assert_eq!(model.as_deref(), Some("virtio-transitional"));
}

#[test]
fn unrendered_interfaces_are_named_for_the_cli() {
    let vmi = on_networks(
        json!([{"name": "br", "bridge": {}}, {"name": "vf", "sriov": {}}]),
        json!({}),
    );
    let err = check_rendered_interfaces(&vmi, &ConverterContext::default()).unwrap_err();
    assert_eq!((err.index, err.kind.clone()), (1, AttachedElsewhere::Sriov));
    assert_eq!(err.path(), "spec.domain.devices.interfaces[1].sriov");
    let with_device = ConverterContext {
        sriov_devices: vec![Default::default()],
        ..ConverterContext::default()
    };
    assert_eq!(check_rendered_interfaces(&vmi, &with_device), Ok(()));
}

/// The user guide's binding plugins, as the cluster registers them: passt and slirp edit the
/// domain from their sidecars, macvtap is a `tap` attachment, a `managedTap` plugin likewise.
fn plugin_attachment(name: &str) -> Option<&'static str> {
    match name {
        "macvtap" => Some("tap"),
        "managedtap" => Some("managedTap"),
        _ => None,
    }
}

/// The domain of a VMI with one interface bound by each of `plugins`, converted with the
/// attachment map the handler derives from the cluster's plugins.
fn plugin_domain(plugins: &[&str]) -> Domain {
    let ifaces: Vec<Value> = plugins
        .iter()
        .map(|p| json!({"name": format!("{p}-net"), "binding": {"name": p}}))
        .collect();
    let vmi = on_networks(Value::Array(ifaces), json!({}));
    let ifaces = vmi.spec.domain.devices.interfaces.as_deref().unwrap();
    let ctx = ConverterContext {
        domain_attachment_by_interface_name: domain_attachment_by_interface_name(
            ifaces,
            plugin_attachment,
        ),
        ..ConverterContext::default()
    };
    network_of(&vmi, &ctx).unwrap()
}

#[test]
fn the_attachment_map_follows_the_plugins_domain_attachment_type() {
    let vmi = on_networks(
        json!([
            {"name": "m", "masquerade": {}},
            {"name": "b", "bridge": {}},
            {"name": "tap", "binding": {"name": "macvtap"}},
            {"name": "managed", "binding": {"name": "managedtap"}},
            {"name": "side", "binding": {"name": "passt"}},
            {"name": "unknown", "binding": {"name": "unregistered"}},
        ]),
        json!({}),
    );
    let ifaces = vmi.spec.domain.devices.interfaces.as_deref().unwrap();
    let map = domain_attachment_by_interface_name(ifaces, plugin_attachment);
    let pairs: Vec<(&str, &str)> = map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        pairs,
        [
            ("b", "tap"),
            ("m", "tap"),
            ("managed", "tap"),
            ("tap", "tap")
        ]
    );
}

#[test]
fn sidecar_plugins_are_left_out_of_the_domain() {
    let d = plugin_domain(&["passt", "slirp"]);
    assert!(d.devices.interfaces.is_empty());
}

#[test]
fn tap_plugins_are_tap_interfaces() {
    let d = plugin_domain(&["macvtap", "managedtap", "passt"]);
    insta::assert_snapshot!("binding_plugin_tap_interfaces", d.to_xml().unwrap());
}

#[test]
fn a_plugin_without_attachment_is_named_for_the_cli() {
    let vmi = on_networks(
        json!([{"name": "p", "binding": {"name": "passt"}}]),
        json!({}),
    );
    let err = check_rendered_interfaces(&vmi, &ConverterContext::default()).unwrap_err();
    assert_eq!(err.kind, AttachedElsewhere::BindingPlugin("passt".into()));
    assert_eq!(err.path(), "spec.domain.devices.interfaces[0].binding");
}
