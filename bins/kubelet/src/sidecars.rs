//! The pod's other containers at run time (hook sidecars, network binding plugins): started
//! after the main container, each waited for by a task of its own that reports its end, stopped
//! together (SIGTERM, the grace period, SIGKILL) when the pod ends. A sidecar that ends early is
//! reported `terminated` and not restarted (`restartPolicy: Never`, as KubeVirt's launcher
//! pods have); the pod goes on while its main container runs.

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::error::HostError;
use crate::host::{self, Footprint};
use crate::plan::SidecarPlan;
use crate::state::SidecarRecord;
use crate::status::{ContainerReport, ContainerState, now};
use crate::worker::{Exit, Proc, terminated};

/// One sidecar: its plan, its first process while it runs, its state.
struct Entry {
    plan: SidecarPlan,
    pid: Option<u32>,
    started_at: String,
    state: ContainerState,
}

/// The running sidecars of one pod.
pub(crate) struct Sidecars {
    entries: Vec<Entry>,
    tx: mpsc::UnboundedSender<(usize, Exit)>,
    exits: mpsc::UnboundedReceiver<(usize, Exit)>,
}

impl Sidecars {
    fn empty() -> Self {
        let (tx, exits) = mpsc::unbounded_channel();
        Self {
            entries: Vec::new(),
            tx,
            exits,
        }
    }

    fn watch(&mut self, plan: SidecarPlan, proc: Proc, started_at: String) {
        let i = self.entries.len();
        let pid = proc.pid();
        self.entries.push(Entry {
            plan,
            pid: Some(pid),
            started_at: started_at.clone(),
            state: ContainerState::Running { started_at },
        });
        let tx = self.tx.clone();
        let mut proc = proc;
        tokio::spawn(async move {
            let exit = proc.wait().await;
            let _ = tx.send((i, exit));
        });
    }

    /// Starts every sidecar of `plans`; the first that cannot start is the error (the caller
    /// tears the pod down, which removes those already started).
    pub(crate) async fn start(plans: &[SidecarPlan], fp: &Footprint) -> Result<Self, HostError> {
        let mut s = Self::empty();
        for plan in plans {
            let (child, pid) = host::spawn_sidecar(plan, &fp.runtime).await?;
            info!(container = %plan.name, pid, "container started");
            s.watch(plan.clone(), Proc::Child { child, pid }, now());
        }
        Ok(s)
    }

    /// The sidecars of a pod whose main container was adopted after a restart: those still
    /// running (recorded pid and start time) are adopted too, the others reported ended.
    pub(crate) fn adopt(plans: &[SidecarPlan], records: &[SidecarRecord]) -> Self {
        let mut s = Self::empty();
        for plan in plans {
            let r = records.iter().find(|r| r.name == plan.name);
            match r.filter(|r| host::start_ticks(r.pid) == Some(r.start_ticks)) {
                Some(r) => s.watch(
                    plan.clone(),
                    Proc::Adopted {
                        pid: r.pid,
                        ticks: r.start_ticks,
                    },
                    r.started_at.clone(),
                ),
                None => {
                    let started_at = r.map(|r| r.started_at.clone()).unwrap_or_else(now);
                    s.entries.push(Entry {
                        state: terminated(&plan.log_path, &started_at, Exit::Unknown),
                        plan: plan.clone(),
                        pid: None,
                        started_at,
                    });
                }
            }
        }
        s
    }

    /// What the pod's record keeps of the running sidecars.
    pub(crate) fn records(&self) -> Vec<SidecarRecord> {
        self.entries
            .iter()
            .filter_map(|e| {
                let pid = e.pid?;
                Some(SidecarRecord {
                    name: e.plan.name.clone(),
                    pid,
                    start_ticks: host::start_ticks(pid)?,
                    started_at: e.started_at.clone(),
                })
            })
            .collect()
    }

    /// Waits for the next sidecar to end and records it; pending while none runs.
    pub(crate) async fn next_exit(&mut self) -> String {
        let Some((i, exit)) = self.exits.recv().await else {
            return std::future::pending().await;
        };
        self.ended(i, exit)
    }

    fn ended(&mut self, i: usize, exit: Exit) -> String {
        let Some(e) = self.entries.get_mut(i) else {
            return String::new();
        };
        e.pid = None;
        e.state = terminated(&e.plan.log_path, &e.started_at, exit);
        if let ContainerState::Terminated { exit_code, .. } = &e.state {
            info!(container = %e.plan.name, exit_code, "container exited");
        }
        e.plan.name.clone()
    }

    /// SIGTERM to every running sidecar, SIGKILL to those still running after `grace`; returns
    /// once all have ended (or 5 s after the SIGKILL: `runc delete --force` follows anyway).
    pub(crate) async fn stop(&mut self, fp: &Footprint, grace: Duration) {
        let running = |s: &Self| s.entries.iter().filter(|e| e.pid.is_some()).count();
        for e in self.entries.iter().filter(|e| e.pid.is_some()) {
            host::signal_container_id(fp, &e.plan.container_spec.id, e.pid, Signal::SIGTERM).await;
        }
        for (signal, wait) in [
            (None, grace),
            (Some(Signal::SIGKILL), Duration::from_secs(5)),
        ] {
            if let Some(sig) = signal {
                if running(self) == 0 {
                    return;
                }
                warn!(?grace, "grace period over: SIGKILL to the sidecars");
                for e in self.entries.iter().filter(|e| e.pid.is_some()) {
                    host::signal_container_id(fp, &e.plan.container_spec.id, e.pid, sig).await;
                }
            }
            let deadline = tokio::time::Instant::now() + wait;
            while running(self) > 0 {
                match tokio::time::timeout_at(deadline, self.exits.recv()).await {
                    Ok(Some((i, exit))) => {
                        self.ended(i, exit);
                    }
                    _ => break,
                }
            }
        }
    }

    /// Each sidecar's status (ready while it runs: KubeVirt's sidecars have no probe).
    pub(crate) fn reports(&self) -> Vec<ContainerReport> {
        self.entries
            .iter()
            .map(|e| ContainerReport {
                name: e.plan.name.clone(),
                image: e.plan.image.clone(),
                ready: matches!(e.state, ContainerState::Running { .. }),
                state: e.state.clone(),
            })
            .collect()
    }
}
