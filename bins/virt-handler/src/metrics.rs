//! virt-handler's metrics and health: the VMI queue's workqueue metrics (KubeVirt's names), sync
//! errors by their stable label, the sync duration — served on `/metrics`, `/healthz`, `/readyz`
//! by `kvrs_runtime::kube::serve`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kvrs_runtime::kube::serve::{
    CounterVec, Endpoints, Histogram, Metrics, QueueMetrics, ServeState, WorkqueueMetrics,
};
use tracing::{error, info};

/// The handler's metrics and health state.
pub struct HandlerMetrics {
    state: ServeState,
    vmi: QueueMetrics,
    sync: Histogram,
    config_refused: CounterVec,
}

impl HandlerMetrics {
    /// Registers the metrics.
    pub fn new() -> Self {
        let metrics = Metrics::new();
        let queues = WorkqueueMetrics::register(&metrics);
        let sync = metrics
            .histogram(
                "kvrs_handler_sync_duration_seconds",
                "How long one handler sync of a VMI took",
                &[],
                &[0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 20.0],
            )
            .with(&[]);
        // The same series virt-controller serves.
        let config_refused = metrics.counter(
            "kvrs_kubevirt_config_refused_total",
            "KubeVirt CR configurations refused (the last good one stays in use), by reason",
            &["reason"],
        );
        let state = ServeState::new(metrics, "virt_handler");
        state.set_healthy(true);
        Self {
            vmi: queues.queue("virt-handler-vm"),
            state,
            sync,
            config_refused,
        }
    }

    /// Binds `addr` and serves the endpoints until the process ends.
    pub async fn serve(&self, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
        let endpoints = Endpoints::bind(addr, self.state.clone())
            .await
            .with_context(|| format!("binding the metrics address {addr}"))?;
        let local = endpoints.local_addr();
        info!(addr = %local, "serving /metrics, /healthz, /readyz");
        tokio::spawn(async move {
            if let Err(e) = endpoints.run(std::future::pending()).await {
                error!("metrics endpoint stopped: {e}");
            }
        });
        Ok(local)
    }

    /// `/readyz`: ready once the caches have synced.
    pub fn set_ready(&self, ready: bool) {
        self.state.set_ready(ready);
    }

    /// The VMI queue's hooks.
    pub fn queue_hooks(&self) -> Arc<dyn kvrs_queue::QueueMetrics> {
        Arc::new(Hooks(self.vmi.clone()))
    }

    /// One sync failed with `label`.
    pub fn reconcile_error(&self, label: &str) {
        self.vmi.reconcile_error(label);
    }

    /// The KubeVirt CR's configuration was refused with `label`.
    pub fn config_refused(&self, label: &str) {
        self.config_refused.with(&[label]).inc();
    }

    /// One sync took `took`.
    pub fn observe_sync(&self, took: Duration) {
        self.sync.observe_duration(took);
    }
}

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
    fn work_duration(&self, took: Duration) {
        self.0.work_duration.observe_duration(took);
    }
}
