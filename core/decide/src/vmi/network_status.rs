//! What KubeVirt v1.9.0's VMI controller takes from the launcher pod's Multus `network-status`
//! (`UpdateVMIStatus`, secondary networks): each secondary Multus network's pod interface name
//! and whether Multus reported it (the `multus-status` info source). virt-handler keeps both
//! when it rewrites `status.interfaces` from the domain (`handler::netstat`), and kvrs's
//! launcher finds the secondary's pod interface by the same names.
//!
//! The pod interface name follows the scheme the pod uses: ordinal (`net<N>`) when any
//! interface Multus reports is named so (pods created before the hashed scheme), else hashed
//! (`pod` + the first 11 hex digits of the SHA-256 of the network name).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Multus's pod annotation listing the attachments it made.
pub(super) const ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
/// The info source naming Multus (`status.interfaces[].infoSource`).
const MULTUS: &str = "multus-status";
/// KubeVirt joins info sources with this.
const SOURCE_SEPARATOR: &str = ", ";
/// Hex digits of the hash kept in a hashed name.
const HASHED_LEN: usize = 11;

/// One attachment of Multus's `network-status` (the fields read here).
#[derive(Debug, Default, Deserialize)]
pub(super) struct NetworkStatus {
    #[serde(default)]
    interface: String,
}

/// The annotation's attachments; a value that does not parse is no attachments, as KubeVirt
/// logs and goes on without them.
pub(super) fn parse(raw: &str) -> Vec<NetworkStatus> {
    serde_json::from_str(raw).unwrap_or_default()
}

/// A secondary network's pod interface and whether Multus reported it.
#[derive(Debug)]
pub(super) struct Secondary {
    pub pod_iface: String,
    pub reported: bool,
}

fn is_ordinal(name: &str) -> bool {
    name.strip_prefix("net")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

fn hashed(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("pod{}", &hex[..HASHED_LEN])
}

/// The secondary Multus networks of the VMI `v` (a JSON view with `spec.networks`), by name.
pub(super) fn secondary_pod_ifaces(
    v: &Value,
    statuses: &[NetworkStatus],
) -> BTreeMap<String, Secondary> {
    let ordinal = statuses.iter().any(|s| is_ordinal(&s.interface));
    v.pointer("/spec/networks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|n| {
            n.get("multus")
                .is_some_and(|m| m.get("default").and_then(Value::as_bool) != Some(true))
        })
        .filter_map(|n| n["name"].as_str())
        .enumerate()
        .map(|(i, name)| {
            let pod_iface = if ordinal {
                format!("net{}", i + 1)
            } else {
                hashed(name)
            };
            let reported = statuses.iter().any(|s| s.interface == pod_iface);
            (
                name.to_string(),
                Secondary {
                    pod_iface,
                    reported,
                },
            )
        })
        .collect()
}

/// Existing `status.interfaces` entries of secondary networks get their pod interface name,
/// and the `multus-status` source added or removed as Multus reports them.
pub(super) fn apply_to_existing(v: &mut Value, secondary: &BTreeMap<String, Secondary>) {
    if secondary.is_empty() {
        return;
    }
    let Some(list) = v
        .pointer_mut("/status/interfaces")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for entry in list {
        let Some(s) = entry["name"].as_str().and_then(|n| secondary.get(n)) else {
            continue;
        };
        let sources = entry["infoSource"].as_str().unwrap_or_default();
        let mut kept: Vec<&str> = sources
            .split(SOURCE_SEPARATOR)
            .filter(|x| !x.is_empty() && *x != MULTUS)
            .collect();
        if s.reported {
            kept.push(MULTUS);
        }
        let joined = kept.join(SOURCE_SEPARATOR);
        if joined != sources {
            if joined.is_empty() {
                if let Some(m) = entry.as_object_mut() {
                    m.remove("infoSource");
                }
            } else {
                entry["infoSource"] = json!(joined);
            }
        }
        if entry["podInterfaceName"].as_str() != Some(s.pod_iface.as_str()) {
            entry["podInterfaceName"] = json!(s.pod_iface);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(status: Value) -> Value {
        json!({
            "spec": {"networks": [
                {"name": "default", "pod": {}},
                {"name": "secondary", "multus": {"networkName": "sec"}},
                {"name": "other", "multus": {"networkName": "o"}},
            ]},
            "status": status,
        })
    }

    #[test]
    fn multus_reported_secondaries_get_kubevirts_hashed_names_and_source() {
        // `printf secondary | sha256sum` starts c0f69e19ba2.
        let statuses = parse(
            r#"[{"name":"kvrs-pods","interface":"eth0","default":true},
                {"name":"ns/secondary","interface":"podc0f69e19ba2"}]"#,
        );
        let mut v = vmi(json!({"interfaces": [
            {"name": "default", "podInterfaceName": "eth0", "infoSource": "domain, guest-agent"},
            {"name": "secondary", "mac": "02:00:00:00:00:02", "infoSource": "domain, guest-agent"},
            {"name": "other", "infoSource": "domain, multus-status"},
        ]}));
        let secondary = secondary_pod_ifaces(&v, &statuses);
        assert!(secondary["secondary"].reported);
        assert!(!secondary["other"].reported);
        apply_to_existing(&mut v, &secondary);
        let list = &v["status"]["interfaces"];
        assert_eq!(
            list[0]["infoSource"], "domain, guest-agent",
            "primary untouched"
        );
        assert_eq!(list[1]["podInterfaceName"], "podc0f69e19ba2");
        assert_eq!(list[1]["infoSource"], "domain, guest-agent, multus-status");
        assert_eq!(list[2]["podInterfaceName"], hashed("other"));
        assert_eq!(
            list[2]["infoSource"], "domain",
            "Multus no longer reports it"
        );
    }

    #[test]
    fn a_pod_with_ordinal_names_keeps_the_ordinal_scheme() {
        let statuses = parse(r#"[{"interface":"eth0"},{"interface":"net2"}]"#);
        let secondary = secondary_pod_ifaces(&vmi(json!({})), &statuses);
        assert_eq!(secondary["secondary"].pod_iface, "net1");
        assert!(!secondary["secondary"].reported);
        assert_eq!(secondary["other"].pod_iface, "net2");
        assert!(secondary["other"].reported);
    }

    #[test]
    fn a_malformed_annotation_is_no_attachments() {
        assert!(parse("{not json").is_empty());
        assert!(parse(r#"{"interface":"x"}"#).is_empty());
    }
}
