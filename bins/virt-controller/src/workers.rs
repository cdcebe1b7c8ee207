//! The VM and VMI controllers' syncs: read the caches, decide, execute, requeue.
//!
//! Everything KubeVirt-specific is in the decisions (`kvrs-decide`); everything about running a
//! plan is in `kvrs-runtime`. What is left here is reading the caches into a world and drawing
//! the clock and the random numbers the decisions take as inputs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube::runtime::reflector::ObjectRef;
use kvrs_api::names::labels;
use kvrs_api::{VirtualMachine, VirtualMachineInstance};
use kvrs_decide::patch::unchanged_by;
use kvrs_decide::vm::{Revision, VmWorld, decide_vm};
use kvrs_decide::vmi::{
    VmiWorld, decide_vmi, launcher_renderer, pod_create_failed, pod_name_suffix,
};
use kvrs_decide::{ApiWrite, Event, Expectation, Now, Plan, WriteOp};
use kvrs_queue::Instant;
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::kubevirt_config::LiveConfig;
use kvrs_runtime::{
    Api, ApiError, ApiErrorKind, ControllerExpectations, Executed, Expecting, execute,
    requeue_async,
};
use serde_json::Value;
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

/// The executor's effects for one controller: the shared API and that controller's expectations,
/// and how long the reconcile waited on the API server (reported in its `reconciled` line).
struct Fx<'a> {
    api: &'a KubeApi,
    events: &'a BackgroundEvents,
    expectations: &'a Mutex<ControllerExpectations>,
    waited: Duration,
}

/// `d` in whole microseconds, for the log (saturating; no duration here comes near the limit).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Sends one write, logs it when accepted (the burst benchmark reads each write's latency from
/// that line) and returns how long it took.
///
/// A conditional patch the server accepted without changing anything (it answers with the
/// version the patch tested) brings no watch event: an own update waiting to be observed is
/// lowered here, or the key would wait out the expectations' timeout (five minutes).
async fn timed_write(
    api: &KubeApi,
    expectations: &Mutex<ControllerExpectations>,
    write: &ApiWrite,
) -> (Result<(), ApiError>, Duration) {
    let start = std::time::Instant::now();
    let out = api.send(write).await;
    let took = start.elapsed();
    tracing::trace!(op = ?write.op, "the write");
    if let Ok(answered) = &out {
        debug!(
            verb = write.op.verb(),
            resource = %write.resource,
            sub = write.subresource.as_deref().unwrap_or(""),
            took_us = micros(took),
            "wrote"
        );
        if let (Some(e @ Expectation::ObservedUpdate { .. }), WriteOp::Patch { patch, .. }) =
            (&write.expectation, &write.op)
            && unchanged_by(patch, answered.as_deref())
        {
            debug!(
                object = %format!("{}/{}", write.namespace, write.name),
                "the patch changed nothing: no update to wait for"
            );
            lock(expectations).lower(e);
        }
    }
    (out.map(drop), took)
}

impl Api for Fx<'_> {
    async fn write(&mut self, write: &ApiWrite) -> Result<(), ApiError> {
        let (out, took) = timed_write(self.api, self.expectations, write).await;
        self.waited += took;
        out
    }

    /// All at once: each write has a connection of the client's pool to itself.
    async fn write_together(&mut self, writes: &[&ApiWrite]) -> Vec<Result<(), ApiError>> {
        let start = std::time::Instant::now();
        let (api, expectations) = (self.api, self.expectations);
        let out =
            futures::future::join_all(writes.iter().map(|w| timed_write(api, expectations, w)))
                .await;
        self.waited += start.elapsed();
        out.into_iter().map(|(result, _)| result).collect()
    }

    async fn event(&mut self, event: &Event) {
        self.events.record(event);
    }
}

impl Expecting for Fx<'_> {
    fn raise(&mut self, e: &Expectation, now: Instant) {
        lock(self.expectations).raise(e, now);
    }
    fn lower(&mut self, e: &Expectation) {
        lock(self.expectations).lower(e);
    }
}

fn now() -> Now {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    Now::from_unix(i64::try_from(secs).unwrap_or(i64::MAX))
}

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

fn in_namespace<K: kube::Resource>(store: &[Arc<K>], ns: &str) -> Vec<Arc<K>> {
    store
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns))
        .cloned()
        .collect()
}

fn to_values<K: serde::Serialize>(objs: &[Arc<K>]) -> Vec<Value> {
    objs.iter()
        .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
        .collect()
}

/// The ControllerRevision names a VM's matchers and status refs give.
fn referenced_revisions(vm: &VirtualMachine) -> Vec<String> {
    let mut names = Vec::new();
    let spec = [
        vm.spec
            .instancetype
            .as_ref()
            .and_then(|m| m.revision_name.clone()),
        vm.spec
            .preference
            .as_ref()
            .and_then(|m| m.revision_name.clone()),
    ];
    let status = vm.status.as_ref();
    let refs = [
        status.and_then(|s| s.instancetype_ref.as_ref()),
        status.and_then(|s| s.preference_ref.as_ref()),
    ]
    .into_iter()
    .flatten()
    .filter_map(|r| r.controller_revision_ref.as_ref()?.name.clone());
    names.extend(spec.into_iter().flatten().chain(refs));
    names
}

impl Controllers {
    /// One VM controller sync of `key`.
    pub async fn sync_vm(&self, key: &str) {
        let started = std::time::Instant::now();
        let config = self.config.current();
        let (ns, name) = split(key);
        let Some(vm) = self
            .caches
            .vms
            .get(&ObjectRef::<VirtualMachine>::new(name).within(ns))
        else {
            lock(&self.shared.vm_expectations).forget(key);
            self.shared.vm_queue.forget(&key.to_string());
            return;
        };
        let vmi = self
            .caches
            .vmis
            .get(&ObjectRef::<VirtualMachineInstance>::new(name).within(ns));
        let uid = vm.metadata.uid.clone().unwrap_or_default();
        let prefix = format!("revision-start-vm-{uid}");
        let named = referenced_revisions(&vm);
        // The VM's start revisions, and the instancetype and preference revisions it owns or
        // names (a `revisionName` may name one another VM stored).
        let revisions: Vec<_> = in_namespace(&self.caches.revisions.state(), ns)
            .into_iter()
            .filter(|r| {
                let name = r.metadata.name.as_deref().unwrap_or_default();
                let owned = r
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid);
                name.starts_with(&prefix) || owned || named.iter().any(|n| n == name)
            })
            .map(Revision::new)
            .collect();
        let instancetype_objects = if vm.spec.instancetype.is_some() || vm.spec.preference.is_some()
        {
            self.instancetype_objects(ns)
        } else {
            Vec::new()
        };
        let pvcs: Vec<_> = in_namespace(&self.caches.pvcs.state(), ns)
            .into_iter()
            .map(|p| p.as_ref().clone())
            .collect();
        let data_volumes = self
            .caches
            .data_volumes
            .as_ref()
            .map(|s| to_values(&in_namespace(&s.state(), ns)))
            .unwrap_or_default();
        let queue_now = self.shared.vm_queue.now();
        let expectations = lock(&self.shared.vm_expectations).pending(key, queue_now);
        let world = VmWorld {
            vm: &vm,
            vmi: vmi.as_deref(),
            revisions: &revisions,
            instancetype_objects: &instancetype_objects,
            data_volumes: &data_volumes,
            pvcs: &pvcs,
            expectations,
            now: now(),
            jitter: random::unit(),
            config: &config.cluster,
        };
        debug!(
            vmi_phase = vmi
                .as_ref()
                .and_then(|v| v.status.as_ref())
                .and_then(|s| s.phase.as_deref()),
            revisions = revisions.len(),
            pending_creations = expectations.creations,
            pending_deletions = expectations.deletions,
            "deciding"
        );
        let decision = decide_vm(&world);
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
        let (ns, name) = split(key);
        let Some(vmi) = self
            .caches
            .vmis
            .get(&ObjectRef::<VirtualMachineInstance>::new(name).within(ns))
        else {
            lock(&self.shared.vmi_expectations).forget(key);
            self.shared.vmi_queue.forget(&key.to_string());
            return;
        };
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        let pods: Vec<_> = in_namespace(&self.caches.pods.state(), ns)
            .into_iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::CREATED_BY))
                    == Some(&uid)
            })
            .collect();
        let vm = self
            .caches
            .vms
            .get(&ObjectRef::<VirtualMachine>::new(name).within(ns));
        let vms: Vec<VirtualMachine> = vm.iter().map(|v| v.as_ref().clone()).collect();
        let queue_now = self.shared.vmi_queue.now();
        let expectations = lock(&self.shared.vmi_expectations).pending(key, queue_now);
        let now = now();
        let world = VmiWorld {
            vmi: &vmi,
            pods: pods.iter().map(|p| p.as_ref()).collect(),
            vms: &vms,
            vm: vm.as_deref(),
            migrations: &[],
            expectations,
            now,
            config: &config.cluster,
        };
        debug!(
            vmi_phase = vmi.status.as_ref().and_then(|s| s.phase.as_deref()),
            pods = pods.len(),
            pending_creations = expectations.creations,
            pending_deletions = expectations.deletions,
            "deciding"
        );
        let mut inputs = config.pod_inputs.clone();
        inputs.qemu_timeout_jitter_seconds = (random::u64() % 120) as u32;
        inputs.vhost_net_available = self.caches.vhost_net_available();
        let render = launcher_renderer(&config.cluster, &inputs);
        let suffix = pod_name_suffix(random::u64());
        let decision = decide_vmi(&world, &render, &suffix);
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

    /// The cluster-wide instancetypes and preferences and those of `ns`, each with its kind (a
    /// list's items may come without one).
    fn instancetype_objects(&self, ns: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for (kind, store) in &self.caches.instancetypes {
            for o in store.state() {
                let namespace = o.metadata.namespace.as_deref();
                if namespace.is_some_and(|n| n != ns) {
                    continue;
                }
                if let Ok(mut v) = serde_json::to_value(o.as_ref()) {
                    v["apiVersion"] = Value::String("instancetype.kubevirt.io/v1beta1".into());
                    v["kind"] = Value::String((*kind).into());
                    out.push(v);
                }
            }
        }
        out
    }

    /// Runs `plan`; also returns how long its writes waited on the API server.
    async fn run(
        &self,
        plan: &Plan,
        expectations: &Mutex<ControllerExpectations>,
        now: Instant,
    ) -> (Executed, Duration) {
        let mut fx = Fx {
            api: &self.api,
            events: &self.events,
            expectations,
            waited: Duration::ZERO,
        };
        let out = execute(plan, &mut fx, now).await;
        (out, fx.waited)
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
                .is_some_and(|f| f.kind == kvrs_runtime::ApiErrorKind::Conflict);
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

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_decide::PatchType;
    use kvrs_runtime::kube::setup::connect;
    use kvrs_test_cluster::TestCluster;
    use serde_json::json;

    const NS: &str = "own-updates";

    /// A write of `pods own-updates/p` adding label `key`, conditional on `rv`, expecting to
    /// observe its own update (as the VMI controller's writes of a VMI it owns do).
    fn labelled(rv: &str, key: &str) -> ApiWrite {
        ApiWrite::new(
            "pods",
            NS,
            "p",
            WriteOp::Patch {
                patch_type: PatchType::Json,
                patch: json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                    {"op": "add", "path": format!("/metadata/labels/{key}"), "value": "yes"},
                ]),
            },
        )
        .expecting(Expectation::ObservedUpdate {
            key: format!("{NS}/p"),
        })
    }

    /// Against a real kube-apiserver: an own patch that changed nothing brings no watch event,
    /// so its expectation is lowered as the write returns; one that changed the object is left
    /// for the watch to observe.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_own_patch_that_changed_nothing_is_not_waited_for() {
        let cluster = tokio::task::block_in_place(|| TestCluster::apiserver_with_namespace(NS));
        let client = connect(Some(cluster.admin_kubeconfig_path()))
            .await
            .expect("a client for the test cluster");
        let api = KubeApi::new(client, "kvrs-test", "own-updates");
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": NS, "labels": {"first": "yes"}},
            "spec": {"containers": [{"name": "c", "image": "example.org/c:1"}]},
        });
        let created = api
            .send(&ApiWrite::new(
                "pods",
                NS,
                "p",
                WriteOp::Create { object: pod },
            ))
            .await
            .expect("create")
            .expect("a resourceVersion");
        let key = format!("{NS}/p");
        let expectations = Mutex::new(ControllerExpectations::new());
        let now = Instant::ZERO;
        let pending = |e: &Mutex<ControllerExpectations>| lock(e).pending(&key, now).creations;

        // (label, whether the patch changes the pod, what is left pending after it)
        for (label, changes, left) in [("first", false, 0), ("second", true, 1)] {
            let write = labelled(&created, label);
            lock(&expectations).raise(write.expectation.as_ref().unwrap(), now);
            let (out, _) = timed_write(&api, &expectations, &write).await;
            out.expect("a label patch");
            // Unchanged: no event will come, so it is not waited for; changed: its watch
            // event is still to be observed.
            assert_eq!(pending(&expectations), left, "{label} (changes: {changes})");
        }
    }
}
