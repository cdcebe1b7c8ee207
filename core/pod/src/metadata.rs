//! Labels and annotations of the launcher pod.

use std::collections::BTreeMap;

use sha1::Digest as _;

use crate::NetworkBindingPlugin;
use crate::api::VirtualMachineInstance;
use crate::resources::ResourceReport;

/// Longest DNS-1035 label, the limit of the `vmi.kubevirt.io/id` label value.
const DNS1035_MAX: usize = 63;
/// Hex digits of a hashed pod interface name after the `pod` prefix.
const HASHED_IFACE_LEN: usize = 11;

/// The `vmi.kubevirt.io/id` label: the VMI name, or for names longer than 63 characters a
/// 54-character prefix, a dash and the first 8 hex digits of the name's SHA-1.
pub fn vmi_id_label(name: &str) -> String {
    if name.len() <= DNS1035_MAX {
        return name.to_string();
    }
    const HASH: usize = 8;
    let prefix: String = name.chars().take(DNS1035_MAX - HASH - 1).collect();
    let digest = sha1::Sha1::digest(name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{}", &hex[..HASH])
}

/// The pod interface name Multus gives a secondary network: `pod` and the first 11 hex digits of
/// the SHA-256 of the network's name.
pub fn hashed_interface_name(network: &str) -> String {
    let digest = sha2::Sha256::digest(network.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("pod{}", &hex[..HASHED_IFACE_LEN])
}

/// Labels: the VMI's own, plus KubeVirt's app / created-by / name / id labels.
pub(super) fn labels(
    vmi: &VirtualMachineInstance,
    name: &str,
    host_name: &str,
) -> BTreeMap<String, String> {
    let mut labels = vmi.metadata.labels.clone().unwrap_or_default();
    labels.insert("kubevirt.io".into(), "virt-launcher".into());
    labels.insert(
        "kubevirt.io/created-by".into(),
        vmi.metadata.uid.clone().unwrap_or_default(),
    );
    labels.insert("vm.kubevirt.io/name".into(), host_name.into());
    labels.insert("vmi.kubevirt.io/id".into(), vmi_id_label(name));
    if let Some(v) = annotation(vmi, "sidecar.istio.io/inject") {
        labels.insert("sidecar.istio.io/inject".into(), v.to_string());
    }
    labels
}

pub(super) fn annotation<'a>(vmi: &'a VirtualMachineInstance, key: &str) -> Option<&'a str> {
    vmi.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Annotations: the VMI's (minus kubectl's and API-version bookkeeping), KubeVirt's own markers,
/// network (Multus, Istio) and backup (Velero) hooks, and the memory overhead.
pub(super) fn annotations(
    vmi: &VirtualMachineInstance,
    name: &str,
    namespace: &str,
    report: &ResourceReport,
    bindings: &BTreeMap<String, NetworkBindingPlugin>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("kubevirt.io/domain".to_string(), name.to_string());
    for (k, v) in vmi.metadata.annotations.iter().flatten() {
        if k.starts_with("kubectl.kubernetes.io")
            || k.starts_with("kubevirt.io/storage-observed-api-version")
            || k.starts_with("kubevirt.io/latest-observed-api-version")
        {
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    out.insert(
        "kubectl.kubernetes.io/default-container".into(),
        "compute".into(),
    );
    out.insert("kubevirt.io/migrationTransportUnix".into(), "true".into());
    out.insert(
        "descheduler.alpha.kubernetes.io/request-evict-only".into(),
        String::new(),
    );
    network_annotations(vmi, namespace, bindings, &mut out);
    backup_hook_annotations(vmi, name, namespace, &mut out);
    out.insert(
        "kubevirt.io/memory-overhead-bytes".into(),
        report.overhead.bytes.to_string(),
    );
    out
}

fn network_annotations(
    vmi: &VirtualMachineInstance,
    namespace: &str,
    bindings: &BTreeMap<String, NetworkBindingPlugin>,
    out: &mut BTreeMap<String, String>,
) {
    let interfaces = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    let networks = vmi.spec.networks.as_deref().unwrap_or_default();
    // KubeVirt lists the networks in the order of the interfaces that are not absent (its
    // FilterNetworksByInterfaces), not in the order of spec.networks: the element order is what
    // Multus attaches in, so it decides which pod interface is net1, net2, ...
    let present: Vec<&crate::api::Interface> = interfaces
        .iter()
        .filter(|i| i.state.as_deref() != Some("absent"))
        .collect();
    let by_name: BTreeMap<&str, &crate::api::Network> =
        networks.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut elements = Vec::new();
    let nad_name = |reference: &str| match reference.split_once('/') {
        Some((ns, nad)) => (ns.to_string(), nad.to_string()),
        None => (namespace.to_string(), reference.to_string()),
    };
    for net in present.iter().filter_map(|i| by_name.get(i.name.as_str())) {
        if let Some(multus) = net.multus.as_ref().filter(|m| !m.default.unwrap_or(false)) {
            let (ns, nad) = nad_name(&multus.network_name);
            elements.push(secondary_network_element(net, ns, nad, &present));
        }
        // A binding plugin's own NetworkAttachmentDefinition, told which VMI network it serves.
        let plugin = present
            .iter()
            .find(|i| i.name == net.name)
            .and_then(|i| i.binding.as_ref())
            .and_then(|b| bindings.get(&b.name));
        if let Some(reference) = plugin
            .and_then(|p| p.network_attachment_definition.as_deref())
            .filter(|r| !r.is_empty())
        {
            let (ns, nad) = nad_name(reference);
            elements.push(serde_json::json!({
                "name": nad,
                "namespace": ns,
                "cni-args": {"logicNetworkName": net.name},
            }));
        }
    }
    if !elements.is_empty() {
        out.insert(
            "k8s.v1.cni.cncf.io/networks".into(),
            serde_json::Value::Array(elements).to_string(),
        );
    }
    if let Some(default) = networks
        .iter()
        .filter_map(|n| n.multus.as_ref())
        .find(|m| m.default.unwrap_or(false))
    {
        out.insert(
            "v1.multus-cni.io/default-network".into(),
            default.network_name.clone(),
        );
    }
    if interfaces.iter().any(|i| i.masquerade.is_some()) {
        // Both names for the same Istio setting; the older one is deprecated since Istio 1.25.
        out.insert(
            "traffic.sidecar.istio.io/kubevirtInterfaces".into(),
            "k6t-eth0".into(),
        );
        out.insert(
            "istio.io/reroute-virtual-interfaces".into(),
            "k6t-eth0".into(),
        );
    }
}

fn backup_hook_annotations(
    vmi: &VirtualMachineInstance,
    name: &str,
    namespace: &str,
    out: &mut BTreeMap<String, String>,
) {
    let skip = annotation(vmi, "kubevirt.io/skip-backup-hooks")
        .map(parse_go_bool)
        .unwrap_or(false);
    if skip {
        return;
    }
    let cmd = |flag: &str| {
        format!(
            "[\"/usr/bin/virt-freezer\", \"{flag}\", \"--name\", {}, \"--namespace\", {}]",
            go_quote(name),
            go_quote(namespace)
        )
    };
    out.insert(
        "pre.hook.backup.velero.io/container".into(),
        "compute".into(),
    );
    out.insert("pre.hook.backup.velero.io/command".into(), cmd("--freeze"));
    out.insert("pre.hook.backup.velero.io/timeout".into(), "60s".into());
    out.insert(
        "post.hook.backup.velero.io/container".into(),
        "compute".into(),
    );
    out.insert(
        "post.hook.backup.velero.io/command".into(),
        cmd("--unfreeze"),
    );
}

/// Go's `strconv.ParseBool`, with errors read as false.
fn parse_go_bool(s: &str) -> bool {
    matches!(s, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// Go's `%q` for the plain names Kubernetes allows (JSON string escaping is the same for them).
fn go_quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The Multus element of a secondary network: its NetworkAttachmentDefinition, the interface's
/// MAC, the hashed pod interface name.
fn secondary_network_element(
    net: &crate::api::Network,
    ns: String,
    nad: String,
    present: &[&crate::api::Interface],
) -> serde_json::Value {
    let mut element = serde_json::Map::new();
    element.insert("name".into(), nad.into());
    element.insert("namespace".into(), ns.into());
    if let Some(mac) = present
        .iter()
        .find(|i| i.name == net.name)
        .and_then(|i| i.mac_address.clone())
        .filter(|m| !m.is_empty())
    {
        element.insert("mac".into(), mac.into());
    }
    element.insert("interface".into(), hashed_interface_name(&net.name).into());
    serde_json::Value::Object(element)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_interface_names_match_kubevirt() {
        assert_eq!(hashed_interface_name("ptp"), "pode31d7ce2712");
        assert_eq!(hashed_interface_name("sriov-net"), "pod5862143f341");
    }

    #[test]
    fn long_vmi_names_are_truncated_with_a_hash() {
        assert_eq!(vmi_id_label("short"), "short");
        let long = "a".repeat(70);
        let id = vmi_id_label(&long);
        assert_eq!(id.len(), 63);
        assert!(id.starts_with(&"a".repeat(54)));
    }
}
