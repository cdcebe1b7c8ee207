//! The evacuation controller's shell (KubeVirt's `watch/drain/evacuation`): keyed by node, it
//! creates the migrations that move VMIs off a node carrying the drain taint, or off the node
//! virt-api's eviction webhook marked them on. What to create is
//! `kvrs_decide::evacuation::decide_evacuation`; this file keeps the caches it reads, turns
//! their events into node keys, and runs the plans.
//!
//! It keeps its own Node, VMI and migration caches rather than reading the other controllers':
//! the expectation of a migration it created is lowered by the same watch event that puts the
//! migration in the cache it decides from, so a sync can never see the expectation met but the
//! migration missing — which would create a second migration for the VMI.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api as KubeResourceApi, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kvrs_api::VirtualMachineInstance;
use kvrs_decide::evacuation::{EvacuationWorld, decide_evacuation, names};
use kvrs_decide::vmi::pod_name_suffix;
use kvrs_queue::AsyncQueue;
use kvrs_runtime::kube::controller::{ControllerApi, micros};
use kvrs_runtime::{ControllerExpectations, execute, requeue_async};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::caches::lock;
use crate::migration_cache::{migration_json, migration_resource};
use crate::random;
use crate::workers::Controllers;

/// KubeVirt's default `evacuationControllerThreads`.
pub const WORKERS: usize = 3;

/// The evacuation controller: its caches, queue and expectations.
pub struct Evacuation {
    controllers: Arc<Controllers>,
    nodes: Store<Node>,
    vmis: Store<VirtualMachineInstance>,
    migrations: Store<DynamicObject>,
    /// Node names.
    pub queue: AsyncQueue<String>,
    /// Migration creations under each node's name.
    expectations: Mutex<ControllerExpectations>,
    /// UIDs of the migrations seen so far: the first sighting of one the controller created
    /// fulfils a creation expectation (a relist replays the others).
    seen: Mutex<HashSet<String>>,
}

/// What one watched object means to the controller.
enum Touched {
    Node(String),
    Vmi(Arc<VirtualMachineInstance>),
    Migration(Arc<DynamicObject>),
}

/// Starts the controller's watches; returns it and their tasks. The caches are ready when
/// [`Evacuation::wait_until_ready`] returns.
pub fn start(
    client: &kube::Client,
    controllers: Arc<Controllers>,
) -> (Arc<Evacuation>, Vec<JoinHandle<()>>) {
    let (nodes, node_writer) = reflector::store::<Node>();
    let (vmis, vmi_writer) = reflector::store::<VirtualMachineInstance>();
    let migration_writer = reflector::store::Writer::new(migration_resource());
    let migrations = migration_writer.as_reader();
    let queue = AsyncQueue::from_queue(
        kvrs_queue::WorkQueue::new().with_metrics(controllers.metrics.queue_hooks("evacuation")),
    );
    let evac = Arc::new(Evacuation {
        controllers,
        nodes,
        vmis,
        migrations,
        queue,
        expectations: Mutex::new(ControllerExpectations::new()),
        seen: Mutex::new(HashSet::new()),
    });
    let all = watcher::Config::default();
    let mut tasks = Vec::new();
    let e = evac.clone();
    let stream = reflector::reflector(
        node_writer,
        watcher::watcher(KubeResourceApi::<Node>::all(client.clone()), all.clone())
            .default_backoff(),
    )
    .touched_objects()
    .map(|r| r.map(|n| Touched::Node(n.metadata.name.clone().unwrap_or_default())));
    tasks.push(tokio::spawn(e.follow(stream)));
    let e = evac.clone();
    let stream = reflector::reflector(
        vmi_writer,
        watcher::watcher(
            KubeResourceApi::<VirtualMachineInstance>::all(client.clone()),
            all.clone(),
        )
        .default_backoff(),
    )
    .touched_objects()
    .map(|r| r.map(|v| Touched::Vmi(Arc::new(v))));
    tasks.push(tokio::spawn(e.follow(stream)));
    let e = evac.clone();
    let stream = reflector::reflector(
        migration_writer,
        watcher::watcher(
            KubeResourceApi::<DynamicObject>::all_with(client.clone(), &migration_resource()),
            all,
        )
        .default_backoff(),
    )
    .touched_objects()
    .map(|r| r.map(|m| Touched::Migration(Arc::new(m))));
    tasks.push(tokio::spawn(e.follow(stream)));
    (evac, tasks)
}

fn node_of(vmi: &VirtualMachineInstance) -> Option<String> {
    vmi.status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

impl Evacuation {
    /// Waits until the three caches have listed once.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await?;
        self.vmis.wait_until_ready().await?;
        self.migrations.wait_until_ready().await
    }

    /// Turns the events of one watch (already applied to its cache) into node keys, as
    /// KubeVirt's event handlers do: a node its own key, a VMI its node, a migration the node it
    /// evacuates or its VMI's node.
    async fn follow(
        self: Arc<Self>,
        stream: impl futures::Stream<Item = Result<Touched, watcher::Error>>,
    ) {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let node = match event {
                Ok(Touched::Node(name)) => Some(name),
                Ok(Touched::Vmi(v)) => node_of(&v),
                Ok(Touched::Migration(m)) => self.migration_node(&m),
                Err(e) => {
                    warn!("evacuation watch error, relisting after backoff: {e}");
                    None
                }
            };
            if let Some(n) = node {
                self.queue.add(n);
            }
        }
    }

    fn migration_node(&self, m: &DynamicObject) -> Option<String> {
        let first_sighting = m
            .metadata
            .uid
            .as_ref()
            .is_some_and(|uid| lock(&self.seen).insert(uid.clone()));
        if let Some(node) = m
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::EVACUATION_MIGRATION))
        {
            if first_sighting {
                lock(&self.expectations)
                    .objects
                    .creation_observed(&node.clone());
            }
            return Some(node.clone());
        }
        let ns = m.metadata.namespace.as_deref().unwrap_or_default();
        let vmi = m.data.pointer("/spec/vmiName").and_then(Value::as_str)?;
        let v = self.vmis.get(&reflector::ObjectRef::new(vmi).within(ns))?;
        node_of(&v)
    }

    /// The drain taint key and the cluster's eviction strategy, from the KubeVirt CR when the
    /// cache holds exactly one.
    fn cluster_settings(&self) -> (String, Option<String>) {
        let crs = self
            .controllers
            .caches
            .kubevirts
            .as_ref()
            .map(|s| s.state())
            .unwrap_or_default();
        let conf = match crs.as_slice() {
            [one] => one.data.pointer("/spec/configuration").cloned(),
            _ => None,
        }
        .unwrap_or(Value::Null);
        let taint = conf
            .pointer("/migrations/nodeDrainTaintKey")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(names::DEFAULT_DRAIN_TAINT_KEY)
            .to_string();
        let strategy = conf
            .get("evictionStrategy")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from);
        (taint, strategy)
    }

    /// One sync of node `key` (KubeVirt's `execute`).
    pub async fn sync_node(&self, key: &str) {
        let started = std::time::Instant::now();
        let queue_now = self.queue.now();
        let Some(node) = self.nodes.get(&reflector::ObjectRef::new(key)) else {
            lock(&self.expectations).forget(key);
            self.queue.forget(&key.to_string());
            return;
        };
        let expectations = lock(&self.expectations).pending(key, queue_now);
        let vmis: Vec<Arc<VirtualMachineInstance>> = self
            .vmis
            .state()
            .into_iter()
            .filter(|v| node_of(v).as_deref() == Some(key))
            .collect();
        let migrations: Vec<Value> = self
            .migrations
            .state()
            .iter()
            .filter_map(|m| migration_json(m))
            .collect();
        let pods = self.controllers.caches.pods.state();
        let (taint, strategy) = self.cluster_settings();
        let world = EvacuationWorld {
            node: &node,
            vmis: vmis.iter().map(|v| &**v).collect(),
            migrations: &migrations,
            pods: pods.iter().map(|p| &**p).collect(),
            expectations,
            drain_taint_key: &taint,
            cluster_strategy: strategy.as_deref(),
            now: crate::workers::now(),
        };
        let plan = decide_evacuation(&world, &|_| pod_name_suffix(random::u64()));
        let creates = plan.writes().count();
        if creates > 0 {
            info!(
                node = key,
                vmis = vmis.len(),
                migrations = creates,
                "evacuating"
            );
        }
        let c = &self.controllers;
        let mut fx = ControllerApi::new(&c.api, &c.events, &self.expectations);
        let out = execute(&plan, &mut fx, queue_now).await;
        let took_us = micros(started.elapsed());
        match &out.error {
            Some(e) => {
                c.metrics.reconcile_error("evacuation", e.label());
                warn!(
                    queue = "evacuation",
                    object = key,
                    writes = out.writes_sent,
                    took_us,
                    reason = e.label(),
                    "reconcile failed: {}",
                    e.message
                );
            }
            None => debug!(
                queue = "evacuation",
                object = key,
                writes = out.writes_sent,
                took_us,
                "reconciled"
            ),
        }
        requeue_async(&self.queue, key, &out.queue);
    }
}
