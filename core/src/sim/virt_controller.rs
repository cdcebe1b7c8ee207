//! virt-controller in the simulator: the VM controller running kvrs's VM decision and the VMI
//! controller, sharing one set of informer caches, each with its own queue and expectations.

use std::time::Duration;

use kvrs_queue::{Expectations, Instant, WorkQueue};
use serde_json::Value;

use super::cache::Cache;
use super::store::{ApiError, Obj, WatchEvent, res};
use super::{Proc, Sim};
use crate::decide::vm::{PendingExpectations, VmWorld, decide_vm};
use crate::decide::{ApiWrite, Expectation, Plan, QueueOutcome};

/// The virt-controller process.
pub(super) struct VirtController {
    pub cache: Cache,
    pub vm_queue: WorkQueue<String>,
    pub vmi_queue: WorkQueue<String>,
    pub vm_expectations: Expectations<String>,
    pub vmi_expectations: Expectations<String>,
    /// The VMI controller's own VMI writes not yet seen in the cache.
    pub vmi_updates: Expectations<String>,
}

impl Default for VirtController {
    fn default() -> Self {
        Self {
            cache: Cache::default(),
            vm_queue: WorkQueue::new(),
            vmi_queue: WorkQueue::new(),
            vm_expectations: Expectations::new(),
            vmi_expectations: Expectations::new(),
            vmi_updates: Expectations::new(),
        }
    }
}

fn deleting(o: Option<&Obj>) -> bool {
    match o {
        Some(Obj::Vmi(v)) => v.metadata.deletion_timestamp.is_some(),
        Some(Obj::Other(v)) => v.pointer("/metadata/deletionTimestamp").is_some(),
        _ => false,
    }
}

/// The VMI key a launcher pod belongs to.
pub(super) fn pod_vmi_key(pod: &Value) -> Option<String> {
    let ns = pod.pointer("/metadata/namespace")?.as_str()?;
    let name = pod
        .pointer("/metadata/labels/vm.kubevirt.io~1name")?
        .as_str()?;
    Some(format!("{ns}/{name}"))
}

impl VirtController {
    /// An event reached the caches: update them, settle expectations, queue the keys affected.
    pub fn observe(&mut self, ev: &WatchEvent, now: Instant) {
        let old = self.cache.get(ev.resource, &ev.key).cloned();
        self.cache.apply(ev);
        match ev.resource {
            res::VMS => {
                self.vm_queue.add(ev.key.clone(), now);
            }
            res::VMIS => {
                let was_deleting = deleting(old.as_deref());
                match (&old, &ev.obj) {
                    (None, Some(_)) => self.vm_expectations.creation_observed(&ev.key),
                    (Some(_), None) => self.vm_expectations.deletion_observed(&ev.key, &ev.key),
                    (Some(_), Some(o)) if !was_deleting && deleting(Some(o)) => {
                        self.vm_expectations.deletion_observed(&ev.key, &ev.key)
                    }
                    _ => {}
                }
                self.vmi_updates.creation_observed(&ev.key);
                if ev.obj.is_none() {
                    self.vmi_expectations.delete_expectations(&ev.key);
                    self.vmi_updates.delete_expectations(&ev.key);
                }
                self.vm_queue.add(ev.key.clone(), now);
                self.vmi_queue.add(ev.key.clone(), now);
            }
            res::PODS => {
                let pod = ev.obj.as_deref().or(old.as_deref()).and_then(Obj::json);
                if let Some(vmi_key) = pod.and_then(pod_vmi_key) {
                    let was_deleting = deleting(old.as_deref());
                    match (&old, &ev.obj) {
                        (None, Some(_)) => self.vmi_expectations.creation_observed(&vmi_key),
                        (Some(_), None) => {
                            self.vmi_expectations.deletion_observed(&vmi_key, &ev.key)
                        }
                        (Some(_), Some(o)) if !was_deleting && deleting(Some(o)) => {
                            self.vmi_expectations.deletion_observed(&vmi_key, &ev.key)
                        }
                        _ => {}
                    }
                    self.vmi_queue.add(vmi_key, now);
                }
            }
            _ => {}
        }
    }

    /// After a relist: the new cache, and every key queued again.
    pub fn reset_cache(&mut self, cache: Cache, now: Instant) {
        self.cache = cache;
        let vms: Vec<String> = self.cache.iter(res::VMS).map(|(k, _)| k.clone()).collect();
        let vmis: Vec<String> = self.cache.iter(res::VMIS).map(|(k, _)| k.clone()).collect();
        for k in vms {
            self.vm_queue.add(k, now);
        }
        for k in vmis {
            self.vm_queue.add(k.clone(), now);
            self.vmi_queue.add(k, now);
        }
    }
}

/// Raises a write's expectation before it is sent.
pub(super) fn raise(
    exp: &mut Expectations<String>,
    updates: &mut Expectations<String>,
    e: &Expectation,
    now: Instant,
) {
    match e {
        Expectation::ObservedUpdate { key } => updates.expect_creations(key.clone(), 1, now),
        Expectation::Creations { key, count } => {
            if exp.pending(key).is_some() {
                exp.raise(key, i64::from(*count), 0);
            } else {
                exp.expect_creations(key.clone(), *count, now);
            }
        }
        Expectation::Deletions { key, objects } => {
            for o in objects {
                exp.add_expected_deletion(key.clone(), o.clone(), now);
            }
        }
    }
}

/// Undoes an expectation whose write failed.
pub(super) fn lower(
    exp: &mut Expectations<String>,
    updates: &mut Expectations<String>,
    e: &Expectation,
) {
    match e {
        Expectation::ObservedUpdate { key } => updates.lower(key, 1, 0),
        Expectation::Creations { key, count } => exp.lower(key, i64::from(*count), 0),
        Expectation::Deletions { key, objects } => {
            for o in objects {
                exp.deletion_observed(key, o);
            }
        }
    }
}

/// Applies the queue outcome of a plan to `q`.
pub(super) fn requeue(q: &mut WorkQueue<String>, key: &str, outcome: QueueOutcome, now: Instant) {
    match outcome {
        QueueOutcome::Forget => q.forget(&key.to_string()),
        QueueOutcome::After(d) => {
            q.forget(&key.to_string());
            q.add_after(key.to_string(), d, now);
        }
        QueueOutcome::RateLimited => {
            q.add_rate_limited(key.to_string(), now);
        }
    }
}

impl Sim {
    /// Sends a plan's writes in order, raising expectations first; stops at the first failure.
    pub(super) fn send_writes(
        &mut self,
        writes: &[ApiWrite],
        exp: ExpectationsOf,
    ) -> Result<(), ApiError> {
        for w in writes {
            let now = self.now;
            if let Some(e) = &w.expectation {
                let c = &mut self.ctrl;
                match exp {
                    ExpectationsOf::Vm => raise(&mut c.vm_expectations, &mut c.vmi_updates, e, now),
                    ExpectationsOf::Vmi => {
                        raise(&mut c.vmi_expectations, &mut c.vmi_updates, e, now)
                    }
                    ExpectationsOf::None => {}
                }
            }
            let inject = self.faults_on() && self.rng.chance(self.cfg.conflict_probability);
            let unix = self.now_unix();
            let result = self.api.apply(w, unix, inject);
            self.flush_events();
            if let Err(err) = result {
                self.stats.failed_writes += 1;
                if let Some(e) = &w.expectation {
                    let c = &mut self.ctrl;
                    match exp {
                        ExpectationsOf::Vm => lower(&mut c.vm_expectations, &mut c.vmi_updates, e),
                        ExpectationsOf::Vmi => {
                            lower(&mut c.vmi_expectations, &mut c.vmi_updates, e)
                        }
                        ExpectationsOf::None => {}
                    }
                }
                return Err(err);
            }
        }
        Ok(())
    }

    /// Executes a plan for `key` and requeues it.
    pub(super) fn execute_plan_pub(&mut self, key: &str, plan: Plan, exp: ExpectationsOf) {
        let mut outcome = plan.queue;
        let result = self.send_writes(&plan.writes, exp);
        if self.traced(key) {
            let writes: Vec<String> = plan
                .writes
                .iter()
                .map(|w| format!("{} {} {}", w.op.verb(), w.resource, w.to_json()))
                .collect();
            eprintln!(
                "[{:?}] {exp:?} sync {key}: writes {writes:#?} -> {result:?}, queue {:?} err {:?}",
                self.elapsed(),
                plan.queue,
                plan.error
            );
        }
        if result.is_err() {
            outcome = QueueOutcome::RateLimited;
        }
        let now = self.now;
        let q = match exp {
            ExpectationsOf::Vmi => &mut self.ctrl.vmi_queue,
            _ => &mut self.ctrl.vm_queue,
        };
        requeue(q, key, outcome, now);
    }

    /// Runs every VM and VMI key that is ready now.
    pub(super) fn run_controller(&mut self) {
        let budget = self.ctrl.vm_queue.len() + self.ctrl.vmi_queue.len() + 16;
        let mut done = 0;
        loop {
            let now = self.now;
            let key = self.ctrl.vm_queue.get(now);
            let Some(key) = key else { break };
            self.sync_vm(&key);
            let now = self.now;
            self.ctrl.vm_queue.done(&key, now);
            done += 1;
            if done > budget {
                break;
            }
        }
        loop {
            let now = self.now;
            let Some(key) = self.ctrl.vmi_queue.get(now) else {
                break;
            };
            self.sync_vmi(&key);
            let now = self.now;
            self.ctrl.vmi_queue.done(&key, now);
            done += 1;
            if done > 2 * budget {
                break;
            }
        }
        let now = self.now;
        self.ctrl.vm_queue.handle_timeout(now);
        self.ctrl.vmi_queue.handle_timeout(now);
        let busy = !self.ctrl.vm_queue.is_empty() || !self.ctrl.vmi_queue.is_empty();
        let next = if busy {
            Some(self.now + Duration::from_millis(1))
        } else {
            [
                self.ctrl.vm_queue.next_wakeup(),
                self.ctrl.vmi_queue.next_wakeup(),
            ]
            .into_iter()
            .flatten()
            .min()
        };
        self.schedule_wakeup(Proc::Controller, next);
    }

    fn sync_vm(&mut self, key: &str) {
        self.stats.vm_syncs += 1;
        let Some(vm) = self.ctrl.cache.get(res::VMS, key).cloned() else {
            self.ctrl
                .vm_expectations
                .delete_expectations(&key.to_string());
            return;
        };
        let Some(vm) = vm.vm() else { return };
        let vmi = self.ctrl.cache.get(res::VMIS, key).cloned();
        let uid = vm.metadata.uid.clone().unwrap_or_default();
        let ns = vm
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let prefix = format!("{ns}/revision-start-vm-{uid}");
        let revisions: Vec<Value> = self
            .ctrl
            .cache
            .with_prefix(res::REVISIONS, &prefix)
            .filter_map(|o| o.json().cloned())
            .collect();
        let now = self.now;
        let k = key.to_string();
        let expectations = if self.ctrl.vm_expectations.satisfied(&k, now) {
            PendingExpectations::default()
        } else {
            let p = self.ctrl.vm_expectations.pending(&k);
            PendingExpectations {
                creations: p.map_or(0, |p| p.creations.max(0) as u32),
                deletions: p.map_or(0, |p| p.deletions.max(0) as u32),
            }
        };
        let world = VmWorld {
            vm,
            vmi: vmi.as_deref().and_then(Obj::vmi),
            revisions: &revisions,
            data_volumes: &[],
            pvcs: &[],
            expectations,
            now: self.now_unix(),
            jitter: self.rng.unit(),
            config: &self.config,
        };
        let decision = decide_vm(&world);
        self.execute_plan_pub(key, decision.plan, ExpectationsOf::Vm);
    }
}

/// Which expectations store a plan's writes raise.
#[derive(Clone, Copy, Debug)]
pub(super) enum ExpectationsOf {
    Vm,
    Vmi,
    /// The write raises no expectation (the handler tracks its own writes itself).
    None,
}
