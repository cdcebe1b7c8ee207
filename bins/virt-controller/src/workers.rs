//! The VM, VMI and migration controllers' syncs: build the world from the caches, decide,
//! execute, requeue.
//!
//! Everything KubeVirt-specific is in the decisions (`kvrs-decide`); which cached objects a
//! decision reads is `kvrs_runtime::world` (the simulator builds its worlds with the same
//! functions); running a plan against the API server is `kvrs-runtime`
//! ([`execute`] through [`ControllerApi`]). What is left here is drawing the clock and the random
//! numbers the decisions take as inputs, and logging each reconcile.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kvrs_decide::migration::{
    MigrationDecision, MigrationWorld, decide_migration, target_renderer,
};
use kvrs_decide::vm::{data_volume_create_failed, decide_vm};
use kvrs_decide::vmi::{
    attachment_pod_create_failed, decide_vmi, is_attachment_pod_object, launcher_renderer,
    pod_create_failed, pod_name_suffix,
};
use kvrs_decide::{Event, Now, Plan, WriteOp};
use kvrs_queue::Instant;
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::controller::{ControllerApi, RecordEvent, micros};
use kvrs_runtime::kube::kubevirt_config::LiveConfig;
use kvrs_runtime::world::{
    ControllerCache, MigrationInputs, VmInputs, VmiInputs, migration_world, vm_world, vmi_world,
};
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

/// Whether the hand-off of a plan that hands a migration off reached the API server: its VMI
/// write (the only one such a plan has) was not stopped by a failure at or before it. KubeVirt
/// remembers the hand-off only once its VMI patch succeeded.
/// Held by the migration sync that creates a target pod, from its final decision until its
/// writes are done (see [`Controllers::sync_migration`]).
static TARGET_POD_GATE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn hand_off_written(plan: &Plan, out: &Executed) -> bool {
    let Some(at) = plan
        .writes()
        .position(|w| w.resource == "virtualmachineinstances")
    else {
        return false;
    };
    out.failed_write.is_none_or(|failed| failed > at)
}

/// The wall clock, as the decisions take it.
pub(crate) fn now() -> Now {
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
        let (mut out, mut api) = self
            .run(&decision.plan, &self.shared.vm_expectations, queue_now)
            .await;
        if let Some(failed) = &out.failed {
            let failed_write = out.failed_write.and_then(|i| decision.plan.writes().nth(i));
            let data_volume = failed_write
                .filter(|w| w.resource == "datavolumes" && matches!(w.op, WriteOp::Create { .. }));
            if let (Some(w), Some(vm)) = (data_volume, self.caches.vm(key)) {
                // KubeVirt warns on the VM that the DataVolume could not be created, then
                // retries.
                let plan = data_volume_create_failed(&vm, &w.name, &failed.message);
                let (again, waited) = self
                    .run(&plan, &self.shared.vm_expectations, queue_now)
                    .await;
                out.queue = again.queue;
                out.error = again.error;
                api += waited;
            }
        }
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
            let attachment_pod = failed_write.is_some_and(
                |w| matches!(&w.op, WriteOp::Create { object } if is_attachment_pod_object(object)),
            );
            if attachment_pod {
                let plan = attachment_pod_create_failed(&vmi, &failed.message);
                let (again, waited) = self
                    .run(&plan, &self.shared.vmi_expectations, queue_now)
                    .await;
                out.queue = again.queue;
                api += waited;
            } else if pod_create {
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

    /// One migration controller sync of `key`.
    ///
    /// Besides the world, the shell keeps what KubeVirt's controller keeps in memory: the
    /// key's pod expectations (and every key's pending creations, which hold back new target
    /// pods) and whether it handed the migration off, until the migration is gone.
    pub async fn sync_migration(&self, key: &str) {
        let started = std::time::Instant::now();
        let config = self.config.current();
        let queue_now = self.shared.migration_queue.now();
        let mut decided = self.decide_migration_key(key, &config, queue_now);
        // A plan that creates a target pod is decided again, and run, under the gate: the
        // parallel limits count the target pods already created or expected, and two workers
        // deciding at once would each see the other's pod neither created nor expected yet
        // (three migrations leaving one node got three target pods under a limit of two).
        let creates_pod = decided.as_ref().is_some_and(|d| {
            d.plan
                .writes()
                .any(|w| w.resource == "pods" && matches!(w.op, WriteOp::Create { .. }))
        });
        let _gate = if creates_pod {
            let gate = TARGET_POD_GATE.lock().await;
            decided = self.decide_migration_key(key, &config, queue_now);
            Some(gate)
        } else {
            None
        };
        let Some(decision) = decided else {
            // The migration is gone: so are its expectations and its hand-off.
            lock(&self.shared.migration_expectations).forget(key);
            lock(&self.shared.handed_off).remove(key);
            self.shared.migration_queue.forget(&key.to_string());
            return;
        };
        let (out, api) = self
            .run(
                &decision.plan,
                &self.shared.migration_expectations,
                queue_now,
            )
            .await;
        if decision.handed_off && hand_off_written(&decision.plan, &out) {
            lock(&self.shared.handed_off).insert(key.to_string());
        }
        self.finish("migration", key, &out, started, api);
        requeue_async(&self.shared.migration_queue, key, &out.queue);
    }

    /// The migration decision of `key` from the caches and expectations as they are now
    /// (`None`: the migration is gone).
    fn decide_migration_key(
        &self,
        key: &str,
        config: &ControllerConfig,
        queue_now: Instant,
    ) -> Option<MigrationDecision> {
        let (expectations, pending_creations_anywhere) = {
            let e = lock(&self.shared.migration_expectations);
            let anywhere = e.objects.all_pending_creations().max(0);
            (
                e.pending(key, queue_now),
                u32::try_from(anywhere).unwrap_or(u32::MAX),
            )
        };
        let handed_off = lock(&self.shared.handed_off).contains(key);
        let inputs = MigrationInputs {
            expectations,
            pending_creations_anywhere,
            handed_off,
            now: now(),
            config: &config.cluster,
        };
        migration_world(&self.caches, key, inputs, |world| {
            debug!(
                phase = world
                    .migration
                    .pointer("/status/phase")
                    .and_then(|p| p.as_str()),
                vmi = world.vmi().is_some(),
                handed_off,
                pending_creations = expectations.creations,
                pending_deletions = expectations.deletions,
                pending_creations_anywhere,
                "deciding"
            );
            let ns = key.split_once('/').map_or("", |(ns, _)| ns);
            let mut pod_inputs = config.pod_inputs.clone();
            pod_inputs.qemu_timeout_jitter_seconds = (random::u64() % 120) as u32;
            pod_inputs.vhost_net_available = self.caches.vhost_net_available();
            pod_inputs.pvcs = kvrs_decide::vmi::pvc_info::pod_claims(&self.caches.pvcs(ns));
            let render = target_renderer(&config.cluster, &pod_inputs);
            let suffix = pod_name_suffix(random::u64());
            // The MigrationPolicies and namespace labels the hand-off resolves the VMI's
            // migration configuration with.
            let migration_config = world.migration_config.clone().with_policies(
                self.caches.migration_policies(),
                self.caches.namespace_labels(),
            );
            let world = MigrationWorld {
                migration_config: &migration_config,
                ..world.clone()
            };
            decide_migration(&world, &render, &suffix)
        })
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
