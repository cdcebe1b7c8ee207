//! A deterministic simulator of a KubeVirt cluster driven by kvrs's pure decisions.
//!
//! One process-free event loop on a virtual clock (like quinn-proto's test `Pair`; a large pass
//! of virt-controller's pure decisions is computed on a second thread while this one executes
//! the plans, which changes nothing a run does, only how long it takes):
//! an in-memory API server with resourceVersions, UIDs, finalizers and garbage collection
//! ([`store`]); informer caches fed by watch events that arrive late, out of step between
//! processes, or not at all until the next relist ([`cache`]); virt-controller running the VM
//! decision ([`kvrs_decide::vm::decide_vm`]) and a VMI controller; one virt-handler per node
//! running [`kvrs_decide::handler::decide`]; a fake scheduler and kubelet that bind launcher pods
//! to nodes and make them Ready; fake libvirt domains that run, shut down or crash. Every process
//! uses the kvrs-queue work queue and expectations exactly as the binaries do, runs its plans
//! through `kvrs-executor`'s executor, and builds its decisions' worlds with the binaries' own
//! functions ([`kvrs_executor::world`]): the simulator's caches and fake node answer the same
//! questions the cluster's informers and launchers do, and say "none" where a simulated cluster
//! has nothing (instancetypes, PVCs, DataVolumes, guest agents).
//!
//! Faults (watch lag, dropped events, API conflicts, domain crashes, restarts of the controllers)
//! are drawn from one seeded generator, so a failing run is reproduced by its seed.
//!
//! ## A simulation
//!
//! Configure the cluster and its faults ([`SimConfig`]), act as a user would ([`Sim::create_vm`],
//! [`Sim::set_run_strategy`], [`Sim::delete_vm`]), run virtual time ([`Sim::run_until`],
//! [`Sim::run_for`]) and read the outcome: the API server's objects ([`Sim::api`]) and the
//! invariants checked on every write ([`Sim::violations`]: a VM with two VMIs, a VMI with two
//! running launcher pods, a controller write dropping a third party's label).
//!
//! ```
//! use kvrs_sim::{Sim, SimConfig};
//!
//! // Two nodes; one watch event in ten lost until the next relist.
//! let mut sim = Sim::new(SimConfig { nodes: 2, drop_probability: 0.1, seed: 7, ..SimConfig::default() });
//! sim.create_vm(&Sim::vm("demo", "Always"));
//! assert!(sim.run_until(|s| s.vmi_phase("default/demo") == Some("Running"), 120));
//! assert_eq!(sim.running_vmis(), 1);
//!
//! // `Halted`: the VM controller stops the VMI, virt-handler shuts the domain down.
//! sim.set_run_strategy("default/demo", "Halted");
//! assert!(sim.run_until(|s| s.vmi_phase("default/demo").is_none(), 120));
//! assert_eq!(sim.running_vmis(), 0);
//! assert_eq!(sim.violations(), &[] as &[String]);
//! ```
//!
//! The VMI controller runs [`kvrs_decide::vmi::decide_vmi`] with a reduced launcher pod (the
//! decision takes the pod renderer as a parameter).

#![warn(unreachable_pub)]

pub mod cache;
mod decider;
mod handler;
mod kubelet;
pub mod rng;
pub mod store;
mod virt_controller;
mod vmi_controller;
pub mod writes;

// The API crate's module under the name the code here has always used.
use kvrs_api::api;

use foldhash::{HashMap, HashMapExt};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use kvrs_queue::Instant;
use serde_json::{Value, json};

use cache::Cache;
use kvrs_admission::ClusterConfig;
use kvrs_decide::small_json::ScanPointer;
use rng::Rng;
use store::{ApiServer, Obj, WatchEvent, res};

/// 2026-01-01T00:00:00Z: virtual time zero.
pub const EPOCH_UNIX: i64 = 1_767_225_600;

/// Marker a third party puts on every VM and VMI; no controller write may drop it.
pub const MARKER_LABEL: &str = "sim.kvrs.io/marker";

/// What the simulated cluster looks like and which faults it injects.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Worker nodes (`node01`, `node02`, ...).
    pub nodes: usize,
    /// Seed of every random draw.
    pub seed: u64,
    /// Watch delivery lag range in milliseconds, drawn per event and process.
    pub watch_lag_ms: (u64, u64),
    /// Probability that a watch event never reaches a process (until its next relist).
    pub drop_probability: f64,
    /// Probability that a controller's API write fails with a conflict.
    pub conflict_probability: f64,
    /// Probability that a started domain crashes some time later.
    pub crash_probability: f64,
    /// Mean interval between restarts of a controller process (virt-controller or a handler), if any.
    pub restart_every_s: Option<u64>,
    /// How often each process relists everything (recovers dropped events).
    pub relist_every_s: u64,
    /// Faults stop after this much virtual time.
    pub faults_for_s: u64,
    /// Scheduler delay range (ms).
    pub schedule_delay_ms: (u64, u64),
    /// Pod start (image pull, containers ready) delay range (ms).
    pub pod_start_delay_ms: (u64, u64),
    /// Guest ACPI shutdown duration range (ms).
    pub guest_shutdown_ms: (u64, u64),
    /// Decide batches of syncs on a second thread too, and drop garbage there (the `decider`
    /// module). Off, everything runs on the simulator's thread: the run is the same (a test pins
    /// that), only slower.
    pub second_thread: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            seed: 1,
            watch_lag_ms: (1, 50),
            drop_probability: 0.0,
            conflict_probability: 0.0,
            crash_probability: 0.0,
            restart_every_s: None,
            relist_every_s: 30,
            faults_for_s: 0,
            schedule_delay_ms: (10, 200),
            pod_start_delay_ms: (200, 2000),
            guest_shutdown_ms: (100, 3000),
            second_thread: true,
        }
    }
}

/// A process that owns a cache and queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Proc {
    /// virt-controller (VM and VMI controllers share its caches).
    Controller,
    /// virt-handler of node index `n`.
    Handler(usize),
}

/// Something that happens at a virtual time.
#[derive(Debug)]
enum Ev {
    Deliver(Proc, WatchEvent),
    Wake(Proc),
    Relist(Proc),
    Restart(Proc),
    Kubelet(kubelet::KubeletEv),
    Notify(usize, String),
}

struct Timed {
    at: Instant,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Counters of a run.
#[derive(Clone, Debug, Default)]
pub struct SimStats {
    /// Syncs run by the VM controller.
    pub vm_syncs: u64,
    /// Syncs run by the VMI controller.
    pub vmi_syncs: u64,
    /// Syncs run by all handlers.
    pub handler_syncs: u64,
    /// Watch events dropped.
    pub dropped_events: u64,
    /// Controller restarts.
    pub restarts: u64,
    /// Domains crashed.
    pub crashes: u64,
    /// Writes that failed (conflicts, failed tests, ...).
    pub failed_writes: u64,
    /// Syncs of virt-controller held back because its cache had not yet seen the process's own
    /// write of the key (the write's event queues the key again).
    pub held_back_syncs: u64,
    /// The refused writes of kvrs's controllers by writer, target and cause.
    pub failed_by: writes::FailedWrites,
    /// The VMI controller's readiness-gate patches (`pods/status`) that succeeded.
    pub pod_status_patches: u64,
    /// Of those, the ones that patched a pod the VMI controller had already patched to the same
    /// state (its reconcile ran on a pod cache that had not shown its own patch yet).
    pub repeated_pod_status_patches: u64,
    /// The pods and the last readiness-gate state the VMI controller patched them to.
    pub pod_status_patched: std::collections::BTreeMap<String, String>,
}

/// The simulated cluster.
pub struct Sim {
    cfg: SimConfig,
    now: Instant,
    seq: u64,
    heap: BinaryHeap<Reverse<Timed>>,
    rng: Rng,
    /// The API server.
    pub api: ApiServer,
    ctrl: virt_controller::VirtController,
    handlers: Vec<handler::HandlerProc>,
    nodes: Vec<kubelet::Node>,
    runnable: Vec<Proc>,
    /// When each process's watch of each resource last delivered: one watch stream per process
    /// and resource, in order within it, as kube-apiserver's watches are; two resources' streams
    /// may overtake each other (a VMI update before the pod update written first).
    last_delivery: HashMap<(Proc, &'static str), Instant>,
    /// Node index by node name, so routing a VMI event does not scan every node.
    node_index: HashMap<String, usize>,
    /// Handlers whose cache holds a VMI key (ascending), kept in step with every change to a
    /// handler cache: routing a VMI event reads it instead of asking every handler.
    vmi_holders: HashMap<String, Vec<usize>>,
    violations: Vec<String>,
    tracker: invariants::Tracker,
    flushing: bool,
    /// Counters.
    pub stats: SimStats,
    /// Shared with the thread that decides virt-controller's syncs.
    config: std::sync::Arc<ClusterConfig>,
    /// That thread.
    decider: decider::Decider,
    /// When set, decisions and writes for this key are printed to stderr (debugging aid).
    pub trace: Option<String>,
}

impl Sim {
    /// A cluster with `cfg.nodes` empty nodes.
    pub fn new(cfg: SimConfig) -> Self {
        let nodes: Vec<kubelet::Node> = (0..cfg.nodes)
            .map(|i| kubelet::Node::new(format!("node{:02}", i + 1)))
            .collect();
        let handlers = nodes.iter().map(|_| handler::HandlerProc::new()).collect();
        let mut sim = Self {
            rng: Rng::new(cfg.seed),
            now: Instant::ZERO,
            seq: 0,
            heap: BinaryHeap::new(),
            api: ApiServer::default(),
            ctrl: virt_controller::VirtController::default(),
            handlers,
            nodes,
            runnable: Vec::new(),
            last_delivery: HashMap::new(),
            node_index: HashMap::new(),
            vmi_holders: HashMap::new(),
            violations: Vec::new(),
            tracker: invariants::Tracker::default(),
            flushing: false,
            stats: SimStats::default(),
            config: std::sync::Arc::new(ClusterConfig::default()),
            decider: decider::Decider::new(cfg.second_thread),
            trace: None,
            cfg,
        };
        sim.node_index = sim
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        if sim.cfg.drop_probability > 0.0 {
            for p in sim.procs() {
                let at = sim.jitter_s(sim.cfg.relist_every_s);
                sim.at(at, Ev::Relist(p));
            }
        }
        if let Some(every) = sim.cfg.restart_every_s {
            for p in sim.procs() {
                let at = sim.jitter_s(every.saturating_mul(2));
                sim.at(at, Ev::Restart(p));
            }
        }
        sim
    }

    /// A VM named `name` in `default` with this run strategy and a small guest.
    pub fn vm(name: &str, run_strategy: &str) -> Value {
        json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "runStrategy": run_strategy,
                "template": {
                    "metadata": {"labels": {"kubevirt.io/vm": name}},
                    "spec": {
                        "domain": {"devices": {}, "memory": {"guest": "128Mi"}},
                        "terminationGracePeriodSeconds": 5
                    }
                }
            }
        })
    }

    fn procs(&self) -> Vec<Proc> {
        std::iter::once(Proc::Controller)
            .chain((0..self.nodes.len()).map(Proc::Handler))
            .collect()
    }

    fn jitter_s(&mut self, max_s: u64) -> Instant {
        self.now + Duration::from_millis(self.rng.range(1, max_s.max(1) * 1000))
    }

    fn at(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse(Timed {
            at,
            seq: self.seq,
            ev,
        }));
    }

    fn faults_on(&self) -> bool {
        self.now < Instant::ZERO + Duration::from_secs(self.cfg.faults_for_s)
    }

    /// The run's work in one line, then the refused writes by class: what the scale scenario
    /// and its profiling example print.
    pub fn work_summary(&self) -> String {
        let s = &self.stats;
        format!(
            "syncs vm {} vmi {} handler {} ({} held back behind own writes); {} successful \
             writes\n{}",
            s.vm_syncs,
            s.vmi_syncs,
            s.handler_syncs,
            s.held_back_syncs,
            self.api.stats.writes,
            s.failed_by
        )
    }

    /// Virtual seconds since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - Instant::ZERO
    }

    /// Seconds since the epoch at the current virtual time.
    pub fn now_unix(&self) -> i64 {
        EPOCH_UNIX.saturating_add(i64::try_from(self.elapsed().as_secs()).unwrap_or(i64::MAX))
    }

    /// Creates a VM as a user would.
    pub fn create_vm(&mut self, vm: &Value) {
        let now = self.now_unix();
        if let Ok(key) = self.api.create(res::VMS, vm.clone(), now) {
            self.api
                .third_party_edit_fields(res::VMS, &key, &["metadata"], |v| {
                    v["metadata"]["labels"][MARKER_LABEL] = json!("kept");
                });
        }
        self.flush_events();
    }

    /// Deletes a VM as a user would.
    pub fn delete_vm(&mut self, key: &str) {
        let now = self.now_unix();
        let _ = self.api.delete(res::VMS, key, None, now);
        self.flush_events();
    }

    /// Changes a VM's run strategy as a user would.
    pub fn set_run_strategy(&mut self, key: &str, strategy: &str) {
        self.api.third_party_edit(res::VMS, key, |v| {
            v["spec"]["runStrategy"] = json!(strategy);
            let g = v
                .at("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            v["metadata"]["generation"] = json!(g + 1);
        });
        self.flush_events();
    }

    /// The phase of a VMI in the API server.
    pub fn vmi_phase(&self, key: &str) -> Option<&str> {
        match &**self.api.object(res::VMIS, key)? {
            Obj::Vmi(vmi) => vmi.status.as_ref()?.phase.as_deref(),
            Obj::Other(v) => v.at("/status/phase")?.as_str(),
            Obj::Vm(_) => None,
        }
    }

    /// How many VMIs the API server holds in phase `Running` (a counter kept with every write,
    /// not a list).
    pub fn running_vmis(&self) -> usize {
        self.api.running_vmis()
    }

    /// Invariant violations seen so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Runs until `done(self)` holds or `max_s` virtual seconds passed; returns whether it held.
    /// `done` is checked every 100 ms of virtual time (it may be expensive on big clusters).
    pub fn run_until(&mut self, mut done: impl FnMut(&Sim) -> bool, max_s: u64) -> bool {
        let deadline = self.now + Duration::from_secs(max_s);
        loop {
            if done(self) {
                return true;
            }
            let slice = (self.now + Duration::from_millis(100)).min(deadline);
            while self.step(slice) {}
            if self.now >= deadline {
                return done(self);
            }
        }
    }

    /// Runs for `secs` virtual seconds.
    pub fn run_for(&mut self, secs: u64) {
        let deadline = self.now + Duration::from_secs(secs);
        while self.step(deadline) {}
    }

    /// One round: run every runnable process, then advance to the next event. `false` when
    /// nothing is left before `deadline`.
    fn step(&mut self, deadline: Instant) -> bool {
        self.run_runnable();
        let Some(Reverse(next)) = self.heap.peek() else {
            self.now = self.now.max(deadline);
            return false;
        };
        if next.at > deadline {
            self.now = deadline;
            return false;
        }
        self.now = self.now.max(next.at);
        while let Some(Reverse(t)) = self.heap.peek() {
            if t.at > self.now {
                break;
            }
            let Some(Reverse(t)) = self.heap.pop() else {
                break;
            };
            self.handle(t.ev);
        }
        true
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver(p, w) => self.deliver(p, &w),
            Ev::Wake(p) => self.mark_runnable(p),
            Ev::Relist(p) => {
                // Relists go on after the faults stop: they are how informers recover.
                self.relist(p);
                let at = self.jitter_s(self.cfg.relist_every_s);
                self.at(at, Ev::Relist(p));
            }
            Ev::Restart(p) => {
                if self.faults_on() {
                    self.restart(p);
                    if let Some(every) = self.cfg.restart_every_s {
                        let at = self.jitter_s(every.saturating_mul(2));
                        self.at(at, Ev::Restart(p));
                    }
                }
            }
            Ev::Kubelet(k) => self.kubelet_event(k),
            Ev::Notify(node, key) => {
                let now = self.now;
                self.handlers[node].queue.add(key, now);
                self.mark_runnable(Proc::Handler(node));
            }
        }
    }

    fn mark_runnable(&mut self, p: Proc) {
        if !self.runnable.contains(&p) {
            self.runnable.push(p);
        }
    }

    /// Sends the API server's new watch events to the processes and the kubelet.
    fn flush_events(&mut self) {
        // Hooks below write too; their events are picked up by this loop, in order.
        if self.flushing {
            return;
        }
        self.flushing = true;
        loop {
            let events = self.api.take_events();
            if events.is_empty() {
                break;
            }
            for ev in events {
                self.dispatch(ev);
            }
        }
        self.flushing = false;
    }

    fn dispatch(&mut self, ev: WatchEvent) {
        {
            self.check_event(&ev);
            self.kubelet_observe(&ev);
            let targets: Vec<Proc> = match ev.resource {
                res::VMIS => {
                    let mut t = vec![Proc::Controller];
                    t.extend(self.handler_targets(&ev));
                    t
                }
                _ => vec![Proc::Controller],
            };
            for p in targets {
                if self.faults_on() && self.rng.chance(self.cfg.drop_probability) {
                    self.stats.dropped_events += 1;
                    continue;
                }
                let lag = Duration::from_millis(
                    self.rng
                        .range(self.cfg.watch_lag_ms.0, self.cfg.watch_lag_ms.1),
                );
                let stream = (p, ev.resource);
                let last = self
                    .last_delivery
                    .get(&stream)
                    .copied()
                    .unwrap_or(Instant::ZERO);
                let at = (self.now + lag).max(last);
                self.last_delivery.insert(stream, at);
                self.at(at, Ev::Deliver(p, ev.clone()));
            }
        }
    }

    /// Handlers that watch this VMI: the node it is labelled for, and any node that has it cached.
    fn handler_targets(&self, ev: &WatchEvent) -> Vec<Proc> {
        let node_of = |o: Option<&std::sync::Arc<store::Obj>>| {
            o.and_then(|o| o.vmi())
                .and_then(|v| v.metadata.labels.as_ref())
                .and_then(|l| l.get("kubevirt.io/nodeName"))
                .cloned()
        };
        let label = node_of(ev.obj.as_ref()).or_else(|| node_of(ev.old.as_ref()));
        let labelled = label.and_then(|l| self.node_index.get(&l).copied());
        let holders = self.vmi_holders.get(&ev.key).map_or(&[][..], Vec::as_slice);
        // Ascending node order, as a scan of every node would produce (the RNG draws per target
        // depend on that order).
        let mut out: Vec<usize> = holders.to_vec();
        if let Some(i) = labelled
            && let Err(pos) = out.binary_search(&i)
        {
            out.insert(pos, i);
        }
        debug_assert!(out.iter().all(|&i| i < self.handlers.len()));
        out.into_iter().map(Proc::Handler).collect()
    }

    /// Records whether handler `n`'s cache now holds VMI `key`.
    fn set_holder(&mut self, n: usize, key: &str, held: bool) {
        if held {
            let v = self.vmi_holders.entry(key.to_string()).or_default();
            if let Err(pos) = v.binary_search(&n) {
                v.insert(pos, n);
            }
        } else if let Some(v) = self.vmi_holders.get_mut(key) {
            if let Ok(pos) = v.binary_search(&n) {
                v.remove(pos);
            }
            if v.is_empty() {
                self.vmi_holders.remove(key);
            }
        }
    }

    /// Rebuilds handler `n`'s entries in [`Self::vmi_holders`] from its cache (after a relist).
    fn reindex_holder(&mut self, n: usize) {
        self.vmi_holders.retain(|_, v| {
            v.retain(|&i| i != n);
            !v.is_empty()
        });
        let keys: Vec<String> = self.handlers[n]
            .cache
            .iter(res::VMIS)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.set_holder(n, &k, true);
        }
    }

    fn deliver(&mut self, p: Proc, ev: &WatchEvent) {
        match p {
            Proc::Controller => {
                let now = self.now;
                let replaced = self.ctrl.observe(ev, now);
                self.decider.keep(replaced);
            }
            Proc::Handler(n) => {
                let now = self.now;
                let replaced = self.handlers[n].observe(ev, now);
                self.decider.keep(replaced);
                if ev.resource == res::VMIS {
                    let held = self.handlers[n].cache.get(res::VMIS, &ev.key).is_some();
                    self.set_holder(n, &ev.key, held);
                }
            }
        }
        self.mark_runnable(p);
    }

    /// Replaces a process's cache with the API server's current state and requeues every key,
    /// as an informer relist does.
    fn relist(&mut self, p: Proc) {
        let now = self.now;
        match p {
            Proc::Controller => {
                let mut c = Cache::default();
                for r in [res::VMS, res::VMIS, res::PODS, res::REVISIONS] {
                    for (k, o) in self.api.list(r) {
                        c.set(r, k, Some(o.clone()));
                    }
                }
                self.ctrl.reset_cache(c, now);
            }
            Proc::Handler(n) => {
                let node = self.nodes[n].name.clone();
                let mut c = Cache::default();
                for (k, o) in self.api.list(res::VMIS) {
                    let on_node = o
                        .vmi()
                        .and_then(|v| v.metadata.labels.as_ref())
                        .and_then(|l| l.get("kubevirt.io/nodeName"))
                        .is_some_and(|l| *l == node);
                    if on_node {
                        c.set(res::VMIS, k, Some(o.clone()));
                    }
                }
                let domains: Vec<String> = self.nodes[n].domains.keys().cloned().collect();
                self.handlers[n].reset_cache(c, domains, now);
                self.reindex_holder(n);
            }
        }
        self.mark_runnable(p);
    }

    /// Restarts a process: every in-memory state (queues, expectations, caches) is lost.
    fn restart(&mut self, p: Proc) {
        self.stats.restarts += 1;
        match p {
            Proc::Controller => self.ctrl = virt_controller::VirtController::default(),
            Proc::Handler(n) => self.handlers[n] = handler::HandlerProc::new(),
        }
        self.relist(p);
    }

    /// Runs the runnable processes, last marked first; consecutive handlers run together
    /// ([`Sim::run_handlers`]: their syncs are decided as one pass).
    fn run_runnable(&mut self) {
        while !self.runnable.is_empty() {
            let order: Vec<Proc> = self.runnable.drain(..).rev().collect();
            let mut i = 0;
            while i < order.len() {
                if order[i] == Proc::Controller {
                    self.run_controller();
                    i += 1;
                    continue;
                }
                let handlers: Vec<usize> = order[i..]
                    .iter()
                    .map_while(|p| match p {
                        Proc::Handler(n) => Some(*n),
                        Proc::Controller => None,
                    })
                    .collect();
                i += handlers.len();
                match handlers.as_slice() {
                    [n] => self.run_handler(*n),
                    _ if !self.cfg.second_thread => {
                        for n in handlers {
                            self.run_handler(n);
                        }
                    }
                    _ => self.run_handlers(&handlers),
                }
            }
        }
    }

    /// Schedules a wake-up of `p` when its earliest delayed key is due.
    fn schedule_wakeup(&mut self, p: Proc, next: Option<Instant>) {
        if let Some(t) = next {
            let t = t.max(self.now + Duration::from_millis(1));
            self.at(t, Ev::Wake(p));
        }
    }

    fn traced(&self, key: &str) -> bool {
        self.trace.as_deref() == Some(key)
    }

    fn record_violation(&mut self, v: String) {
        if self.violations.len() < 100 {
            self.violations.push(format!("t={:?}: {v}", self.elapsed()));
        }
    }
}

mod invariants;
