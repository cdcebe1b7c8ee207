//! virt-controller's metrics and health: KubeVirt's workqueue metrics (depth, adds, retries,
//! work duration) per controller, reconcile errors by their stable label, the leader gauge and
//! readiness — served by `kvrs_runtime::kube::serve` on `/metrics`, `/healthz`, `/readyz` and
//! `/leader`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kvrs_runtime::kube::serve::{
    CounterVec, Endpoints, Metrics, QueueMetrics, ServeState, WorkqueueMetrics,
};
use tracing::{error, info};

/// The controller's metrics and health state.
pub struct ControllerMetrics {
    state: ServeState,
    vm: QueueMetrics,
    vmi: QueueMetrics,
    config_refused: CounterVec,
}

impl ControllerMetrics {
    /// Registers the metrics.
    pub fn new() -> Self {
        let metrics = Metrics::new();
        let queues = WorkqueueMetrics::register(&metrics);
        let config_refused = config_refused_counter(&metrics);
        let state = ServeState::new(metrics, "virt_controller");
        state.set_healthy(true);
        Self {
            vm: queues.queue("virt-controller-vm"),
            vmi: queues.queue("virt-controller-vmi"),
            state,
            config_refused,
        }
    }

    fn queue(&self, name: &str) -> &QueueMetrics {
        if name == "vm" { &self.vm } else { &self.vmi }
    }

    /// Binds `addr` and serves the endpoints until the process ends.
    pub async fn serve(&self, addr: SocketAddr) -> anyhow::Result<()> {
        let endpoints = Endpoints::bind(addr, self.state.clone())
            .await
            .with_context(|| format!("binding the metrics address {addr}"))?;
        info!(addr = %endpoints.local_addr(), "serving /metrics, /healthz, /readyz, /leader");
        tokio::spawn(async move {
            if let Err(e) = endpoints.run(std::future::pending()).await {
                error!("metrics endpoint stopped: {e}");
            }
        });
        Ok(())
    }

    /// Mirrors the leader election into the leader gauge and `/leader`.
    pub fn watch_leading(&self, leading: tokio::sync::watch::Receiver<bool>) {
        let state = self.state.clone();
        tokio::spawn(async move { state.follow_leading(leading).await });
    }

    /// Sets the leader gauge (no election: always leading).
    pub fn set_leading(&self, leading: bool) {
        self.state.set_leading(leading);
    }

    /// `/readyz`: a standby is ready (it serves its purpose by waiting); a leader once its
    /// caches have synced.
    pub fn set_ready(&self, ready: bool) {
        self.state.set_ready(ready);
    }

    /// The queue hooks of `queue` (`vm` or `vmi`): adds, retries, depth and work duration are
    /// counted by the queue itself, as client-go's workqueue counts them.
    pub fn queue_hooks(&self, queue: &str) -> Arc<dyn kvrs_queue::QueueMetrics> {
        Arc::new(Hooks(self.queue(queue).clone()))
    }

    /// One sync of `queue` failed with `label`.
    pub fn reconcile_error(&self, queue: &str, label: &str) {
        self.queue(queue).reconcile_error(label);
    }
}

/// `kvrs_kubevirt_config_refused_total{reason}`: KubeVirt CR configurations refused (once per
/// distinct error; the last good configuration stays in use).
pub fn config_refused_counter(metrics: &Metrics) -> CounterVec {
    metrics.counter(
        "kvrs_kubevirt_config_refused_total",
        "KubeVirt CR configurations refused (the last good one stays in use), by reason",
        &["reason"],
    )
}

impl ControllerMetrics {
    /// The KubeVirt CR's configuration was refused with `label`.
    pub fn config_refused(&self, label: &str) {
        self.config_refused.with(&[label]).inc();
    }
}

/// kvrs-queue's hooks feeding one queue's metrics.
struct Hooks(QueueMetrics);

impl kvrs_queue::QueueMetrics for Hooks {
    fn depth(&self, depth: usize) {
        self.0.depth.set(depth as f64);
    }
    fn add(&self) {
        self.0.adds.inc();
    }
    fn retry(&self) {
        self.0.retries.inc();
    }
    fn queue_latency(&self, waited: Duration) {
        self.0.queue_duration.observe_duration(waited);
    }
    fn work_duration(&self, took: Duration) {
        self.0.work_duration.observe_duration(took);
    }
}
