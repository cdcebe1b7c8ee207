//! virt-controller in the simulator: the VM controller running kvrs's VM decision and the VMI
//! controller, sharing one set of informer caches, each with its own queue and expectations.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;
use std::time::Duration;

use kvrs_admission::ClusterConfig;
use kvrs_decide::vm::decide_vm;
use kvrs_decide::{ApiWrite, Event, Expectation, Now, PendingExpectations, Plan, WriteOp};
use kvrs_executor::ready::run_ready;
use kvrs_executor::world::{VmInputs, vm_world};
use kvrs_executor::{
    Api, ApiError, Change, ControllerExpectations, Expecting, Seen, Watched, execute, observe,
    requeue,
};
use kvrs_queue::{Instant, WorkQueue};
use serde_json::Value;

use super::cache::{Cache, Replaced};
use super::decider::Decision;
use super::store::{Obj, WatchEvent, res};
use super::vmi_controller::decide_vmi_sync;
use super::writes::{FailureClass, Writer, classify, rv_of};
use super::{Proc, Sim};

/// The virt-controller process.
pub(super) struct VirtController {
    /// Shared with the thread that decides a pass's syncs (changed only between passes).
    pub cache: Arc<Cache>,
    pub vm_queue: WorkQueue<String>,
    pub vmi_queue: WorkQueue<String>,
    pub vm_expectations: ControllerExpectations,
    pub vmi_expectations: ControllerExpectations,
    /// The process's own writes its cache has not seen yet: by (resource, key), the
    /// resourceVersion written and the VM/VMI key it belongs to.
    /// (By resource, then key: every event the controller sees is looked up here, by `&str`.)
    own_writes: HashMap<&'static str, HashMap<String, (u64, String)>>,
    /// How many of [`Self::own_writes`] belong to each VM/VMI key.
    own_writes_of: HashMap<String, u32>,
}

impl Default for VirtController {
    fn default() -> Self {
        Self {
            cache: Arc::new(Cache::default()),
            vm_queue: WorkQueue::new(),
            vmi_queue: WorkQueue::new(),
            vm_expectations: ControllerExpectations::new(),
            vmi_expectations: ControllerExpectations::new(),
            own_writes: HashMap::new(),
            own_writes_of: HashMap::new(),
        }
    }
}

/// What the observer needs of a cached object (read for the old and the new version of every
/// event the controller sees, so its metadata is looked up once, not per field).
fn seen(o: &Obj) -> Seen {
    let (deleting, vmi_key) = match o {
        Obj::Vmi(v) => (v.metadata.deletion_timestamp.is_some(), None),
        Obj::Other(v) => {
            let md = v.get("metadata");
            (
                md.and_then(|m| m.get("deletionTimestamp")).is_some(),
                md.and_then(launcher_vmi_key),
            )
        }
        _ => (false, None),
    };
    Seen { deleting, vmi_key }
}

/// The VMI key a launcher pod belongs to.
pub(super) fn pod_vmi_key(pod: &Value) -> Option<String> {
    pod.get("metadata").and_then(launcher_vmi_key)
}

/// The VMI key a launcher pod's `metadata` names: its namespace and `vm.kubevirt.io/name` label.
fn launcher_vmi_key(metadata: &Value) -> Option<String> {
    // Scanned, not hashed (`small_json`): this runs on every pod event.
    use kvrs_decide::small_json::get;
    let ns = get(metadata, "namespace")?.as_str()?;
    let name = get(get(metadata, "labels")?, "vm.kubevirt.io/name")?.as_str()?;
    let mut key = String::with_capacity(ns.len() + 1 + name.len());
    key.push_str(ns);
    key.push('/');
    key.push_str(name);
    Some(key)
}

impl VirtController {
    /// An event reached the caches: update them, then let the shared observer settle the
    /// expectations and say which keys to queue. Returns what the cache let go.
    pub(crate) fn observe(&mut self, ev: &WatchEvent, now: Instant) -> Replaced {
        let old = self.cache.get(ev.resource, &ev.key).map(|o| seen(o));
        let replaced = Arc::make_mut(&mut self.cache).apply(ev);
        self.own_write_seen(ev, now);
        let watched = match ev.resource {
            res::VMS => Watched::Vm,
            res::VMIS => Watched::Vmi,
            res::PODS => Watched::Pod,
            _ => Watched::Other,
        };
        let change = Change {
            watched,
            key: &ev.key,
            old,
            new: ev.obj.as_deref().map(seen),
        };
        let keys = observe(
            &change,
            &mut self.vm_expectations,
            &mut self.vmi_expectations,
        );
        for k in keys.vm_keys {
            self.vm_queue.add(k, now);
        }
        for k in keys.vmi_keys {
            self.vmi_queue.add(k, now);
        }
        replaced
    }

    /// Records a write of this process that produced `rv` of `(resource, key)`, belonging to
    /// VM/VMI `owner`, until its watch event reaches the cache.
    pub(crate) fn own_write(&mut self, resource: &'static str, key: &str, rv: u64, owner: String) {
        let pending = self.own_writes.entry(resource).or_default();
        match pending.get_mut(key) {
            Some(pending) => pending.0 = pending.0.max(rv),
            None => {
                *self.own_writes_of.entry(owner.clone()).or_default() += 1;
                pending.insert(key.to_string(), (rv, owner));
            }
        }
    }

    /// Whether a VM/VMI key has own writes the cache has not seen: a sync would decide from a
    /// version older than the process itself wrote, and its writes would be refused.
    pub(crate) fn behind_own_writes(&self, key: &str) -> bool {
        self.own_writes_of.contains_key(key)
    }

    /// Settles the pending own write an event catches up with, and queues its VM/VMI key (whose
    /// sync was held back while the write was pending).
    fn own_write_seen(&mut self, ev: &WatchEvent, now: Instant) {
        let Some(pending) = self.own_writes.get_mut(ev.resource) else {
            return;
        };
        let Some(&(rv, _)) = pending.get(&ev.key) else {
            return;
        };
        let caught_up = ev
            .obj
            .as_deref()
            .and_then(rv_of)
            .is_none_or(|seen| seen >= rv);
        if !caught_up {
            return;
        }
        let Some((_, owner)) = pending.remove(&ev.key) else {
            return;
        };
        if let Some(n) = self.own_writes_of.get_mut(&owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.own_writes_of.remove(&owner);
                self.vm_queue.add(owner.clone(), now);
                self.vmi_queue.add(owner, now);
            }
        }
    }

    /// After a relist: the new cache, and every key queued again.
    pub(crate) fn reset_cache(&mut self, cache: Cache, now: Instant) {
        self.cache = Arc::new(cache);
        self.own_writes.clear();
        self.own_writes_of.clear();
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

/// Which controller's expectations a plan raises.
#[derive(Clone, Copy, Debug)]
pub(super) enum Controller {
    Vm,
    Vmi,
}

/// The simulator as the effects of a controller plan: writes go to the simulated API server
/// (with injected conflicts while faults are on), expectations to the controller's store.
/// Both live in the one `Sim`, as a write's watch event can reach the caches before the write
/// returns.
pub(super) struct ControllerFx<'s> {
    pub sim: &'s mut Sim,
    pub controller: Option<Controller>,
    /// Who the writes are from (what the report blames refused writes on).
    pub writer: Writer,
}

impl Api for ControllerFx<'_> {
    async fn write(&mut self, w: &ApiWrite) -> Result<(), ApiError> {
        let sim = &mut *self.sim;
        let inject = sim.faults_on() && sim.rng.chance(sim.cfg.conflict_probability);
        let unix = sim.now_unix();
        let result = sim.api.apply(w, self.writer, unix, inject);
        match &result {
            // Classified before the flush: a refused write changed nothing, so the API server
            // still holds the version the write met.
            Err(e) => sim.count_failure(w, self.writer, e, inject),
            Ok(()) if self.controller.is_some() => {
                sim.note_own_write(w, self.writer);
                sim.count_pod_status_patch(w);
            }
            Ok(()) => {}
        }
        sim.flush_events();
        result.map_err(ApiError::from)
    }

    async fn event(&mut self, _: &Event) {}
}

impl Expecting for ControllerFx<'_> {
    fn raise(&mut self, e: &Expectation, now: Instant) {
        match self.controller {
            Some(Controller::Vm) => self.sim.ctrl.vm_expectations.raise(e, now),
            Some(Controller::Vmi) => self.sim.ctrl.vmi_expectations.raise(e, now),
            None => {}
        }
    }

    fn lower(&mut self, e: &Expectation) {
        match self.controller {
            Some(Controller::Vm) => self.sim.ctrl.vm_expectations.lower(e),
            Some(Controller::Vmi) => self.sim.ctrl.vmi_expectations.lower(e),
            None => {}
        }
    }
}

impl Sim {
    /// Counts a readiness-gate patch of a launcher pod, and whether it repeats the last one.
    fn count_pod_status_patch(&mut self, w: &ApiWrite) {
        let (res::PODS, Some("status"), WriteOp::Patch { patch, .. }) =
            (w.resource.as_str(), w.subresource.as_deref(), &w.op)
        else {
            return;
        };
        // The condition's reason and status, without its timestamps.
        let condition = &patch["status"]["conditions"][0];
        let state = format!("{}/{}", condition["reason"], condition["status"]);
        let stats = &mut self.stats;
        stats.pod_status_patches += 1;
        let key = format!("{}/{}", w.namespace, w.name);
        if stats.pod_status_patched.insert(key, state.clone()) == Some(state) {
            stats.repeated_pod_status_patches += 1;
        }
    }

    /// Remembers a successful write of virt-controller that made a new version its cache has
    /// yet to see (a write that changed nothing made none).
    fn note_own_write(&mut self, w: &ApiWrite, writer: Writer) {
        let resource = match w.resource.as_str() {
            res::VMS => res::VMS,
            res::VMIS => res::VMIS,
            res::PODS => res::PODS,
            _ => return,
        };
        let key = if w.namespace.is_empty() {
            w.name.clone()
        } else {
            format!("{}/{}", w.namespace, w.name)
        };
        let Some((rv, by)) = self.api.last_write(resource, &key) else {
            return;
        };
        let cached = self.ctrl.cache.get(resource, &key).and_then(|o| rv_of(o));
        if by != writer || cached.is_some_and(|c| c >= rv) {
            return;
        }
        let owner = if resource == res::PODS {
            match self.api.get(resource, &key).and_then(|p| pod_vmi_key(&p)) {
                Some(k) => k,
                None => return,
            }
        } else {
            key.clone()
        };
        self.ctrl.own_write(resource, &key, rv, owner);
    }

    /// Counts a refused write of `writer` in its class (see [`crate::writes::Cause`]).
    fn count_failure(
        &mut self,
        w: &ApiWrite,
        writer: Writer,
        err: &super::store::ApiError,
        injected: bool,
    ) {
        self.stats.failed_writes += 1;
        let key = if w.namespace.is_empty() {
            w.name.clone()
        } else {
            format!("{}/{}", w.namespace, w.name)
        };
        let cache = match writer {
            Writer::Handler(n) => self.handlers.get(n).map(|h| &h.cache),
            Writer::VmController | Writer::VmiController => Some(&*self.ctrl.cache),
            Writer::Kubelet | Writer::OtherClient => None,
        };
        let cached = cache
            .and_then(|c| c.get(&w.resource, &key))
            .and_then(|o| rv_of(o));
        let current = self.api.last_write(&w.resource, &key);
        let cause = classify(err, injected, writer, cached, current);
        let target = match &w.subresource {
            Some(sub) => format!("{} {}/{sub}", w.op.verb(), w.resource),
            None => format!("{} {}", w.op.verb(), w.resource),
        };
        self.stats.failed_by.count(FailureClass {
            writer: writer.kind(),
            target,
            cause,
        });
    }

    /// Executes a plan for `key` through the shared executor and requeues the key.
    pub(super) fn execute_plan(&mut self, key: &str, plan: Plan, controller: Controller) {
        let now = self.now;
        let writer = match controller {
            Controller::Vm => Writer::VmController,
            Controller::Vmi => Writer::VmiController,
        };
        let mut fx = ControllerFx {
            sim: self,
            controller: Some(controller),
            writer,
        };
        let Ok(out) = run_ready(execute(&plan, &mut fx, now)) else {
            // The simulator's effects never wait; a pending executor is a bug in them.
            self.stats.failed_writes += 1;
            return;
        };
        if self.traced(key) {
            let writes: Vec<String> = plan
                .writes()
                .map(|w| format!("{} {} {}", w.op.verb(), w.resource, w.to_json()))
                .collect();
            eprintln!(
                "[{:?}] {controller:?} sync {key}: writes {writes:#?} -> {:?}, queue {:?} err {:?}",
                self.elapsed(),
                out.failed,
                out.queue,
                out.error
            );
        }
        let now = self.now;
        let q = match controller {
            Controller::Vmi => &mut self.ctrl.vmi_queue,
            Controller::Vm => &mut self.ctrl.vm_queue,
        };
        requeue(q, key, &out.queue, now);
        self.decider.garbage.plans.push(plan);
    }

    /// Runs every VM and VMI key that is ready now: the VM keys first, in batches, then the VMI
    /// keys (gathered only after the VM plans ran, so a VMI key the VM controller just wrote
    /// is held back as it would be one sync at a time).
    pub(super) fn run_controller(&mut self) {
        let budget = self.ctrl.vm_queue.len() + self.ctrl.vmi_queue.len() + 16;
        let mut done = 0;
        for controller in [Controller::Vm, Controller::Vmi] {
            let limit = match controller {
                Controller::Vm => budget + 1,
                Controller::Vmi => 2 * budget + 1,
            };
            loop {
                let mut jobs = Vec::new();
                while done < limit {
                    let now = self.now;
                    let queue = match controller {
                        Controller::Vm => &mut self.ctrl.vm_queue,
                        Controller::Vmi => &mut self.ctrl.vmi_queue,
                    };
                    let Some(key) = queue.get(now) else { break };
                    done += 1;
                    if let Some(job) = self.job(controller, key) {
                        jobs.push(job);
                    }
                }
                if jobs.is_empty() {
                    break;
                }
                self.run_jobs(jobs, controller);
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

    /// A sync of `key` to decide, or `None` when it ends here (held back behind the process's
    /// own write, or nothing cached to decide on); the key is then done.
    fn job(&mut self, controller: Controller, key: String) -> Option<Job> {
        let now = self.now;
        if self.ctrl.behind_own_writes(&key) {
            // The event of the pending write queues the key again.
            self.stats.held_back_syncs += 1;
            self.done(controller, key);
            return None;
        }
        let (resource, expectations) = match controller {
            Controller::Vm => {
                self.stats.vm_syncs += 1;
                (res::VMS, &mut self.ctrl.vm_expectations)
            }
            Controller::Vmi => {
                self.stats.vmi_syncs += 1;
                (res::VMIS, &mut self.ctrl.vmi_expectations)
            }
        };
        if self.ctrl.cache.get(resource, &key).is_none() {
            expectations.forget(&key);
            self.done(controller, key);
            return None;
        }
        let expectations = expectations.pending(&key, now);
        // The seeded draws happen here, in queue order, whatever thread decides.
        let draw = match controller {
            Controller::Vm => Draw::Jitter(self.rng.unit()),
            Controller::Vmi => Draw::Suffix(
                (0..5)
                    .map(|_| {
                        char::from(
                            b"bcdfghjklmnpqrstvwxz2456789"
                                [usize::try_from(self.rng.range(0, 26)).unwrap_or(0)],
                        )
                    })
                    .collect(),
            ),
        };
        Some(Job {
            key,
            expectations,
            draw,
        })
    }

    fn done(&mut self, controller: Controller, key: String) {
        let now = self.now;
        match controller {
            Controller::Vm => self.ctrl.vm_queue.done(&key, now),
            Controller::Vmi => self.ctrl.vmi_queue.done(&key, now),
        };
    }

    /// Decides the jobs and executes their plans in queue order. A batch of more than one is
    /// decided on both threads ([`crate::decider`]) while this one executes the plans already
    /// decided: the decisions read only the controller's cache, which no write changes
    /// before its watch event is delivered (at least a millisecond of virtual time later), so
    /// each decides from what it would have seen one sync at a time, and the run stays
    /// reproducible from its seed.
    fn run_jobs(&mut self, jobs: Vec<Job>, controller: Controller) {
        let now = Now::from_unix(self.now_unix());
        self.discard_garbage();
        if jobs.len() < PARALLEL_BATCH || !self.cfg.second_thread {
            let cache = Arc::clone(&self.ctrl.cache);
            for job in jobs {
                let plan = job.decide_with(&cache, &self.config, now);
                self.finish(job.key, plan, controller);
            }
            return;
        }
        let context = ControllerContext {
            cache: Arc::clone(&self.ctrl.cache),
            config: Arc::clone(&self.config),
            now,
        };
        let mut pass = self.decider.submit(context, jobs);
        while let Some((job, plan)) = self.decider.next_plan(&mut pass) {
            let key = job.key.clone();
            self.finish(key, plan, controller);
        }
    }

    /// Hands what the simulator's thread let go since the last controller run to the decision
    /// thread.
    fn discard_garbage(&mut self) {
        let evicted = self.api.take_evicted();
        self.decider.garbage.events.extend(evicted);
        self.decider.discard();
    }

    /// Executes a decided plan and marks the key done.
    fn finish(&mut self, key: String, plan: Option<Plan>, controller: Controller) {
        if let Some(plan) = plan {
            self.execute_plan(&key, plan, controller);
        }
        self.done(controller, key);
    }
}

/// Batches at least this large are shared with the decision thread (a single sync has nothing
/// to overlap with: handing it over would only cost a wake-up).
const PARALLEL_BATCH: usize = 2;

/// What one sync's decision needs besides the cache, the configuration and the time.
pub(crate) struct Job {
    key: String,
    expectations: PendingExpectations,
    draw: Draw,
}

/// The seeded draw a decision takes.
enum Draw {
    /// The VM decision's start-failure jitter.
    Jitter(f64),
    /// The VMI decision's pod name suffix.
    Suffix(String),
}

/// What a pass of controller syncs is decided from besides each job.
pub(crate) struct ControllerContext {
    cache: Arc<Cache>,
    config: Arc<ClusterConfig>,
    now: Now,
}

impl Decision for Job {
    type Context = ControllerContext;
    /// `None` when the cache holds no typed object to decide on.
    type Plan = Option<Plan>;

    fn decide(&self, cx: &ControllerContext) -> Option<Plan> {
        self.decide_with(&cx.cache, &cx.config, cx.now)
    }
}

impl Job {
    /// The plan of this sync (`None` when the cache holds no typed object to decide on).
    fn decide_with(&self, cache: &Cache, config: &ClusterConfig, now: Now) -> Option<Plan> {
        match &self.draw {
            Draw::Jitter(jitter) => {
                decide_vm_sync(cache, config, now, &self.key, self.expectations, *jitter)
            }
            Draw::Suffix(suffix) => {
                decide_vmi_sync(cache, config, now, &self.key, self.expectations, suffix)
            }
        }
    }
}

/// One sync of the VM controller, decided from the controller's cache with the world function
/// virt-controller uses (`None` when the VM is not cached as a typed object).
fn decide_vm_sync(
    cache: &Cache,
    config: &ClusterConfig,
    now: Now,
    key: &str,
    expectations: PendingExpectations,
    jitter: f64,
) -> Option<Plan> {
    let inputs = VmInputs {
        expectations,
        now,
        jitter,
        config,
    };
    vm_world(cache, key, inputs, |world| decide_vm(world).plan)
}
