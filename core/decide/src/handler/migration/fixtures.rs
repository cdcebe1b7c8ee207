//! Builders for migration scenarios: a VMI running on `src` migrating to `dst`, the domain as each
//! launcher reports it, and a runner for both controllers on a fixed clock.

use serde_json::{Value, json};

use super::super::{Domain, HandlerConfig, HandlerPlan, HandlerWorld, NodeFacts};
use super::{decide_source, decide_target};
use crate::api::VirtualMachineInstance;
use crate::patch::apply_json_patch;

pub(super) const SRC: &str = "src";
pub(super) const DST: &str = "dst";
pub(super) const UID: &str = "vmi-uid";
pub(super) const MIG: &str = "mig-uid";
pub(super) const NOW: &str = "2026-01-01T00:10:00Z";

/// A running VMI on `SRC` whose migration (`MIG`) targets `DST`, target not prepared yet.
pub(super) fn migrating_vmi() -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {"name": "v", "namespace": "ns", "uid": UID, "resourceVersion": "10",
                     "labels": {"kubevirt.io/nodeName": SRC,
                                "kubevirt.io/migrationTargetNodeName": DST}},
        "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                 "networks": [{"name": "default", "pod": {}}]},
        "status": {"phase": "Running", "nodeName": SRC,
                   "migrationState": {"migrationUid": MIG, "sourceNode": SRC, "targetNode": DST,
                                      "targetPod": "virt-launcher-v-dst"}}
    }))
    .expect("vmi")
}

/// Edits the VMI through its JSON (readable scenario steps).
pub(super) fn with(
    vmi: &VirtualMachineInstance,
    edit: impl FnOnce(&mut Value),
) -> VirtualMachineInstance {
    let mut v = serde_json::to_value(vmi).expect("json");
    edit(&mut v);
    serde_json::from_value(v).expect("vmi")
}

/// The VMI after the target published its address and ports.
pub(super) fn published(vmi: &VirtualMachineInstance) -> VirtualMachineInstance {
    with(vmi, |v| {
        let m = &mut v["status"]["migrationState"];
        m["targetNodeAddress"] = json!("10.0.0.2");
        m["targetDirectMigrationNodePorts"] = json!({"40001": 0, "40002": 49152});
    })
}

/// A domain for the VMI with `status`/`reason` and an optional migration record.
pub(super) fn domain(status: &str, reason: &str, record: Option<Value>) -> Domain {
    let mut kv = json!({"UID": UID});
    if let Some(r) = record {
        kv["Migration"] = r;
    }
    serde_json::from_value(json!({
        "ObjectMeta": {"name": "v", "namespace": "ns"},
        "Spec": {"Metadata": {"KubeVirt": kv}},
        "Status": {"Status": status, "Reason": reason}
    }))
    .expect("domain")
}

/// Facts of a target node whose proxy listens.
pub(super) fn listening() -> NodeFacts {
    let mut f = NodeFacts::default();
    f.migration.migration_ip_address = "10.0.0.2".into();
    f.migration.target_listener_ports = [("40001".to_string(), 0), ("40002".to_string(), 49152)]
        .into_iter()
        .collect();
    f
}

/// Which controller to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    Source,
    Target,
}

/// Runs one controller on `node` at `now`.
pub(super) fn run_at(
    side: Side,
    node: &str,
    now: &str,
    vmi: Option<&VirtualMachineInstance>,
    domain: Option<&Domain>,
    facts: &NodeFacts,
    config: &HandlerConfig,
) -> HandlerPlan {
    let w = HandlerWorld {
        node,
        key: "ns/v",
        now: crate::Now::parse(now).expect("time"),
        vmi,
        domain,
        facts,
        config,
    };
    match side {
        Side::Source => decide_source(&w),
        Side::Target => decide_target(&w),
    }
}

/// Runs one controller at [`NOW`] with the default config.
pub(super) fn run(
    side: Side,
    vmi: &VirtualMachineInstance,
    domain: Option<&Domain>,
    facts: &NodeFacts,
) -> HandlerPlan {
    let node = match side {
        Side::Source => SRC,
        Side::Target => DST,
    };
    run_at(
        side,
        node,
        NOW,
        Some(vmi),
        domain,
        facts,
        &HandlerConfig::default(),
    )
}

/// The VMI after the plan's write (bumping the resourceVersion as the API server would); the
/// same VMI when the plan writes nothing. Panics when the patch's tests fail.
pub(super) fn apply(vmi: &VirtualMachineInstance, plan: &HandlerPlan) -> VirtualMachineInstance {
    match write_patch(plan) {
        None => vmi.clone(),
        Some(patch) => {
            let mut doc = serde_json::to_value(vmi).expect("json");
            apply_json_patch(&mut doc, &patch).expect("patch applies");
            let rv: u64 = doc["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            doc["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
            serde_json::from_value(doc).expect("vmi")
        }
    }
}

/// The JSON patch of the plan's VMI write, if any.
pub(super) fn write_patch(plan: &HandlerPlan) -> Option<Value> {
    plan.plan
        .actions
        .iter()
        .find_map(|a| match a.as_write().map(|w| &w.op) {
            Some(crate::WriteOp::Patch { patch, .. }) => Some(patch.clone()),
            _ => None,
        })
}

/// Event reasons and messages of a plan.
pub(super) fn events(plan: &HandlerPlan) -> Vec<(String, String)> {
    plan.plan
        .events
        .iter()
        .map(|e| (e.reason.clone(), e.message.clone()))
        .collect()
}
