//! The VM and VMI controllers' syncs: build the world from the caches, decide, execute, requeue.
//!
//! Everything KubeVirt-specific is in the decisions (`kvrs-decide`); which cached objects a
//! decision reads is `kvrs_runtime::world` (the simulator builds its worlds with the same
//! functions); running a plan against the API server is `kvrs-runtime`
//! ([`execute`] through [`ControllerApi`]). What is left here is drawing the clock and the random
//! numbers the decisions take as inputs, and logging each reconcile.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kvrs_decide::vm::decide_vm;
use kvrs_decide::vmi::{decide_vmi, launcher_renderer, pod_create_failed, pod_name_suffix};
use kvrs_decide::{Event, Now, Plan, WriteOp};
use kvrs_queue::Instant;
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::controller::{ControllerApi, RecordEvent, micros};
use kvrs_runtime::kube::kubevirt_config::LiveConfig;
use kvrs_runtime::world::{VmInputs, VmiInputs, vm_world, vmi_world};
use kvrs_runtime::{ApiErrorKind, ControllerExpectations, Executed, execute, requeue_async};
use tracing::{debug, info, warn};

use crate::caches::{Caches, Shared, lock};
use crate::config::ControllerConfig;
use crate::events::BackgroundEvents;
use crate::random;

/// What a sync needs besides its key.
pub struct Controllers {
    /// The caches.
    pub caches: Caches,
    /// Queues and expectations.
    pub shared: Arc<Shared>,
    /// The API.
    pub api: Arc<KubeApi>,
    /// Where events go (sent in the background, as client-go's recorder sends them).
    pub events: BackgroundEvents,
    /// The cluster configuration and launcher pod inputs, from the KubeVirt CR and the flags;
    /// each sync takes one snapshot (the jitter is drawn per pod).
    pub config: LiveConfig<ControllerConfig>,
    /// Metrics.
    pub metrics: Arc<crate::metrics::ControllerMetrics>,
}

impl RecordEvent for BackgroundEvents {
    fn record(&self, event: &Event) {
        BackgroundEvents::record(self, event);
    }
}

fn now() -> Now {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    Now::from_unix(i64::try_from(secs).unwrap_or(i64::MAX))
}

impl Controllers {
    /// One VM controller sync of `key`.
    pub async fn sync_vm(&self, key: &str) {
        let started = std::time::Instant::now();
        let config = self.config.current();
        let queue_now = self.shared.vm_queue.now();
        let expectations = lock(&self.shared.vm_expectations).pending(key, queue_now);
        let inputs = VmInputs {
            expectations,
            now: now(),
            jitter: random::unit(),
            config: &config.cluster,
        };
        let decided = vm_world(&self.caches, key, inputs, |world| {
            debug!(
                vmi_phase = world
                    .vmi
                    .and_then(|v| v.status.as_ref())
                    .and_then(|s| s.phase.as_deref()),
                revisions = world.revisions.len(),
                pending_creations = expectations.creations,
                pending_deletions = expectations.deletions,
                "deciding"
            );
            decide_vm(world)
        });
        let Some(decision) = decided else {
            lock(&self.shared.vm_expectations).forget(key);
            self.shared.vm_queue.forget(&key.to_string());
            return;
        };
        let (out, api) = self
            .run(&decision.plan, &self.shared.vm_expectations, queue_now)
            .await;
        self.finish("vm", key, &out, started, api);
        requeue_async(&self.shared.vm_queue, key, &out.queue);
    }

    /// One VMI controller sync of `key`.
    pub async fn sync_vmi(&self, key: &str) {
        let started = std::time::Instant::now();
        let config = self.config.current();
        let queue_now = self.shared.vmi_queue.now();
        let expectations = lock(&self.shared.vmi_expectations).pending(key, queue_now);
        let now = now();
        let inputs = VmiInputs {
            expectations,
            now,
            config: &config.cluster,
        };
        let decided = vmi_world(&self.caches, key, inputs, |world| {
            debug!(
                vmi_phase = world.vmi.status.as_ref().and_then(|s| s.phase.as_deref()),
                pods = world.pods.len(),
                pending_creations = expectations.creations,
                pending_deletions = expectations.deletions,
                "deciding"
            );
            let mut pod_inputs = config.pod_inputs.clone();
            pod_inputs.qemu_timeout_jitter_seconds = (random::u64() % 120) as u32;
            pod_inputs.vhost_net_available = self.caches.vhost_net_available();
            pod_inputs.pvcs = kvrs_decide::vmi::pvc_info::pod_claims(world.pvcs);
            let render = launcher_renderer(&config.cluster, &pod_inputs);
            let suffix = pod_name_suffix(random::u64());
            decide_vmi(world, &render, &suffix)
        });
        let Some((vmi, decision)) = decided else {
            lock(&self.shared.vmi_expectations).forget(key);
            self.shared.vmi_queue.forget(&key.to_string());
            return;
        };
        let (mut out, mut api) = self
            .run(&decision.plan, &self.shared.vmi_expectations, queue_now)
            .await;
        if let Some(failed) = &out.failed {
            let failed_write = out.failed_write.and_then(|i| decision.plan.writes().nth(i));
            let pod_create = failed_write
                .is_some_and(|w| w.resource == "pods" && matches!(w.op, WriteOp::Create { .. }));
            if pod_create {
                // KubeVirt records why the pod could not be created on the VMI, then retries.
                let forbidden = failed.kind == ApiErrorKind::Forbidden;
                let plan: Plan = pod_create_failed(&vmi, forbidden, &failed.message, now.unix());
                let (again, waited) = self
                    .run(&plan, &self.shared.vmi_expectations, queue_now)
                    .await;
                out.queue = again.queue;
                api += waited;
            }
        }
        self.finish("vmi", key, &out, started, api);
        requeue_async(&self.shared.vmi_queue, key, &out.queue);
    }

    /// Runs `plan` against the API server; also returns how long its writes waited on it.
    async fn run(
        &self,
        plan: &Plan,
        expectations: &Mutex<ControllerExpectations>,
        now: Instant,
    ) -> (Executed, Duration) {
        let mut fx = ControllerApi::new(&self.api, &self.events, expectations);
        let out = execute(plan, &mut fx, now).await;
        (out, fx.waited())
    }

    /// Logs the reconcile's end: its writes, how long it took from the key's dequeue (`took_us`)
    /// and how much of that was spent waiting on the API server (`api_us`).
    fn finish(
        &self,
        queue: &str,
        key: &str,
        out: &Executed,
        started: std::time::Instant,
        api: Duration,
    ) {
        let took_us = micros(started.elapsed());
        let api_us = micros(api);
        // A conflict is routine (a cache one write behind; the watch brings the newer version
        // and queues the key again): said at info, as KubeVirt's re-enqueue is. Anything else
        // is a warning.
        macro_rules! failed {
            ($level:ident, $e:expr) => {
                $level!(
                    queue,
                    object = key,
                    writes = out.writes_sent,
                    took_us,
                    api_us,
                    reason = $e.label(),
                    "reconcile failed: {}",
                    $e.message
                )
            };
        }
        if let Some(e) = &out.error {
            self.metrics.reconcile_error(queue, e.label());
            let conflict = out
                .failed
                .as_ref()
                .is_some_and(|f| f.kind == ApiErrorKind::Conflict);
            if conflict {
                failed!(info, e);
            } else {
                failed!(warn, e);
            }
        } else {
            // One line per reconcile: the burst benchmark counts reconciles and writes from it.
            debug!(
                queue,
                object = key,
                writes = out.writes_sent,
                took_us,
                api_us,
                "reconciled"
            );
        }
    }
}
