//! VMIs, pods, nodes and migrations the evacuation tests start from, as small builders.

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::api::VirtualMachineInstance;

pub(super) const NOW: i64 = 1_767_225_600;

/// A running VMI on `node` as virt-handler leaves it: `LiveMigratable` per `migratable`,
/// `evictionStrategy` per `strategy` (`None`: unset).
pub(super) fn vmi(name: &str, node: &str, strategy: Option<&str>, migratable: bool) -> VmiBuilder {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                     "resourceVersion": "7", "annotations": {"kubevirt.io/nonroot": "true"}},
        "spec": {"domain": {"devices": {}}},
        "status": {"phase": "Running", "nodeName": node, "selinuxContext": "none",
                   "runtimeUser": 107,
                   "conditions": [{"type": "LiveMigratable",
                                   "status": if migratable { "True" } else { "False" }}]},
    });
    if let Some(s) = strategy {
        v["spec"]["evictionStrategy"] = json!(s);
    }
    VmiBuilder(v)
}

/// A VMI under construction.
pub(super) struct VmiBuilder(pub(super) Value);

impl VmiBuilder {
    pub(super) fn marked(mut self, node: &str) -> Self {
        self.0["status"]["evacuationNodeName"] = json!(node);
        self
    }
    pub(super) fn phase(mut self, phase: &str) -> Self {
        self.0["status"]["phase"] = json!(phase);
        self
    }
    pub(super) fn deleting(mut self) -> Self {
        self.0["metadata"]["deletionTimestamp"] = json!("2025-12-31T23:59:00Z");
        self
    }
    pub(super) fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    /// A migration state started at `start` (unix) and ended at `end`, if given.
    pub(super) fn migrating(mut self, start: i64, end: Option<i64>) -> Self {
        let mut s =
            json!({"migrationUid": "m-uid", "startTimestamp": crate::meta::time_json(start)});
        if let Some(e) = end {
            s["endTimestamp"] = crate::meta::time_json(e);
        }
        self.0["status"]["migrationState"] = s;
        self
    }
    pub(super) fn build(self) -> VirtualMachineInstance {
        serde_json::from_value(self.0).expect("fixture VMI")
    }
}

/// A node, with the taint `key:NoSchedule` when given.
pub(super) fn node(name: &str, taint: Option<(&str, &str)>) -> Node {
    let mut n = json!({"metadata": {"name": name}, "spec": {}});
    if let Some((key, effect)) = taint {
        n["spec"]["taints"] = json!([{"key": key, "effect": effect}]);
    }
    serde_json::from_value(n).expect("fixture node")
}

/// A migration of VMI `vmi` in `phase` (empty: none yet).
pub(super) fn migration(name: &str, vmi: &str, phase: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid")},
           "spec": {"vmiName": vmi},
           "status": if phase.is_empty() { json!({}) } else { json!({"phase": phase}) }})
}

/// The launcher pod of `vmi` on `node` in `phase`.
pub(super) fn launcher(name: &str, vmi: &VirtualMachineInstance, node: &str, phase: &str) -> Pod {
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    let vmi_name = vmi.metadata.name.clone().unwrap_or_default();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
            "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid},
            "annotations": {"kubevirt.io/domain": vmi_name},
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "name": vmi_name, "uid": uid, "controller": true}]},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": phase},
    }))
    .expect("fixture pod")
}
