//! Random walks through what the migration controller can observe — the target pod running,
//! failing or vanishing, the handlers advancing or failing the VMI's migration state, the user
//! deleting the migration, the VMI stopping, time passing, the pod cache showing the
//! controller's own creations late — with every decision's writes applied to a small store
//! between steps. After every decision:
//! - a migration never has two target pods at once;
//! - its phase only moves forward, and never leaves Succeeded or Failed;
//! - every patch carries a `test` and every delete a UID precondition.
//!
//! And once the observations stop, the controller settles: it stops writing.

use k8s_openapi::api::core::v1::{Node, Pod};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::fixtures::*;
use super::*;
use crate::api::VirtualMachineInstance;
use crate::patch::apply_json_patch;

#[derive(Clone, Debug)]
enum Step {
    Reconcile,
    /// A reconcile whose writes all fail (a conflict, a lost connection).
    ReconcileLost,
    TargetRuns,
    TargetFails,
    TargetVanishes,
    TargetUnschedulable,
    HandlerPrepares,
    HandlerStarts,
    HandlerCompletes,
    HandlerFails,
    UserDeletes,
    VmiStops,
    Wait(i64),
    /// The pod cache shows the pods created so far (until then the decisions see the
    /// creations as outstanding expectations).
    CacheCatchesUp,
}

/// Only what happens when nothing goes wrong (in any order, lost writes and waits included):
/// these walks reach the late phases far more often.
fn calm_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => Just(Step::Reconcile),
        1 => Just(Step::ReconcileLost),
        2 => Just(Step::TargetRuns),
        2 => Just(Step::HandlerPrepares),
        2 => Just(Step::HandlerStarts),
        2 => Just(Step::HandlerCompletes),
        1 => (0i64..60).prop_map(Step::Wait),
        3 => Just(Step::CacheCatchesUp),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    // Weighted so that a fair share of the walks gets all the way to Succeeded: the
    // destructive observations are rare.
    prop_oneof![
        24 => Just(Step::Reconcile),
        2 => Just(Step::ReconcileLost),
        5 => Just(Step::TargetRuns),
        1 => Just(Step::TargetFails),
        1 => Just(Step::TargetVanishes),
        1 => Just(Step::TargetUnschedulable),
        5 => Just(Step::HandlerPrepares),
        5 => Just(Step::HandlerStarts),
        5 => Just(Step::HandlerCompletes),
        1 => Just(Step::HandlerFails),
        1 => Just(Step::UserDeletes),
        1 => Just(Step::VmiStops),
        2 => (0i64..240).prop_map(Step::Wait),
        4 => Just(Step::CacheCatchesUp),
    ]
}

/// The store the decisions' writes land in.
struct Store {
    migration: Option<Value>,
    vmi: Value,
    pods: Vec<Value>,
    /// Pods created but not yet in the cache.
    lagging: Vec<Value>,
    nodes: Vec<Node>,
    handed_off: bool,
    now: i64,
    version: u64,
}

impl Store {
    fn new() -> Self {
        let scene = Scene::new("");
        Self {
            migration: Some(scene.migration),
            vmi: scene.vmis[0].clone(),
            pods: scene.pods,
            lagging: vec![],
            nodes: scene.nodes,
            handed_off: false,
            now: NOW,
            version: 10,
        }
    }

    fn targets(&mut self) -> impl Iterator<Item = &mut Value> {
        self.pods
            .iter_mut()
            .filter(|p| p["metadata"]["labels"][names::MIGRATION_JOB_UID] == MIG_UID)
    }

    fn state(&mut self) -> Option<&mut Value> {
        let s = self.vmi.pointer_mut("/status/migrationState")?;
        (s["migrationUid"] == MIG_UID).then_some(s)
    }

    fn phase(&self) -> MigrationPhase {
        self.migration
            .as_ref()
            .map_or(MigrationPhase::Unset, |m| Vmim(m).phase())
    }

    fn decide(&self) -> Option<MigrationDecision> {
        let migration = self.migration.as_ref()?;
        let vmi: VirtualMachineInstance = serde_json::from_value(self.vmi.clone()).unwrap();
        let pods: Vec<Pod> = self
            .pods
            .iter()
            .map(|p| serde_json::from_value(p.clone()).unwrap())
            .collect();
        let migrations = vec![migration.clone()];
        let (cluster, mc) = (ClusterConfig::default(), MigrationConfig::default());
        let w = MigrationWorld {
            migration,
            migrations: &migrations,
            vmis: vec![&vmi],
            pods: pods.iter().collect(),
            nodes: &self.nodes,
            kubevirt: None,
            expectations: PendingExpectations {
                creations: u32::try_from(self.lagging.len()).unwrap(),
                deletions: 0,
            },
            pending_creations_anywhere: u32::try_from(self.lagging.len()).unwrap(),
            handed_off: self.handed_off,
            config: &cluster,
            migration_config: &mc,
            now: Now::from_unix(self.now),
        };
        Some(decide_migration(&w, &render, &format!("p{}", self.version)))
    }

    /// Applies one write as the API server would; a failed `test` leaves the object alone.
    fn apply(&mut self, w: &ApiWrite) {
        self.version += 1;
        match (&w.op, w.resource.as_str()) {
            (WriteOp::Patch { patch, .. }, "virtualmachineinstancemigrations") => {
                let Some(m) = self.migration.as_mut() else {
                    return;
                };
                let mut next = m.clone();
                if apply_json_patch(&mut next, patch).is_ok() {
                    next["metadata"]["resourceVersion"] = json!(self.version.to_string());
                    *m = next;
                }
                let gone = m["metadata"]["deletionTimestamp"].is_string()
                    && m["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(Vec::is_empty);
                if gone {
                    self.migration = None;
                }
            }
            (WriteOp::Delete { .. }, "virtualmachineinstancemigrations") => self.delete_migration(),
            (WriteOp::Patch { patch, .. }, "virtualmachineinstances") => {
                let mut next = self.vmi.clone();
                if apply_json_patch(&mut next, patch).is_ok() {
                    self.vmi = next;
                }
            }
            (WriteOp::Create { object }, "pods") => {
                let mut pod = object.clone();
                pod["metadata"]["uid"] = json!(format!("{}-uid", w.name));
                pod["metadata"]["creationTimestamp"] = json!(crate::format_rfc3339(self.now));
                pod["status"] = json!({"phase": "Pending"});
                self.lagging.push(pod);
            }
            (WriteOp::Delete { .. }, "pods") => self
                .pods
                .retain(|p| p["metadata"]["name"] != w.name.as_str()),
            (WriteOp::Patch { patch, .. }, "pods") => {
                if let Some(p) = self
                    .pods
                    .iter_mut()
                    .find(|p| p["metadata"]["name"] == w.name.as_str())
                {
                    let mut next = p.clone();
                    if apply_json_patch(&mut next, patch).is_ok() {
                        *p = next;
                    }
                }
            }
            other => panic!("unexpected write {other:?}"),
        }
    }

    fn delete_migration(&mut self) {
        let Some(m) = self.migration.as_mut() else {
            return;
        };
        if m["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
        {
            m["metadata"]["deletionTimestamp"] = json!(crate::format_rfc3339(self.now));
        } else {
            self.migration = None;
        }
    }
}

fn check_preconditions(d: &MigrationDecision) -> Result<(), TestCaseError> {
    for w in d.plan.writes() {
        match &w.op {
            WriteOp::Patch { patch, .. } => prop_assert!(
                patch
                    .as_array()
                    .is_some_and(|ops| ops.iter().any(|o| o["op"] == "test")),
                "patch without a test: {}",
                patch
            ),
            WriteOp::Delete { precondition_uid } => {
                prop_assert!(
                    precondition_uid.is_some(),
                    "delete of {} without a UID",
                    w.name
                )
            }
            WriteOp::Create { .. } | WriteOp::Update { .. } => {}
        }
    }
    Ok(())
}

fn walk(steps: &[Step]) -> Result<(), TestCaseError> {
    let mut s = Store::new();
    for step in steps {
        match step {
            Step::Reconcile | Step::ReconcileLost => {
                let before = s.phase();
                let Some(d) = s.decide() else { continue };
                check_preconditions(&d)?;
                if matches!(step, Step::Reconcile) {
                    for w in d.plan.writes() {
                        s.apply(w);
                    }
                    s.handed_off |= d.handed_off;
                }
                let after = s.phase();
                prop_assert!(
                    s.migration.is_none() || before.may_become(after),
                    "phase went from {before:?} to {after:?}"
                );
                let lagging = s
                    .lagging
                    .iter()
                    .filter(|p| p["metadata"]["labels"][names::MIGRATION_JOB_UID] == MIG_UID)
                    .count();
                let live_targets = lagging
                    + s.targets()
                        .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                        .count();
                prop_assert!(live_targets <= 1, "{live_targets} target pods");
            }
            Step::TargetRuns => {
                for p in s.targets() {
                    if p["status"]["phase"] == "Pending" {
                        p["spec"]["nodeName"] = json!("node-b");
                        p["status"] = json!({"phase": "Running", "containerStatuses": [
                            {"name": "compute", "ready": true, "state": {"running": {}}}]});
                    }
                }
            }
            Step::TargetFails => {
                for p in s.targets() {
                    p["status"]["phase"] = json!("Failed");
                }
            }
            Step::TargetVanishes => s
                .pods
                .retain(|p| p["metadata"]["labels"][names::MIGRATION_JOB_UID] != MIG_UID),
            Step::TargetUnschedulable => {
                for p in s.targets() {
                    if p["status"]["phase"] == "Pending" {
                        p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
                    }
                }
            }
            Step::HandlerPrepares => {
                if let Some(st) = s.state() {
                    st["targetNodeAddress"] = json!("10.0.0.2");
                }
            }
            Step::HandlerStarts => {
                let now = crate::format_rfc3339(s.now);
                if let Some(st) = s.state().filter(|st| st["targetNodeAddress"].is_string()) {
                    st["startTimestamp"] = json!(now);
                }
            }
            Step::HandlerCompletes => {
                if let Some(st) = s.state().filter(|st| st["startTimestamp"].is_string()) {
                    st["completed"] = json!(true);
                }
            }
            Step::HandlerFails => {
                if let Some(st) = s.state() {
                    st["completed"] = json!(true);
                    st["failed"] = json!(true);
                }
            }
            Step::UserDeletes => s.delete_migration(),
            Step::VmiStops => s.vmi["status"]["phase"] = json!("Failed"),
            Step::Wait(secs) => s.now += secs,
            Step::CacheCatchesUp => {
                let seen = std::mem::take(&mut s.lagging);
                s.pods.extend(seen);
            }
        }
    }
    // Left alone, the controller settles: a few reconciles later it has nothing more to write
    // (a status that never stops changing would be a hot loop of writes and watch events).
    s.pods.extend(std::mem::take(&mut s.lagging));
    let mut quiet = false;
    for _ in 0..12 {
        let Some(d) = s.decide() else {
            quiet = true;
            break;
        };
        if d.plan.writes().next().is_none() {
            quiet = true;
            break;
        }
        for w in d.plan.writes() {
            s.apply(w);
        }
        s.handed_off |= d.handed_off;
        s.pods.extend(std::mem::take(&mut s.lagging));
    }
    prop_assert!(
        quiet,
        "still writing after 12 reconciles in {:?}",
        s.phase()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_observations_keep_the_migration_invariants(steps in prop::collection::vec(step(), 1..80)) {
        walk(&steps)?;
    }

    #[test]
    fn calm_walks_keep_the_migration_invariants(steps in prop::collection::vec(calm_step(), 1..60)) {
        walk(&steps)?;
    }
}

/// The walk of a migration that goes right, as a fixed sequence: it must reach Succeeded and
/// end without its finalizer (the walks above only check what must never happen).
#[test]
fn a_smooth_migration_reaches_succeeded() {
    let mut s = Store::new();
    let run = |s: &mut Store| {
        let d = s.decide().unwrap();
        for w in d.plan.writes() {
            s.apply(w);
        }
        s.handed_off |= d.handed_off;
    };
    use Step::*;
    let plan = [
        Reconcile,
        Reconcile,
        TargetRuns,
        Reconcile,
        Reconcile,
        Reconcile,
        Reconcile,
        HandlerPrepares,
        Reconcile,
        HandlerStarts,
        Reconcile,
        HandlerCompletes,
        Reconcile,
    ];
    let mut phases = vec![];
    for st in plan {
        match st {
            Reconcile => {
                run(&mut s);
                phases.push(s.phase().as_str());
            }
            TargetRuns => {
                let seen = std::mem::take(&mut s.lagging);
                s.pods.extend(seen);
                for p in s.targets() {
                    p["spec"]["nodeName"] = json!("node-b");
                    p["status"] = json!({"phase": "Running", "containerStatuses": [
                        {"name": "compute", "ready": true, "state": {"running": {}}}]});
                }
            }
            HandlerPrepares => s.state().unwrap()["targetNodeAddress"] = json!("10.0.0.2"),
            HandlerStarts => s.state().unwrap()["startTimestamp"] = json!("2026-01-01T00:00:00Z"),
            HandlerCompletes => s.state().unwrap()["completed"] = json!(true),
            _ => unreachable!(),
        }
    }
    assert_eq!(
        phases,
        [
            "Pending",
            "Pending",
            "Scheduling",
            "Scheduled",
            "Scheduled",
            "PreparingTarget",
            "TargetReady",
            "Running",
            "Succeeded"
        ]
    );
    run(&mut s);
    assert_eq!(
        s.migration.as_ref().unwrap()["metadata"]["finalizers"],
        json!([])
    );
    assert_eq!(
        s.vmi["metadata"]["labels"][names::MIGRATION_TARGET_NODE_NAME],
        "node-b"
    );
}
