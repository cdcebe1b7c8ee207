//! Scenario tables for the VM decision: every run strategy against every VMI state and the
//! double-create guard. Decisions applied to a store (the lifecycle from Stopped to Running and
//! back, the safety properties) are in tests/on_the_store, next to the store they need.

use super::Revision;
use serde_json::{Value, json};

use super::{PendingExpectations, VmWorld, decide_vm};
use crate::ClusterConfig;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::{Now, Requeue, WriteOp};

include!("fixtures.rs");

/// The writes of a decision as `verb resource[/sub]`, status writes left out.
fn actions(d: &super::VmDecision) -> Vec<String> {
    d.plan
        .writes()
        .filter(|w| w.subresource.is_none())
        .map(|w| format!("{} {}", w.op.verb(), w.resource))
        .collect()
}

fn printable(d: &super::VmDecision, vm: &VirtualMachine) -> String {
    d.status
        .as_ref()
        .or(vm
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .as_ref())
        .and_then(|s| s["printableStatus"].as_str().map(String::from))
        .unwrap_or_default()
}

const START: &[&str] = &[
    "create controllerrevisions",
    "create virtualmachineinstances",
];
const STOP_FINAL: &[&str] = &[
    "delete virtualmachineinstances",
    "patch virtualmachineinstances",
];
const STOP: &[&str] = &["delete virtualmachineinstances"];
const NOTHING: &[&str] = &[];
const FIN: &[&str] = &["patch virtualmachineinstances"];

#[test]
fn every_run_strategy_against_every_vmi_state() {
    let cfg = ClusterConfig::default();
    // (strategy, VMI: None | (phase, ever running), start request, expected writes, printable)
    #[allow(clippy::type_complexity)]
    let table: &[(&str, Option<(&str, bool)>, bool, &[&str], &str)] = &[
        ("Always", None, false, START, "Starting"),
        ("Always", Some(("Running", true)), false, NOTHING, "Running"),
        (
            "Always",
            Some(("Scheduling", false)),
            false,
            NOTHING,
            "Starting",
        ),
        (
            "Always",
            Some(("Succeeded", true)),
            false,
            STOP_FINAL,
            "Stopped",
        ),
        (
            "Always",
            Some(("Failed", false)),
            false,
            STOP_FINAL,
            "CrashLoopBackOff",
        ),
        ("RerunOnFailure", None, false, START, "Starting"),
        (
            "RerunOnFailure",
            Some(("Running", true)),
            false,
            NOTHING,
            "Running",
        ),
        (
            "RerunOnFailure",
            Some(("Succeeded", true)),
            false,
            STOP_FINAL,
            "Stopped",
        ),
        (
            "RerunOnFailure",
            Some(("Failed", true)),
            false,
            STOP_FINAL,
            "Stopped",
        ),
        ("Manual", None, false, NOTHING, "Stopped"),
        ("Manual", None, true, START, "Starting"),
        ("Manual", Some(("Running", true)), false, NOTHING, "Running"),
        ("Manual", Some(("Succeeded", true)), false, FIN, "Stopped"),
        ("Halted", None, false, NOTHING, "Stopped"),
        ("Halted", None, true, &["patch virtualmachines"], "Stopped"),
        ("Halted", Some(("Running", true)), false, STOP, "Stopping"),
        ("Once", None, false, START, "Starting"),
        ("Once", Some(("Running", true)), false, NOTHING, "Running"),
        ("Once", Some(("Succeeded", true)), false, FIN, "Stopped"),
        (
            "Once",
            Some(("Failed", false)),
            false,
            FIN,
            "CrashLoopBackOff",
        ),
        ("WaitAsReceiver", None, false, START, "Starting"),
    ];
    for (strategy, state, start_req, want, want_printable) in table {
        let status = if *start_req {
            json!({"stateChangeRequests": [{"action": "Start"}]})
        } else {
            json!({})
        };
        let v = vm(Some(strategy), None, status);
        let i = state.map(|(p, r)| vmi(p, r));
        let d = decide_vm(&world(&v, i.as_ref(), &cfg));
        let case = format!("{strategy} {state:?} start={start_req}");
        assert_eq!(
            actions(&d),
            want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{case}"
        );
        assert_eq!(printable(&d, &v), *want_printable, "{case}");
    }
}

#[test]
fn legacy_running_maps_to_always_and_halted_and_both_is_an_error() {
    let cfg = ClusterConfig::default();
    let d = decide_vm(&world(&vm(None, Some(true), json!({})), None, &cfg));
    assert_eq!(actions(&d), START);
    let d = decide_vm(&world(&vm(None, Some(false), json!({})), None, &cfg));
    assert_eq!(actions(&d), NOTHING);
    let d = decide_vm(&world(
        &vm(Some("Always"), Some(true), json!({})),
        None,
        &cfg,
    ));
    assert_eq!(
        d.plan.error_message(),
        Some("running and runstrategy are mutually exclusive")
    );
    assert_eq!(d.plan.queue, Requeue::rate_limited());
    assert!(
        d.status.is_none(),
        "no status write after a run strategy error"
    );
}

#[test]
fn stop_request_for_the_running_vmi_stops_it_other_uids_are_dropped() {
    let cfg = ClusterConfig::default();
    let i = vmi("Running", true);
    let req = |uid: &str| json!({"stateChangeRequests": [{"action": "Stop", "uid": uid}]});
    let v = vm(Some("Manual"), None, req("vmi-uid"));
    let d = decide_vm(&world(&v, Some(&i), &cfg));
    assert_eq!(actions(&d), STOP);
    let WriteOp::Delete { precondition_uid } = &d.plan.write_list()[0].op else {
        panic!("delete first")
    };
    assert_eq!(precondition_uid.as_deref(), Some("vmi-uid"));
    let v = vm(Some("Manual"), None, req("older-uid"));
    let d = decide_vm(&world(&v, Some(&i), &cfg));
    assert_eq!(actions(&d), NOTHING);
    assert!(
        d.status.unwrap().get("stateChangeRequests").is_none(),
        "stale request trimmed"
    );
}

#[test]
fn start_failures_back_off_with_the_jitter_passed_in() {
    let cfg = ClusterConfig::default();
    let i = vmi("Failed", false);
    let v = vm(Some("Always"), None, json!({}));
    for (jitter, want) in [(0.0, 10), (0.99, 15)] {
        let mut w = world(&v, Some(&i), &cfg);
        w.jitter = jitter;
        let d = decide_vm(&w);
        let sf = &d.status.unwrap()["startFailure"];
        assert_eq!(sf["consecutiveFailCount"], 1);
        assert_eq!(
            sf["retryAfterTimestamp"],
            json!(crate::format_rfc3339(NOW + want))
        );
    }
    // While the backoff runs, no start: requeue after the time left.
    let v = vm(
        Some("Always"),
        None,
        json!({"startFailure": {"consecutiveFailCount": 3, "lastFailedVMIUID": "x",
                                "retryAfterTimestamp": "2026-01-01T00:01:30Z"}}),
    );
    let d = decide_vm(&world(&v, None, &cfg));
    assert_eq!(actions(&d), NOTHING);
    assert_eq!(
        d.plan.queue,
        Requeue::after(std::time::Duration::from_secs(90))
    );
    assert_eq!(d.status.unwrap()["printableStatus"], "CrashLoopBackOff");
}

#[test]
fn double_create_guard_cache_lagging_behind_a_create() {
    let cfg = ClusterConfig::default();
    let v = vm(Some("Always"), None, json!({}));
    // First reconcile creates the VMI and raises the expectation before the create.
    let d = decide_vm(&world(&v, None, &cfg));
    let create = d
        .plan
        .writes()
        .find(|w| w.resource == "virtualmachineinstances")
        .unwrap();
    assert!(matches!(
        create.expectation,
        Some(crate::Expectation::Creations { count: 1, .. })
    ));
    // Second reconcile: the cache has not seen the VMI yet, the expectation is outstanding.
    let mut w = world(&v, None, &cfg);
    w.expectations = PendingExpectations {
        creations: 1,
        deletions: 0,
    };
    let d = decide_vm(&w);
    assert!(
        !d.plan
            .writes()
            .any(|w| matches!(w.op, WriteOp::Create { .. })),
        "no second VMI while the first create is unobserved"
    );
    assert_eq!(d.status.unwrap()["printableStatus"], "Starting");
}

#[test]
fn deletion_stops_the_vmi_then_releases_the_vm() {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Always"), None, json!({}));
    v.metadata.deletion_timestamp = crate::meta::time_at(NOW - 10);
    let i = vmi("Running", true);
    let d = decide_vm(&world(&v, Some(&i), &cfg));
    assert_eq!(actions(&d), STOP);
    assert_eq!(d.status.unwrap()["printableStatus"], "Terminating");
    let d = decide_vm(&world(&v, None, &cfg));
    assert_eq!(actions(&d), ["patch virtualmachines"]);
}

#[test]
fn missing_finalizer_and_firmware_uuid_are_added() {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Halted"), None, json!({}));
    v.metadata.finalizers = None;
    if let Some(s) = v.spec.template.spec.as_mut() {
        s.domain.firmware = None;
    }
    let d = decide_vm(&world(&v, None, &cfg));
    // One JSON patch carries both: the finalizer and the firmware UUID.
    assert_eq!(actions(&d), ["patch virtualmachines"]);
    let WriteOp::Patch { patch, .. } = &d.plan.write_list()[0].op else {
        panic!("the VM write is a patch")
    };
    let ops = patch.as_array().expect("a JSON patch is an array");
    assert!(
        ops.iter().any(
            |op| op["path"] == "/metadata/finalizers" || op["path"] == "/metadata/finalizers/-"
        ),
        "the finalizer is added: {patch}"
    );
    assert!(
        ops.iter().any(|op| op["value"]["uuid"]
            == json!(kvrs_admission::template::firmware_uuid_for_vm("vm1"))),
        "the firmware UUID is set: {patch}"
    );
}

/// Revisions the cache may hold in odd shapes (no data, no name, someone else's) are skipped
/// rather than trusted or panicked on.
#[test]
fn odd_revisions_are_ignored() {
    let cfg = ClusterConfig::default();
    let v = vm(Some("Always"), None, json!({}));
    let mut i = vmi("Running", true);
    i.status.as_mut().unwrap().virtual_machine_revision_name =
        Some("revision-start-vm-vm-uid-1".into());
    let owner = json!([{"kind": "VirtualMachine", "uid": "vm-uid", "name": "vm1",
                        "apiVersion": "kubevirt.io/v1", "controller": true}]);
    let revs: Vec<Revision> = [
        json!({}),
        json!({"metadata": {"name": "revision-start-vm-vm-uid-1", "ownerReferences": owner}}),
        json!({"metadata": {"name": "revision-start-vm-vm-uid-2", "ownerReferences": owner},
               "data": {"spec": 7}}),
    ]
    .into_iter()
    .map(|r| serde_json::from_value(r).unwrap())
    .collect();
    let mut w = world(&v, Some(&i), &cfg);
    w.revisions = &revs;
    let d = decide_vm(&w);
    assert_eq!(d.plan.error, None);
    assert_eq!(actions(&d), NOTHING);
}

#[test]
fn restart_required_when_the_template_changed_since_start() {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Always"), None, json!({}));
    let revision = json!({
        "metadata": {"name": "revision-start-vm-vm-uid-1", "namespace": "default",
                     "ownerReferences": [{"kind": "VirtualMachine", "uid": "vm-uid", "name": "vm1",
                                          "apiVersion": "kubevirt.io/v1", "controller": true}]},
        "data": {"spec": serde_json::to_value(&v.spec).unwrap()},
        "revision": 1,
    });
    v.metadata.generation = Some(2);
    if let Some(s) = v.spec.template.spec.as_mut() {
        s.hostname = Some("changed".into());
    }
    let i = vmi("Running", true);
    let revs = [serde_json::from_value(revision).unwrap()];
    let mut w = world(&v, Some(&i), &cfg);
    w.revisions = &revs;
    let d = decide_vm(&w);
    let conds = d.status.unwrap()["conditions"].clone();
    assert!(
        conds
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "RestartRequired" && c["status"] == "True")
    );
}

#[test]
fn eviction_annotations_and_pci_topology_are_synced() {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Always"), None, json!({}));
    v.spec.template.metadata.annotations = Some(
        [(
            "descheduler.alpha.kubernetes.io/evict".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let mut i = vmi("Running", true);
    i.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("kubevirt.io/pci-topology-version".into(), "v3".into());
    let d = decide_vm(&world(&v, Some(&i), &cfg));
    assert_eq!(
        actions(&d),
        ["patch virtualmachineinstances", "patch virtualmachines"]
    );
    let WriteOp::Patch { patch, .. } = &d.plan.write_list()[0].op else {
        panic!()
    };
    assert_eq!(
        patch[1]["value"]["descheduler.alpha.kubernetes.io/evict"],
        "true"
    );
    let WriteOp::Patch { patch, .. } = &d.plan.write_list()[1].op else {
        panic!()
    };
    assert_eq!(patch[0]["path"], "/spec/template/metadata/annotations");
    assert_eq!(patch[1]["value"]["kubevirt.io/pci-topology-version"], "v3");
}

#[test]
fn data_volumes_are_created_first_and_the_start_waits_for_them() {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Always"), None, json!({}));
    v.spec.data_volume_templates = Some(vec![
        serde_json::from_value(json!({"metadata": {"name": "disk1"},
            "spec": {"source": {"http": {"url": "http://x/img"}}, "storage": {}}}))
        .unwrap(),
    ]);
    let d = decide_vm(&world(&v, None, &cfg));
    assert_eq!(actions(&d), ["create datavolumes"]);
    let WriteOp::Create { object } = &d.plan.write_list()[0].op else {
        panic!()
    };
    assert_eq!(
        object["metadata"]["labels"]["kubevirt.io/created-by"],
        "vm-uid"
    );
    assert_eq!(
        object["metadata"]["annotations"]["cdi.kubevirt.io/allowClaimAdoption"],
        "true"
    );
    assert_eq!(
        object["metadata"]["ownerReferences"][0]["kind"],
        "VirtualMachine"
    );
    // Importing: no start yet, the VM shows Provisioning.
    let mut dvs = vec![
        json!({"metadata": {"name": "disk1", "namespace": "default"},
                              "status": {"phase": "ImportInProgress"}}),
    ];
    if let Some(s) = v.spec.template.spec.as_mut() {
        s.volumes = Some(vec![
            serde_json::from_value(json!({"name": "disk1", "dataVolume": {"name": "disk1"}}))
                .unwrap(),
        ]);
    }
    let mut w = world(&v, None, &cfg);
    w.data_volumes = &dvs;
    let d = decide_vm(&w);
    assert_eq!(actions(&d), NOTHING);
    assert_eq!(d.status.unwrap()["printableStatus"], "Provisioning");
    // Imported: start.
    dvs[0]["status"]["phase"] = json!("Succeeded");
    let mut w = world(&v, None, &cfg);
    w.data_volumes = &dvs;
    let d = decide_vm(&w);
    assert_eq!(actions(&d), START);
}

#[test]
fn without_a_webhook_the_created_vmi_is_stored_as_virt_api_would_return_it() {
    let bare = ClusterConfig::default();
    let admitting = ClusterConfig {
        admit_created_vmis: true,
        ..ClusterConfig::default()
    };
    let v = vm(Some("Always"), None, json!({}));
    let created = |cfg: &ClusterConfig| -> Value {
        let d = super::decide_vm(&world(&v, None, cfg));
        d.plan
            .created("virtualmachineinstances")
            .cloned()
            .expect("a VMI is created")
    };
    let (plain, admitted) = (created(&bare), created(&admitting));
    // KubeVirt's controller creates the bare VMI (with Go's zero `runtimeUser: 0`, a field without
    // omitempty); the webhook sets the runtime user and the defaults.
    assert_eq!(plain["status"]["runtimeUser"], 0, "{plain}");
    assert_eq!(admitted["status"]["runtimeUser"], 107, "{admitted}");
    assert!(
        admitted["spec"]["domain"]["machine"]["type"].is_string(),
        "defaults applied: {admitted}"
    );
    // Both carry what the controller itself adds.
    for vmi in [&plain, &admitted] {
        assert!(
            vmi["status"]["virtualMachineRevisionName"].is_string(),
            "{vmi}"
        );
    }
    // The controller's finalizer is in what it sends; the webhook appends its own after it and
    // stamps the `Pending` transition with its clock (here the decision's `now`).
    assert_eq!(
        plain["metadata"]["finalizers"],
        json!(["kubevirt.io/virtualMachineControllerFinalize"])
    );
    assert_eq!(
        admitted["metadata"]["finalizers"],
        json!([
            "kubevirt.io/virtualMachineControllerFinalize",
            "kubevirt.io/foregroundDeleteVirtualMachine"
        ])
    );
    let now = world(&v, None, &admitting).now.rfc3339();
    assert_eq!(
        admitted["status"]["phaseTransitionTimestamps"],
        json!([{"phase": "Pending", "phaseTransitionTimestamp": now}]),
        "{admitted}"
    );
    assert_eq!(plain["status"].get("phaseTransitionTimestamps"), None);
}

/// A VM with an instancetype and a preference starts a VMI expanded from their stored
/// ControllerRevisions; without the revisions it does not start, with KubeVirt's reason.
#[test]
fn a_vm_with_an_instancetype_starts_from_its_revisions() {
    let cfg = ClusterConfig::default();
    let mut v = vm(
        Some("Always"),
        None,
        json!({
            "instancetypeRef": {"name": "u1", "controllerRevisionRef": {"name": "vm1-u1-v1beta1-u-1"}},
            "preferenceRef": {"name": "p", "controllerRevisionRef": {"name": "vm1-p-v1beta1-p-1"}},
        }),
    );
    v.spec.instancetype = Some(serde_json::from_value(json!({"name": "u1"})).unwrap());
    v.spec.preference = Some(serde_json::from_value(json!({"name": "p"})).unwrap());
    if let Some(s) = v.spec.template.spec.as_mut() {
        s.domain.resources = None;
    }
    let revision = |name: &str, object: &str, data: Value| {
        serde_json::from_value::<Revision>(json!({
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"instancetype.kubevirt.io/object-name": object}},
            "data": data, "revision": 0,
        }))
        .unwrap()
    };
    let revs = [
        revision(
            "vm1-u1-v1beta1-u-1",
            "u1",
            json!({"kind": "VirtualMachineClusterInstancetype",
            "spec": {"cpu": {"guest": 2}, "memory": {"guest": "1Gi"}}}),
        ),
        revision(
            "vm1-p-v1beta1-p-1",
            "p",
            json!({"kind": "VirtualMachineClusterPreference",
            "spec": {"cpu": {"preferredCPUTopology": "cores"}, "devices": {"preferredDiskBus": "sata"}}}),
        ),
    ];
    let mut w = world(&v, None, &cfg);
    w.revisions = &revs;
    let d = decide_vm(&w);
    assert_eq!(d.plan.error, None);
    let created = d
        .plan
        .writes()
        .find_map(|x| match (&x.op, x.resource.as_str()) {
            (WriteOp::Create { object }, "virtualmachineinstances") => Some(object.clone()),
            _ => None,
        })
        .expect("the VMI is created");
    assert_eq!(
        created["spec"]["domain"]["cpu"]["cores"], 2,
        "the preference's topology"
    );
    assert_eq!(created["spec"]["domain"]["memory"]["guest"], "1Gi");
    assert_eq!(
        created["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"],
        "sata"
    );
    assert_eq!(
        created["metadata"]["annotations"]["kubevirt.io/cluster-instancetype-name"],
        "u1"
    );

    let mut w = world(&v, None, &cfg);
    w.revisions = &revs[1..];
    let d = decide_vm(&w);
    assert!(
        d.plan
            .error_message()
            .is_some_and(|m| m.contains(r#"VirtualMachineClusterInstancetype "u1" not found"#)),
        "{:?}",
        d.plan.error_message()
    );
    assert!(
        !d.plan
            .writes()
            .any(|x| x.resource == "virtualmachineinstances")
    );
}

fn with_references(status: Value) -> VirtualMachine {
    let mut v = vm(Some("Always"), None, status);
    v.spec.instancetype = Some(serde_json::from_value(json!({"name": "u1"})).unwrap());
    v.spec.preference = Some(serde_json::from_value(json!({"name": "p"})).unwrap());
    if let Some(s) = v.spec.template.spec.as_mut() {
        s.domain.resources = None;
    }
    v
}

#[test]
fn references_are_stored_before_the_vm_starts() {
    let cfg = ClusterConfig::default();
    let v = with_references(json!({}));
    let objects = [
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
               "kind": "VirtualMachineClusterInstancetype",
               "metadata": {"name": "u1", "uid": "u", "generation": 1,
                            "labels": {"team": "a"}},
               "spec": {"cpu": {"guest": 2}, "memory": {"guest": "1Gi"}}}),
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
               "kind": "VirtualMachineClusterPreference",
               "metadata": {"name": "p", "uid": "p", "generation": 3},
               "spec": {"cpu": {"preferredCPUTopology": "cores"}}}),
    ];
    let mut w = world(&v, None, &cfg);
    w.instancetype_objects = &objects;
    let d = decide_vm(&w);
    assert_eq!(d.plan.error, None);
    assert_eq!(
        actions(&d),
        ["create controllerrevisions", "create controllerrevisions"],
        "the revisions, and no VMI in the same sync"
    );
    let created: Vec<Value> = d
        .plan
        .writes()
        .filter_map(|x| match &x.op {
            WriteOp::Create { object } => Some(object.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created[0]["metadata"]["name"], "vm1-u1-v1beta1-u-1");
    assert_eq!(
        created[0]["metadata"]["ownerReferences"][0]["uid"],
        "vm-uid"
    );
    assert!(created[0]["data"]["metadata"]["labels"].is_null());
    assert_eq!(created[1]["metadata"]["name"], "vm1-p-v1beta1-p-3");
    let status_patch = d
        .plan
        .writes()
        .find(|x| x.subresource.as_deref() == Some("status"))
        .expect("the status refs are patched");
    let WriteOp::Patch { patch, .. } = &status_patch.op else {
        panic!("a patch")
    };
    assert_eq!(patch[0]["path"], "/status/instancetypeRef");
    assert_eq!(
        patch[0]["value"]["controllerRevisionRef"]["name"],
        "vm1-u1-v1beta1-u-1"
    );
    assert_eq!(patch[1]["path"], "/status/preferenceRef");
    let status = d.status.expect("status written");
    assert_eq!(
        status["instancetypeRef"]["controllerRevisionRef"]["name"],
        "vm1-u1-v1beta1-u-1"
    );

    // A revision already stored (its status patch lost) is not created again.
    let stored: Vec<Revision> = created
        .iter()
        .map(|o| serde_json::from_value(o.clone()).unwrap())
        .collect();
    w.revisions = &stored;
    let d = decide_vm(&w);
    assert_eq!(actions(&d), Vec::<String>::new());
    assert!(
        d.plan
            .writes()
            .any(|x| x.subresource.as_deref() == Some("status"))
    );
}

#[test]
fn a_missing_instancetype_is_a_failure_without_a_vmi() {
    let cfg = ClusterConfig::default();
    let v = with_references(json!({}));
    let d = decide_vm(&world(&v, None, &cfg));
    assert_eq!(actions(&d), Vec::<String>::new());
    let status = d.status.expect("status written");
    let failure = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Failure"))
        .expect("a Failure condition");
    assert_eq!(failure["reason"], "FailedFindInstancetype");
    assert!(failure["message"].as_str().unwrap().contains("\"u1\""));
}

/// A reconcile that both adds the finalizer and stores the firmware UUID sends one VM patch,
/// and that patch stores exactly what the two separate patches stored.
#[test]
fn one_reconcile_sends_one_patch_of_the_vm_object() {
    let cfg = ClusterConfig::default();
    let mut bare = serde_json::to_value(vm(Some("Halted"), None, json!({}))).unwrap();
    bare["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    bare["spec"]["template"]["spec"]["domain"]
        .as_object_mut()
        .unwrap()
        .remove("firmware");
    let bare_vm: VirtualMachine = serde_json::from_value(bare.clone()).unwrap();
    let d = decide_vm(&world(&bare_vm, None, &cfg));
    let object_patches: Vec<_> = d
        .plan
        .writes()
        .filter(|w| w.resource == "virtualmachines" && w.subresource.is_none())
        .collect();
    assert_eq!(object_patches.len(), 1, "{:?}", d.plan.write_list());
    let WriteOp::Patch { patch, .. } = &object_patches[0].op else {
        panic!("not a patch: {:?}", object_patches[0].op);
    };
    let tested: Vec<&str> = patch
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == "test")
        .filter_map(|o| o["path"].as_str())
        .collect();
    assert_eq!(
        tested,
        [
            "/metadata/finalizers",
            "/metadata/generation",
            "/spec/template/spec/domain/firmware"
        ]
    );
    let mut stored = bare.clone();
    crate::patch::apply_json_patch(&mut stored, patch).unwrap();
    assert_eq!(
        stored["metadata"]["finalizers"],
        json!([super::VM_CONTROLLER_FINALIZER])
    );
    let uuid = kvrs_admission::template::firmware_uuid_for_vm("vm1");
    assert_eq!(
        stored["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"],
        json!(uuid)
    );
    // A VM changed in between (another finalizer stored) refuses the whole patch.
    let mut changed = bare;
    changed["metadata"]["finalizers"] = json!(["other"]);
    assert!(crate::patch::apply_json_patch(&mut changed, patch).is_err());
}

/// The VMI a VM starts carries the API-version annotations, so the VMI controller's first
/// reconcile of it creates the launcher pod instead of only storing them (KubeVirt creates the
/// VMI without them and spends a write and a reconcile on them).
#[test]
fn the_started_vmi_needs_no_api_version_write_of_the_vmi_controller() {
    let cfg = ClusterConfig {
        admit_created_vmis: true,
        ..ClusterConfig::default()
    };
    let v = vm(Some("Always"), None, json!({}));
    let d = decide_vm(&world(&v, None, &cfg));
    let mut created = d
        .plan
        .created("virtualmachineinstances")
        .cloned()
        .expect("a VMI is created");
    for a in [
        crate::meta::LATEST_OBSERVED_API_VERSION,
        crate::meta::STORAGE_OBSERVED_API_VERSION,
    ] {
        assert_eq!(created["metadata"]["annotations"][a], "v1", "{created}");
    }
    // As the API server stores it: with a UID.
    created["metadata"]["uid"] = json!("vmi-uid");
    let vmi: VirtualMachineInstance = serde_json::from_value(created).unwrap();
    let world = crate::vmi::VmiWorld {
        vmi: &vmi,
        pods: Vec::new(),
        vms: std::slice::from_ref(&v),
        vm: Some(&v),
        migrations: &[],
        pvcs: &[],
        data_volumes: &[],
        storage_classes: &[],
        storage_profiles: &[],
        expectations: PendingExpectations::default(),
        now: crate::Now::from_unix(NOW),
        config: &cfg,
    };
    let inputs = kvrs_pod::PodInputs::default();
    let render = crate::vmi::launcher_renderer(&cfg, &inputs);
    let first = crate::vmi::decide_vmi(&world, &render, "abcde");
    let writes: Vec<String> = first
        .plan
        .writes()
        .map(|w| format!("{} {}", w.op.verb(), w.resource))
        .collect();
    assert_eq!(
        writes.first().map(String::as_str),
        Some("create pods"),
        "{writes:?}"
    );
}

/// A VM's first start: the finalizer patch and the start revision go out together (neither
/// reads the other); the VMI create waits for both, the status for the VMI create.
#[test]
fn the_first_start_sends_the_finalizer_and_the_revision_together() {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Always"), None, json!({}));
    v.metadata.finalizers = None;
    let d = decide_vm(&world(&v, None, &cfg));
    let writes: Vec<(String, bool)> = d
        .plan
        .writes()
        .map(|w| {
            let sub = w
                .subresource
                .as_deref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            (
                format!("{} {}{sub}", w.op.verb(), w.resource),
                w.alongside_previous,
            )
        })
        .collect();
    let expected = [
        ("patch virtualmachines", false),
        ("create controllerrevisions", true),
        ("create virtualmachineinstances", false),
        ("patch virtualmachines/status", false),
    ];
    let expected: Vec<(String, bool)> = expected.iter().map(|(w, t)| (w.to_string(), *t)).collect();
    assert_eq!(writes, expected);

    // A VM that has its finalizer starts in order: nothing goes out together.
    let started = decide_vm(&world(&vm(Some("Always"), None, json!({})), None, &cfg));
    assert!(started.plan.writes().all(|w| !w.alongside_previous));
}

/// A running VM (its VMI Running) whose spec has no firmware yet, and its decision: the
/// firmware UUID patch.
fn running_vm_without_firmware() -> (VirtualMachine, super::VmDecision) {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Always"), None, json!({}));
    if let Some(s) = v.spec.template.spec.as_mut() {
        s.domain.firmware = None;
    }
    let running = vmi("Running", true);
    let d = decide_vm(&world(&v, Some(&running), &cfg));
    (v, d)
}

/// The firmware UUID patch changes the spec, which the API server stores at the next
/// generation: the status written after it reports that generation (KubeVirt's reads it from
/// its update's answer), instead of a second status write once the VM's watch event shows it.
#[test]
fn the_status_after_the_firmware_patch_reports_the_next_generation() {
    let (_, d) = running_vm_without_firmware();
    assert_eq!(actions(&d), ["patch virtualmachines"]);
    let status = d.status.expect("the status is written");
    assert_eq!(status["desiredGeneration"], 2, "{status}");
    assert_eq!(status["observedGeneration"], 1, "{status}");
}

/// The firmware patch tests the generation it read, so the next generation the status reports
/// is the one the API server stores: a VM whose spec changed meanwhile refuses the patch.
#[test]
fn the_firmware_patch_holds_only_at_the_generation_it_read() {
    let (v, d) = running_vm_without_firmware();
    let patch = d
        .plan
        .writes()
        .find_map(|w| match &w.op {
            WriteOp::Patch { patch, .. } if w.resource == "virtualmachines" => Some(patch.clone()),
            _ => None,
        })
        .expect("the firmware patch");
    let stored = serde_json::to_value(&v).unwrap();
    let mut same = stored.clone();
    crate::patch::apply_json_patch(&mut same, &patch).expect("applies at the generation read");
    assert!(same["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"].is_string());
    let mut changed = stored;
    changed["metadata"]["generation"] = json!(2);
    assert!(crate::patch::apply_json_patch(&mut changed, &patch).is_err());
}

/// A start revision goes out alongside the VM patch only when it records the VM as stored: its
/// generation and its spec. One made from another spec or generation waits for the patch.
#[test]
fn only_a_revision_of_the_stored_vm_goes_alongside_the_patch() {
    let v = vm(Some("Always"), None, json!({}));
    let revision = |generation: i64, spec: &crate::api::VirtualMachineSpec| {
        let spec = serde_json::to_value(spec).unwrap();
        json!({"revision": generation, "data": {"spec": spec}})
    };
    assert!(super::records_stored_vm(&revision(1, &v.spec), &v));
    assert!(!super::records_stored_vm(&revision(2, &v.spec), &v));
    let mut other = v.spec.clone();
    other.run_strategy = Some("Halted".into());
    assert!(!super::records_stored_vm(&revision(1, &other), &v));
    let mut no_generation = v.clone();
    no_generation.metadata.generation = None;
    assert!(!super::records_stored_vm(
        &revision(0, &no_generation.spec),
        &no_generation
    ));
}

/// A new VM without the API-version annotations: one reconcile adds them and the finalizer in
/// one patch that first tests the VM's UID, then creates the start revision and the VMI
/// (KubeVirt's reconcile ends after storing the annotations). Applied to the VM as read, the
/// patch stores both; applied to a VM of the same name created again, it fails, so nothing
/// after it is sent for a VM that is gone.
#[test]
fn a_new_vm_is_annotated_finalized_and_started_in_one_reconcile() {
    let cfg = ClusterConfig::default();
    let mut v = vm(Some("Always"), None, json!({}));
    v.metadata.annotations = None;
    v.metadata.finalizers = None;
    let d = decide_vm(&world(&v, None, &cfg));
    assert_eq!(
        actions(&d),
        [
            "patch virtualmachines",
            "create controllerrevisions",
            "create virtualmachineinstances"
        ]
    );
    let patch = d
        .plan
        .writes()
        .find_map(|w| match &w.op {
            WriteOp::Patch { patch, .. } if w.resource == "virtualmachines" => Some(patch),
            _ => None,
        })
        .expect("the VM patch");
    assert_eq!(
        patch[0],
        json!({"op": "test", "path": "/metadata/uid", "value": "vm-uid"})
    );
    let read = serde_json::to_value(&v).unwrap();
    let mut stored = read.clone();
    crate::patch::apply_json_patch(&mut stored, patch).expect("applies to the VM read");
    assert_eq!(
        stored["metadata"]["finalizers"],
        json!(["kubevirt.io/virtualMachineControllerFinalize"])
    );
    for a in [
        crate::meta::LATEST_OBSERVED_API_VERSION,
        crate::meta::STORAGE_OBSERVED_API_VERSION,
    ] {
        assert_eq!(stored["metadata"]["annotations"][a], "v1", "{stored}");
    }
    let mut recreated = read;
    recreated["metadata"]["uid"] = json!("another-uid");
    assert!(crate::patch::apply_json_patch(&mut recreated, patch).is_err());
}
