//! The VM decision against the store: the lifecycle from Stopped to Running and back, and the
//! safety properties of every decision, its writes applied to the snapshot it came from.

use kvrs_admission::ClusterConfig;
use kvrs_api::api::{VirtualMachine, VirtualMachineInstance};
use kvrs_decide::vm::{PendingExpectations, Revision, VmDecision, VmWorld, decide_vm};
use kvrs_decide::{Now, WriteOp};
use kvrs_decide_test_support::ObjectStore;
use serde_json::{Value, json};

include!("../../src/vm/fixtures.rs");

/// The writes of a decision as `verb resource[/sub]`, status writes left out.
fn actions(d: &VmDecision) -> Vec<String> {
    d.plan
        .writes()
        .filter(|w| w.subresource.is_none())
        .map(|w| format!("{} {}", w.op.verb(), w.resource))
        .collect()
}

const START: &[&str] = &[
    "create controllerrevisions",
    "create virtualmachineinstances",
];
const STOP: &[&str] = &["delete virtualmachineinstances"];
const NOTHING: &[&str] = &[];

/// Drives VM decisions against the in-memory store, feeding each result back as the next
/// snapshot, with the VMI phase advanced as virt-handler would: Stopped -> Running -> Stopped.
#[test]
fn lifecycle_start_run_stop_on_the_store() {
    let cfg = ClusterConfig::default();
    let mut store = ObjectStore::new();
    store.insert(
        "virtualmachines",
        serde_json::to_value(vm(Some("Manual"), None, json!({}))).unwrap(),
    );
    let step = |store: &mut ObjectStore| {
        let v: VirtualMachine = serde_json::from_value(
            store
                .get("virtualmachines", "default", "vm1")
                .unwrap()
                .clone(),
        )
        .unwrap();
        let i: Option<VirtualMachineInstance> = store
            .get("virtualmachineinstances", "default", "vm1")
            .map(|x| serde_json::from_value(x.clone()).unwrap());
        let revs: Vec<Revision> = store
            .list("controllerrevisions")
            .map(|x| serde_json::from_value(x.clone()).unwrap())
            .collect();
        let mut w = world(&v, i.as_ref(), &cfg);
        w.revisions = &revs;
        let d = decide_vm(&w);
        let (q, e) = store.execute(&d.plan, NOW);
        assert_eq!(e, None, "{:?}", d.plan.write_list());
        (d, q)
    };
    let (d, _) = step(&mut store);
    assert_eq!(actions(&d), NOTHING);
    // virtctl start
    store
        .objects
        .get_mut(&("virtualmachines".into(), "default".into(), "vm1".into()))
        .unwrap()["status"]["stateChangeRequests"] = json!([{"action": "Start"}]);
    let (d, _) = step(&mut store);
    assert_eq!(actions(&d), START);
    let mut created = store
        .get("virtualmachineinstances", "default", "vm1")
        .unwrap()
        .clone();
    created["metadata"]["uid"] = json!("vmi-uid");
    created["status"]["phase"] = json!("Running");
    created["status"]["phaseTransitionTimestamps"] =
        json!([{"phase": "Running", "phaseTransitionTimestamp": "2026-01-01T00:00:00Z"}]);
    created["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    store.insert("virtualmachineinstances", created);
    let (d, _) = step(&mut store);
    assert_eq!(d.status.as_ref().unwrap()["printableStatus"], "Running");
    assert!(
        d.status
            .as_ref()
            .unwrap()
            .get("stateChangeRequests")
            .is_none(),
        "start request consumed"
    );
    // virtctl stop
    store
        .objects
        .get_mut(&("virtualmachines".into(), "default".into(), "vm1".into()))
        .unwrap()["status"]["stateChangeRequests"] = json!([{"action": "Stop", "uid": "vmi-uid"}]);
    let (d, _) = step(&mut store);
    assert_eq!(actions(&d), STOP);
    assert!(
        store
            .get("virtualmachineinstances", "default", "vm1")
            .unwrap()["metadata"]["deletionTimestamp"]
            .is_string(),
        "the VMI is terminating (finalizers hold it)"
    );
}

mod invariants {
    use proptest::prelude::*;

    use super::*;

    const PRINTABLE: &[&str] = &[
        "Stopped",
        "Provisioning",
        "Starting",
        "Running",
        "Paused",
        "Stopping",
        "Terminating",
        "CrashLoopBackOff",
        "Migrating",
        "Unknown",
        "ErrorUnschedulable",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrorPvcNotFound",
        "DataVolumeError",
        "WaitingForVolumeBinding",
        "WaitingForReceiver",
    ];

    fn strategy() -> impl Strategy<Value = (Option<&'static str>, Option<bool>)> {
        prop_oneof![
            Just((Some("Always"), None)),
            Just((Some("RerunOnFailure"), None)),
            Just((Some("Manual"), None)),
            Just((Some("Halted"), None)),
            Just((Some("Once"), None)),
            Just((Some("WaitAsReceiver"), None)),
            Just((None, Some(true))),
            Just((None, Some(false))),
            Just((None, None)),
        ]
    }

    fn vmi_state() -> impl Strategy<Value = Option<(&'static str, bool, bool)>> {
        let phase = prop_oneof![
            Just("Pending"),
            Just("Scheduling"),
            Just("Scheduled"),
            Just("Running"),
            Just("Succeeded"),
            Just("Failed"),
            Just("WaitingForSync"),
        ];
        proptest::option::of((phase, any::<bool>(), any::<bool>()))
    }

    fn request() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!(null)),
            Just(json!([{"action": "Start"}])),
            Just(json!([{"action": "Start", "data": {"paused": "true"}}])),
            Just(json!([{"action": "Stop", "uid": "vmi-uid"}])),
            Just(json!([{"action": "Stop", "uid": "other"}])),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Whatever the snapshot, a decision never creates more than one VMI, never creates one
        /// next to an existing VMI or while a create is unobserved, raises the expectation on
        /// every create and delete, and its writes apply to the snapshot it was made from.
        #[test]
        fn vm_decisions_are_safe(
            (rs, running) in strategy(),
            state in vmi_state(),
            req in request(),
            pending_create in any::<bool>(),
            vm_deleting in any::<bool>(),
            backoff_secs in prop_oneof![Just(None), (-100i64..300).prop_map(Some)],
        ) {
            let cfg = ClusterConfig::default();
            let mut status = json!({});
            if !req.is_null() {
                status["stateChangeRequests"] = req;
            }
            if let Some(b) = backoff_secs {
                status["startFailure"] = json!({"consecutiveFailCount": 2, "lastFailedVMIUID": "old",
                    "retryAfterTimestamp": kvrs_decide::format_rfc3339(NOW + b)});
            }
            let mut v = vm(rs, running, status);
            if vm_deleting {
                v.metadata.deletion_timestamp = kvrs_decide::meta::time_at(NOW - 1);
            }
            let i = state.map(|(phase, ever_running, deleting)| {
                let mut i = vmi(phase, ever_running);
                if deleting {
                    i.metadata.deletion_timestamp = kvrs_decide::meta::time_at(NOW - 1);
                }
                i
            });
            let mut w = world(&v, i.as_ref(), &cfg);
            if pending_create {
                w.expectations = PendingExpectations { creations: 1, deletions: 0 };
            }
            let d = decide_vm(&w);
            let creates: Vec<_> = d.plan.writes()
                .filter(|x| x.resource == "virtualmachineinstances" && matches!(x.op, WriteOp::Create { .. }))
                .collect();
            prop_assert!(creates.len() <= 1);
            if i.is_some() || pending_create || vm_deleting {
                prop_assert!(creates.is_empty());
            }
            for x in &d.plan.write_list() {
                if x.resource == "virtualmachineinstances" && matches!(x.op, WriteOp::Create { .. } | WriteOp::Delete { .. }) {
                    prop_assert!(x.expectation.is_some());
                }
            }
            if let Some(s) = &d.status {
                let p = s["printableStatus"].as_str().unwrap_or_default();
                prop_assert!(PRINTABLE.contains(&p), "{p}");
            }
            let mut store = ObjectStore::new();
            store.insert("virtualmachines", serde_json::to_value(&v).unwrap());
            if let Some(i) = &i {
                store.insert("virtualmachineinstances", serde_json::to_value(i).unwrap());
            }
            let (_, err) = store.execute(&d.plan, NOW);
            if let Some(e) = err.filter(|e| Some(e.as_str()) != d.plan.error_message()) {
                // Only a VM released by its last finalizer may vanish before its status write.
                prop_assert!(vm_deleting && e.contains("not found"), "{e}: {:?}", d.plan.write_list());
            }
        }
    }
}
