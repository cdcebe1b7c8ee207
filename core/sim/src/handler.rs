//! virt-handler in the simulator: one per node, with a node-filtered VMI cache, a work queue,
//! and kvrs's handler decision; launcher commands go to the node's fake launchers.

use std::collections::HashMap;
use std::time::Duration;

use kvrs_queue::{Instant, WorkQueue};

use kvrs_decide::handler::{
    HandlerConfig, HandlerWorld, LauncherCall, NodeFacts, NodeStep, decide,
};
use kvrs_decide::{ApiWrite, Event, Now};
use kvrs_runtime::ready::run_ready;
use kvrs_runtime::{Api, ApiError, Launcher, Node, execute_handler, requeue};

use super::cache::Cache;
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
    pub config: HandlerConfig,
}

impl HandlerProc {
    pub fn new() -> Self {
        Self {
            cache: Cache::default(),
            queue: WorkQueue::new(),
            own_writes: HashMap::new(),
            config: HandlerConfig::default(),
        }
    }

    pub fn observe(&mut self, ev: &WatchEvent, now: Instant) {
        if ev.resource != res::VMIS {
            return;
        }
        self.cache.apply(ev);
        if let Some(n) = self.own_writes.get_mut(&ev.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.own_writes.remove(&ev.key);
            }
        }
        self.queue.add(ev.key.clone(), now);
    }

    pub fn reset_cache(&mut self, cache: Cache, domain_keys: Vec<String>, now: Instant) {
        self.cache = cache;
        self.own_writes.clear();
        let keys: Vec<String> = self.cache.iter(res::VMIS).map(|(k, _)| k.clone()).collect();
        for k in keys.into_iter().chain(domain_keys) {
            self.queue.add(k, now);
        }
    }
}

impl Sim {
    pub(super) fn run_handler(&mut self, n: usize) {
        let budget = self.handlers[n].queue.len() + 16;
        for _ in 0..budget {
            let now = self.now;
            let Some(key) = self.handlers[n].queue.get(now) else {
                break;
            };
            self.sync_handler(n, &key);
            let now = self.now;
            self.handlers[n].queue.done(&key, now);
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

    fn sync_handler(&mut self, n: usize, key: &str) {
        self.stats.handler_syncs += 1;
        let vmi_obj = self.handlers[n].cache.get(res::VMIS, key).cloned();
        let vmi = vmi_obj.as_deref().and_then(Obj::vmi);
        let domain = self.nodes[n].domains.get(key).cloned();
        let vmi_uid = vmi.and_then(|v| v.metadata.uid.clone()).unwrap_or_default();
        let domain_uid = domain
            .as_ref()
            .map(|d| d.uid().to_string())
            .unwrap_or_default();
        let uid = if vmi_uid.is_empty() {
            domain_uid.clone()
        } else {
            vmi_uid.clone()
        };
        let mut facts = NodeFacts {
            launcher: self.nodes[n].launcher_facts(&uid),
            old_launcher: self.nodes[n].launcher_facts(&domain_uid),
            expectations_satisfied: Some(!self.handlers[n].own_writes.contains_key(key)),
            ..Default::default()
        };
        let now = Now::from_unix(self.now_unix());
        let node_name = self.nodes[n].name.clone();
        let config = self.handlers[n].config.clone();
        let decide_now = |facts: &NodeFacts| {
            decide(&HandlerWorld {
                node: &node_name,
                key,
                now,
                vmi,
                domain: domain.as_ref(),
                facts,
                config: &config,
            })
        };
        let mut fx = HandlerFx {
            sim: self,
            node: n,
            key,
            uid: &uid,
        };
        let Ok(out) = run_ready(execute_handler(decide_now, &mut facts, vmi, &mut fx)) else {
            self.stats.failed_writes += 1;
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
