//! The branches of KubeVirt v1.9.0's evacuation controller (`evacuation.go`) and pod-eviction
//! admitter (`pod-eviction-admitter.go`), one test each.

use serde_json::{Value, json};

use super::fixtures::*;
use super::*;

fn world<'a>(
    node: &'a Node,
    vmis: &'a [VirtualMachineInstance],
    migrations: &'a [Value],
    pods: &'a [Pod],
) -> EvacuationWorld<'a> {
    EvacuationWorld {
        node,
        vmis: vmis.iter().collect(),
        migrations,
        pods: pods.iter().collect(),
        expectations: PendingExpectations::default(),
        drain_taint_key: names::DEFAULT_DRAIN_TAINT_KEY,
        cluster_strategy: None,
        now: Now::from_unix(NOW),
    }
}

fn suffix(i: usize) -> String {
    format!("s{i:04}")
}

/// The VMIs the plan migrates, by `spec.vmiName`.
fn migrated(plan: &Plan) -> Vec<String> {
    plan.writes()
        .map(|w| match &w.op {
            WriteOp::Create { object } => object["spec"]["vmiName"].as_str().unwrap().to_string(),
            other => panic!("unexpected write {other:?}"),
        })
        .collect()
}

const DRAIN: Option<(&str, &str)> = Some(("kubevirt.io/drain", "NoSchedule"));

#[test]
fn an_untainted_node_without_marked_vmis_is_left_alone() {
    let n = node("node-a", None);
    let vmis = [vmi("a", "node-a", Some("LiveMigrate"), true).build()];
    assert!(
        decide_evacuation(&world(&n, &vmis, &[], &[]), &suffix)
            .actions
            .is_empty()
    );
}

#[test]
fn a_drain_taint_migrates_every_vmi_that_wants_to_move_as_kubevirt_names_it() {
    let n = node("node-a", DRAIN);
    let vmis = [
        vmi("a", "node-a", Some("LiveMigrate"), true).build(),
        vmi("b", "node-a", Some("LiveMigrate"), true).build(),
    ];
    let plan = decide_evacuation(&world(&n, &vmis, &[], &[]), &suffix);
    assert_eq!(migrated(&plan), ["a", "b"]);
    let first = plan.writes().next().unwrap();
    assert_eq!(first.resource, "virtualmachineinstancemigrations");
    assert_eq!(first.namespace, "default");
    assert_eq!(first.name, "kubevirt-evacuation-s0000");
    let WriteOp::Create { object } = &first.op else {
        panic!("a create")
    };
    assert_eq!(
        object["metadata"]["annotations"],
        json!({"kubevirt.io/evacuationMigration": "node-a"})
    );
    assert_eq!(object["spec"]["priority"], "system-critical");
    assert_eq!(
        first.expectation,
        Some(Expectation::Creations {
            key: "node-a".into(),
            count: 1
        })
    );
    assert_eq!(plan.events.len(), 2);
    assert_eq!(plan.events[0].reason, "SuccessfulCreate");
    assert_eq!(
        plan.events[0].message,
        "Created Migration kubevirt-evacuation-s0000"
    );
    assert_eq!(plan.events[0].object.name, "a");
}

#[test]
fn only_a_no_schedule_taint_of_the_configured_key_drains() {
    let vmis = [vmi("a", "node-a", Some("LiveMigrate"), true).build()];
    let no_execute = node("node-a", Some(("kubevirt.io/drain", "NoExecute")));
    assert!(
        decide_evacuation(&world(&no_execute, &vmis, &[], &[]), &suffix)
            .actions
            .is_empty()
    );
    let custom = node("node-a", Some(("example.com/maintenance", "NoSchedule")));
    assert!(
        decide_evacuation(&world(&custom, &vmis, &[], &[]), &suffix)
            .actions
            .is_empty()
    );
    let mut w = world(&custom, &vmis, &[], &[]);
    w.drain_taint_key = "example.com/maintenance";
    assert_eq!(migrated(&decide_evacuation(&w, &suffix)), ["a"]);
}

#[test]
fn the_eviction_strategy_decides_who_moves() {
    let n = node("node-a", DRAIN);
    let vmis = [
        vmi("live", "node-a", Some("LiveMigrate"), true).build(),
        vmi("live-stuck", "node-a", Some("LiveMigrate"), false).build(),
        vmi("if-possible", "node-a", Some("LiveMigrateIfPossible"), true).build(),
        vmi(
            "if-possible-stuck",
            "node-a",
            Some("LiveMigrateIfPossible"),
            false,
        )
        .build(),
        vmi("external", "node-a", Some("External"), true).build(),
        vmi("none", "node-a", Some("None"), true).build(),
        vmi("unset", "node-a", None, true).build(),
    ];
    let plan = decide_evacuation(&world(&n, &vmis, &[], &[]), &suffix);
    assert_eq!(migrated(&plan), ["live", "if-possible"]);
}

#[test]
fn the_clusters_strategy_applies_to_vmis_that_set_none() {
    let n = node("node-a", DRAIN);
    let vmis = [
        vmi("unset", "node-a", None, true).build(),
        vmi("own-none", "node-a", Some("None"), true).build(),
    ];
    let mut w = world(&n, &vmis, &[], &[]);
    w.cluster_strategy = Some("LiveMigrate");
    assert_eq!(migrated(&decide_evacuation(&w, &suffix)), ["unset"]);
}

#[test]
fn vmis_stopping_or_already_migrating_are_skipped() {
    let n = node("node-a", DRAIN);
    let vmis = [
        vmi("done", "node-a", Some("LiveMigrate"), true)
            .phase("Succeeded")
            .build(),
        vmi("deleting", "node-a", Some("LiveMigrate"), true)
            .deleting()
            .build(),
        vmi("in-flight", "node-a", Some("LiveMigrate"), true).build(),
        vmi("failed-before", "node-a", Some("LiveMigrate"), true).build(),
    ];
    let migrations = [
        migration("m1", "in-flight", "Scheduling"),
        migration("m2", "failed-before", "Failed"),
    ];
    let plan = decide_evacuation(&world(&n, &vmis, &migrations, &[]), &suffix);
    assert_eq!(migrated(&plan), ["failed-before"]);
}

#[test]
fn a_vmi_with_two_active_pods_waits_for_the_old_one_to_end() {
    let n = node("node-a", DRAIN);
    let vmis = [
        vmi("two", "node-a", Some("LiveMigrate"), true).build(),
        vmi("one", "node-a", Some("LiveMigrate"), true).build(),
    ];
    let pods = [
        launcher("virt-launcher-two-a", &vmis[0], "node-a", "Running"),
        launcher("virt-launcher-two-b", &vmis[0], "node-b", "Running"),
        launcher("virt-launcher-one-a", &vmis[1], "node-a", "Running"),
        launcher("virt-launcher-one-b", &vmis[1], "node-b", "Succeeded"),
    ];
    let plan = decide_evacuation(&world(&n, &vmis, &[], &pods), &suffix);
    assert_eq!(migrated(&plan), ["one"]);
}

#[test]
fn marked_vmis_on_an_untainted_node_move_until_they_have_left_it() {
    let n = node("node-a", None);
    let vmis = [
        vmi("marked", "node-a", Some("LiveMigrate"), true)
            .marked("node-a")
            .build(),
        // Marked on node-a, now on node-b: it has migrated on eviction already.
        vmi("moved", "node-b", Some("LiveMigrate"), true)
            .marked("node-a")
            .build(),
        vmi("migrating", "node-a", Some("LiveMigrate"), true)
            .marked("node-a")
            .migrating(NOW - 10, None)
            .build(),
        vmi("migrated-back", "node-a", Some("LiveMigrate"), true)
            .marked("node-a")
            .migrating(NOW - 10, Some(NOW - 5))
            .build(),
        vmi("unmarked", "node-a", Some("LiveMigrate"), true).build(),
    ];
    let plan = decide_evacuation(&world(&n, &vmis, &[], &[]), &suffix);
    assert_eq!(migrated(&plan), ["marked", "migrated-back"]);
}

#[test]
fn outstanding_creations_hold_the_node_back() {
    let n = node("node-a", DRAIN);
    let vmis = [vmi("a", "node-a", Some("LiveMigrate"), true).build()];
    let mut w = world(&n, &vmis, &[], &[]);
    w.expectations = PendingExpectations {
        creations: 1,
        deletions: 0,
    };
    assert!(decide_evacuation(&w, &suffix).actions.is_empty());
}

#[test]
fn a_descheduler_eviction_migrates_at_maintenance_priority() {
    let n = node("node-a", None);
    let vmis = [vmi("a", "node-a", Some("LiveMigrate"), true)
        .marked("node-a")
        .annotation(names::EVICTION_SOURCE, "descheduler")
        .build()];
    let plan = decide_evacuation(&world(&n, &vmis, &[], &[]), &suffix);
    let WriteOp::Create { object } = &plan.writes().next().unwrap().op else {
        panic!("a create")
    };
    assert_eq!(object["spec"]["priority"], "system-maintenance");
}

// ---- the eviction webhook ----

fn eviction() -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction",
           "metadata": {"name": "virt-launcher-a-abcde", "namespace": "default"}})
}

fn request<'a>(
    pod: Option<&'a Pod>,
    vmi: Result<&'a VirtualMachineInstance, String>,
    eviction: &'a Value,
) -> EvictionRequest<'a> {
    EvictionRequest {
        pod,
        vmi,
        eviction,
        dry_run: false,
        cluster_strategy: None,
    }
}

const MARKED: &str = "Eviction triggered evacuation of VMI \"default/a\"";

#[test]
fn evictions_of_what_is_not_a_live_launcher_pod_go_through() {
    let v = vmi("a", "node-a", Some("LiveMigrate"), true).build();
    let e = eviction();
    assert_eq!(
        admit_eviction(&request(None, Ok(&v), &e)),
        EvictionVerdict::Allow
    );
    let done = launcher("virt-launcher-a", &v, "node-a", "Succeeded");
    assert_eq!(
        admit_eviction(&request(Some(&done), Ok(&v), &e)),
        EvictionVerdict::Allow
    );
    let mut other = launcher("web", &v, "node-a", "Running");
    other.metadata.labels = None;
    assert_eq!(
        admit_eviction(&request(Some(&other), Ok(&v), &e)),
        EvictionVerdict::Allow
    );
    let mut anonymous = launcher("virt-launcher-a", &v, "node-a", "Running");
    anonymous.metadata.annotations = None;
    assert_eq!(
        admit_eviction(&request(Some(&anonymous), Ok(&v), &e)),
        EvictionVerdict::Allow
    );
}

#[test]
fn a_vmi_that_cannot_be_read_refuses_the_eviction() {
    let v = vmi("a", "node-a", Some("LiveMigrate"), true).build();
    let pod = launcher("virt-launcher-a", &v, "node-a", "Running");
    let e = eviction();
    let gone = "virtualmachineinstances.kubevirt.io \"a\" not found".to_string();
    assert_eq!(
        admit_eviction(&request(Some(&pod), Err(gone), &e)),
        EvictionVerdict::Deny(
            "kubevirt failed getting the vmi: virtualmachineinstances.kubevirt.io \"a\" not found"
                .into()
        )
    );
}

#[test]
fn live_migrate_marks_a_migratable_vmi_and_refuses() {
    let v = vmi("a", "node-a", Some("LiveMigrate"), true).build();
    let pod = launcher("virt-launcher-a", &v, "node-a", "Running");
    let e = eviction();
    assert_eq!(
        admit_eviction(&request(Some(&pod), Ok(&v), &e)),
        EvictionVerdict::Mark {
            namespace: "default".into(),
            name: "a".into(),
            patch: json!([
                {"op": "test", "path": "/metadata/uid", "value": "a-uid"},
                {"op": "add", "path": "/status/evacuationNodeName", "value": "node-a"},
            ]),
            dry_run: false,
            message: MARKED.into(),
        }
    );
    assert_eq!(
        EvictionVerdict::mark_failed("conflict"),
        "kubevirt failed marking the vmi for eviction: conflict"
    );
}

#[test]
fn live_migrate_on_a_vmi_that_cannot_migrate_refuses_without_marking() {
    let v = vmi("a", "node-a", Some("LiveMigrate"), false).build();
    let pod = launcher("virt-launcher-a", &v, "node-a", "Running");
    let e = eviction();
    assert_eq!(
        admit_eviction(&request(Some(&pod), Ok(&v), &e)),
        EvictionVerdict::Deny(
            "VMI a is configured with an eviction strategy but is not live-migratable".into()
        )
    );
}

#[test]
fn live_migrate_if_possible_lets_a_non_migratable_vmi_go() {
    let e = eviction();
    let stuck = vmi("a", "node-a", Some("LiveMigrateIfPossible"), false).build();
    let pod = launcher("virt-launcher-a", &stuck, "node-a", "Running");
    assert_eq!(
        admit_eviction(&request(Some(&pod), Ok(&stuck), &e)),
        EvictionVerdict::Allow
    );
    let able = vmi("a", "node-a", Some("LiveMigrateIfPossible"), true).build();
    assert!(matches!(
        admit_eviction(&request(Some(&pod), Ok(&able), &e)),
        EvictionVerdict::Mark { .. }
    ));
}

#[test]
fn external_marks_even_a_non_migratable_vmi_and_none_lets_it_go() {
    let e = eviction();
    let ext = vmi("a", "node-a", Some("External"), false).build();
    let pod = launcher("virt-launcher-a", &ext, "node-a", "Running");
    assert!(matches!(
        admit_eviction(&request(Some(&pod), Ok(&ext), &e)),
        EvictionVerdict::Mark { .. }
    ));
    let none = vmi("a", "node-a", Some("None"), true).build();
    assert_eq!(
        admit_eviction(&request(Some(&pod), Ok(&none), &e)),
        EvictionVerdict::Allow
    );
    let unset = vmi("a", "node-a", None, true).build();
    assert_eq!(
        admit_eviction(&request(Some(&pod), Ok(&unset), &e)),
        EvictionVerdict::Allow
    );
    let mut r = request(Some(&pod), Ok(&unset), &e);
    r.cluster_strategy = Some("LiveMigrate");
    assert!(matches!(admit_eviction(&r), EvictionVerdict::Mark { .. }));
}

#[test]
fn a_marked_vmi_and_a_target_pod_are_refused_without_a_second_mark() {
    let e = eviction();
    let marked = vmi("a", "node-a", Some("LiveMigrate"), true)
        .marked("node-a")
        .build();
    let pod = launcher("virt-launcher-a", &marked, "node-a", "Running");
    assert_eq!(
        admit_eviction(&request(Some(&pod), Ok(&marked), &e)),
        EvictionVerdict::Deny(format!("Evacuation in progress: {MARKED}"))
    );
    let v = vmi("a", "node-a", Some("LiveMigrate"), true).build();
    let target = launcher("virt-launcher-a-target", &v, "node-b", "Running");
    assert_eq!(
        admit_eviction(&request(Some(&target), Ok(&v), &e)),
        EvictionVerdict::Deny("Eviction request for target Pod".into())
    );
}

#[test]
fn dry_runs_and_descheduler_evictions_shape_the_mark() {
    let mut v = vmi("a", "node-a", Some("LiveMigrate"), true).build();
    v.metadata.annotations = None;
    let pod = launcher("virt-launcher-a", &v, "node-a", "Running");
    let e = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "virt-launcher-a", "annotations": {"requested-by": "sigs.k8s.io/descheduler"}},
        "deleteOptions": {"dryRun": ["All"]}});
    let EvictionVerdict::Mark { patch, dry_run, .. } =
        admit_eviction(&request(Some(&pod), Ok(&v), &e))
    else {
        panic!("marked")
    };
    assert!(dry_run);
    assert_eq!(
        patch[2],
        json!({"op": "add", "path": "/metadata/annotations",
               "value": {"kubevirt.io~1eviction-source": "descheduler"}}),
        "KubeVirt's key, escaped as a JSON pointer"
    );
    let annotated = vmi("a", "node-a", Some("LiveMigrate"), true)
        .annotation("x", "y")
        .build();
    let mut r = request(Some(&pod), Ok(&annotated), &e);
    r.dry_run = true;
    let EvictionVerdict::Mark { patch, .. } = admit_eviction(&r) else {
        panic!("marked")
    };
    assert_eq!(
        patch[2],
        json!({"op": "add", "path": "/metadata/annotations/kubevirt.io~1eviction-source",
               "value": "descheduler"})
    );
}

#[test]
fn an_unreadable_eviction_object_is_refused_with_a_typed_reason() {
    let v = vmi("a", "node-a", Some("LiveMigrate"), true).build();
    let pod = launcher("virt-launcher-a", &v, "node-a", "Running");
    let bad = json!({"deleteOptions": {"dryRun": "All"}});
    let EvictionVerdict::Deny(message) = admit_eviction(&request(Some(&pod), Ok(&v), &bad)) else {
        panic!("refused")
    };
    assert!(
        message.starts_with("failed to parse the eviction object: "),
        "{message}"
    );
    assert_eq!(
        EvictionError::Unparsable(String::new()).label(),
        "eviction_object_unparsable"
    );
}
