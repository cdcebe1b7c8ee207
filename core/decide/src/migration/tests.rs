//! One test per transition of KubeVirt v1.9.0's migration controller, named after the
//! behaviour it pins.

use serde_json::json;

use super::fixtures::*;
use super::*;

// --- a new migration -------------------------------------------------------------------------

#[test]
fn a_new_migration_becomes_pending_and_names_its_source_pod() {
    let d = Scene::new("").decide();
    assert_eq!(
        writes(&d),
        ["patch virtualmachineinstancemigrations/status"]
    );
    let status = d.status.as_ref().unwrap();
    assert_eq!(status["phase"], "Pending");
    assert_eq!(
        status["migrationState"]["sourcePod"],
        "virt-launcher-vmi1-src"
    );
    assert_eq!(
        status["phaseTransitionTimestamps"],
        json!([{"phase": "Pending", "phaseTransitionTimestamp": "2026-01-01T00:00:00Z"}])
    );
    // The status write applies only to the migration as read.
    let w = d.plan.writes().next().unwrap();
    let WriteOp::Patch { patch, .. } = &w.op else {
        panic!("a patch")
    };
    assert_eq!(
        patch[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "10"})
    );
}

#[test]
fn the_api_version_annotations_and_selector_label_come_first() {
    let mut s = Scene::new("");
    s.migration["metadata"]["annotations"] = json!({});
    s.migration["metadata"]["labels"] = json!({});
    let d = s.decide();
    assert_eq!(writes(&d), ["patch virtualmachineinstancemigrations"]);
    let patch = patch_of(&d, "virtualmachineinstancemigrations");
    assert_eq!(patch[0]["path"], "/metadata/resourceVersion");
    assert_eq!(
        patch[2]["value"]["kubevirt.io/latest-observed-api-version"],
        "v1"
    );
    assert_eq!(patch[4]["value"], json!({"kubevirt.io/vmi-name": "vmi1"}));
}

#[test]
fn a_migration_of_a_vmi_that_is_gone_is_deleted() {
    let mut s = Scene::new("Pending");
    s.vmis.clear();
    let d = s.decide();
    assert_eq!(writes(&d), ["delete virtualmachineinstancemigrations"]);
    let WriteOp::Delete { precondition_uid } = &d.plan.write_list()[0].op else {
        panic!()
    };
    assert_eq!(precondition_uid.as_deref(), Some(MIG_UID));
    // ... but only once: a deleting one is left to its finalizer.
    let mut s = Scene::new("Pending").deleted();
    s.vmis.clear();
    assert!(writes(&s.decide()).is_empty());
}

#[test]
fn a_migration_of_a_stopped_vmi_fails() {
    let mut s = Scene::new("Pending");
    s.vmi()["status"]["phase"] = json!("Failed");
    let d = s.decide();
    assert_eq!(new_phase(&d).as_deref(), Some("Failed"));
    assert_eq!(
        events(&d),
        ["Migration failed vmi shutdown during migration."]
    );
}

#[test]
fn a_second_migration_fails_when_another_owns_the_vmi_migration_state() {
    let mut s =
        Scene::new("").vmi_state(json!({"migrationUid": "other-uid", "targetNode": "node-c"}));
    s.others.push(vmim("mig0", "other-uid", "vmi1", "Running"));
    let d = s.decide();
    assert_eq!(new_phase(&d).as_deref(), Some("Failed"));
    assert_eq!(
        events(&d),
        ["VMI is not eligible for migration because another migration job is in progress."]
    );
}

#[test]
fn a_second_migration_takes_over_the_state_of_a_finished_one() {
    let mut s = Scene::new("").vmi_state(json!({"migrationUid": "other-uid", "completed": true}));
    s.others
        .push(vmim("mig0", "other-uid", "vmi1", "Succeeded"));
    assert_eq!(new_phase(&s.decide()).as_deref(), Some("Pending"));
}

#[test]
fn a_second_pending_migration_waits_while_the_first_has_a_target_pod() {
    let mut s = Scene::new("Pending");
    let first = vmim("mig0", "other-uid", "vmi1", "Scheduling");
    s.others.push(first);
    s.pods.push(pod_json(
        "virt-launcher-vmi1-first",
        "vmi-uid",
        Some("node-c"),
        "Pending",
        Some("other-uid"),
    ));
    let d = s.decide();
    assert!(writes(&d).is_empty(), "{:?}", writes(&d));
    assert_eq!(d.plan.queue.after_seconds(), Some(1));
    assert!(d.plan.error.is_none());
}

#[test]
fn a_second_pending_migration_stays_pending_once_the_first_was_handed_off() {
    let mut s = Scene::new("Pending")
        .vmi_state(json!({"migrationUid": "other-uid", "targetNode": "node-c"}));
    s.others.push(vmim("mig0", "other-uid", "vmi1", "Running"));
    let d = s.decide();
    assert!(new_phase(&d).is_none(), "no phase change");
    assert!(!writes(&d).iter().any(|w| w.contains("pods")));
    assert_eq!(
        d.plan.error_message(),
        Some("vmi is ineligible for migration because another migration job is running")
    );
    assert!(d.plan.queue.is_rate_limited());
}

// --- Scheduling, Scheduled and the hand-off --------------------------------------------------

#[test]
fn pending_with_a_target_pod_becomes_scheduling() {
    let d = Scene::new("Pending").target("Pending").decide();
    assert_eq!(new_phase(&d).as_deref(), Some("Scheduling"));
}

#[test]
fn scheduling_becomes_scheduled_when_the_target_pod_runs() {
    assert_eq!(
        new_phase(&Scene::new("Scheduling").target("Pending").decide()),
        None
    );
    let d = Scene::new("Scheduling").target("Running").decide();
    assert_eq!(new_phase(&d).as_deref(), Some("Scheduled"));
}

#[test]
fn scheduled_hands_the_migration_to_virt_handler_through_the_vmi() {
    let mut s = Scene::new("Scheduled").target("Running");
    s.migration["status"]["migrationState"] = json!({"sourcePod": "virt-launcher-vmi1-src"});
    let d = s.decide();
    assert_eq!(writes(&d), ["patch virtualmachineinstances"]);
    assert!(d.handed_off);
    let patch = patch_of(&d, "virtualmachineinstances");
    assert_eq!(
        patch[0],
        json!({"op": "test", "path": "/status/migrationState", "value": null})
    );
    assert_eq!(patch[1]["op"], "add");
    let state = &patch[1]["value"];
    assert_eq!(state["migrationUid"], MIG_UID);
    assert_eq!(state["sourceNode"], "node-a");
    assert_eq!(state["targetNode"], "node-b");
    assert_eq!(state["targetPod"], "virt-launcher-vmi1-tgt");
    assert_eq!(state["sourcePod"], "virt-launcher-vmi1-src");
    assert_eq!(
        state["migrationConfiguration"]["parallelMigrationsPerCluster"],
        5
    );
    assert_eq!(
        state["migrationConfiguration"]["bandwidthPerMigration"], "0",
        "KubeVirt's default 0Mi, as Go writes the quantity"
    );
    assert_eq!(patch[3]["path"], "/metadata/labels");
    assert_eq!(
        patch[3]["value"]["kubevirt.io/migrationTargetNodeName"],
        "node-b"
    );
    assert_eq!(
        events(&d),
        ["Migration target pod is ready for preparation by virt-handler."]
    );
}

#[test]
fn the_hand_off_replaces_the_state_a_finished_migration_left() {
    let mut s = Scene::new("Scheduled")
        .target("Running")
        .vmi_state(json!({"migrationUid": "other-uid", "completed": true, "targetNode": "node-c"}));
    s.others
        .push(vmim("mig0", "other-uid", "vmi1", "Succeeded"));
    let d = s.decide();
    let patch = patch_of(&d, "virtualmachineinstances");
    assert_eq!(
        patch[0],
        json!({"op": "test", "path": "/status/migrationState/migrationUid", "value": "other-uid"})
    );
    assert_eq!(patch[1]["op"], "replace");
    assert_eq!(patch[1]["value"]["migrationUid"], MIG_UID);
    assert!(
        patch[1]["value"].get("completed").is_none(),
        "a fresh state"
    );
}

#[test]
fn the_handler_phases_follow_the_vmi_migration_state() {
    let table = [
        (
            "Scheduled",
            json!({"migrationUid": MIG_UID, "targetNode": "node-b"}),
            Some("PreparingTarget"),
        ),
        (
            "PreparingTarget",
            json!({"migrationUid": MIG_UID, "targetNode": "node-b"}),
            None,
        ),
        (
            "PreparingTarget",
            json!({"migrationUid": MIG_UID, "targetNode": "node-b", "targetNodeAddress": "10.0.0.2"}),
            Some("TargetReady"),
        ),
        (
            "TargetReady",
            json!({"migrationUid": MIG_UID, "targetNode": "node-b"}),
            None,
        ),
        (
            "TargetReady",
            json!({"migrationUid": MIG_UID, "targetNode": "node-b", "startTimestamp": "2026-01-01T00:00:00Z"}),
            Some("Running"),
        ),
        (
            "Running",
            json!({"migrationUid": MIG_UID, "startTimestamp": "2026-01-01T00:00:00Z", "completed": true}),
            Some("Succeeded"),
        ),
        (
            "Running",
            json!({"migrationUid": MIG_UID, "completed": true, "failed": true}),
            Some("Failed"),
        ),
    ];
    for (phase, state, want) in table {
        let d = Scene::new(phase)
            .target("Running")
            .vmi_state(state.clone())
            .decide();
        assert_eq!(new_phase(&d).as_deref(), want, "{phase} with {state}");
    }
}

#[test]
fn a_completed_migration_waits_for_a_pending_hotplug() {
    let mut s = Scene::new("Running")
        .target("Running")
        .vmi_state(json!({"migrationUid": MIG_UID, "completed": true}));
    s.vmi()["status"]["conditions"] = json!([{"type": "HotVCPUChange", "status": "True"}]);
    assert_eq!(new_phase(&s.decide()), None);
}

#[test]
fn running_marks_the_target_pod_with_the_domain_ready_time() {
    let d = Scene::new("Running")
        .target("Running")
        .vmi_state(json!({"migrationUid": MIG_UID, "targetNodeDomainReadyTimestamp": "2026-01-01T00:00:00Z"}))
        .decide();
    let patch = patch_of(&d, "pods");
    assert_eq!(
        patch.as_array().unwrap().last().unwrap(),
        &json!({"op": "add", "path": "/metadata/annotations/kubevirt.io~1migration-target-ready-timestamp",
                "value": "2026-01-01 00:00:00 +0000 UTC"})
    );
}

#[test]
fn a_final_migration_keeps_the_vmi_record_and_drops_its_finalizer() {
    let d = Scene::new("Succeeded")
        .vmi_state(json!({"migrationUid": MIG_UID, "completed": true, "targetNode": "node-b"}))
        .decide();
    assert_eq!(
        writes(&d),
        [
            "patch virtualmachineinstancemigrations/status",
            "patch virtualmachineinstancemigrations"
        ]
    );
    assert_eq!(
        d.status.as_ref().unwrap()["migrationState"]["targetNode"],
        "node-b"
    );
    assert_eq!(
        patch_of(&d, "virtualmachineinstancemigrations")[1],
        json!({"op": "replace", "path": "/metadata/finalizers", "value": []})
    );
}

// --- cancellation and failures ---------------------------------------------------------------

#[test]
fn a_migration_deleted_before_the_hand_off_fails_and_deletes_its_target() {
    let d = Scene::new("Scheduling")
        .target("Pending")
        .deleted()
        .decide();
    assert_eq!(
        writes(&d),
        [
            "delete pods",
            "patch virtualmachineinstancemigrations/status"
        ]
    );
    let status = d.status.as_ref().unwrap();
    assert_eq!(status["phase"], "Failed");
    assert_eq!(status["conditions"][0]["type"], "migrationAbortRequested");
    assert_eq!(
        events(&d),
        [
            "migration canceled and pod default/virt-launcher-vmi1-tgt is deleted",
            "Migration failed due to being canceled"
        ]
    );
}

#[test]
fn a_cancelled_migration_loses_its_finalizer_once_failed() {
    let d = Scene::new("Failed").deleted().decide();
    assert_eq!(writes(&d), ["patch virtualmachineinstancemigrations"]);
}

#[test]
fn a_migration_deleted_while_running_asks_the_source_to_abort() {
    let d = Scene::new("Running")
        .target("Running")
        .vmi_state(json!({"migrationUid": MIG_UID, "startTimestamp": "2026-01-01T00:00:00Z"}))
        .deleted()
        .decide();
    assert_eq!(
        writes(&d),
        [
            "patch virtualmachineinstances",
            "patch virtualmachineinstancemigrations/status"
        ]
    );
    assert_eq!(
        patch_of(&d, "virtualmachineinstances"),
        &json!([{"op": "test", "path": "/status/migrationState/migrationUid", "value": MIG_UID},
                {"op": "add", "path": "/status/migrationState/abortRequested", "value": true}])
    );
    assert_eq!(d.status.as_ref().unwrap()["phase"], "Running");
    assert_eq!(
        d.status.as_ref().unwrap()["conditions"][0]["type"],
        "migrationAbortRequested"
    );
}

#[test]
fn a_target_pod_that_dies_fails_the_migration() {
    let d = Scene::new("Scheduling").target("Failed").decide();
    assert_eq!(new_phase(&d).as_deref(), Some("Failed"));
    assert_eq!(
        events(&d),
        ["Migration failed because target pod shutdown during migration"]
    );
}

#[test]
fn a_target_pod_that_disappears_fails_the_migration() {
    let d = Scene::new("Scheduled").decide();
    assert_eq!(new_phase(&d).as_deref(), Some("Failed"));
    assert_eq!(
        events(&d),
        ["Migration target pod was removed during active migration."]
    );
}

#[test]
fn a_target_lost_before_the_migration_started_is_marked_failed_on_the_vmi() {
    let d = Scene::new("PreparingTarget")
        .vmi_state(json!({"migrationUid": MIG_UID, "targetNode": "node-b"}))
        .decide();
    assert_eq!(
        patch_of(&d, "virtualmachineinstances"),
        &json!([
            {"op": "test", "path": "/status/migrationState/migrationUid", "value": MIG_UID},
            {"op": "add", "path": "/status/migrationState/failed", "value": true},
            {"op": "add", "path": "/status/migrationState/completed", "value": true},
            {"op": "add", "path": "/status/migrationState/endTimestamp", "value": "2026-01-01T00:00:00Z"},
            {"op": "add", "path": "/status/migrationState/startTimestamp", "value": "2026-01-01T00:00:00Z"},
            {"op": "add", "path": "/status/migrationState/failureReason", "value": "Target pod is down"},
        ])
    );
    assert_eq!(new_phase(&d).as_deref(), Some("Failed"));
}

#[test]
fn a_cleared_or_taken_over_migration_state_fails_a_handed_off_migration() {
    let d = Scene::new("Running").target("Running").decide();
    assert_eq!(
        events(&d),
        ["VMI's migration state was cleared during the active migration."]
    );
    let d = Scene::new("Running")
        .target("Running")
        .vmi_state(json!({"migrationUid": "other-uid"}))
        .decide();
    assert_eq!(
        events(&d),
        ["VMI's migration state was taken over by another migration job during active migration."]
    );
}

#[test]
fn a_target_pod_unschedulable_for_five_minutes_is_deleted() {
    let mut s = Scene::new("Scheduling").target("Pending");
    s.pods[1]["status"]["conditions"] =
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
    // Created at 23:55, now 00:00: exactly five minutes.
    let d = s.decide();
    assert_eq!(writes(&d), ["delete pods"]);
    assert_eq!(
        events(&d),
        [
            "Migration target pod for VMI [default/vmi1] is currently unschedulable.",
            "unschedulable pod default/virt-launcher-vmi1-tgt timeout period exceeded"
        ]
    );
    // A minute earlier it is looked at again when the timeouts expire.
    s.now -= 60;
    let d = s.decide();
    assert!(writes(&d).is_empty());
    assert_eq!(d.plan.queue.after_seconds(), Some(60));
}

#[test]
fn old_final_migrations_beyond_five_are_collected_with_their_leftover_pod() {
    let mut s = Scene::new("Succeeded");
    for i in 0..6 {
        let mut m = vmim(&format!("old{i}"), &format!("old-uid{i}"), "vmi1", "Failed");
        m["metadata"]["creationTimestamp"] = json!(format!("2025-12-0{}T00:00:00Z", i + 1));
        m["status"]["migrationState"] = json!({"failed": true, "targetPod": format!("tgt{i}")});
        s.others.push(m);
    }
    s.pods.push(pod_json(
        "tgt0",
        "vmi-uid",
        Some("node-c"),
        "Failed",
        Some("old-uid0"),
    ));
    let d = s.decide();
    let deletes: Vec<_> = d
        .plan
        .writes()
        .filter(|w| w.op.verb() == "delete")
        .map(|w| format!("{} {}", w.resource, w.name))
        .collect();
    // Seven final migrations: the two oldest go; only old0's pod is in the cache.
    assert_eq!(
        deletes,
        [
            "pods tgt0",
            "virtualmachineinstancemigrations old0",
            "virtualmachineinstancemigrations old1"
        ]
    );
}

#[test]
fn a_decentralized_migration_is_refused_without_retry() {
    let mut s = Scene::new("");
    s.migration["spec"]["sendTo"] = json!({"migrationID": "x", "connectURL": "y"});
    let d = s.decide();
    assert!(writes(&d).is_empty());
    assert_eq!(
        d.plan.error.as_ref().map(DecideError::label),
        Some("invalid_object")
    );
    assert!(!d.plan.queue.requeued());
}

/// KubeVirt's `handleUtilityVolumes` (tests/migration_oracle.rs found kvrs ignoring it): a
/// Pending migration of a VMI with utility volumes waits — condition, event, a look again when
/// its time runs out, no target pod — and fails once the time has passed since its creation.
#[test]
fn a_pending_migration_waits_for_utility_volumes_then_fails() {
    let utility = |s: &mut Scene| {
        s.vmi()["spec"]["utilityVolumes"] = json!([{"name": "u1", "claimName": "u1"}]);
    };
    // Created an hour ago; 4000 s allowed: 400 s left.
    let mut s = Scene::new("Pending");
    utility(&mut s);
    s.migration["metadata"]["annotations"]["kubevirt.io/migrationUtilityVolumesTimeoutSeconds"] =
        json!("4000");
    let d = s.decide();
    assert_eq!(
        writes(&d),
        ["patch virtualmachineinstancemigrations/status"]
    );
    let status = d.status.as_ref().unwrap();
    assert_eq!(status["phase"], "Pending");
    let c = &status["conditions"][0];
    assert_eq!(c["type"], "migrationBlockedByUtilityVolumes");
    assert_eq!(c["reason"], "UtilityVolumesPresent");
    assert_eq!(
        c["message"],
        "Migration is waiting for utility volumes to detach. Will timeout in 400 seconds."
    );
    assert_eq!(
        events(&d),
        [
            "Migration waiting for utility volumes to detach from VMI [default/vmi1]. Will timeout in 400 seconds."
        ]
    );
    assert_eq!(
        d.plan.queue,
        Requeue(vec![
            crate::QueueOp::AddAfter { delay_seconds: 400 },
            crate::QueueOp::Forget
        ])
    );

    // The default 150 s are long gone.
    let mut s = Scene::new("Pending");
    utility(&mut s);
    let d = s.decide();
    assert_eq!(new_phase(&d).as_deref(), Some("Failed"));
    assert_eq!(
        events(&d),
        [
            "Migration timeout waiting for utility volumes to detach from VMI [default/vmi1]. Utility volumes still present after 3600 seconds."
        ]
    );
    assert_eq!(d.plan.queue, Requeue::forget());

    // Detached: the condition goes, the migration moves on.
    let mut s = Scene::new("Pending").target("Pending");
    s.migration["status"]["conditions"] = json!([{"type": "migrationBlockedByUtilityVolumes",
        "status": "True", "reason": "UtilityVolumesPresent"}]);
    let d = s.decide();
    let status = d.status.as_ref().unwrap();
    assert_eq!(status["phase"], "Scheduling");
    assert_eq!(status["conditions"], json!([]));
}
