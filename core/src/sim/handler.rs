//! virt-handler in the simulator: one per node, with a node-filtered VMI cache, a work queue,
//! and kvrs's handler decision; launcher commands go to the node's fake launchers.

use std::collections::HashMap;
use std::time::Duration;

use kvrs_queue::{Instant, WorkQueue};

use super::cache::Cache;
use super::store::{Obj, WatchEvent, res};
use super::{Proc, Sim};
use crate::decide::handler::scenario::status_write;
use crate::decide::handler::{HandlerConfig, HandlerWorld, NodeFacts, NodeStep, QueueOp, decide};
use k8s_openapi::jiff::Timestamp;

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
        let now = Timestamp::from_second(self.now_unix()).unwrap_or(Timestamp::UNIX_EPOCH);
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
        let mut plan = decide_now(&facts);
        // Run the launcher commands in order; a failure is fed back and decided again.
        for call in plan.launcher_calls.clone() {
            if let Err(e) = self.launcher_call(n, key, &uid, vmi, call) {
                facts.launcher_errors.insert(call.name().to_string(), e);
                plan = decide_now(&facts);
                break;
            }
        }
        if self.traced(key) {
            eprintln!(
                "[{:?}] handler{n} sync {key}: {:?} calls {:?} status {:?} queue {:?} err {:?}",
                self.elapsed(),
                plan.decision,
                plan.launcher_calls,
                plan.status.as_ref().map(|s| s.phase.clone()),
                plan.queue,
                plan.error
            );
        }
        for step in &plan.node_steps {
            if let NodeStep::Cleanup { uid } = step {
                let gone = self.nodes[n]
                    .domains
                    .get(key)
                    .is_some_and(|d| d.uid() == uid && (d.is_deleted() || !d.is_alive()));
                if gone {
                    self.nodes[n].domains.remove(key);
                }
            }
        }
        let mut write_failed = false;
        if let (Some(status), Some(v)) = (&plan.status, vmi) {
            let w = status_write(v, status);
            match self.send_writes(
                std::slice::from_ref(&w),
                super::virt_controller::ExpectationsOf::None,
            ) {
                Ok(()) => {
                    *self.handlers[n]
                        .own_writes
                        .entry(key.to_string())
                        .or_default() += 1
                }
                Err(_) => write_failed = true,
            }
        }
        let now = self.now;
        let q = &mut self.handlers[n].queue;
        for op in &plan.queue {
            match op {
                QueueOp::AddAfter { delay_seconds } => {
                    q.add_after(key.to_string(), Duration::from_secs(*delay_seconds), now);
                }
                QueueOp::AddRateLimited => {
                    q.add_rate_limited(key.to_string(), now);
                }
                QueueOp::Forget if write_failed => {
                    q.add_rate_limited(key.to_string(), now);
                }
                QueueOp::Forget => q.forget(&key.to_string()),
            }
        }
    }
}
