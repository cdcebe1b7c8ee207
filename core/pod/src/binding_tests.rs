//! Network binding plugins in the launcher pod: the plugin's hook sidecar, its Multus element,
//! and virt-controller's refusal of a plugin the cluster does not register.

use serde_json::{Value, json};

use super::tests::{typed, vmi};
use super::*;

/// The user guide's passt plugin: a sidecar and a NetworkAttachmentDefinition.
fn passt() -> NetworkBindingPlugin {
    NetworkBindingPlugin {
        sidecar_image: Some("quay.io/kubevirt/network-passt-binding:v1.9.0".into()),
        network_attachment_definition: Some("default/netbindingpasst".into()),
        migration: true,
        ..NetworkBindingPlugin::default()
    }
}

/// The user guide's macvtap plugin: a tap domain attachment, nothing in the pod.
fn macvtap() -> NetworkBindingPlugin {
    NetworkBindingPlugin {
        domain_attachment_type: Some("tap".into()),
        ..NetworkBindingPlugin::default()
    }
}

fn with_binding(plugin: &str, network: Value) -> Value {
    let mut v = vmi();
    v["spec"]["domain"]["devices"]["interfaces"] =
        json!([{"name": "net1", "binding": {"name": plugin}}]);
    v["spec"]["networks"] = json!([{"name": "net1"}]);
    v["spec"]["networks"][0]
        .as_object_mut()
        .unwrap()
        .extend(network.as_object().unwrap().clone());
    v
}

fn inputs(plugins: &[(&str, NetworkBindingPlugin)]) -> PodInputs {
    PodInputs {
        network_bindings: plugins
            .iter()
            .map(|(n, p)| ((*n).to_string(), p.clone()))
            .collect(),
        ..PodInputs::default()
    }
}

fn render(v: Value, inputs: &PodInputs) -> Value {
    let pod = render_launcher_pod(&typed(v), &ClusterConfig::default(), inputs).unwrap();
    serde_json::to_value(pod).unwrap()
}

fn container<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
}

#[test]
fn an_unregistered_plugin_is_virt_controllers_refusal() {
    let v = with_binding("passt", json!({"pod": {}}));
    let err = render_launcher_pod(&typed(v), &ClusterConfig::default(), &inputs(&[])).unwrap_err();
    assert_eq!(err, PodError::UnknownNetworkBinding(0, "passt".into()));
    assert_eq!(
        err.to_string(),
        "spec.domain.devices.interfaces[0].binding: couldn't find configuration for network binding: passt"
    );
}

#[test]
fn passt_plugin_gets_its_sidecar_and_multus_element() {
    let pod = render(
        with_binding("passt", json!({"pod": {}})),
        &inputs(&[("passt", passt())]),
    );
    insta::assert_yaml_snapshot!(
        "passt_plugin_sidecar",
        container(&pod, "hook-sidecar-0").unwrap()
    );
    let networks = &pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"];
    assert_eq!(
        networks,
        r#"[{"name":"netbindingpasst","namespace":"default","cni-args":{"logicNetworkName":"net1"}}]"#
    );
    let compute = container(&pod, "compute").unwrap();
    let args: Vec<&str> = compute["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = args.iter().position(|a| *a == "--hook-sidecars").unwrap();
    assert_eq!(args[at + 1], "1");
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert!(volumes.iter().any(|v| v["name"] == "hook-sidecar-sockets"));
}

#[test]
fn slirp_plugin_without_nad_gets_a_sidecar_only() {
    let slirp = NetworkBindingPlugin {
        sidecar_image: Some("quay.io/kubevirt/network-slirp-binding:v1.9.0".into()),
        ..NetworkBindingPlugin::default()
    };
    let mut inputs = inputs(&[("slirp", slirp)]);
    inputs.image_pull_policy = "Always".into();
    let pod = render(with_binding("slirp", json!({"pod": {}})), &inputs);
    insta::assert_yaml_snapshot!(
        "slirp_plugin_sidecar",
        container(&pod, "hook-sidecar-0").unwrap()
    );
    assert!(
        pod["metadata"]["annotations"]
            .get("k8s.v1.cni.cncf.io/networks")
            .is_none()
    );
}

#[test]
fn macvtap_plugin_adds_only_its_multus_network() {
    let pod = render(
        with_binding(
            "macvtap",
            json!({"multus": {"networkName": "macvtapnetwork"}}),
        ),
        &inputs(&[("macvtap", macvtap())]),
    );
    assert!(container(&pod, "hook-sidecar-0").is_none());
    let networks = &pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"];
    assert_eq!(
        networks.as_str().unwrap(),
        format!(
            r#"[{{"name":"macvtapnetwork","namespace":"ns","interface":"{}"}}]"#,
            hashed_interface_name("net1")
        )
    );
}

#[test]
fn a_plugin_shared_by_two_interfaces_has_one_sidecar() {
    let mut v = with_binding("passt", json!({"pod": {}}));
    v["spec"]["domain"]["devices"]["interfaces"] = json!([
        {"name": "net1", "binding": {"name": "passt"}},
        {"name": "net2", "binding": {"name": "passt"}},
    ]);
    v["spec"]["networks"] = json!([
        {"name": "net1", "pod": {}},
        {"name": "net2", "multus": {"networkName": "other/blue"}},
    ]);
    let pod = render(v, &inputs(&[("passt", passt())]));
    assert!(container(&pod, "hook-sidecar-0").is_some());
    assert!(container(&pod, "hook-sidecar-1").is_none());
    let networks: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        networks,
        json!([
            {"name": "netbindingpasst", "namespace": "default", "cni-args": {"logicNetworkName": "net1"}},
            {"name": "blue", "namespace": "other", "interface": hashed_interface_name("net2")},
            {"name": "netbindingpasst", "namespace": "default", "cni-args": {"logicNetworkName": "net2"}},
        ])
    );
}
