//! One test per step of the source and target controllers.

use serde_json::json;

use super::super::plan::{Decision, LauncherCall, NodeStep};
use super::super::{HandlerConfig, NodeFacts};
use super::fixtures::*;
use super::{MigrationOptions, OptionsError, build_options, parse_factor};
use crate::api::VirtualMachineInstance;

fn migrate_calls(plan: &super::super::HandlerPlan) -> Vec<MigrationOptions> {
    plan.launcher_calls()
        .into_iter()
        .filter_map(|c| match c {
            LauncherCall::MigrateVirtualMachine(o) => Some(o),
            _ => None,
        })
        .collect()
}

fn state(vmi: &VirtualMachineInstance) -> serde_json::Value {
    serde_json::to_value(vmi).expect("json")["status"]["migrationState"].clone()
}

#[test]
fn source_waits_for_the_target_ports() {
    let v = migrating_vmi();
    let plan = run(
        Side::Source,
        &v,
        Some(&domain("Running", "Unknown", None)),
        &NodeFacts::default(),
    );
    assert_eq!(plan.decision, Decision::MigrationSourceSync);
    assert!(plan.launcher_calls().is_empty());
    assert!(plan.node_steps().is_empty());
    assert_eq!(plan.requeue_after(), Some(1));
    assert!(write_patch(&plan).is_none());
}

#[test]
fn source_with_target_address_starts_proxy_and_migrates_once() {
    let v = published(&migrating_vmi());
    let d = domain("Running", "Unknown", None);
    let plan = run(Side::Source, &v, Some(&d), &NodeFacts::default());
    assert_eq!(
        plan.node_steps(),
        vec![&NodeStep::StartSourceProxy {
            key: UID.into(),
            target_address: "10.0.0.2".into(),
            ports: [("40001".to_string(), 0), ("40002".to_string(), 49152)]
                .into_iter()
                .collect(),
        }]
    );
    let opts = migrate_calls(&plan);
    assert_eq!(opts.len(), 1);
    let o = serde_json::to_value(&opts[0]).expect("json");
    assert_eq!(
        o,
        json!({"Bandwidth": "0", "ProgressTimeout": 150, "CompletionTimeoutPerGiB": 150,
               "MaxDowntimeMs": 900, "UnsafeMigration": false, "AllowAutoConverge": false,
               "AllowPostCopy": false, "ParallelMigrationThreads": 8,
               "AllowWorkloadDisruption": false, "StallDetectorOptions": null,
               "Compression": null})
    );
    assert!(events(&plan).contains(&(
        "Migrating".into(),
        "VirtualMachineInstance is migrating.".into()
    )));

    // Once the launcher recorded the start, the next sync does not migrate again.
    let d = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:59Z"})),
    );
    let again = run(Side::Source, &v, Some(&d), &NodeFacts::default());
    assert!(migrate_calls(&again).is_empty());
    assert_eq!(
        state(&apply(&v, &again))["startTimestamp"],
        json!("2026-01-01T00:09:59Z")
    );
}

#[test]
fn options_follow_the_vmi_migration_configuration() {
    let v = with(&published(&migrating_vmi()), |v| {
        v["status"]["migrationState"]["migrationConfiguration"] = json!({
            "bandwidthPerMigration": "64Mi", "progressTimeout": 30, "completionTimeoutPerGiB": 10,
            "unsafeMigrationOverride": true, "allowAutoConverge": true, "allowPostCopy": true,
            "maxDowntimeMs": 300,
            "experimental": {"compression": "zstd", "stallDetector": {"stallMargin": 10, "ewmaAlpha": "0.25"}}
        });
        v["spec"]["domain"]["resources"] = json!({"limits": {"cpu": "2"}});
    });
    let mut config = HandlerConfig::default();
    config.feature_gates.push("MigrationStallDetection".into());
    let plan = run_at(
        Side::Source,
        SRC,
        NOW,
        Some(&v),
        Some(&domain("Running", "Unknown", None)),
        &NodeFacts::default(),
        &config,
    );
    let o = serde_json::to_value(&migrate_calls(&plan)[0]).expect("json");
    assert_eq!(o["Bandwidth"], "64Mi");
    assert_eq!(o["ProgressTimeout"], 30);
    assert_eq!(o["CompletionTimeoutPerGiB"], 10);
    assert_eq!(o["MaxDowntimeMs"], 300);
    assert_eq!(o["UnsafeMigration"], true);
    assert_eq!(o["AllowAutoConverge"], true);
    assert_eq!(o["AllowPostCopy"], true);
    // allowWorkloadDisruption unset: follows allowPostCopy.
    assert_eq!(o["AllowWorkloadDisruption"], true);
    // A CPU limit leaves no room for multifd threads.
    assert_eq!(o["ParallelMigrationThreads"], json!(null));
    assert_eq!(o["Compression"], "zstd");
    let sd = &o["StallDetectorOptions"];
    assert_eq!(sd["StallMargin"], 0.1);
    assert_eq!(sd["EwmaAlpha"], 0.25);
    assert_eq!(sd["StallProgressTimeout"], 40);
    assert_eq!(sd["SwitchoverTimeout"], 60);
    assert_eq!(sd["PrecopyPossibleFactor"], 1.5);
    assert_eq!(sd["PatienceWindowDecayFactor"], 0.5);
    assert_eq!(sd["SearchLocalMinima"], true);
    assert_eq!(sd["CompletionTimeoutFactor"], 2.0);
}

#[test]
fn bad_migration_configuration_is_a_typed_error_naming_the_field() {
    let v = with(&published(&migrating_vmi()), |v| {
        v["status"]["migrationState"]["migrationConfiguration"] =
            json!({"bandwidthPerMigration": "1Gi"});
    });
    assert_eq!(
        build_options(&v, None, false),
        Err(OptionsError::Missing(
            "status.migrationState.migrationConfiguration.allowPostCopy"
        ))
    );
    let plan = run(
        Side::Source,
        &v,
        Some(&domain("Running", "Unknown", None)),
        &NodeFacts::default(),
    );
    assert!(migrate_calls(&plan).is_empty());
    let err = plan.plan.error.as_ref().expect("sync error").to_string();
    assert!(err.contains("allowPostCopy"), "{err}");
    assert!(parse_factor("0.1234", "f").is_err());
    assert!(parse_factor("NaN", "f").is_err());
    assert_eq!(parse_factor(" 1.5 ", "f"), Ok(1.5));
}

#[test]
fn source_copies_progress_from_the_domain_record() {
    let v = published(&migrating_vmi());
    let d = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z", "Mode": "PostCopy"})),
    );
    let plan = run(Side::Source, &v, Some(&d), &NodeFacts::default());
    let after = apply(&v, &plan);
    assert_eq!(state(&after)["startTimestamp"], "2026-01-01T00:09:00Z");
    assert_eq!(state(&after)["mode"], "PostCopy");
    let patch = write_patch(&plan).expect("write");
    assert!(
        patch
            .as_array()
            .expect("ops")
            .iter()
            .any(|o| o["op"] == "test"
                && o["path"] == "/status/migrationState/migrationUid"
                && o["value"] == MIG)
    );

    // A record of another migration is ignored.
    let other = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": "old", "StartTimestamp": "2026-01-01T00:01:00Z"})),
    );
    let plan = run(Side::Source, &v, Some(&other), &NodeFacts::default());
    assert!(write_patch(&plan).is_none());
}

#[test]
fn source_records_a_failed_migration() {
    let v = with(&published(&migrating_vmi()), |v| {
        v["status"]["migrationState"]["startTimestamp"] = json!("2026-01-01T00:09:00Z");
    });
    let d = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z",
                    "EndTimestamp": "2026-01-01T00:09:30Z", "Failed": true,
                    "FailureReason": "job aborted", "Mode": "PreCopy"})),
    );
    let plan = run(Side::Source, &v, Some(&d), &NodeFacts::default());
    let m = state(&apply(&v, &plan));
    assert_eq!(m["failed"], true);
    assert_eq!(m["completed"], true);
    assert_eq!(m["endTimestamp"], "2026-01-01T00:09:30Z");
    assert_eq!(m["failureReason"], "job aborted");
    assert!(events(&plan).contains(&(
        "Migrated".into(),
        format!("VirtualMachineInstance migration uid {MIG} failed. reason:job aborted")
    )));
    // The guest keeps running here: the phase is untouched.
    assert_eq!(
        apply(&v, &plan).status.and_then(|s| s.phase).as_deref(),
        Some("Running")
    );
}

#[test]
fn source_done_stops_the_proxy() {
    let v = with(&published(&migrating_vmi()), |v| {
        let m = &mut v["status"]["migrationState"];
        m["endTimestamp"] = json!("2026-01-01T00:09:30Z");
        m["completed"] = json!(true);
    });
    let plan = run(
        Side::Source,
        &v,
        Some(&domain("Shutoff", "Migrated", None)),
        &NodeFacts::default(),
    );
    assert_eq!(plan.decision, Decision::MigrationSourceCleanup);
    assert_eq!(
        plan.node_steps(),
        vec![&NodeStep::StopSourceProxy { key: UID.into() }]
    );
}

#[test]
fn source_abort_cancels_once() {
    let v = with(&published(&migrating_vmi()), |v| {
        let m = &mut v["status"]["migrationState"];
        m["startTimestamp"] = json!("2026-01-01T00:09:00Z");
        m["abortRequested"] = json!(true);
    });
    let d = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z"})),
    );
    let plan = run(Side::Source, &v, Some(&d), &NodeFacts::default());
    assert_eq!(
        plan.launcher_calls(),
        vec![LauncherCall::CancelVirtualMachineMigration]
    );
    assert!(events(&plan).contains(&(
        "Migrating".into(),
        "VirtualMachineInstance is aborting migration.".into()
    )));
    // The launcher reports the abort under way: no second cancel.
    let d = domain(
        "Running",
        "Unknown",
        Some(
            json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z", "AbortStatus": "Aborting"}),
        ),
    );
    assert!(
        run(Side::Source, &v, Some(&d), &NodeFacts::default())
            .launcher_calls()
            .is_empty()
    );
}

#[test]
fn source_fails_the_vmi_when_the_target_never_reports_the_domain() {
    let v = with(&published(&migrating_vmi()), |v| {
        v["status"]["migrationState"]["endTimestamp"] = json!("2026-01-01T00:08:00Z");
    });
    let d = domain("Shutoff", "Migrated", None);
    let plan = run(Side::Source, &v, Some(&d), &NodeFacts::default());
    let after = apply(&v, &plan);
    assert_eq!(
        after.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    assert_eq!(state(&after)["failed"], true);

    // Within the 60 s window it waits.
    let plan = run_at(
        Side::Source,
        SRC,
        "2026-01-01T00:08:30Z",
        Some(&v),
        Some(&d),
        &NodeFacts::default(),
        &HandlerConfig::default(),
    );
    assert!(write_patch(&plan).is_none());
    assert_eq!(plan.requeue_after(), Some(30));
}

#[test]
fn target_prepares_syncs_and_starts_its_proxy() {
    let v = migrating_vmi();
    let plan = run(Side::Target, &v, None, &NodeFacts::default());
    assert_eq!(plan.decision, Decision::MigrationTargetSync);
    let steps: Vec<&str> = plan.node_steps().iter().map(|s| s.name()).collect();
    assert_eq!(
        steps,
        [
            "mountContainerDisks",
            "mountHotplugVolumes",
            "setupNetworks",
            "claimDevices",
            "startTargetProxy"
        ]
    );
    assert_eq!(
        plan.launcher_calls(),
        vec![LauncherCall::SyncMigrationTarget]
    );
    assert!(plan.node_steps().contains(&&NodeStep::StartTargetProxy {
        key: UID.into(),
        sockets: vec![
            "libvirt/virtqemud-sock".into(),
            format!("kubevirt/migrationproxy/{UID}-49152-source.sock"),
        ],
    }));
    // Sync comes before the proxy.
    let order: Vec<String> = plan.plan.actions.iter().map(|a| a.label()).collect();
    let sync = order
        .iter()
        .position(|l| l == "SyncMigrationTarget")
        .expect("sync");
    let proxy = order
        .iter()
        .position(|l| l == "startTargetProxy")
        .expect("proxy");
    assert!(sync < proxy);
    assert!(events(&plan).contains(&(
        "PreparingTarget".into(),
        "VirtualMachineInstance Migration Target Prepared.".into()
    )));
    assert_eq!(plan.requeue_after(), Some(1));
}

#[test]
fn target_publishes_its_address_and_ports_once_listening() {
    let v = migrating_vmi();
    let plan = run(Side::Target, &v, None, &listening());
    // Prepared already: no second SyncMigrationTarget.
    assert!(plan.launcher_calls().is_empty());
    let after = apply(&v, &plan);
    let m = state(&after);
    assert_eq!(m["targetNodeAddress"], "10.0.0.2");
    assert_eq!(
        m["targetDirectMigrationNodePorts"],
        json!({"40001": 0, "40002": 49152})
    );
    assert!(events(&plan).iter().any(|(r, m)| r == "PreparingTarget"
        && m == "Migration Target is listening at 10.0.0.2, on ports: 40001,40002"));
    // Published: nothing more to write.
    assert!(write_patch(&run(Side::Target, &after, None, &listening())).is_none());
}

#[test]
fn target_detects_the_incoming_domain_then_its_start() {
    let v = published(&migrating_vmi());
    let paused = domain(
        "Paused",
        "Migration",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z"})),
    );
    let plan = run(Side::Target, &v, Some(&paused), &listening());
    let after = apply(&v, &plan);
    assert_eq!(state(&after)["targetNodeDomainDetected"], true);
    assert!(
        state(&after)
            .get("targetNodeDomainReadyTimestamp")
            .is_none()
    );

    let running = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z"})),
    );
    let plan = run(Side::Target, &after, Some(&running), &listening());
    let after = apply(&after, &plan);
    assert_eq!(state(&after)["targetNodeDomainReadyTimestamp"], NOW);
    // Not the owner yet: the launcher has not recorded the end.
    assert_eq!(
        after.status.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(SRC)
    );
}

#[test]
fn target_takes_over_and_finalizes_when_the_domain_runs_here() {
    let v = with(&published(&migrating_vmi()), |v| {
        let m = &mut v["status"]["migrationState"];
        m["startTimestamp"] = json!("2026-01-01T00:09:00Z");
        m["targetNodeDomainDetected"] = json!(true);
    });
    let d = domain(
        "Running",
        "Unknown",
        Some(
            json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z", "EndTimestamp": "2026-01-01T00:09:40Z"}),
        ),
    );
    let plan = run(Side::Target, &v, Some(&d), &listening());
    let after = apply(&v, &plan);
    let s = after.status.as_ref().expect("status");
    assert_eq!(s.node_name.as_deref(), Some(DST));
    assert_eq!(s.migration_transport.as_deref(), Some("Unix"));
    assert_eq!(
        after.metadata.labels.as_ref().expect("labels")["kubevirt.io/nodeName"],
        DST
    );
    assert_eq!(state(&after)["endTimestamp"], "2026-01-01T00:09:40Z");
    assert!(events(&plan).contains(&(
        "Migrated".into(),
        format!("The VirtualMachineInstance migrated to node {DST}.")
    )));
    let patch = write_patch(&plan).expect("write");
    assert!(
        patch
            .as_array()
            .expect("ops")
            .iter()
            .any(|o| o["op"] == "test" && o["path"] == "/status/nodeName" && o["value"] == SRC)
    );

    // Next round: finalize, then completed.
    let plan = run(Side::Target, &after, Some(&d), &listening());
    assert_eq!(
        plan.launcher_calls(),
        vec![LauncherCall::FinalizeVirtualMachineMigration]
    );
    let done = apply(&after, &plan);
    assert_eq!(state(&done)["completed"], true);

    // Final cleanup: finalize (idempotent in the launcher), close, stop proxy, drop the label.
    let plan = run(Side::Target, &done, Some(&d), &listening());
    assert_eq!(plan.decision, Decision::MigrationTargetFinalCleanup);
    assert_eq!(
        plan.launcher_calls(),
        vec![LauncherCall::FinalizeVirtualMachineMigration]
    );
    assert!(
        plan.node_steps()
            .contains(&&NodeStep::StopTargetProxy { key: UID.into() })
    );
    let cleaned = apply(&done, &plan);
    assert!(
        !cleaned
            .metadata
            .labels
            .as_ref()
            .expect("labels")
            .contains_key("kubevirt.io/migrationTargetNodeName")
    );
    // No longer a target: nothing more.
    let plan = run(Side::Target, &cleaned, Some(&d), &listening());
    assert_eq!(plan.decision, Decision::MigrationNotInvolved);
}

#[test]
fn target_marks_an_aborted_migration_failed_and_cleans_up() {
    let v = with(&published(&migrating_vmi()), |v| {
        v["status"]["migrationState"]["startTimestamp"] = json!("2026-01-01T00:09:00Z");
    });
    let d = domain(
        "Paused",
        "Migration",
        Some(
            json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z", "EndTimestamp": "2026-01-01T00:09:40Z"}),
        ),
    );
    let plan = run(Side::Target, &v, Some(&d), &listening());
    let after = apply(&v, &plan);
    assert_eq!(state(&after)["failed"], true);
    assert_eq!(
        after.status.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(SRC)
    );
    let plan = run(Side::Target, &after, Some(&d), &listening());
    assert_eq!(
        plan.launcher_calls(),
        vec![LauncherCall::SignalTargetPodCleanup]
    );
    assert!(
        plan.node_steps()
            .contains(&&NodeStep::Cleanup { uid: UID.into() })
    );
}

#[test]
fn target_ignores_vmis_labelled_for_another_node() {
    let v = migrating_vmi();
    let plan = run_at(
        Side::Target,
        "elsewhere",
        NOW,
        Some(&v),
        None,
        &NodeFacts::default(),
        &HandlerConfig::default(),
    );
    assert_eq!(plan.decision, Decision::MigrationNotInvolved);
    assert!(plan.plan.actions.is_empty());
}

#[test]
fn proxy_start_failure_is_reported() {
    let v = published(&migrating_vmi());
    let mut facts = NodeFacts::default();
    facts.migration.source_proxy_error = Some("tls: bad certificate".into());
    let plan = run(
        Side::Source,
        &v,
        Some(&domain("Running", "Unknown", None)),
        &facts,
    );
    assert!(migrate_calls(&plan).is_empty());
    assert!(
        plan.plan
            .error
            .as_ref()
            .expect("err")
            .to_string()
            .contains("failed to handle migration proxy: tls: bad certificate")
    );
}

#[test]
fn only_the_node_named_in_the_label_runs_the_source_controller() {
    let v = published(&migrating_vmi());
    let d = domain("Running", "Unknown", None);
    for node in [DST, "elsewhere"] {
        let plan = run_at(
            Side::Source,
            node,
            NOW,
            Some(&v),
            Some(&d),
            &NodeFacts::default(),
            &HandlerConfig::default(),
        );
        assert_eq!(plan.decision, Decision::MigrationNotInvolved, "{node}");
        assert!(plan.plan.actions.is_empty(), "{node}");
    }
}

#[test]
fn the_vm_controller_still_leaves_the_migration_to_these_controllers() {
    let v = with(&published(&migrating_vmi()), |v| {
        v["status"]["migrationState"]["startTimestamp"] = json!("2026-01-01T00:09:00Z");
    });
    let d = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z"})),
    );
    let config = HandlerConfig::default();
    let facts = NodeFacts::default();
    let plan = super::super::decide(&super::super::HandlerWorld {
        node: SRC,
        key: "ns/v",
        now: crate::Now::parse(NOW).expect("time"),
        vmi: Some(&v),
        domain: Some(&d),
        facts: &facts,
        config: &config,
    });
    assert_eq!(plan.decision, Decision::MigrationInProgress);
    assert!(plan.launcher_calls().is_empty());
}

#[test]
fn a_final_target_vmi_gets_a_best_effort_cleanup() {
    let v = with(&migrating_vmi(), |v| v["status"]["phase"] = json!("Failed"));
    let plan = run(Side::Target, &v, None, &NodeFacts::default());
    assert_eq!(plan.decision, Decision::MigrationTargetTerminated);
    assert_eq!(
        plan.node_steps(),
        vec![
            &NodeStep::UnmountHotplugVolumes,
            &NodeStep::CloseLauncherClient
        ]
    );
    assert!(write_patch(&plan).is_none());
}

#[test]
fn a_stale_target_domain_is_dropped_with_an_error() {
    let v = migrating_vmi();
    let stale: super::super::Domain = serde_json::from_value(json!({
        "ObjectMeta": {"name": "v", "namespace": "ns"},
        "Spec": {"Metadata": {"KubeVirt": {"UID": "older"}}},
        "Status": {"Status": "Running", "Reason": "Unknown"}
    }))
    .expect("domain");
    let plan = run(Side::Target, &v, Some(&stale), &NodeFacts::default());
    assert_eq!(
        plan.node_steps(),
        vec![&NodeStep::Cleanup {
            uid: "older".into()
        }]
    );
    let err = plan.plan.error.as_ref().expect("error").to_string();
    assert!(
        err.contains("had to delete stale domain (UID older)"),
        "{err}"
    );
}

#[test]
fn dedicated_cpus_publish_the_target_cpu_set_and_topology() {
    let v = with(&migrating_vmi(), |v| {
        v["spec"]["domain"]["cpu"] = json!({"dedicatedCpuPlacement": true});
    });
    let mut facts = listening();
    let plan = run(Side::Target, &v, None, &facts);
    let err = plan.plan.error.as_ref().expect("error").to_string();
    assert!(err.contains("targetCPUSet"), "{err}");
    assert!(write_patch(&plan).is_none());
    facts.migration.target_cpu_set = Some(vec![2, 3]);
    facts.migration.target_node_topology = Some("{\"cells\":[]}".into());
    let plan = run(Side::Target, &v, None, &facts);
    let m = state(&apply(&v, &plan));
    assert_eq!(m["targetCPUSet"], json!([2, 3]));
    assert_eq!(m["targetNodeTopology"], "{\"cells\":[]}");
}

#[test]
fn a_failed_proxy_step_is_recorded_as_the_fact_the_next_decision_reads() {
    let v = published(&migrating_vmi());
    let d = domain("Running", "Unknown", None);
    let mut facts = NodeFacts::default();
    let plan = run(Side::Source, &v, Some(&d), &facts);
    let proxy = plan
        .plan
        .actions
        .iter()
        .find(|a| matches!(a, crate::Action::Node(NodeStep::StartSourceProxy { .. })))
        .expect("proxy step");
    assert!(facts.record_failure(proxy, "address in use"));
    let again = run(Side::Source, &v, Some(&d), &facts);
    assert!(migrate_calls(&again).is_empty());
    let err = again.plan.error.as_ref().expect("error").to_string();
    assert_eq!(err, "failed to handle migration proxy: address in use");
    assert!(again.requeued());
}

#[test]
fn a_launcher_that_is_not_up_yet_delays_the_migration() {
    let v = published(&migrating_vmi());
    let mut facts = NodeFacts::default();
    facts.launcher.not_initialized = true;
    let plan = run(
        Side::Source,
        &v,
        Some(&domain("Running", "Unknown", None)),
        &facts,
    );
    assert!(plan.launcher_calls().is_empty());
    assert_eq!(plan.requeue_after(), Some(1));
    facts.launcher = Default::default();
    facts.launcher.unresponsive = true;
    let plan = run(
        Side::Source,
        &v,
        Some(&domain("Running", "Unknown", None)),
        &facts,
    );
    assert!(plan.launcher_calls().is_empty());
    assert!(plan.plan.error.is_some());
}

#[test]
fn a_migration_the_launcher_already_recorded_is_not_sent_again() {
    // The VMI has not caught up yet (no start), but the launcher's record of this migration
    // says it ran and failed: no second MigrateVirtualMachine.
    let v = published(&migrating_vmi());
    let d = domain(
        "Running",
        "Unknown",
        Some(json!({"UID": MIG, "StartTimestamp": "2026-01-01T00:09:00Z",
                    "EndTimestamp": "2026-01-01T00:09:10Z", "Failed": true})),
    );
    let plan = run(Side::Source, &v, Some(&d), &NodeFacts::default());
    assert!(migrate_calls(&plan).is_empty());
    assert_eq!(state(&apply(&v, &plan))["failed"], true);
}
