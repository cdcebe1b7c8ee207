//! kvrs's migration controller decision (`kvrs_decide::migration::decide_migration`) against
//! KubeVirt v1.9.0's own migration controller (`pkg/virt-controller/watch/migration`, with its
//! real launcher template service), imported as a Go module: `scripts/migration-harness.sh`
//! builds `tests/migration`, which runs ONE `Execute` of each scenario's key against fake
//! clientsets and informer caches and records every API call, event and queue operation. The
//! test fails when the harness cannot be built.
//!
//! The scenarios are generated here: every phase transition (Pending → Scheduling → Scheduled →
//! PreparingTarget → TargetReady → Running → Succeeded / Failed), cancellation before and after
//! the hand-off, a target pod that failed or went missing, the parallel limits per cluster and
//! per outbound node, VMIs that cannot migrate, two migrations of one VMI, a MigrationPolicy.
//!
//! What is compared, after normalisation:
//! - the writes, in order: verb (an update may be a patch: kvrs patches where KubeVirt updates),
//!   resource, subresource and name (`migration-writes`; a delete's UID precondition at
//!   `SELECTOR /preconditions/uid`);
//! - what each write changes (`migration-content`): the migration's status as written (KubeVirt's
//!   UpdateStatus object, kvrs's new status); the migration's metadata after an update or patch;
//!   the VMI and pods after applying either side's JSON patch to the object as the caches hold it
//!   (the `test` operations left out: kvrs's preconditions differ on purpose, see
//!   `core/decide/src/migration`); the created target pod as oracle-vm summarises pods
//!   (metadata, node placement, container names);
//! - the events (object, type, reason, message) and the queue operations on the key.
//!
//! Timestamps: the harness shifts every scenario onto the wall clock and back, so every time the
//! controller writes reads as the scenario's `now`; kvrs decides at the same `now`.
//!
//! A difference fails the test unless `tests/deliberate-differences.json` lists it (corpus
//! `migration`).

use std::collections::BTreeMap;

#[path = "controller_oracle/mod.rs"]
mod controller_oracle;

use controller_oracle::{
    NOW, NOW_UNIX, Oracle, Side, Write, by_name, patched, pod_cache, strip_empty, typed,
};
use k8s_openapi::api::core::v1::Node;
use kvrs_core::ClusterConfig;
use kvrs_core::api::VirtualMachineInstance;
use kvrs_core::decide::migration::policy::{Labels, MigrationPolicy};
use kvrs_core::decide::migration::{
    MigrationConfig, MigrationDecision, MigrationWorld, decide_migration, target_renderer,
};
use kvrs_core::decide::{Now, PendingExpectations};
use kvrs_tests::Difference;
use serde_json::{Value, json};

/// The oracle: its comparisons are `migration-writes`, `-content`, `-events` and `-queue`, as
/// `tests/deliberate-differences.json` names them; `KVRS_MIGRATION_TRACE=NAME` (or `all`)
/// prints both sides of scenario NAME as compared.
const ORACLE: Oracle = Oracle {
    corpus: "migration",
    script: "scripts/migration-harness.sh",
    trace_var: "KVRS_MIGRATION_TRACE",
};

const MIG_UID: &str = "mig-uid";
const VMI_UID: &str = "vmi-uid";
const FINALIZER: &str = "kubevirt.io/migrationJobFinalize";

// ---- the scenarios ----

/// One reconcile's inputs, in the shape the harness reads.
#[derive(Clone, Debug)]
struct Scenario {
    name: String,
    migration: Value,
    migrations: Vec<Value>,
    vmis: Vec<Value>,
    pods: Vec<Value>,
    nodes: Vec<Value>,
    namespaces: Vec<Value>,
    policies: Vec<Value>,
    configuration: Value,
    /// The KubeVirt CR in the cache (its `status.synchronizationAddresses`).
    kubevirt: Value,
}

impl Scenario {
    fn to_json(&self) -> Value {
        json!({"name": self.name, "now": NOW, "migration": self.migration,
               "migrations": self.migrations, "vmis": self.vmis, "pods": self.pods,
               "nodes": self.nodes, "namespaces": self.namespaces,
               "migrationPolicies": self.policies, "configuration": self.configuration,
               "kubevirt": self.kubevirt})
    }

    fn vmi(&mut self) -> &mut Value {
        &mut self.vmis[0]
    }

    fn with(mut self, edit: impl FnOnce(&mut Self)) -> Self {
        edit(&mut self);
        self
    }
}

fn migration(name: &str, uid: &str, vmi: &str, phase: &str) -> Value {
    let mut m = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": name, "namespace": "default", "uid": uid, "resourceVersion": "10",
            "creationTimestamp": "2025-12-31T23:00:00Z",
            "labels": {"kubevirt.io/vmi-name": vmi},
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                            "kubevirt.io/storage-observed-api-version": "v1"},
            "finalizers": [FINALIZER],
        },
        "spec": {"vmiName": vmi},
    });
    if !phase.is_empty() {
        m["status"] = json!({"phase": phase, "migrationState": {"sourcePod": format!("virt-launcher-{vmi}-src")}});
    }
    m
}

/// A running VMI on `node`, as virt-api and virt-handler leave it.
fn vmi(name: &str, uid: &str, node: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "5",
                     "annotations": {"kubevirt.io/nonroot": "true",
                                     "kubevirt.io/latest-observed-api-version": "v1",
                                     "kubevirt.io/storage-observed-api-version": "v1"},
                     "labels": {"kubevirt.io/nodeName": node}},
        "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}},
                            "machine": {"type": "q35"}},
                 "architecture": "amd64"},
        "status": {"phase": "Running", "nodeName": node, "selinuxContext": "none",
                   "runtimeUser": 107,
                   "conditions": [{"type": "LiveMigratable", "status": "True"}]},
    })
}

/// A launcher pod of VMI `vmi_name`/`vmi_uid` on `node`; a target pod when `migration_uid` is set.
fn pod(
    name: &str,
    vmi_name: &str,
    vmi_uid: &str,
    node: &str,
    phase: &str,
    migration_uid: Option<&str>,
) -> Value {
    let mut labels = json!({"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vmi_uid});
    if let Some(m) = migration_uid {
        labels["kubevirt.io/migrationJobUID"] = json!(m);
    }
    let running = phase == "Running";
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                     "creationTimestamp": "2025-12-31T23:59:00Z", "labels": labels,
                     "annotations": {"kubevirt.io/domain": vmi_name},
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                          "name": vmi_name, "uid": vmi_uid, "controller": true,
                                          "blockOwnerDeletion": true}]},
        "spec": {"nodeName": if phase == "Pending" { Value::Null } else { json!(node) },
                 "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}]},
        "status": {"phase": phase,
                   "conditions": [{"type": "Ready", "status": if running { "True" } else { "False" }}],
                   "containerStatuses": [{"name": "compute", "ready": running, "restartCount": 0,
                                          "image": "quay.io/kubevirt/virt-launcher:v1.9.0", "imageID": "",
                                          "state": if running { json!({"running": {}}) } else { json!({"waiting": {}}) }}]},
    })
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
               "kubevirt.io/schedulable": "true",
               "cpu-vendor.node.kubevirt.io/GenuineIntel": "true"}}})
}

const SRC: &str = "virt-launcher-vmi1-src";
const TGT: &str = "virt-launcher-vmi1-tgt";

/// `mig1` of the running `vmi1` (source pod on node-a) in `phase`.
fn base(name: &str, phase: &str) -> Scenario {
    Scenario {
        name: name.into(),
        migration: migration("mig1", MIG_UID, "vmi1", phase),
        migrations: vec![],
        vmis: vec![vmi("vmi1", VMI_UID, "node-a")],
        pods: vec![pod(SRC, "vmi1", VMI_UID, "node-a", "Running", None)],
        nodes: vec![node("node-a"), node("node-b")],
        namespaces: vec![json!({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": "default", "labels": {"team": "a"}}})],
        policies: vec![],
        configuration: json!({}),
        kubevirt: Value::Null,
    }
}

fn target(phase: &str) -> Value {
    pod(TGT, "vmi1", VMI_UID, "node-b", phase, Some(MIG_UID))
}

/// The VMI's migration state after this migration's hand-off.
fn handed_off_state() -> Value {
    json!({"migrationUid": MIG_UID, "sourceNode": "node-a", "targetNode": "node-b",
           "targetPod": TGT, "sourcePod": SRC})
}

/// A migration of another VMI (`vmiN` on `node`, with its own VMI) in `phase`.
fn other(i: usize, node_name: &str, phase: &str) -> (Value, Value) {
    let v = format!("vmi-o{i}");
    let m = migration(&format!("mig-o{i}"), &format!("mig-o{i}-uid"), &v, phase);
    (m, vmi(&v, &format!("{v}-uid"), node_name))
}

fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();

    // -- the first reconcile and the phases, one step each
    out.push(base("first-reconcile-annotations", "").with(|s| {
        let meta = s.migration["metadata"].as_object_mut().unwrap();
        meta.remove("annotations");
        meta.remove("labels");
    }));
    out.push(base("unset-to-pending", ""));
    out.push(base("pending-creates-target-pod", "Pending"));
    out.push(base("pending-runtime-user-patched", "Pending").with(|s| {
        s.vmi()["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("kubevirt.io/nonroot");
        s.vmi()["status"]["runtimeUser"] = json!(0);
    }));
    out.push(base("pending-to-scheduling", "Pending").with(|s| s.pods.push(target("Pending"))));
    out.push(
        base("scheduling-target-pending", "Scheduling").with(|s| s.pods.push(target("Pending"))),
    );
    out.push(
        base("scheduling-to-scheduled", "Scheduling").with(|s| s.pods.push(target("Running"))),
    );
    out.push(base("scheduled-hands-off", "Scheduled").with(|s| s.pods.push(target("Running"))));
    out.push(base("scheduled-to-preparing", "Scheduled").with(|s| {
        s.pods.push(target("Running"));
        s.vmi()["status"]["migrationState"] = handed_off_state();
    }));
    out.push(
        base("preparing-to-target-ready", "PreparingTarget").with(|s| {
            s.pods.push(target("Running"));
            let mut st = handed_off_state();
            st["targetNodeAddress"] = json!("10.0.0.2");
            s.vmi()["status"]["migrationState"] = st;
        }),
    );
    out.push(base("preparing-waits", "PreparingTarget").with(|s| {
        s.pods.push(target("Running"));
        s.vmi()["status"]["migrationState"] = handed_off_state();
    }));
    out.push(base("target-ready-to-running", "TargetReady").with(|s| {
        s.pods.push(target("Running"));
        let mut st = handed_off_state();
        st["targetNodeAddress"] = json!("10.0.0.2");
        st["startTimestamp"] = json!("2025-12-31T23:59:30Z");
        s.vmi()["status"]["migrationState"] = st;
    }));
    let running_state = || {
        let mut st = handed_off_state();
        st["targetNodeAddress"] = json!("10.0.0.2");
        st["startTimestamp"] = json!("2025-12-31T23:59:30Z");
        st
    };
    out.push(
        base("running-marks-target-domain-ready", "Running").with(|s| {
            s.pods.push(target("Running"));
            let mut st = running_state();
            st["targetNodeDomainReadyTimestamp"] = json!("2025-12-31T23:59:50Z");
            s.vmi()["status"]["migrationState"] = st;
        }),
    );
    out.push(base("running-to-succeeded", "Running").with(|s| {
        let mut t = target("Running");
        t["metadata"]["annotations"]["kubevirt.io/migration-target-ready-timestamp"] =
            json!("2025-12-31 23:59:50 +0000 UTC");
        s.pods.push(t);
        let mut st = running_state();
        st["targetNodeDomainReadyTimestamp"] = json!("2025-12-31T23:59:50Z");
        st["endTimestamp"] = json!("2025-12-31T23:59:58Z");
        st["completed"] = json!(true);
        s.vmi()["status"]["migrationState"] = st;
    }));
    out.push(base("running-to-failed", "Running").with(|s| {
        s.pods.push(target("Running"));
        let mut st = running_state();
        st["endTimestamp"] = json!("2025-12-31T23:59:58Z");
        st["completed"] = json!(true);
        st["failed"] = json!(true);
        s.vmi()["status"]["migrationState"] = st;
    }));
    out.push(base("succeeded-removes-finalizer", "Succeeded").with(|s| {
        let mut st = running_state();
        st["endTimestamp"] = json!("2025-12-31T23:59:58Z");
        st["completed"] = json!(true);
        s.vmi()["status"]["migrationState"] = st;
    }));
    out.push(
        base("failed-marks-vmi-and-removes-finalizer", "Failed").with(|s| {
            s.pods.push(target("Failed"));
            s.vmi()["status"]["migrationState"] = handed_off_state();
        }),
    );
    out.push(base("succeeded-without-finalizer", "Succeeded").with(|s| {
        s.migration["metadata"]["finalizers"] = json!([]);
    }));

    // -- cancellation
    let deleted = |s: &mut Scenario| {
        s.migration["metadata"]["deletionTimestamp"] = json!("2025-12-31T23:59:59Z");
    };
    out.push(base("cancel-pending-no-pod", "Pending").with(deleted));
    out.push(
        base("cancel-scheduling-deletes-target", "Scheduling").with(|s| {
            deleted(s);
            s.pods.push(target("Pending"));
        }),
    );
    out.push(
        base("cancel-scheduled-before-hand-off", "Scheduled").with(|s| {
            deleted(s);
            s.pods.push(target("Running"));
        }),
    );
    out.push(base("cancel-running-requests-abort", "Running").with(|s| {
        deleted(s);
        s.pods.push(target("Running"));
        s.vmi()["status"]["migrationState"] = running_state();
    }));
    out.push(
        base("cancel-running-abort-already-requested", "Running").with(|s| {
            deleted(s);
            s.pods.push(target("Running"));
            let mut st = running_state();
            st["abortRequested"] = json!(true);
            s.vmi()["status"]["migrationState"] = st;
            s.migration["status"]["conditions"] = json!([{"type": "migrationAbortRequested",
            "status": "True", "lastProbeTime": "2025-12-31T23:59:59Z"}]);
        }),
    );

    // -- the target pod failed or missing
    out.push(
        base("scheduling-target-failed", "Scheduling").with(|s| s.pods.push(target("Failed"))),
    );
    out.push(base("scheduled-target-missing", "Scheduled"));
    out.push(
        base("preparing-target-missing-marks-vmi", "PreparingTarget").with(|s| {
            s.vmi()["status"]["migrationState"] = handed_off_state();
        }),
    );
    out.push(base("target-ready-target-failed", "TargetReady").with(|s| {
        s.pods.push(target("Failed"));
        let mut st = handed_off_state();
        st["targetNodeAddress"] = json!("10.0.0.2");
        s.vmi()["status"]["migrationState"] = st;
    }));
    out.push(base("running-state-cleared", "Running").with(|s| s.pods.push(target("Running"))));
    out.push(
        base("pending-target-unschedulable-timeout", "Pending").with(|s| {
            let mut t = target("Pending");
            t["metadata"]["creationTimestamp"] = json!("2025-12-31T23:50:00Z");
            t["status"]["conditions"] =
                json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
            s.pods.push(t);
        }),
    );
    out.push(
        base("scheduling-target-unschedulable-waits", "Scheduling").with(|s| {
            let mut t = target("Pending");
            t["metadata"]["creationTimestamp"] = json!("2025-12-31T23:58:00Z");
            t["status"]["conditions"] =
                json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
            s.pods.push(t);
        }),
    );
    out.push(
        base("scheduling-target-pending-catch-all-timeout", "Scheduling").with(|s| {
            let mut t = target("Pending");
            t["metadata"]["creationTimestamp"] = json!("2025-12-31T23:40:00Z");
            s.pods.push(t);
        }),
    );

    // -- parallel limits
    out.push(base("limit-per-cluster", "Pending").with(|s| {
        for i in 0..5 {
            let (m, v) = other(i, &format!("node-o{i}"), "Running");
            s.migrations.push(m);
            s.vmis.push(v);
        }
    }));
    out.push(base("limit-per-cluster-not-reached", "Pending").with(|s| {
        for i in 0..4 {
            let (m, v) = other(i, &format!("node-o{i}"), "Running");
            s.migrations.push(m);
            s.vmis.push(v);
        }
    }));
    out.push(base("limit-per-outbound-node", "Pending").with(|s| {
        for i in 0..2 {
            let (m, v) = other(i, "node-a", "Scheduling");
            s.migrations.push(m);
            s.vmis.push(v);
        }
    }));
    out.push(
        base("limit-per-outbound-node-configured", "Pending").with(|s| {
            let (m, v) = other(0, "node-a", "Running");
            s.migrations.push(m);
            s.vmis.push(v);
            s.configuration = json!({"migrations": {"parallelOutboundMigrationsPerNode": 1}});
        }),
    );
    out.push(
        base("limit-per-cluster-user-triggered", "Pending").with(|s| {
            s.migration["spec"]["priority"] = json!("user-triggered");
            s.configuration = json!({"migrations": {"parallelMigrationsPerCluster": 1}});
            let (m, v) = other(0, "node-o0", "TargetReady");
            s.migrations.push(m);
            s.vmis.push(v);
        }),
    );

    // -- VMIs that cannot migrate
    out.push(base("vmi-shut-down", "Scheduling").with(|s| {
        s.vmi()["status"]["phase"] = json!("Succeeded");
        s.pods.push(target("Running"));
    }));
    out.push(base("vmi-not-running-yet", "Pending").with(|s| {
        s.vmi()["status"]["phase"] = json!("Scheduled");
    }));
    out.push(base("vmi-deleting", "Pending").with(|s| {
        s.vmi()["metadata"]["deletionTimestamp"] = json!("2025-12-31T23:59:59Z");
    }));
    out.push(base("vmi-missing", "Pending").with(|s| {
        s.vmis.clear();
        s.pods.clear();
    }));
    out.push(base("vmi-missing-migration-deleting", "Pending").with(|s| {
        deleted(s);
        s.vmis.clear();
        s.pods.clear();
    }));
    out.push(base("vmi-without-pod", "Pending").with(|s| s.pods.clear()));

    // -- two migrations of one VMI
    let taken = |s: &mut Scenario, phase: &str| {
        let mut m = migration("mig2", "mig2-uid", "vmi1", phase);
        m["metadata"]["creationTimestamp"] = json!("2025-12-31T22:00:00Z");
        s.migrations.push(m);
        let mut st = handed_off_state();
        st["migrationUid"] = json!("mig2-uid");
        st["targetPod"] = json!("virt-launcher-vmi1-other");
        s.vmi()["status"]["migrationState"] = st;
    };
    out.push(base("second-migration-refused", "").with(|s| taken(s, "Running")));
    out.push(base("second-migration-pending-blocked", "Pending").with(|s| taken(s, "Running")));
    out.push(base("second-migration-after-final-one", "").with(|s| taken(s, "Succeeded")));
    out.push(
        base("second-migration-takes-over-final-state", "Pending").with(|s| taken(s, "Failed")),
    );
    out.push(
        base("handed-off-state-taken-over", "PreparingTarget").with(|s| {
            s.pods.push(target("Running"));
            taken(s, "Scheduling");
        }),
    );
    out.push(base("garbage-collects-oldest-final", "Succeeded").with(|s| {
        s.migration["metadata"]["finalizers"] = json!([]);
        for i in 0..6 {
            let mut m = migration(&format!("old{i}"), &format!("old{i}-uid"), "vmi1", "Failed");
            m["metadata"]["creationTimestamp"] = json!(format!("2025-12-31T1{i}:00:00Z"));
            m["metadata"]["finalizers"] = json!([]);
            m["status"]["migrationState"] = json!({"targetPod": format!("virt-launcher-vmi1-old{i}"),
                                                   "failed": true, "completed": true});
            s.migrations.push(m);
        }
        s.pods.push(pod(
            "virt-launcher-vmi1-old0",
            "vmi1",
            VMI_UID,
            "node-b",
            "Failed",
            Some("old0-uid"),
        ));
    }));

    // -- MigrationPolicies at the hand-off
    let policy = |name: &str, selectors: Value, spec: Value| {
        let mut p = json!({"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
                           "metadata": {"name": name}, "spec": spec});
        p["spec"]["selectors"] = selectors;
        p
    };
    out.push(base("hand-off-with-policy", "Scheduled").with(|s| {
        s.pods.push(target("Running"));
        s.vmi()["metadata"]["labels"]["workload"] = json!("db");
        s.policies = vec![
            policy(
                "by-vmi-and-namespace",
                json!({"virtualMachineInstanceSelector": {"workload": "db"},
                       "namespaceSelector": {"team": "a"}}),
                json!({"bandwidthPerMigration": "2048Mi", "completionTimeoutPerGiB": 300,
                       "allowAutoConverge": true, "allowPostCopy": true}),
            ),
            policy(
                "by-namespace",
                json!({"namespaceSelector": {"team": "a"}}),
                json!({"allowAutoConverge": false}),
            ),
            policy(
                "other-team",
                json!({"namespaceSelector": {"team": "b"}}),
                json!({"maxDowntimeMs": 100}),
            ),
        ];
    }));
    out.push(base("hand-off-policy-not-matching", "Scheduled").with(|s| {
        s.pods.push(target("Running"));
        s.policies = vec![policy(
            "other-workload",
            json!({"virtualMachineInstanceSelector": {"workload": "web"}}),
            json!({"allowPostCopy": true}),
        )];
    }));
    out.push(base("hand-off-cluster-configuration", "Scheduled").with(|s| {
        s.pods.push(target("Running"));
        s.configuration = json!({"migrations": {"bandwidthPerMigration": "1024Mi",
                                                "allowAutoConverge": true, "progressTimeout": 300}});
    }));

    // -- the target pod's placement
    out.push(base("target-pod-added-node-selector", "Pending").with(|s| {
        s.migration["spec"]["addedNodeSelector"] = json!({"rack": "r2"});
    }));
    out.push(base("target-pod-selinux-level", "Pending").with(|s| {
        s.vmi()["status"]["selinuxContext"] = json!("system_u:system_r:container_t:s0:c1,c2");
    }));
    out.push(base("target-pod-host-model", "Pending").with(|s| {
        s.vmi()["spec"]["domain"]["cpu"] = json!({"model": "host-model"});
        s.nodes[0]["metadata"]["labels"]["host-model-cpu.node.kubevirt.io/Skylake"] = json!("true");
        s.nodes[0]["metadata"]["labels"]["host-model-required-features.node.kubevirt.io/vmx"] =
            json!("true");
    }));

    // -- cluster settings and VMI features the reconcile reads
    out.push(base("pending-root-gate-runtime-user", "Pending").with(|s| {
        s.configuration = json!({"developerConfiguration": {"featureGates": ["Root"]}});
    }));
    out.push(base("synchronization-addresses", "Pending").with(|s| {
        s.pods.push(target("Pending"));
        s.kubevirt = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "status": {"synchronizationAddresses": ["10.0.0.9:9185"]}});
    }));
    out.push(base("pending-utility-volumes", "Pending").with(|s| {
        s.vmi()["spec"]["utilityVolumes"] = json!([{"name": "u1", "claimName": "u1"}]);
    }));
    out.push(base("target-pod-container-disk", "Pending").with(|s| {
        s.vmi()["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "cd", "disk": {"bus": "virtio"}}]);
        s.vmi()["spec"]["volumes"] = json!([{"name": "cd", "containerDisk": {
            "image": "quay.io/kubevirt/cirros-container-disk-demo:v1.9.0"}}]);
        s.pods[0]["status"]["containerStatuses"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "volumecd", "ready": true, "restartCount": 0,
                "image": "quay.io/kubevirt/cirros-container-disk-demo:v1.9.0",
                "imageID": "quay.io/kubevirt/cirros-container-disk-demo@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "state": {"running": {}}}));
    }));
    out.push(base("target-pod-container-disk-no-digest", "Pending").with(|s| {
        // kvrs's own kubelet reports no image IDs.
        s.vmi()["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "cd", "disk": {"bus": "virtio"}}]);
        s.vmi()["spec"]["volumes"] = json!([{"name": "cd", "containerDisk": {
            "image": "kvrs.local/empty-disk:64m"}}]);
        s.pods[0]["status"]["initContainerStatuses"] = json!([{"name": "volumecd", "ready": true,
            "restartCount": 0, "image": "kvrs.local/empty-disk:64m", "imageID": "",
            "state": {"terminated": {"exitCode": 0}}}]);
    }));
    out.push(base("target-pod-container-disk-source-pinned", "Pending").with(|s| {
        // The source is itself a former target: its image volume is pinned, no init containers.
        s.vmi()["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "cd", "disk": {"bus": "virtio"}}]);
        s.vmi()["spec"]["volumes"] = json!([{"name": "cd", "containerDisk": {
            "image": "quay.io/kubevirt/cirros-container-disk-demo:v1.9.0"}}]);
        s.pods[0]["spec"]["volumes"] = json!([{"name": "cd", "image": {
            "reference": "quay.io/kubevirt/cirros-container-disk-demo@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"}}]);
    }));
    out
}

// ---- kvrs's side ----

fn decide(s: &Scenario) -> MigrationDecision {
    let vmis: Vec<VirtualMachineInstance> = typed(&s.vmis, "vmi");
    let pods = pod_cache(&s.pods);
    let nodes: Vec<Node> = typed(&s.nodes, "node");
    let mut migrations = vec![s.migration.clone()];
    migrations.extend(s.migrations.iter().cloned());
    let gates: Vec<&str> = s
        .configuration
        .pointer("/developerConfiguration/featureGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let cluster = ClusterConfig::with_feature_gates(&gates.join(","));
    let policies: Vec<MigrationPolicy> = s
        .policies
        .iter()
        .map(|p| MigrationPolicy::from_value(p).expect("policy"))
        .collect();
    let namespace_labels: BTreeMap<String, Labels> = s
        .namespaces
        .iter()
        .map(|n| {
            (
                n["metadata"]["name"].as_str().unwrap().to_string(),
                serde_json::from_value(n["metadata"]["labels"].clone()).unwrap_or_default(),
            )
        })
        .collect();
    let config = MigrationConfig::from_migrations(s.configuration.get("migrations"))
        .with_policies(policies, namespace_labels);
    let world = MigrationWorld {
        migration: &s.migration,
        migrations: &migrations,
        vmis: vmis.iter().collect(),
        pods: pods.iter().collect(),
        nodes: &nodes,
        kubevirt: Some(&s.kubevirt).filter(|k| !k.is_null()),
        expectations: PendingExpectations::default(),
        pending_creations_anywhere: 0,
        handed_off: false,
        config: &cluster,
        migration_config: &config,
        now: Now::from_unix(NOW_UNIX),
    };
    let inputs = kvrs_core::pod::PodInputs::default();
    let render = target_renderer(&cluster, &inputs);
    decide_migration(&world, &render, "00000")
}

// ---- normalisation ----

/// The object a write is about, as the caches held it.
fn subject<'s>(s: &'s Scenario, resource: &str, name: &str) -> Option<&'s Value> {
    match resource {
        "virtualmachineinstancemigrations" => {
            by_name(std::iter::once(&s.migration).chain(&s.migrations), name)
        }
        "virtualmachineinstances" => by_name(&s.vmis, name),
        "pods" => by_name(&s.pods, name),
        _ => None,
    }
}

/// A pod as oracle-vm summarises it — the metadata that matters, node placement, container names —
/// plus the images: the containers', the init containers' and the image volumes'.
fn pod_summary(p: &Value) -> Value {
    let m = &p["metadata"];
    let spec = &p["spec"];
    strip_empty(&json!({
        "metadata": {"name": m["name"], "generateName": m["generateName"], "labels": m["labels"],
                     "annotations": m["annotations"], "ownerReferences": m["ownerReferences"]},
        "nodeSelector": spec["nodeSelector"], "affinity": spec["affinity"],
        "seLinuxOptions": spec.pointer("/securityContext/seLinuxOptions").cloned().unwrap_or(Value::Null),
        "containers": spec["containers"].as_array().into_iter().flatten()
            .map(|c| json!({"name": c["name"], "image": c["image"]})).collect::<Vec<_>>(),
        "initContainers": spec["initContainers"].as_array().into_iter().flatten()
            .map(|c| json!({"name": c["name"], "image": c["image"]})).collect::<Vec<_>>(),
        // Container disks as image volumes (KubeVirt pins the target's to the source's digest).
        "imageVolumes": spec["volumes"].as_array().into_iter().flatten()
            .filter(|v| v.get("image").is_some())
            .map(|v| json!({"name": v["name"], "image": v["image"]})).collect::<Vec<_>>(),
    }))
}

/// What a write changes, as compared: see the module header. kvrs's migration status patch is
/// compared as the status it makes (`kvrs_status`), KubeVirt's status update as the status it
/// sends.
fn effect(s: &Scenario, w: &Write, kvrs_status: Option<&Value>, side: Side) -> Value {
    let resource = w.resource.as_str();
    match (w.verb.as_str(), resource, w.subresource.as_str()) {
        ("create", "pods", _) => pod_summary(&w.body),
        ("update", "virtualmachineinstancemigrations", "status") => strip_empty(&w.body["status"]),
        ("patch", "virtualmachineinstancemigrations", "status") if side == Side::Kvrs => {
            strip_empty(kvrs_status.unwrap_or(&Value::Null))
        }
        ("update", "virtualmachineinstancemigrations", "") => metadata_view(&w.body),
        ("patch", _, _) => match subject(s, resource, &w.name) {
            Some(o) => {
                let after = patched(o, &w.body);
                match resource {
                    "virtualmachineinstancemigrations" => metadata_view(&after),
                    "pods" => strip_empty(&json!({"annotations": after["metadata"]["annotations"],
                                                   "labels": after["metadata"]["labels"]})),
                    _ => strip_empty(&json!({"labels": after["metadata"]["labels"],
                                             "annotations": after["metadata"]["annotations"],
                                             "status": after["status"]})),
                }
            }
            None => json!({"patch of an unknown object": w.body}),
        },
        _ => Value::Null,
    }
}

fn metadata_view(o: &Value) -> Value {
    strip_empty(&json!({"labels": o["metadata"]["labels"],
                        "annotations": o["metadata"]["annotations"],
                        "finalizers": o["metadata"]["finalizers"]}))
}

fn compare(s: &Scenario, go: &Value) -> Vec<Difference> {
    let d = decide(s);
    ORACLE.compare(&s.name, go, &d.plan, |w, side| {
        effect(s, w, d.status.as_ref(), side)
    })
}

#[test]
fn kvrs_decides_migrations_as_kubevirts_controller() {
    let scenarios = scenarios();
    let inputs: Vec<Value> = scenarios.iter().map(Scenario::to_json).collect();
    let answers = ORACLE.answers(&inputs);
    let writes_seen = controller_oracle::kubevirt_writes_seen(&answers, Write::selector);
    println!("KubeVirt's writes across the scenarios: {writes_seen:?}");
    ORACLE.verdict(
        scenarios
            .iter()
            .zip(&answers)
            .map(|(s, go)| (s.name.as_str(), compare(s, go))),
        &[],
    );
    // The grid reaches what it is meant to: a target pod, the hand-off, an abort, a pod delete.
    for w in [
        "create pods",
        "patch virtualmachineinstances",
        "update virtualmachineinstancemigrations/status",
        "delete pods",
        "delete virtualmachineinstancemigrations",
        "patch pods",
    ] {
        assert!(
            writes_seen.contains_key(w),
            "no scenario makes KubeVirt {w}"
        );
    }
}
