//! virt-handler's metrics and health: the shared daemon series ([`DaemonMetrics`]: KubeVirt's
//! workqueue metrics, sync errors by their stable label, refused KubeVirt CR configurations,
//! readiness) with the VMI queue and the sync duration — served on `/metrics`, `/healthz` and
//! `/readyz`.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use kvrs_runtime::kube::daemon::DaemonMetrics;
use kvrs_runtime::kube::serve::{Histogram, QueueMetrics};

/// The handler's metrics and health state.
pub struct HandlerMetrics {
    daemon: DaemonMetrics,
    vmi: QueueMetrics,
    sync: Histogram,
}

impl HandlerMetrics {
    /// Registers the metrics.
    pub fn new() -> Self {
        let daemon = DaemonMetrics::new("virt-handler");
        let sync = daemon
            .registry()
            .histogram(
                "kvrs_handler_sync_duration_seconds",
                "How long one handler sync of a VMI took",
                &[],
                &[0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 20.0],
            )
            .with(&[]);
        Self {
            vmi: daemon.queue("virt-handler-vm"),
            daemon,
            sync,
        }
    }

    /// The VMI queue's hooks.
    pub fn queue_hooks(&self) -> Arc<dyn kvrs_queue::QueueMetrics> {
        self.vmi.hooks()
    }

    /// One sync failed with `label`.
    pub fn reconcile_error(&self, label: &str) {
        self.vmi.reconcile_error(label);
    }

    /// One sync took `took`.
    pub fn observe_sync(&self, took: Duration) {
        self.sync.observe(took.as_secs_f64());
    }
}

/// `serve`, `set_ready` (ready once the caches have synced) and `config_refused`.
impl Deref for HandlerMetrics {
    type Target = DaemonMetrics;

    fn deref(&self) -> &DaemonMetrics {
        &self.daemon
    }
}
