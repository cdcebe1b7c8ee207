//! Phase 2 of a tap-attached interface in the domain: the converter leaves
//! `<interface type="ethernet">` without a device, because only the pod knows it. The launcher
//! fills in the tap the handler created (`managed="no"`: libvirt must not create or delete it),
//! the pod NIC's MTU, and the MAC — the VMI's, or else the pod NIC's, so the guest keeps the
//! address the pod network assigned.

use kvrs_converter::Domain;
use kvrs_converter::domain::{InterfaceTarget, Mac, Mtu};

/// What the pod says about one interface's attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapAttachment {
    /// The device libvirt opens (`tap0`, or the pod interface when no tap exists).
    pub target: String,
    /// The pod NIC's MTU.
    pub mtu: u32,
    /// The guest MAC, as Go prints it.
    pub mac: String,
}

/// Writes `att` into the domain interface aliased `ua-<iface>`; `false` when there is none.
pub fn apply(domain: &mut Domain, iface: &str, att: &TapAttachment) -> bool {
    let Some(di) = domain
        .devices
        .interfaces
        .iter_mut()
        .find(|i| i.alias.as_ref().and_then(|a| a.user_name()) == Some(iface))
    else {
        return false;
    };
    di.mtu = Some(Mtu {
        size: att.mtu.to_string(),
    });
    di.mac = Some(Mac {
        address: att.mac.clone(),
    });
    di.target = Some(InterfaceTarget {
        dev: att.target.clone(),
        managed: Some("no".into()),
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_converter::ConverterContext;

    fn vmi(ifaces: serde_json::Value) -> kvrs_api::VirtualMachineInstance {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "net", "namespace": "default", "uid": "u-1"},
            "spec": {
                "domain": {
                    "devices": {"interfaces": ifaces},
                    "resources": {"requests": {"memory": "128Mi"}}
                },
                "networks": [{"name": "default", "pod": {}}]
            }
        }))
        .unwrap()
    }

    fn domain(ifaces: serde_json::Value) -> Domain {
        let ctx = ConverterContext {
            allow_emulation: true,
            ..ConverterContext::default()
        };
        kvrs_converter::convert(&vmi(ifaces), &ctx).unwrap()
    }

    fn interface_xml(d: &Domain) -> String {
        let xml = d.to_xml().unwrap();
        let start = xml.find("<interface").unwrap();
        let end = xml.rfind("</interface>").unwrap() + "</interface>".len();
        xml[start..end].to_string()
    }

    #[test]
    fn a_masquerade_interface_gets_tap_mtu_and_the_pod_mac() {
        let mut d = domain(serde_json::json!([{"name": "default", "masquerade": {}}]));
        let att = TapAttachment {
            target: "tap0".into(),
            mtu: 1450,
            mac: "0a:58:0a:f4:00:07".into(),
        };
        assert!(apply(&mut d, "default", &att));
        insta::assert_snapshot!(interface_xml(&d));
    }

    #[test]
    fn a_bridge_interface_keeps_the_vmi_mac() {
        let mut d = domain(serde_json::json!([
            {"name": "default", "bridge": {}, "macAddress": "de:ad:00:00:be:af"}
        ]));
        let att = TapAttachment {
            target: "tap0".into(),
            mtu: 1500,
            mac: "de:ad:00:00:be:af".into(),
        };
        assert!(apply(&mut d, "default", &att));
        insta::assert_snapshot!(interface_xml(&d));
    }

    #[test]
    fn an_unknown_interface_changes_nothing() {
        let mut d = domain(serde_json::json!([{"name": "default", "masquerade": {}}]));
        let before = d.clone();
        let att = TapAttachment {
            target: "tap0".into(),
            mtu: 1500,
            mac: "02:00:00:00:00:01".into(),
        };
        assert!(!apply(&mut d, "other", &att));
        assert_eq!(d, before);
    }
}
