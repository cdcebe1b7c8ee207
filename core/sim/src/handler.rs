//! virt-handler in the simulator: one per node, with a node-filtered VMI cache, a work queue,
//! and kvrs's handler decision; launcher commands go to the node's fake launchers.

use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kvrs_queue::{Instant, WorkQueue};

use kvrs_decide::handler::facts::{GuestInfo, LauncherFacts, PodInterface};
use kvrs_decide::handler::retry::RetryState;
use kvrs_decide::handler::{
    Domain, HandlerConfig, HandlerPlan, HandlerWorld, LauncherCall, NodeFacts, NodeStep, decide,
};
use kvrs_decide::{ApiWrite, Event, Now};
use kvrs_executor::ready::run_ready;
use kvrs_executor::world::{HandlerSources, HandlerSubject, VmiRef, handler_inputs};
use kvrs_executor::{Api, ApiError, Launcher, Node, execute_handler, requeue};

use super::cache::{Cache, Replaced};
use super::decider::Decision;
use super::kubelet;
use super::store::{Obj, WatchEvent, res};
use super::virt_controller::ControllerFx;
use super::writes::Writer;
use super::{Proc, Sim};
use crate::api::VirtualMachineInstance;

/// One virt-handler.
pub(super) struct HandlerProc {
    pub cache: Cache,
    pub queue: WorkQueue<String>,
    /// Own status writes not yet seen back through the informer, by key.
    pub own_writes: HashMap<String, u32>,
    pub config: Arc<HandlerConfig>,
}

impl HandlerProc {
    pub(crate) fn new() -> Self {
        Self {
            cache: Cache::default(),
            queue: WorkQueue::new(),
            own_writes: HashMap::new(),
            config: Arc::new(HandlerConfig::default()),
        }
    }

    /// Returns what the cache let go.
    pub(crate) fn observe(&mut self, ev: &WatchEvent, now: Instant) -> Replaced {
        if ev.resource != res::VMIS {
            return Replaced::default();
        }
        let replaced = self.cache.apply(ev);
        if let Some(n) = self.own_writes.get_mut(&ev.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.own_writes.remove(&ev.key);
            }
        }
        self.queue.add(ev.key.clone(), now);
        replaced
    }

    pub(crate) fn reset_cache(&mut self, cache: Cache, domain_keys: Vec<String>, now: Instant) {
        self.cache = cache;
        self.own_writes.clear();
        let keys: Vec<String> = self.cache.iter(res::VMIS).map(|(k, _)| k.clone()).collect();
        for k in keys.into_iter().chain(domain_keys) {
            self.queue.add(k, now);
        }
    }
}

impl Sim {
    /// Runs handlers `nodes`, in that order, as [`Sim::run_handler`] runs one: the syncs of the
    /// keys each has ready now are decided up front, as one pass on both threads
    /// ([`crate::decider`]), and executed in queue order. A decision reads only its node's
    /// facts about its own key (the handler's cache, which only a delivered event changes; the
    /// key's domain, launcher and own writes, which only the key's own sync changes), so the
    /// plans are the ones the syncs would decide one at a time. Keys queued again while they
    /// ran are then run one at a time, as before.
    pub(super) fn run_handlers(&mut self, nodes: &[usize]) {
        let now = self.now;
        let mut jobs = Vec::new();
        // Per handler: the jobs taken for the pass, and the budget left after them.
        let mut counts = Vec::with_capacity(nodes.len());
        for &n in nodes {
            let budget = self.handlers[n].queue.len() + 16;
            let (mut taken, mut decided) = (0, 0);
            while taken < budget {
                let Some(key) = self.handlers[n].queue.get(now) else {
                    break;
                };
                taken += 1;
                match self.handler_job(n, &key) {
                    Some(job) => {
                        jobs.push(job);
                        decided += 1;
                    }
                    None => self.stalled_sources(n, key),
                }
            }
            counts.push((decided, budget - taken));
        }
        let mut pass = self.decider.submit((), jobs);
        for (&n, (decided, left)) in nodes.iter().zip(counts) {
            for _ in 0..decided {
                if let Some((job, plan)) = self.decider.next_plan(&mut pass) {
                    self.execute_handler_job(job, plan);
                }
            }
            self.finish_handler(n, left);
        }
    }

    /// Runs one handler: its ready keys in queue order, each decided then executed.
    pub(super) fn run_handler(&mut self, n: usize) {
        let budget = self.handlers[n].queue.len() + 16;
        self.finish_handler(n, budget);
    }

    /// Runs up to `budget` more of handler `n`'s ready keys one at a time, then schedules its
    /// next wake-up.
    fn finish_handler(&mut self, n: usize, budget: usize) {
        for _ in 0..budget {
            let now = self.now;
            let Some(key) = self.handlers[n].queue.get(now) else {
                break;
            };
            match self.handler_job(n, &key) {
                Some(job) => {
                    let plan = job.decide(&());
                    self.execute_handler_job(&job, plan);
                }
                None => self.stalled_sources(n, key),
            }
        }
        let now = self.now;
        self.handlers[n].queue.handle_timeout(now);
        let next = if self.handlers[n].queue.is_empty() {
            self.handlers[n].queue.next_wakeup()
        } else {
            Some(self.now + Duration::from_millis(1))
        };
        self.schedule_wakeup(Proc::Handler(n), next);
    }

    /// What handler `n`'s sync of `key` is decided from, as its node shows it now, gathered by
    /// the world function virt-handler uses. `None` (the key then done) only if the simulated
    /// node's sources awaited something, which they never do.
    fn handler_job(&self, n: usize, key: &str) -> Option<HandlerJob> {
        let now = Now::from_unix(self.now_unix());
        let mut sources = SimNode {
            handler: &self.handlers[n],
            node: &self.nodes[n],
        };
        let (subject, facts) = run_ready(handler_inputs(&mut sources, key, now)).ok()?;
        Some(HandlerJob {
            node: n,
            node_name: self.nodes[n].name.clone(),
            subject,
            facts,
            config: Arc::clone(&self.handlers[n].config),
            now,
        })
    }

    /// A sync whose sources did not answer at once (a bug in the simulated node): counted as
    /// the executor's stalls are, and the key let go.
    fn stalled_sources(&mut self, n: usize, key: String) {
        self.stats.failed_writes += 1;
        let now = self.now;
        self.handlers[n].queue.done(&key, now);
    }

    /// Executes a handler sync's plan (deciding again after a failed step, as the shell does)
    /// and marks the key done.
    fn execute_handler_job(&mut self, job: &HandlerJob, plan: HandlerPlan) {
        self.stats.handler_syncs += 1;
        let n = job.node;
        let key = job.subject.key.as_str();
        let vmi = job.subject.vmi();
        let mut facts = job.facts.clone();
        let mut first = Some(plan);
        let decide_now =
            |facts: &NodeFacts| first.take().unwrap_or_else(|| decide(&job.world(facts)));
        let mut fx = HandlerFx {
            sim: self,
            node: n,
            key,
            uid: &job.subject.uid,
        };
        let Ok(out) = run_ready(execute_handler(decide_now, &mut facts, vmi, &mut fx)) else {
            self.stats.failed_writes += 1;
            let now = self.now;
            self.handlers[n].queue.done(&job.subject.key, now);
            return;
        };
        if self.traced(key) {
            eprintln!(
                "[{:?}] handler{n} sync {key}: {:?} actions {:?} status {:?} queue {:?} err {:?}",
                self.elapsed(),
                out.plan.decision,
                out.plan
                    .plan
                    .actions
                    .iter()
                    .map(|a| a.label())
                    .collect::<Vec<_>>(),
                out.plan.status.as_ref().map(|s| s.phase.clone()),
                out.queue,
                out.error
            );
        }
        if out.status_written {
            *self.handlers[n]
                .own_writes
                .entry(key.to_string())
                .or_default() += 1;
        }
        let now = self.now;
        requeue(&mut self.handlers[n].queue, key, &out.queue, now);
        self.handlers[n].queue.done(&job.subject.key, now);
    }
}

/// One handler sync's inputs, gathered on the simulator's thread: everything its decision
/// reads, so it can be decided on either thread.
pub(crate) struct HandlerJob {
    node: usize,
    node_name: String,
    /// The key, its VMI and domain, and the UID the sync's launcher commands are for.
    subject: HandlerSubject<CachedVmi>,
    facts: NodeFacts,
    config: Arc<HandlerConfig>,
    now: Now,
}

impl HandlerJob {
    fn world<'a>(&'a self, facts: &'a NodeFacts) -> HandlerWorld<'a> {
        self.subject
            .world(&self.node_name, self.now, facts, &self.config)
    }
}

/// A VMI of a handler's cache, shared with it.
#[derive(Clone, Debug)]
pub(crate) struct CachedVmi(Arc<Obj>);

impl VmiRef for CachedVmi {
    fn vmi(&self) -> Option<&VirtualMachineInstance> {
        self.0.vmi()
    }
}

/// One handler's key as its simulated node shows it: the handler's VMI cache and own writes,
/// the node's domains and fake launchers. What the simulated node does not have it answers with
/// nothing, here rather than in a copy of the world function.
struct SimNode<'s> {
    handler: &'s HandlerProc,
    node: &'s kubelet::Node,
}

impl HandlerSources for SimNode<'_> {
    type Vmi = CachedVmi;

    fn vmi(&self, key: &str) -> Option<CachedVmi> {
        self.handler
            .cache
            .get(res::VMIS, key)
            .cloned()
            .map(CachedVmi)
    }

    fn domain(&self, key: &str) -> Option<Domain> {
        self.node.domains.get(key).cloned()
    }

    /// None: the simulated handler reads no VMI outside its node cache.
    async fn vmi_outside_node(&mut self, _: &str) -> Option<CachedVmi> {
        None
    }

    async fn launcher(
        &mut self,
        uid: &str,
        _: Option<&VirtualMachineInstance>,
        _: &str,
    ) -> LauncherFacts {
        self.node.launcher_facts(uid)
    }

    async fn old_launcher(&mut self, uid: &str, _: &str) -> LauncherFacts {
        self.node.launcher_facts(uid)
    }

    /// Nothing to keep: the node's domains are the simulated libvirt's own, and the next sync
    /// marks a domain of a launcher still gone again.
    fn domain_lost(&mut self, _: &Domain) {}

    /// Empty: the fake node sets up no pod network.
    fn pod_interface_cache(&self, _: &str) -> BTreeMap<String, PodInterface> {
        BTreeMap::new()
    }

    /// None: the simulated guests run no agent.
    async fn guest_info(&mut self, _: &str) -> Option<GuestInfo> {
        None
    }

    fn expectations_satisfied(&self, key: &str, _: Option<&VirtualMachineInstance>) -> bool {
        !self.handler.own_writes.contains_key(key)
    }

    /// None: simulated domains never pause on an IO error.
    fn io_error_retry(&self, _: &str) -> Option<RetryState> {
        None
    }
}

impl Decision for HandlerJob {
    type Context = ();
    type Plan = HandlerPlan;

    fn decide(&self, _: &()) -> HandlerPlan {
        decide(&self.world(&self.facts))
    }
}

/// The simulator as one handler's effects: status writes to the simulated API server, launcher
/// commands to the node's fake launchers, node steps on the node's fake domains.
struct HandlerFx<'s> {
    sim: &'s mut Sim,
    node: usize,
    key: &'s str,
    uid: &'s str,
}

impl Api for HandlerFx<'_> {
    async fn write(&mut self, w: &ApiWrite) -> Result<(), ApiError> {
        let mut fx = ControllerFx {
            sim: &mut *self.sim,
            controller: None,
            writer: Writer::Handler(self.node),
        };
        fx.write(w).await
    }

    async fn event(&mut self, _: &Event) {}
}

impl Launcher for HandlerFx<'_> {
    async fn call(
        &mut self,
        vmi: Option<&VirtualMachineInstance>,
        call: LauncherCall,
    ) -> Result<(), String> {
        self.sim
            .launcher_call(self.node, self.key, self.uid, vmi, call)
    }
}

impl Node for HandlerFx<'_> {
    async fn step(
        &mut self,
        _: Option<&VirtualMachineInstance>,
        step: &NodeStep,
    ) -> Result<(), String> {
        // The fake node prepares nothing; cleaning up drops a dead domain of that UID.
        if let NodeStep::Cleanup { uid } = step {
            let domains = &mut self.sim.nodes[self.node].domains;
            let gone = domains
                .get(self.key)
                .is_some_and(|d| d.uid() == uid && (d.is_deleted() || !d.is_alive()));
            if gone {
                domains.remove(self.key);
            }
        }
        Ok(())
    }
}
