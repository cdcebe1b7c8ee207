//! Unit tests of branches the oracle corpus does not reach.

use serde_json::json;

use super::conditions::unanchored_match;
use super::facts::{GuestInfo, LauncherFacts};
use super::*;
use crate::api::VirtualMachineInstance;

fn vmi(phase: &str) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {"name": "v", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
                     "labels": {"kubevirt.io/nodeName": "n1"}},
        "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                 "networks": [{"name": "default", "pod": {}}]},
        "status": {"phase": phase, "nodeName": "n1"}
    }))
    .expect("vmi")
}

fn domain(uid: &str, status: &str, reason: &str) -> Domain {
    serde_json::from_value(json!({
        "ObjectMeta": {"name": "v", "namespace": "ns"},
        "Spec": {"Metadata": {"KubeVirt": {"UID": uid}},
                 "Devices": {"Interfaces": [{"Alias": {"Name": "default"}, "MAC": {"MAC": "02:00:00:00:00:01"}}]}},
        "Status": {"Status": status, "Reason": reason}
    }))
    .expect("domain")
}

fn run(vmi: Option<&VirtualMachineInstance>, d: Option<&Domain>, facts: &NodeFacts) -> HandlerPlan {
    let config = HandlerConfig::default();
    decide(&HandlerWorld {
        node: "n1",
        key: "ns/v",
        now: crate::Now::parse("2026-01-01T00:00:00Z").expect("time"),
        vmi,
        domain: d,
        facts,
        config: &config,
    })
}

fn condition<'a>(
    plan: &'a HandlerPlan,
    kind: &str,
) -> Option<&'a crate::api::VirtualMachineInstanceCondition> {
    plan.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.r#type == kind)
}

#[test]
fn agent_version_patterns_match_unanchored_like_go_regexp() {
    assert!(unanchored_match("2.*", "2.5.0"));
    assert!(unanchored_match("2.*", "9.2"));
    assert!(!unanchored_match("2.*", "9.0.0"));
    assert!(unanchored_match("a.c", "xxabcxx"));
    assert!(!unanchored_match("a.c", "ac"));
}

#[test]
fn stale_domain_waits_for_an_initialising_old_launcher() {
    let v = vmi("Scheduled");
    let d = domain("old-uid", "Running", "Unknown");
    let facts = NodeFacts {
        old_launcher: LauncherFacts {
            not_initialized: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let plan = run(Some(&v), Some(&d), &facts);
    assert_eq!(plan.decision, Decision::StaleDomainWait);
    assert_eq!(
        plan.plan.queue.ops(),
        [QueueOp::AddAfter { delay_seconds: 1 }, QueueOp::Forget]
    );
    assert!(plan.status.is_none() && plan.launcher_calls().is_empty());
}

#[test]
fn failed_post_copy_domain_is_destroyed_and_the_vmi_fails() {
    let v = vmi("Running");
    let d = domain("uid-1", "Paused", "PostcopyFailed");
    let plan = run(Some(&v), Some(&d), &NodeFacts::default());
    assert_eq!(plan.decision, Decision::DestroyIrrecoverable);
    assert_eq!(
        plan.launcher_calls(),
        vec![LauncherCall::KillVirtualMachine]
    );
    assert_eq!(
        plan.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    assert!(
        plan.plan
            .error_message()
            .is_some_and(|e| e.contains("post-copy"))
    );
    assert_eq!(plan.plan.queue.ops().last(), Some(&QueueOp::AddRateLimited));
}

#[test]
fn io_error_pause_sets_the_paused_condition() {
    let v = vmi("Running");
    let d = domain("uid-1", "Paused", "IOError");
    let plan = run(Some(&v), Some(&d), &NodeFacts::default());
    let c = condition(&plan, "Paused").expect("Paused condition");
    assert_eq!(c.reason.as_deref(), Some("PausedIOError"));
}

#[test]
fn io_error_pauses_are_resumed_by_syncs_spaced_out_by_the_retry_backoff() {
    use crate::handler::retry::RetryState;
    let v = vmi("Running");
    let d = domain("uid-1", "Paused", "IOError");
    let now = crate::Now::parse("2026-01-01T00:00:00Z")
        .expect("time")
        .unix();
    // First IO error: the sync (which resumes the domain) goes through, and is remembered.
    let first = run(Some(&v), Some(&d), &NodeFacts::default());
    assert!(
        first
            .launcher_calls()
            .contains(&LauncherCall::SyncVirtualMachine),
        "{first:?}"
    );
    let state = first.io_error_retry.expect("retry state kept");
    assert_eq!(state.first_fail, now);
    // Paused again right after: no sync until the 10 s backoff has passed, asked for by AddAfter.
    let again = NodeFacts {
        io_error_retry: Some(RetryState {
            last_run: now - 1,
            next_run: now + 9,
            ..state
        }),
        ..Default::default()
    };
    let held = run(Some(&v), Some(&d), &again);
    assert!(
        !held
            .launcher_calls()
            .contains(&LauncherCall::SyncVirtualMachine),
        "{held:?}"
    );
    assert!(
        held.plan
            .queue
            .ops()
            .contains(&QueueOp::AddAfter { delay_seconds: 9 })
    );
    assert!(held.io_error_retry.is_some_and(|s| s.last_run_failed));
    // The condition still tells why.
    let c = condition(&held, "Paused").expect("Paused condition");
    assert_eq!(c.reason.as_deref(), Some("PausedIOError"));
    // A running domain forgets an old retry state.
    let ok = domain("uid-1", "Running", "Unknown");
    let stale = NodeFacts {
        io_error_retry: Some(RetryState {
            last_run: now - 60,
            ..state
        }),
        ..Default::default()
    };
    assert_eq!(run(Some(&v), Some(&ok), &stale).io_error_retry, None);
}

#[test]
fn old_agent_without_command_list_is_judged_by_version() {
    let v = vmi("Running");
    let mut d = domain("uid-1", "Running", "Unknown");
    d.spec.devices.channels = serde_json::from_value(
        json!([{"Target": {"Name": "org.qemu.guest_agent.0", "State": "connected"}}]),
    )
    .expect("channels");
    let facts = NodeFacts {
        guest_info: Some(GuestInfo {
            guest_agent_version: "9.0.0".into(),
            supported_commands: vec![],
        }),
        ..Default::default()
    };
    let plan = run(Some(&v), Some(&d), &facts);
    assert_eq!(
        plan.launcher_calls(),
        vec![LauncherCall::SyncVirtualMachine, LauncherCall::GetGuestInfo]
    );
    let c = condition(&plan, "AgentVersionNotSupported").expect("unsupported agent");
    assert_eq!(
        c.reason.as_deref(),
        Some("Guest agent version '9.0.0' is not supported")
    );
}

#[test]
fn guest_agent_addresses_join_the_interface_without_link_local_ones_under_masquerade() {
    let v = vmi("Running");
    let mut d = domain("uid-1", "Running", "Unknown");
    d.status.interfaces = serde_json::from_value(json!([
        {"Mac": "02:00:00:00:00:01", "IPs": ["10.0.2.2", "fe80::1", "fd00::2"], "InterfaceName": "eth0"},
        {"Mac": "aa:bb:cc:dd:ee:ff", "IPs": ["192.168.1.5"], "InterfaceName": "eth1"}
    ]))
    .expect("interfaces");
    let plan = run(Some(&v), Some(&d), &NodeFacts::default());
    let ifaces = plan
        .status
        .as_ref()
        .and_then(|s| s.interfaces.clone())
        .expect("interfaces");
    assert_eq!(ifaces.len(), 2);
    assert_eq!(ifaces[0].name.as_deref(), Some("default"));
    assert_eq!(
        ifaces[0].ip_addresses,
        Some(vec!["10.0.2.2".to_string(), "fd00::2".to_string()])
    );
    assert_eq!(
        ifaces[0].info_source.as_deref(),
        Some("domain, guest-agent")
    );
    assert_eq!(ifaces[1].info_source.as_deref(), Some("guest-agent"));
}

#[test]
fn running_vmi_whose_launcher_vanished_fails() {
    let v = vmi("Running");
    let facts = NodeFacts {
        launcher: LauncherFacts {
            gone: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let plan = run(Some(&v), None, &facts);
    assert_eq!(
        plan.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    assert!(plan.launcher_calls().is_empty());
}

#[test]
fn own_write_not_yet_observed_means_no_action() {
    let v = vmi("Running");
    let facts = NodeFacts {
        expectations_satisfied: Some(false),
        ..Default::default()
    };
    let plan = run(
        Some(&v),
        Some(&domain("uid-1", "Running", "Unknown")),
        &facts,
    );
    assert_eq!(plan.decision, Decision::WaitingForExpectations);
    assert!(plan.status.is_none() && plan.launcher_calls().is_empty());
}

/// The status the decision writes for a running VMI, then stored as the API server would keep
/// it: the next sync of the same VMI and domain must write nothing.
fn settled() -> (VirtualMachineInstance, Domain) {
    let mut v = vmi("Running");
    let d = domain("uid-1", "Running", "Unknown");
    for _ in 0..3 {
        let plan = run(Some(&v), Some(&d), &NodeFacts::default());
        match plan.status {
            Some(s) => v.status = Some(s),
            None => return (v, d),
        }
    }
    panic!("the status does not settle: {:?}", v.status);
}

#[test]
fn a_settled_vmi_with_its_conditions_in_another_order_writes_nothing() {
    let (mut v, d) = settled();
    let conds = v
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .expect("conditions");
    assert!(conds.len() >= 2, "two conditions to reorder: {conds:?}");
    conds.reverse();
    let plan = run(Some(&v), Some(&d), &NodeFacts::default());
    assert_eq!(plan.status, None, "a reordered condition list is no change");
}

#[test]
fn null_and_absent_condition_timestamps_are_the_same_status() {
    let (v, d) = settled();
    // The API server hands back `lastProbeTime: null` where the decision wrote none (Go's zero
    // metav1.Time marshals as null), and absent where it wrote null.
    let mut json = serde_json::to_value(&v).expect("json");
    for c in json["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
    {
        let c = c.as_object_mut().expect("condition");
        for field in ["lastProbeTime", "lastTransitionTime"] {
            match c.get(field) {
                Some(serde_json::Value::Null) => {
                    c.remove(field);
                }
                None => {
                    c.insert(field.into(), serde_json::Value::Null);
                }
                Some(_) => {}
            }
        }
    }
    let v: VirtualMachineInstance = serde_json::from_value(json).expect("vmi");
    let plan = run(Some(&v), Some(&d), &NodeFacts::default());
    assert_eq!(plan.status, None, "null and absent timestamps are equal");
}

/// A Scheduled VMI whose launcher has not made its socket yet: the sync looks again in a
/// second (the client manager turns a wait that lasts into "unresponsive", which fails the VMI).
#[test]
fn a_scheduled_vmi_waiting_for_its_launcher_is_looked_at_again() {
    let v = vmi("Scheduled");
    let facts = NodeFacts {
        launcher: LauncherFacts {
            not_initialized: true,
            not_initialized_since: Some("2026-01-01T00:00:00Z".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let plan = run(Some(&v), None, &facts);
    assert!(
        plan.plan
            .queue
            .ops()
            .contains(&QueueOp::AddAfter { delay_seconds: 1 }),
        "{:?} {:?}",
        plan.decision,
        plan.plan.queue.ops()
    );
    let gone = NodeFacts {
        launcher: LauncherFacts {
            unresponsive: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let plan = run(Some(&v), None, &gone);
    assert_eq!(
        plan.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
}

/// A start whose device claim fails (a device the pod should have but has not): the failure of
/// that attempt is a fact, and the decision on it writes `Synchronized=False` with the error
/// and a `SyncFailed` warning at once — after the first failure, as KubeVirt's handler does for
/// any sync error — and retries with backoff, instead of failing the sync invisibly.
#[test]
fn a_failed_device_claim_shows_as_a_condition_and_an_event_after_the_first_attempt() {
    let v = vmi("Scheduled");
    let first = run(Some(&v), None, &NodeFacts::default());
    let claim = first
        .plan
        .actions
        .iter()
        .position(|a| matches!(a, crate::Action::Node(NodeStep::ClaimDevices { .. })))
        .expect("the start claims the pod's devices");
    assert!(
        first.plan.actions[claim + 1..]
            .iter()
            .any(|a| matches!(a, crate::Action::Launcher(LauncherCall::SyncVirtualMachine))),
        "the domain is synced after the claim"
    );

    let error = "device dev/vhost-net: does not exist";
    let mut facts = NodeFacts::default();
    assert!(facts.record_failure(&first.plan.actions[claim], error));
    let plan = run(Some(&v), None, &facts);
    assert_eq!(
        plan.plan.actions[..=claim],
        first.plan.actions[..=claim],
        "the steps before the failure are the same (the shell does not repeat them)"
    );
    assert!(
        !plan
            .plan
            .actions
            .iter()
            .any(|a| matches!(a, crate::Action::Launcher(LauncherCall::SyncVirtualMachine))),
        "no domain without its devices"
    );
    let synced = condition(&plan, "Synchronized").expect("Synchronized condition");
    assert_eq!(synced.status, "False");
    assert_eq!(
        synced.reason.as_deref(),
        Some("Synchronizing with the Domain failed.")
    );
    assert_eq!(synced.message.as_deref(), Some(error));
    assert!(
        plan.plan
            .writes()
            .any(|w| w.resource == "virtualmachineinstances"),
        "the condition is written"
    );
    let warnings: Vec<_> = plan
        .plan
        .events
        .iter()
        .filter(|e| e.reason == "SyncFailed")
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", plan.plan.events);
    assert_eq!(warnings[0].message, error);
    assert_eq!(plan.plan.error_message(), Some(error));
    assert_eq!(plan.plan.queue.ops(), [QueueOp::AddRateLimited]);
}

/// A non-root VMI's block-mode claims are handed to QEMU's user with the plugin devices (as
/// KubeVirt's `changeOwnershipOfBlockDevices`); filesystem claims, claims of a root VMI and
/// other volume kinds are not.
#[test]
fn a_non_root_vmis_block_claims_are_claimed_with_its_devices() {
    let claimed = |runtime_user: i64| {
        let mut v = vmi("Scheduled");
        let mut j = serde_json::to_value(&v).expect("json");
        j["spec"]["volumes"] = json!([
            {"name": "blk", "persistentVolumeClaim": {"claimName": "b"}},
            {"name": "fs", "persistentVolumeClaim": {"claimName": "f"}},
            {"name": "scratch", "emptyDisk": {"capacity": "1Mi"}}
        ]);
        j["status"]["runtimeUser"] = json!(runtime_user);
        j["status"]["volumeStatus"] = json!([
            {"name": "blk", "target": "vdb", "persistentVolumeClaimInfo": {"volumeMode": "Block"}},
            {"name": "fs", "target": "vdc", "persistentVolumeClaimInfo": {"volumeMode": "Filesystem"}},
            {"name": "scratch", "target": "vdd"}
        ]);
        v = serde_json::from_value(j).expect("vmi");
        let plan = run(Some(&v), None, &NodeFacts::default());
        plan.plan
            .actions
            .iter()
            .find_map(|a| match a {
                crate::Action::Node(NodeStep::ClaimDevices { paths }) => Some(paths.clone()),
                _ => None,
            })
            .expect("the start claims the pod's devices")
    };
    let non_root = claimed(107);
    assert!(non_root.contains(&"/dev/blk".to_string()), "{non_root:?}");
    assert!(non_root.contains(&"/dev/kvm".to_string()), "{non_root:?}");
    assert!(
        !non_root
            .iter()
            .any(|p| p == "/dev/fs" || p == "/dev/scratch"),
        "{non_root:?}"
    );
    let root = claimed(0);
    assert!(!root.contains(&"/dev/blk".to_string()), "{root:?}");
}
