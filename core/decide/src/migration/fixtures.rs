//! The migration, VMI, pods and world every migration decision test starts from, as builders
//! so a test reads like its scenario (`Scene::new().phase("Pending").target_pod(..)`).

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::*;
use crate::api::VirtualMachineInstance;

pub(super) const NOW: i64 = 1_767_225_600;
pub(super) const MIG_UID: &str = "mig-uid";

/// A migration of `vmi1` as virt-api's webhook leaves it: finalizer, selector label, and the
/// API-version annotations of an earlier reconcile.
pub(super) fn vmim(name: &str, uid: &str, vmi: &str, phase: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": name, "namespace": "default", "uid": uid, "resourceVersion": "10",
            "creationTimestamp": "2025-12-31T23:00:00Z",
            "labels": {"kubevirt.io/vmi-name": vmi},
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                            "kubevirt.io/storage-observed-api-version": "v1"},
            "finalizers": [names::FINALIZER],
        },
        "spec": {"vmiName": vmi},
        "status": if phase.is_empty() { json!({}) } else { json!({"phase": phase}) },
    })
}

/// A VMI running on `node-a`.
pub(super) fn vmi_json(name: &str, uid: &str, node: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "5",
                     "annotations": {"kubevirt.io/nonroot": "true"}},
        "spec": {"domain": {"devices": {}}},
        "status": {"phase": "Running", "nodeName": node, "selinuxContext": "none",
                   "runtimeUser": 107},
    })
}

/// A launcher pod of VMI `vmi_uid` on `node`; a target pod when `migration_uid` is set.
pub(super) fn pod_json(
    name: &str,
    vmi_uid: &str,
    node: Option<&str>,
    phase: &str,
    migration_uid: Option<&str>,
) -> Value {
    let mut labels = json!({"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vmi_uid});
    if let Some(m) = migration_uid {
        labels[names::MIGRATION_JOB_UID] = json!(m);
    }
    let compute = if phase == "Running" {
        json!({"running": {}})
    } else {
        json!({"waiting": {}})
    };
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                     "creationTimestamp": "2025-12-31T23:55:00Z", "labels": labels,
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                          "name": "vmi1", "uid": vmi_uid, "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "launcher"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "compute", "ready": false,
                                                          "state": compute}]},
    })
}

/// What the renderer returns: a launcher pod of the VMI without node placement.
pub(super) fn render(v: &VirtualMachineInstance, _source: &Pod) -> Result<Value, String> {
    let uid = v.metadata.uid.clone().unwrap_or_default();
    Ok(json!({
        "metadata": {"generateName": "virt-launcher-vmi1-", "namespace": "default",
                     "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid},
                     "annotations": {},
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                          "name": "vmi1", "uid": uid, "controller": true}]},
        "spec": {"nodeSelector": {"kubevirt.io/schedulable": "true"},
                 "containers": [{"name": "compute", "image": "launcher"}]},
    }))
}

/// One reconcile's inputs, built up by a test.
pub(super) struct Scene {
    pub(super) migration: Value,
    pub(super) others: Vec<Value>,
    pub(super) vmis: Vec<Value>,
    pub(super) pods: Vec<Value>,
    pub(super) nodes: Vec<Node>,
    pub(super) handed_off: bool,
    pub(super) expectations: PendingExpectations,
    pub(super) pending_anywhere: u32,
    pub(super) config: MigrationConfig,
    pub(super) now: i64,
}

impl Scene {
    /// `mig1` of the running `vmi1` with its source pod on `node-a` (an Intel node).
    pub(super) fn new(phase: &str) -> Self {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "node-a",
                         "labels": {"cpu-vendor.node.kubevirt.io/GenuineIntel": "true"}}
        }))
        .unwrap();
        let mut migration = vmim("mig1", MIG_UID, "vmi1", phase);
        if !phase.is_empty() {
            // Recorded by the reconcile that made it Pending.
            migration["status"]["migrationState"] = json!({"sourcePod": "virt-launcher-vmi1-src"});
        }
        Self {
            migration,
            others: vec![],
            vmis: vec![vmi_json("vmi1", "vmi-uid", "node-a")],
            pods: vec![pod_json(
                "virt-launcher-vmi1-src",
                "vmi-uid",
                Some("node-a"),
                "Running",
                None,
            )],
            nodes: vec![node],
            handed_off: false,
            expectations: PendingExpectations::default(),
            pending_anywhere: 0,
            config: MigrationConfig::default(),
            now: NOW,
        }
    }

    /// The VMI, for edits.
    pub(super) fn vmi(&mut self) -> &mut Value {
        &mut self.vmis[0]
    }

    /// Adds this migration's target pod on `node-b` in `phase`.
    pub(super) fn target(mut self, phase: &str) -> Self {
        self.pods.push(pod_json(
            "virt-launcher-vmi1-tgt",
            "vmi-uid",
            Some("node-b"),
            phase,
            Some(MIG_UID),
        ));
        self
    }

    /// Sets the VMI's `status.migrationState`.
    pub(super) fn vmi_state(mut self, state: Value) -> Self {
        self.vmi()["status"]["migrationState"] = state;
        self
    }

    /// Marks the migration deleted.
    pub(super) fn deleted(mut self) -> Self {
        self.migration["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        self
    }

    /// Decides.
    pub(super) fn decide(&self) -> MigrationDecision {
        let vmis: Vec<VirtualMachineInstance> = self
            .vmis
            .iter()
            .map(|v| serde_json::from_value(v.clone()).unwrap())
            .collect();
        let pods: Vec<Pod> = self
            .pods
            .iter()
            .map(|p| serde_json::from_value(p.clone()).unwrap())
            .collect();
        let mut migrations = vec![self.migration.clone()];
        migrations.extend(self.others.iter().cloned());
        let cluster = ClusterConfig::default();
        let w = MigrationWorld {
            migration: &self.migration,
            migrations: &migrations,
            vmis: vmis.iter().collect(),
            pods: pods.iter().collect(),
            nodes: &self.nodes,
            kubevirt: None,
            expectations: self.expectations,
            pending_creations_anywhere: self.pending_anywhere,
            handed_off: self.handed_off,
            config: &cluster,
            migration_config: &self.config,
            now: Now::from_unix(self.now),
        };
        decide_migration(&w, &render, "x7k2p")
    }
}

/// `verb resource[/sub]` of each write, in order.
pub(super) fn writes(d: &MigrationDecision) -> Vec<String> {
    d.plan
        .writes()
        .map(|w| match &w.subresource {
            Some(s) => format!("{} {}/{s}", w.op.verb(), w.resource),
            None => format!("{} {}", w.op.verb(), w.resource),
        })
        .collect()
}

/// The phase the decision writes, or `None` when it writes no status.
pub(super) fn new_phase(d: &MigrationDecision) -> Option<String> {
    d.status
        .as_ref()
        .map(|s| s["phase"].as_str().unwrap_or_default().to_string())
}

/// The messages of the plan's events.
pub(super) fn events(d: &MigrationDecision) -> Vec<String> {
    d.plan.events.iter().map(|e| e.message.clone()).collect()
}

/// The patch document of the write to `resource` (first one).
pub(super) fn patch_of<'d>(d: &'d MigrationDecision, resource: &str) -> &'d Value {
    d.plan
        .writes()
        .find_map(|w| match &w.op {
            WriteOp::Patch { patch, .. } if w.resource == resource && w.subresource.is_none() => {
                Some(patch)
            }
            _ => None,
        })
        .expect("a patch of the resource")
}
