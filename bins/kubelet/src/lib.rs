//! kvrs's pod runner: the kubelet of one node, for virt-launcher pods.
//!
//! `kvrs run` has no real kubelet, and the full-cluster end-to-end test wants one that runs
//! kvrs's launcher on this machine; both use [`Kubelet`]. It talks to the API only through
//! [`kube::Client`]: it watches the pods bound to its node (`spec.nodeName=<node>`) and for each
//! 1. plans it — a pure function, [`plan::plan_pod`]: Pod + [`KubeletConfig`] → [`PodPlan`] of
//!    network namespace, directories, files, and each container's OCI runtime spec
//!    ([`PodPlan::runtime_spec`] for the main `compute` container, [`plan::SidecarPlan`] for
//!    every other regular container: root filesystem, mounts, namespaces, cgroup, devices,
//!    user, capabilities, seccomp, environment and command);
//! 2. sets it up on the host ([`host`]): a network namespace with `eth0` (the pod IP), emptyDirs
//!    under the pods directory where virt-handler looks for the `sockets` one, configMap, secret,
//!    projected and downwardAPI volumes as files, claims bound to `hostPath`/`local` PVs (their
//!    objects read first, [`volumes::fetch`]), each container's bundle (its root filesystem's
//!    directory, `/run`, `config.json`) and the pod's `/etc`;
//! 3. runs each container with runc ([`pod_exec`]): a container as a Kubernetes node makes it —
//!    its own read-only root filesystem (not the host's `/`: for a container running a command,
//!    its image's `/usr` when the image resolves to a directory, else only the host's libraries,
//!    data and the launcher's programs, [`root`]; the image's own file tree for one running its
//!    image's entrypoint; the pod's `/etc`, its own `/run`, `/tmp`, `/dev`), its own PID, mount,
//!    IPC, UTS and cgroup namespaces, the pod's network namespace, a cgroup of its own, the user,
//!    capabilities, `no_new_privs` and seccomp profile its securityContext asks for (KubeVirt's
//!    launcher and hook sidecars: UID 107, no capabilities but `NET_BIND_SERVICE`), each volume
//!    at its mount path (emptyDirs shared by the pod's containers, a `subPath` made as the
//!    kubelet makes it) and only the device nodes it requested;
//! 4. reports `pods/status` ([`status`]): Running, a status per container, Ready once the
//!    launcher's command socket exists and every other container runs, Succeeded/Failed with
//!    the main container's exit code;
//! 5. on deletion stops every container (SIGTERM, grace period, SIGKILL), `runc delete --force`
//!    of each, removes everything it made and deletes the pod with grace 0 and a UID
//!    precondition.
//!
//! The pod lives as long as its main container (`compute`): a sidecar that ends early is
//! reported terminated and not restarted, and the sidecars are stopped once the main container
//! ends (they only serve it). Init containers are not run: in KubeVirt's pods they only copy
//! helper binaries (image-volume mode) or, as a `restartPolicy: Always` init container, only
//! tail the serial log into the pod's log (`guest-console-log`).
//! Images are not pulled: [`ImageMap`] and [`BinaryMap`] say which local directories and
//! binaries stand for them, and [`ImageMap::set_entrypoint`] what a container that has no
//! `command` (a hook sidecar) runs from its image's directory.

mod config;
mod error;
pub mod host;
pub mod limits;
pub mod names;
pub mod node;
pub mod oci;
pub mod plan;
pub mod pod_exec;
pub mod root;
pub mod runc;
mod sidecars;
pub mod state;
pub mod status;
pub mod volumes;
mod worker;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use config::{BinaryMap, ImageMap, KubeletConfig, PodAddress, PodCidr};
pub use error::{ConfigError, HostError, KubeletError, PlanError};
pub use plan::{PodKey, PodPlan, plan_pod, plan_pod_on, plan_pod_with};
pub use volumes::VolumeObjects;

use worker::Ctx;

/// How often the Node's status (its Ready heartbeat) is refreshed.
const NODE_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// The pod runner of one node. See the crate docs.
pub struct Kubelet {
    client: kube::Client,
    config: KubeletConfig,
}

struct PodTask {
    pods: watch::Sender<Option<Pod>>,
    handle: JoinHandle<()>,
}

impl Kubelet {
    /// A runner for `config.node_name` using `client`.
    pub fn new(client: kube::Client, mut config: KubeletConfig) -> Self {
        if config.memory_capacity.is_none() {
            config.memory_capacity = node::memory_capacity();
        }
        if config.oom_score_floor.is_none() {
            config.oom_score_floor = node::oom_score_floor();
        }
        Self { client, config }
    }

    /// Runs pods until `shutdown` resolves, then stops every pod it runs (SIGTERM, each pod's
    /// grace period, SIGKILL), waits for all of them and removes what they left (processes,
    /// network namespaces, veths, directories) before returning.
    ///
    /// Pods found bound to this node at start whose container is no longer running are marked
    /// Failed, not restarted; containers that still run (the runner itself was killed) are
    /// adopted. Errors only when the runtime cannot run or is a runc without the November 2025
    /// fixes ([`runc::check`]), the state directory is unusable or the Node cannot be
    /// registered; API errors while running are logged and retried.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), KubeletError> {
        let config = self.config;
        // Before anything is made: a runc without the November 2025 fixes is refused.
        runc::check(&config.runtime, config.allow_vulnerable_runtime).await?;
        for d in [
            &config.state_dir.join("pods"),
            &config.state_dir.join("logs"),
            &config.pods_dir,
        ] {
            std::fs::create_dir_all(d).map_err(HostError::io(d))?;
        }
        let cgroup_root = host::cgroup_root(&config.node_name);
        if cgroup_root.is_none() {
            warn!("no writable cgroup2: a pod's processes are left to runc alone to stop");
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let facts = node::NodeFacts::of_this_machine(
            &config.node_name,
            config.host_ip,
            config.pod_cidr.slots().min(110),
            config.node_labels.clone(),
        );
        if config.register_node {
            node::register(&nodes, &facts, &status::now()).await?;
            info!(node = %config.node_name, "Node registered");
        }
        let mut records: HashMap<String, state::PodRecord> = state::load_all(&config.state_dir)
            .into_iter()
            .map(|r| (r.key.uid.clone(), r))
            .collect();
        let slots = records.values().map(|r| r.slot).collect();
        let node_name = config.node_name.clone();
        let bind = config.bind_unscheduled;
        let register = config.register_node;
        let ctx = Arc::new(Ctx {
            client: self.client.clone(),
            config,
            cgroup_root,
            slots: Mutex::new(slots),
        });

        let mut background = Vec::new();
        if bind {
            background.push(tokio::spawn(bind_unscheduled(
                self.client.clone(),
                node_name.clone(),
            )));
        }
        if register {
            background.push(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(NODE_HEARTBEAT).await;
                    if let Err(e) = node::register(&nodes, &facts, &status::now()).await {
                        warn!(error = %e, "Node heartbeat");
                    }
                }
            }));
        }

        let (stop_tx, stop_rx) = watch::channel(false);
        let pods: Api<Pod> = Api::all(self.client.clone());
        let wc = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
        let mut events = std::pin::pin!(watcher::watcher(pods, wc).default_backoff());
        let mut tasks: HashMap<String, PodTask> = HashMap::new();
        let mut done: HashSet<String> = HashSet::new();
        let mut listing: Option<HashSet<String>> = None;
        let mut swept = false;
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let ev = tokio::select! {
                () = &mut shutdown => break,
                ev = events.next() => ev,
            };
            let Some(ev) = ev else { break };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    warn!(error = %e, "pod watch");
                    continue;
                }
            };
            tasks.retain(|uid, t| {
                if t.handle.is_finished() {
                    done.insert(uid.clone());
                    false
                } else {
                    true
                }
            });
            match ev {
                Event::Init => listing = Some(HashSet::new()),
                Event::InitApply(pod) | Event::Apply(pod) => {
                    if let (Some(l), Some(uid)) = (listing.as_mut(), pod.metadata.uid.clone()) {
                        l.insert(uid);
                    }
                    dispatch(&ctx, &mut tasks, &done, &mut records, &stop_rx, pod);
                }
                Event::Delete(pod) => {
                    if let Some(t) = pod.metadata.uid.as_ref().and_then(|u| tasks.get(u)) {
                        let _ = t.pods.send(None);
                    }
                }
                Event::InitDone => {
                    let seen = listing.take().unwrap_or_default();
                    // Pods that vanished while the watch was down.
                    for (uid, t) in &tasks {
                        if !seen.contains(uid) {
                            let _ = t.pods.send(None);
                        }
                    }
                    if !swept {
                        swept = true;
                        sweep(&ctx, &seen, &mut records).await;
                    }
                }
            }
        }
        info!(pods = tasks.len(), "shutting down: stopping every pod");
        let _ = stop_tx.send(true);
        for (_, t) in tasks {
            let _ = t.handle.await;
        }
        for b in background {
            b.abort();
        }
        host::remove_node_dirs(&ctx.config.node_name, &ctx.config.oci_runtime());
        Ok(())
    }
}

/// Starts a worker for a pod seen for the first time, or hands the new version to its worker.
fn dispatch(
    ctx: &Arc<Ctx>,
    tasks: &mut HashMap<String, PodTask>,
    done: &HashSet<String>,
    records: &mut HashMap<String, state::PodRecord>,
    stop: &watch::Receiver<bool>,
    pod: Pod,
) {
    let key = match PodKey::of(&pod) {
        Ok(k) => k,
        Err(e) => {
            warn!(error = %e, "ignoring a pod without identity");
            return;
        }
    };
    if let Some(t) = tasks.get(&key.uid) {
        let _ = t.pods.send(Some(pod));
        return;
    }
    if done.contains(&key.uid) {
        return;
    }
    let (tx, rx) = watch::channel(Some(pod));
    let record = records.remove(&key.uid);
    let handle = tokio::spawn(worker::run_pod(
        ctx.clone(),
        key.clone(),
        rx,
        stop.clone(),
        record,
    ));
    tasks.insert(key.uid, PodTask { pods: tx, handle });
}

/// At start, after the first full listing: removes what is left of pods this node no longer
/// has (their records, or bare state directories), killing any process still running.
async fn sweep(
    ctx: &Arc<Ctx>,
    seen: &HashSet<String>,
    records: &mut HashMap<String, state::PodRecord>,
) {
    let gone: Vec<String> = state::pod_uids(&ctx.config.state_dir)
        .into_iter()
        .filter(|uid| !seen.contains(uid))
        .collect();
    for uid in gone {
        let record = records.remove(&uid);
        let key = record.as_ref().map(|r| r.key.clone()).unwrap_or(PodKey {
            namespace: String::new(),
            name: String::new(),
            uid: uid.clone(),
        });
        info!(uid, "removing what is left of a pod no longer on this node");
        let fp = host::Footprint::of(
            &key,
            &ctx.config.pods_dir,
            &ctx.config.state_dir,
            &ctx.config.oci_runtime(),
            ctx.cgroup_root.as_deref(),
        );
        let pid = record
            .as_ref()
            .filter(|r| r.process_alive())
            .and_then(|r| r.pid);
        host::teardown(&fp, pid).await;
        if let Some(r) = record {
            ctx.slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&r.slot);
        }
    }
}

/// Binds every pod without `spec.nodeName` to `node` (`kvrs run` has no scheduler), through
/// the `pods/binding` subresource as kube-scheduler does.
async fn bind_unscheduled(client: kube::Client, node: String) {
    let all: Api<Pod> = Api::all(client.clone());
    let wc = watcher::Config::default().fields("spec.nodeName=");
    let mut events = std::pin::pin!(
        watcher::watcher(all, wc)
            .default_backoff()
            .applied_objects()
    );
    while let Some(ev) = events.next().await {
        let pod = match ev {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "unscheduled pod watch");
                continue;
            }
        };
        let scheduled = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if scheduled || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(name), Some(ns)) = (pod.metadata.name.clone(), pod.metadata.namespace.clone())
        else {
            continue;
        };
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let binding: Binding = match serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        })) {
            Ok(b) => b,
            Err(_) => continue,
        };
        match api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => info!(pod = %format!("{ns}/{name}"), node = %node, "bound"),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => warn!(pod = %format!("{ns}/{name}"), error = %e, "binding failed"),
        }
    }
}

/// Node labels for [`KubeletConfig::node_labels`]: `kubernetes.io/hostname`, `os`, `arch`.
pub fn default_node_labels(node: &str) -> BTreeMap<String, String> {
    node::default_labels(node)
}
