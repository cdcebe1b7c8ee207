//! Random orders of what two handlers and their launchers observe during one migration, with
//! the invariants that must hold whatever the order:
//! - `MigrateVirtualMachine` is sent at most once per migration UID;
//! - on one node, the source and the target controllers never both act for the VMI;
//! - `status.nodeName` moves to the target node only while the target runs the domain;
//! - every VMI write tests the resourceVersion and the migration UID, and tests each field it
//!   replaces or removes.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::plan::{LauncherCall, NodeStep};
use super::super::{Domain, HandlerConfig, HandlerPlan, NodeFacts};
use super::fixtures::*;
use crate::api::VirtualMachineInstance;
use crate::format_rfc3339;

/// One observation.
#[derive(Clone, Debug)]
enum Obs {
    /// The source handler syncs.
    Source,
    /// The target handler syncs.
    Target,
    /// The incoming domain shows up on the target (paused, receiving).
    TargetDomainAppears,
    /// libvirt finishes: the guest runs on the target, the source domain shuts off.
    Completes,
    /// libvirt's job fails: the target domain goes away.
    Fails,
    /// Someone asks to abort (the VMIM is deleted).
    Abort,
    /// Seconds pass.
    Tick(u8),
}

fn obs() -> impl Strategy<Value = Obs> {
    prop_oneof![
        4 => Just(Obs::Source),
        4 => Just(Obs::Target),
        1 => Just(Obs::TargetDomainAppears),
        1 => Just(Obs::Completes),
        1 => Just(Obs::Fails),
        1 => Just(Obs::Abort),
        2 => (0u8..90).prop_map(Obs::Tick),
    ]
}

/// The two nodes and launchers as the handlers see them.
struct Model {
    vmi: VirtualMachineInstance,
    now: i64,
    /// Source domain: status, reason, migration record.
    src: (String, String, Option<Value>),
    /// Target domain, once it exists.
    dst: Option<(String, String, Option<Value>)>,
    listening: bool,
    migrate_sent: u32,
    ended: bool,
}

impl Model {
    fn new() -> Self {
        Self {
            vmi: migrating_vmi(),
            now: 1_767_226_200, // 2026-01-01T00:10:00Z
            src: ("Running".into(), "Unknown".into(), None),
            dst: None,
            listening: false,
            migrate_sent: 0,
            ended: false,
        }
    }

    fn stamp(&self) -> String {
        format_rfc3339(self.now)
    }

    fn domain_of(d: &(String, String, Option<Value>)) -> Domain {
        domain(&d.0, &d.1, d.2.clone())
    }

    fn facts(&self, node: &str) -> NodeFacts {
        if node == DST && self.listening {
            listening()
        } else {
            NodeFacts::default()
        }
    }

    fn plan(&self, side: Side, node: &str) -> HandlerPlan {
        let d = if node == SRC {
            Some(Self::domain_of(&self.src))
        } else {
            self.dst.as_ref().map(Self::domain_of)
        };
        run_at(
            side,
            node,
            &self.stamp(),
            Some(&self.vmi),
            d.as_ref(),
            &self.facts(node),
            &HandlerConfig::default(),
        )
    }

    fn started(&self) -> bool {
        self.src.2.is_some()
    }
}

fn acts(plan: &HandlerPlan) -> bool {
    !plan.launcher_calls().is_empty() || !plan.node_steps().is_empty()
}

/// Every write tests what it was decided from and each field it overwrites.
fn check_patch(plan: &HandlerPlan) -> Result<(), TestCaseError> {
    let Some(patch) = write_patch(plan) else {
        return Ok(());
    };
    let ops = patch.as_array().expect("ops");
    let tested = |path: &str| ops.iter().any(|o| o["op"] == "test" && o["path"] == path);
    prop_assert!(tested("/metadata/resourceVersion"), "{patch}");
    prop_assert!(tested("/status/migrationState/migrationUid"), "{patch}");
    for (i, o) in ops.iter().enumerate() {
        if o["op"] == "replace" || o["op"] == "remove" {
            prop_assert!(
                i > 0 && ops[i - 1]["op"] == "test" && ops[i - 1]["path"] == o["path"],
                "{patch}"
            );
        }
    }
    Ok(())
}

fn node_name(vmi: &VirtualMachineInstance) -> Option<String> {
    vmi.status.as_ref().and_then(|s| s.node_name.clone())
}

fn step(m: &mut Model, o: &Obs) -> Result<(), TestCaseError> {
    match o {
        Obs::Source | Obs::Target => {
            // On each node, at most one of the two controllers acts.
            for node in [SRC, DST] {
                let s = m.plan(Side::Source, node);
                let t = m.plan(Side::Target, node);
                prop_assert!(!(acts(&s) && acts(&t)), "both act on {node}: {s:?} {t:?}");
            }
            let (side, node) = if matches!(o, Obs::Source) {
                (Side::Source, SRC)
            } else {
                (Side::Target, DST)
            };
            let plan = m.plan(side, node);
            check_patch(&plan)?;
            for call in plan.launcher_calls() {
                match call {
                    LauncherCall::MigrateVirtualMachine(_) => {
                        m.migrate_sent += 1;
                        prop_assert!(m.migrate_sent <= 1, "second Migrate for {MIG}");
                        // The launcher records the start before it answers.
                        m.src.2 = Some(json!({"UID": MIG, "StartTimestamp": m.stamp()}));
                    }
                    LauncherCall::CancelVirtualMachineMigration if !m.ended => {
                        if let Some(r) = m.src.2.as_mut() {
                            r["AbortStatus"] = json!("Aborting");
                        }
                    }
                    LauncherCall::SignalTargetPodCleanup => m.dst = None,
                    _ => {}
                }
            }
            for s in plan.node_steps() {
                match s {
                    NodeStep::StartTargetProxy { .. } => m.listening = true,
                    NodeStep::StopTargetProxy { .. } => m.listening = false,
                    _ => {}
                }
            }
            let before = node_name(&m.vmi);
            m.vmi = apply(&m.vmi, &plan);
            let after = node_name(&m.vmi);
            if after != before && after.as_deref() == Some(DST) {
                let running = m.dst.as_ref().is_some_and(|d| d.0 == "Running");
                prop_assert!(
                    running,
                    "nodeName moved to {DST} without the domain running there"
                );
            }
        }
        Obs::TargetDomainAppears => {
            if m.started() && m.dst.is_none() && !m.ended {
                let r = m.src.2.clone();
                m.dst = Some(("Paused".into(), "Migration".into(), r));
            }
        }
        Obs::Completes => {
            if m.started() && m.dst.is_some() && !m.ended {
                let mut r = m.src.2.clone().expect("record");
                r["EndTimestamp"] = json!(m.stamp());
                m.src = ("Shutoff".into(), "Migrated".into(), Some(r.clone()));
                m.dst = Some(("Running".into(), "Unknown".into(), Some(r)));
                m.ended = true;
            }
        }
        Obs::Fails => {
            if m.started() && !m.ended {
                let mut r = m.src.2.clone().expect("record");
                r["EndTimestamp"] = json!(m.stamp());
                r["Failed"] = json!(true);
                r["FailureReason"] = json!("job failed");
                m.src.2 = Some(r);
                m.dst = None;
                m.ended = true;
            }
        }
        Obs::Abort => {
            m.vmi = with(&m.vmi, |v| {
                v["status"]["migrationState"]["abortRequested"] = json!(true);
                v["metadata"]["resourceVersion"] = json!("999");
            });
        }
        Obs::Tick(s) => m.now += i64::from(*s),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_order_of_observations_keeps_the_invariants(seq in proptest::collection::vec(obs(), 1..60)) {
        let mut m = Model::new();
        for o in &seq {
            step(&mut m, o)?;
        }
    }

    /// With the observations in a sensible order the migration completes: the VMI ends on the
    /// target, completed, without the target label.
    #[test]
    fn the_happy_path_ends_on_the_target(extra in proptest::collection::vec(0u8..5, 12)) {
        let mut m = Model::new();
        let script = [
            Obs::Target, Obs::Target, Obs::Source, Obs::TargetDomainAppears, Obs::Target,
            Obs::Completes, Obs::Target, Obs::Target, Obs::Target, Obs::Source, Obs::Target,
            Obs::Source,
        ];
        for (o, t) in script.iter().zip(extra) {
            step(&mut m, o)?;
            step(&mut m, &Obs::Tick(t))?;
        }
        let node = node_name(&m.vmi);
        prop_assert_eq!(node.as_deref(), Some(DST));
        let v = serde_json::to_value(&m.vmi).expect("json");
        prop_assert_eq!(&v["status"]["migrationState"]["completed"], &json!(true));
        prop_assert!(v["metadata"]["labels"].get("kubevirt.io/migrationTargetNodeName").is_none());
        prop_assert_eq!(m.migrate_sent, 1);
    }
}
