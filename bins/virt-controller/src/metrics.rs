//! virt-controller's metrics and health: the shared daemon series
//! ([`DaemonMetrics`]: KubeVirt's workqueue metrics, reconcile errors by their stable label,
//! refused KubeVirt CR configurations, the leader gauge and readiness) with the VM and VMI
//! queues — served on `/metrics`, `/healthz`, `/readyz` and `/leader`.

use std::ops::Deref;
use std::sync::Arc;

use kvrs_runtime::kube::daemon::DaemonMetrics;
use kvrs_runtime::kube::serve::QueueMetrics;

/// The controller's metrics and health state.
pub struct ControllerMetrics {
    daemon: DaemonMetrics,
    vm: QueueMetrics,
    vmi: QueueMetrics,
}

impl ControllerMetrics {
    /// Registers the metrics.
    pub fn new() -> Self {
        let daemon = DaemonMetrics::new("virt-controller");
        Self {
            vm: daemon.queue("virt-controller-vm"),
            vmi: daemon.queue("virt-controller-vmi"),
            daemon,
        }
    }

    fn queue(&self, name: &str) -> &QueueMetrics {
        if name == "vm" { &self.vm } else { &self.vmi }
    }

    /// The queue hooks of `queue` (`vm` or `vmi`): adds, retries, depth, queue latency and work
    /// duration are counted by the queue itself, as client-go's workqueue counts them.
    pub fn queue_hooks(&self, queue: &str) -> Arc<dyn kvrs_queue::QueueMetrics> {
        self.queue(queue).hooks()
    }

    /// One sync of `queue` failed with `label`.
    pub fn reconcile_error(&self, queue: &str, label: &str) {
        self.queue(queue).reconcile_error(label);
    }
}

/// `serve`, `watch_leading`, `set_leading`, `set_ready` (a standby is ready: it serves its
/// purpose by waiting; a leader once its caches have synced) and `config_refused`.
impl Deref for ControllerMetrics {
    type Target = DaemonMetrics;

    fn deref(&self) -> &DaemonMetrics {
        &self.daemon
    }
}
