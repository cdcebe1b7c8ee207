//! One pod's life on this node, from its first sight to its final deletion: plan, set up,
//! start, report, stop (deleted, or the runner shutting down) and clean up.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

use crate::config::KubeletConfig;
use crate::error::PlanError;
use crate::host::{self, Footprint};
use crate::plan::{PodKey, PodPlan, plan_pod_on};
use crate::sidecars::Sidecars;
use crate::state::{self, PodRecord};
use crate::status::{ContainerState, Phase, PodReport, now, status_patch};

/// How long a pod removed from the API outright (force-deleted) gets to stop.
const FORCED_GRACE: Duration = Duration::from_secs(2);
/// How often the readiness file is looked for.
const READINESS_POLL: Duration = Duration::from_millis(250);

/// What every pod worker shares.
pub(crate) struct Ctx {
    pub client: kube::Client,
    pub config: KubeletConfig,
    pub cgroup_root: Option<PathBuf>,
    pub slots: Mutex<BTreeSet<u32>>,
}

impl Ctx {
    fn footprint(&self, key: &PodKey) -> Footprint {
        Footprint::of(
            key,
            &self.config.pods_dir,
            &self.config.state_dir,
            &self.config.oci_runtime(),
            self.cgroup_root.as_deref(),
        )
    }

    /// The first slot neither held by a pod of this runner nor already routed on the host
    /// (see [`host::host_routes`]).
    fn take_slot(&self) -> Option<u32> {
        let routes = host::host_routes();
        let cidr = &self.config.pod_cidr;
        let mut used = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let free = (0..cidr.slots()).find(|&s| {
            if used.contains(&s) {
                return false;
            }
            let shadowed = cidr.address(s).is_some_and(|a| a.shadowed_by(&routes));
            if shadowed {
                warn!(
                    slot = s,
                    "address block already routed on this host (left by another runner?): skipped"
                );
            }
            !shadowed
        })?;
        used.insert(free);
        Some(free)
    }

    fn release_slot(&self, slot: u32) {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&slot);
    }
}

/// The container: `runc run` started by this runner (and the container's first process), or
/// its first process found running after a restart.
pub(crate) enum Proc {
    Child {
        child: tokio::process::Child,
        pid: u32,
    },
    Adopted {
        pid: u32,
        ticks: u64,
    },
}

/// How the container ended: its wait status, or unknown (an adopted process is not our child).
pub(crate) enum Exit {
    Status(std::process::ExitStatus),
    Unknown,
}

impl Proc {
    pub(crate) fn pid(&self) -> u32 {
        match self {
            Self::Child { pid, .. } | Self::Adopted { pid, .. } => *pid,
        }
    }

    pub(crate) async fn wait(&mut self) -> Exit {
        match self {
            Self::Child { child, .. } => match child.wait().await {
                Ok(s) => Exit::Status(s),
                Err(_) => Exit::Unknown,
            },
            Self::Adopted { pid, ticks } => loop {
                if host::start_ticks(*pid) != Some(*ticks) {
                    return Exit::Unknown;
                }
                tokio::time::sleep(READINESS_POLL).await;
            },
        }
    }
}

/// Runs one pod until it is deleted from the API or the runner stops.
pub(crate) async fn run_pod(
    ctx: Arc<Ctx>,
    key: PodKey,
    pods: watch::Receiver<Option<Pod>>,
    stop: watch::Receiver<bool>,
    record: Option<PodRecord>,
) {
    let span = info_span!("pod", pod = %key);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let mut w = Worker {
        ctx,
        key,
        api,
        pods,
        stop,
        last_patch: None,
    };
    w.run(record).instrument(span).await;
}

struct Worker {
    ctx: Arc<Ctx>,
    key: PodKey,
    api: Api<Pod>,
    pods: watch::Receiver<Option<Pod>>,
    stop: watch::Receiver<bool>,
    last_patch: Option<Value>,
}

/// Why the running loop ended.
enum End {
    Exited(Exit),
    Deleted(Duration),
    Gone,
    Shutdown,
}

impl Worker {
    fn current(&self) -> Option<Pod> {
        self.pods.borrow().clone()
    }

    async fn run(&mut self, record: Option<PodRecord>) {
        let Some(pod) = self.current() else { return };
        let fp = self.ctx.footprint(&self.key);
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if matches!(phase.as_str(), "Succeeded" | "Failed") {
            if let Some(r) = &record {
                self.ctx.release_slot(r.slot);
            }
            host::teardown(&fp, None).await;
            return self.await_deletion().await;
        }
        if pod.metadata.deletion_timestamp.is_some() && record.is_none() {
            host::teardown(&fp, None).await;
            return self.final_delete().await;
        }
        let started_before = pod
            .status
            .as_ref()
            .is_some_and(|s| s.start_time.is_some() || phase == "Running");
        let (slot, proc, started_at) = match record {
            Some(r) if r.process_alive() => {
                info!(pid = ?r.pid, "adopting the container still running from before the restart");
                let (Some(pid), Some(ticks)) = (r.pid, r.start_ticks) else {
                    return;
                };
                (
                    r.slot,
                    Some((Proc::Adopted { pid, ticks }, r.sidecars.clone())),
                    r.started_at.clone(),
                )
            }
            Some(r) => {
                self.ctx.release_slot(r.slot);
                return self.lost_after_restart(&fp).await;
            }
            None if started_before => return self.lost_after_restart(&fp).await,
            None => {
                let Some(slot) = self.ctx.take_slot() else {
                    let e = crate::error::HostError::CidrExhausted(
                        self.ctx.config.pod_cidr.to_string(),
                    );
                    return self
                        .cannot_start(None, "OutOfAddresses", &e.to_string())
                        .await;
                };
                (slot, None, None)
            }
        };
        let Some(address) = self.ctx.config.pod_cidr.address(slot) else {
            return;
        };
        let planned = match crate::volumes::fetch(&self.ctx.client, &pod).await {
            Ok(objects) => plan_pod_on(&pod, &self.ctx.config, address, &objects, Path::is_dir),
            Err(e) => Err(e),
        };
        let plan = match planned.and_then(|p| p.missing_image(|d| d.is_dir()).map_or(Ok(p), Err)) {
            Ok(p) => p,
            Err(e) => {
                self.ctx.release_slot(slot);
                warn!(error = %e, label = e.label(), "pod cannot run");
                let image_error = matches!(e, PlanError::UnknownImage { .. });
                return self
                    .cannot_start(image_error.then_some(&e), e.reason(), &e.to_string())
                    .await;
            }
        };
        for s in &plan.skipped {
            info!(skipped = %s, "not run by the kvrs pod runner");
        }
        let roots = std::iter::once((&plan.container, &plan.root))
            .chain(plan.sidecars.iter().map(|s| (&s.name, &s.root)));
        for (container, root) in roots {
            match root {
                Some(r) => info!(container = %container, root = %r, "container root filesystem"),
                None => {
                    info!(container = %container, "container root filesystem: its image's file tree")
                }
            }
        }
        let (proc, started_at, sidecars) = match proc {
            Some((p, records)) => (
                p,
                started_at.unwrap_or_else(now),
                Sidecars::adopt(&plan.sidecars, &records),
            ),
            None => match self.start(&plan, &fp, slot).await {
                Some(p) => p,
                None => {
                    self.ctx.release_slot(slot);
                    return self.await_deletion().await;
                }
            },
        };
        self.run_container(plan, fp, slot, proc, started_at, sidecars)
            .await;
    }

    /// Sets the pod up and starts its containers (the main one, then the others); on failure
    /// cleans up and reports Failed.
    async fn start(
        &mut self,
        plan: &PodPlan,
        fp: &Footprint,
        slot: u32,
    ) -> Option<(Proc, String, Sidecars)> {
        host::teardown(fp, None).await;
        let setup = match host::setup_files(plan).and_then(|()| host::setup_network(&plan.network))
        {
            Ok(()) => host::spawn(plan, &fp.runtime).await,
            Err(e) => Err(e),
        };
        let setup = match setup {
            Ok(main) => match Sidecars::start(&plan.sidecars, fp).await {
                Ok(sidecars) => Ok((main, sidecars)),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        let ((child, pid), sidecars) = match setup {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, label = e.label(), "pod set-up failed");
                host::teardown(fp, None).await;
                self.report_failed("CreateContainerError", &e.to_string(), None)
                    .await;
                return None;
            }
        };
        let started_at = now();
        let record = PodRecord {
            key: self.key.clone(),
            slot,
            pid: Some(pid),
            start_ticks: host::start_ticks(pid),
            started_at: Some(started_at.clone()),
            sidecars: sidecars.records(),
        };
        if let Err(e) = state::save(&self.ctx.config.state_dir, &record) {
            warn!(error = %e, "cannot record the pod's process");
        }
        info!(pid, ip = %plan.network.address.pod_ip, netns = %plan.network.netns, "container started");
        Some((Proc::Child { child, pid }, started_at, sidecars))
    }

    async fn run_container(
        &mut self,
        plan: PodPlan,
        fp: Footprint,
        slot: u32,
        mut proc: Proc,
        started_at: String,
        mut sidecars: Sidecars,
    ) {
        let mut ready = plan.readiness_file.is_none();
        let running = ContainerState::Running {
            started_at: started_at.clone(),
        };
        let first = self.report(&plan, Phase::Running, running.clone(), ready, &sidecars);
        self.send(first).await;
        let mut tick = tokio::time::interval(READINESS_POLL);
        let end = loop {
            tokio::select! {
                exit = proc.wait() => break End::Exited(exit),
                name = sidecars.next_exit() => {
                    warn!(container = %name, "a sidecar container ended; the pod goes on");
                    let r = self.report(&plan, Phase::Running, running.clone(), ready, &sidecars);
                    self.send(r).await;
                }
                changed = self.pods.changed() => {
                    let Ok(()) = changed else { break End::Shutdown };
                    match self.current() {
                        None => break End::Gone,
                        Some(p) if p.metadata.deletion_timestamp.is_some() => {
                            let grace = p.metadata.deletion_grace_period_seconds
                                .and_then(|s| u64::try_from(s).ok())
                                .map_or(plan.grace, Duration::from_secs);
                            break End::Deleted(grace);
                        }
                        Some(_) => {
                            let r = self.report(&plan, Phase::Running, running.clone(), ready, &sidecars);
                            self.send(r).await;
                        }
                    }
                }
                _ = self.stop.changed() => break End::Shutdown,
                _ = tick.tick() => {
                    if !ready && plan.readiness_file.as_ref().is_some_and(|f| f.exists()) {
                        ready = true;
                        info!("ready");
                        let r = self.report(&plan, Phase::Running, running.clone(), ready, &sidecars);
                        self.send(r).await;
                    }
                }
            }
        };
        let finished = |exit: Exit| terminated(&plan.log_path, &started_at, exit);
        let phase_of = |state: &ContainerState| match state {
            ContainerState::Terminated { exit_code: 0, .. } => Phase::Succeeded,
            _ => Phase::Failed,
        };
        match end {
            End::Exited(exit) => {
                let state = finished(exit);
                // The pod lives as long as its main container: the sidecars serve it only.
                sidecars.stop(&fp, plan.grace).await;
                host::remove_container(&fp, Some(proc.pid())).await;
                host::remove_network(&fp.netns, &fp.host_veth);
                self.ctx.release_slot(slot);
                let phase = phase_of(&state);
                info!(phase = phase.as_str(), "container exited");
                let r = self.report(&plan, phase, state, false, &sidecars);
                self.send(r).await;
                self.await_deletion().await;
            }
            End::Deleted(grace) => {
                info!(?grace, "pod deleted: stopping its containers");
                let (exit, ()) = tokio::join!(
                    stop_container(&mut proc, &fp, grace),
                    sidecars.stop(&fp, grace)
                );
                host::teardown(&fp, Some(proc.pid())).await;
                self.ctx.release_slot(slot);
                let state = finished(exit);
                let r = self.report(&plan, phase_of(&state), state, false, &sidecars);
                self.send(r).await;
                self.final_delete().await;
            }
            End::Gone => {
                info!("pod removed from the API: stopping its containers");
                tokio::join!(
                    stop_container(&mut proc, &fp, FORCED_GRACE),
                    sidecars.stop(&fp, FORCED_GRACE)
                );
                host::teardown(&fp, Some(proc.pid())).await;
                self.ctx.release_slot(slot);
            }
            End::Shutdown => {
                info!(grace = ?plan.grace, "runner shutting down: stopping the containers");
                let (exit, ()) = tokio::join!(
                    stop_container(&mut proc, &fp, plan.grace),
                    sidecars.stop(&fp, plan.grace)
                );
                host::teardown(&fp, Some(proc.pid())).await;
                self.ctx.release_slot(slot);
                let mut r = self.report(&plan, Phase::Failed, finished(exit), false, &sidecars);
                r.reason = Some("Terminated".into());
                r.message = Some("the kvrs pod runner of this node shut down".into());
                self.send(r).await;
            }
        }
    }

    fn report(
        &self,
        plan: &PodPlan,
        phase: Phase,
        state: ContainerState,
        ready: bool,
        sidecars: &Sidecars,
    ) -> PodReport {
        PodReport {
            phase,
            reason: None,
            message: None,
            pod_ip: Some(plan.network.address.pod_ip),
            host_ip: self.ctx.config.host_ip,
            start_time: self
                .current()
                .and_then(|p| p.status?.start_time)
                .and_then(|t| serde_json::to_value(t).ok()?.as_str().map(String::from))
                .or_else(|| match &state {
                    ContainerState::Running { started_at } => Some(started_at.clone()),
                    _ => None,
                }),
            container: plan.container.clone(),
            image: plan.image.clone(),
            state,
            ready,
            sidecars: sidecars.reports(),
        }
    }

    /// Patches `pods/status` with `r` unless it says what the last patch said.
    async fn send(&mut self, r: PodReport) {
        let Some(pod) = self.current() else { return };
        let patch = status_patch(&r, &pod, &now());
        if self.last_patch.as_ref() == Some(&patch) {
            return;
        }
        for attempt in 0..5u32 {
            match self
                .api
                .patch_status(
                    &self.key.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.last_patch = Some(patch);
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return,
                Err(e) => {
                    warn!(error = %e, attempt, "status patch failed");
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
            }
        }
    }

    async fn report_failed(&mut self, reason: &str, message: &str, waiting: Option<&PlanError>) {
        let Some(pod) = self.current() else { return };
        let container = pod.spec.as_ref().and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == crate::plan::COMPUTE)
                .or(s.containers.first())
        });
        let state = match waiting {
            Some(e) => ContainerState::Waiting {
                reason: e.reason().into(),
                message: message.into(),
            },
            None => ContainerState::Terminated {
                exit_code: 128,
                signal: None,
                reason: reason.into(),
                message: Some(message.into()),
                started_at: None,
                finished_at: now(),
            },
        };
        let r = PodReport {
            phase: Phase::Failed,
            reason: Some(reason.into()),
            message: Some(message.into()),
            pod_ip: None,
            host_ip: self.ctx.config.host_ip,
            start_time: Some(now()),
            container: container
                .map(|c| c.name.clone())
                .unwrap_or_else(|| crate::plan::COMPUTE.into()),
            image: container.and_then(|c| c.image.clone()).unwrap_or_default(),
            state,
            ready: false,
            sidecars: Vec::new(),
        };
        self.send(r).await;
    }

    async fn cannot_start(&mut self, waiting: Option<&PlanError>, reason: &str, message: &str) {
        self.report_failed(reason, message, waiting).await;
        self.await_deletion().await;
    }

    /// A pod this node had started whose container did not survive the runner's restart: a
    /// kubelet after a reboot fails such pods (restartPolicy Never), it does not rerun them.
    async fn lost_after_restart(&mut self, fp: &Footprint) {
        warn!("container not running after the runner restarted: marking the pod Failed");
        host::teardown(fp, None).await;
        self.report_failed(
            "NodeRestart",
            "the container is no longer running after the kvrs pod runner restarted",
            None,
        )
        .await;
        self.await_deletion().await;
    }

    /// Waits until the (finished) pod gets a deletionTimestamp, then removes what is left and
    /// deletes it for good. A finished pod is deleted with grace 0: the API server stores its
    /// deletionTimestamp and removes it in two back-to-back watch events, and this worker's
    /// channel keeps only the latest, so on a busy node the pod can just vanish (as it can while
    /// the watch is down): its remains are removed then too, or its directories outlive it.
    async fn await_deletion(&mut self) {
        loop {
            match self.current() {
                None => {
                    host::teardown(&self.ctx.footprint(&self.key), None).await;
                    break;
                }
                Some(p) if p.metadata.deletion_timestamp.is_some() => {
                    host::teardown(&self.ctx.footprint(&self.key), None).await;
                    self.final_delete().await;
                    break;
                }
                Some(_) => {}
            }
            tokio::select! {
                r = self.pods.changed() => if r.is_err() { break },
                _ = self.stop.changed() => break,
            }
        }
    }

    /// What a kubelet does once a deleted pod's containers are gone: delete it with grace 0,
    /// only if it is still the same pod (UID precondition).
    async fn final_delete(&mut self) {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.key.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        for attempt in 0..5u32 {
            match self.api.delete(&self.key.name, &dp).await {
                Ok(_) => {
                    info!("pod deleted");
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                Err(e) => {
                    warn!(error = %e, attempt, "final delete failed");
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
            }
        }
    }
}

/// SIGTERM to the container's first process (PID 1 of its PID namespace), SIGKILL once `grace`
/// has passed (which ends every process of the namespace), both through `runc kill`.
async fn stop_container(proc: &mut Proc, fp: &Footprint, grace: Duration) -> Exit {
    let pid = proc.pid();
    host::signal_container(fp, Some(pid), Signal::SIGTERM).await;
    match tokio::time::timeout(grace, proc.wait()).await {
        Ok(exit) => exit,
        Err(_) => {
            warn!(?grace, "grace period over: SIGKILL");
            host::signal_container(fp, Some(pid), Signal::SIGKILL).await;
            proc.wait().await
        }
    }
}

/// The state of a container that ended: its exit code, and its log's tail when it failed
/// (`FallbackToLogsOnError`).
pub(crate) fn terminated(
    log_path: &std::path::Path,
    started_at: &str,
    exit: Exit,
) -> ContainerState {
    use std::os::unix::process::ExitStatusExt;
    let (exit_code, signal, reason) = match exit {
        Exit::Status(s) => match (s.code(), s.signal()) {
            (Some(0), _) => (0, None, "Completed"),
            (Some(c), _) => (c, None, "Error"),
            (None, Some(sig)) => (128 + sig, Some(sig), "Error"),
            (None, None) => (128, None, "Error"),
        },
        Exit::Unknown => (137, None, "ContainerStatusUnknown"),
    };
    ContainerState::Terminated {
        exit_code,
        signal,
        reason: reason.into(),
        message: (exit_code != 0).then(|| host::log_tail(log_path)).flatten(),
        started_at: Some(started_at.to_string()),
        finished_at: now(),
    }
}
