//! What both cluster daemons (virt-controller, virt-handler) share around their own loops, so
//! each binary keeps only what is its own: the process's [`main`] (logging, the tokio runtime,
//! the client, the exit code), the metrics and health state every daemon serves
//! ([`DaemonMetrics`]), and the command-line flags both lay over the KubeVirt CR
//! ([`flag_overrides`], [`configuration_of`]).
//!
//! `kvrs run` embeds the daemons' `run` functions and does not go through [`main`].

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use kvrs_admission::feature_gates::{UnknownFeatureGate, parse_feature_gates};
use kvrs_admission::kubevirt_cr::{KubevirtCr, KubevirtCrError, read_kubevirt_cr};
use kvrs_admission::live_config::Overrides;
use serde_json::Value;
use tracing::error;

use crate::kube::serve::{
    CounterVec, Endpoints, Metrics, QueueMetrics, ServeError, ServeState, WorkqueueMetrics,
};
use crate::kube::setup::{ConnectError, LogFormat, connect_as, init_logging_as};

/// A daemon binary's `main` after its flags are parsed: logs to stderr in `log_format`
/// (`RUST_LOG`, default `info`), starts the multi-threaded tokio runtime (as `#[tokio::main]`
/// does), connects as `component` (the User-Agent; to `kubeconfig`'s cluster or the
/// environment's), runs `run` with the client, and turns its result into the exit code. An error
/// is logged as `<component>: <error with its causes>` and exits with 1.
///
/// `run` gets only the client: it passes [`terminated`](crate::kube::setup::terminated) (or its
/// own stop) to the daemon.
pub fn main<F, Fut, E>(
    component: &str,
    log_format: LogFormat,
    kubeconfig: Option<PathBuf>,
    run: F,
) -> ExitCode
where
    F: FnOnce(kube::Client) -> Fut,
    Fut: Future<Output = Result<ExitCode, E>>,
    E: From<ConnectError> + std::fmt::Display,
{
    init_logging_as(log_format, "info");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            error!("{component}: starting the tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match connect_as(component, kubeconfig.as_deref()).await {
            Ok(client) => run(client).await,
            Err(e) => Err(e.into()),
        }
    });
    result.unwrap_or_else(|e| {
        error!("{component}: {e:#}");
        ExitCode::from(1)
    })
}

/// A `--feature-gates` value naming a gate KubeVirt does not know; shown as
/// `--feature-gates: <the gate error>` by `{:#}` (anyhow's chain).
#[derive(Debug, thiserror::Error)]
#[error("--feature-gates")]
pub struct FeatureGatesFlag(#[source] pub UnknownFeatureGate);

impl FeatureGatesFlag {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        self.0.label()
    }
}

/// The overrides both daemons' flags lay over the KubeVirt CR: `--feature-gates` (added to the
/// CR's gates; every name must be one of KubeVirt's) and `--allow-emulation` (forces
/// `useEmulation` on). The virt-controller-only ones (launcher image, VMI admission) are unset.
pub fn flag_overrides(
    feature_gates: &[String],
    allow_emulation: bool,
) -> Result<Overrides, FeatureGatesFlag> {
    let feature_gates: BTreeSet<String> =
        parse_feature_gates(&feature_gates.join(",")).map_err(FeatureGatesFlag)?;
    Ok(Overrides {
        feature_gates,
        allow_emulation,
        launcher_image: None,
        admit_created_vmis: false,
    })
}

/// What the KubeVirt CR watch hands a daemon's `derive` when the install namespace holds one
/// KubeVirt CR whose `spec.configuration` is `configuration`: KubeVirt's reading of it with
/// `overrides` laid over it ([`Overrides::apply`], as the watch's `ConfigTracker` does), or why
/// KubeVirt refuses it. The daemons check their `derive` and their flags' precedence with it,
/// without a cluster.
pub fn configuration_of(
    overrides: &Overrides,
    configuration: Value,
) -> Result<KubevirtCr, KubevirtCrError> {
    let cr = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "spec": {"configuration": configuration},
    });
    Ok(overrides.apply(&read_kubevirt_cr(&cr)?))
}

/// The metrics and health state of one daemon: KubeVirt's work-queue families, reconcile errors,
/// `kvrs_kubevirt_config_refused_total{reason}`, and the leader and readiness gauges behind
/// `/leader` and `/readyz`. A daemon's own metrics type wraps it (and derefs to it), adding its
/// queues and series.
pub struct DaemonMetrics {
    state: ServeState,
    queues: WorkqueueMetrics,
    config_refused: CounterVec,
}

impl DaemonMetrics {
    /// Registers the families of `component` (`virt-controller`, `virt-handler`: the leader and
    /// readiness gauges are `kubevirt_<component>_…`, `-` read as `_`). Starts healthy, not
    /// ready, not leading.
    pub fn new(component: &str) -> Self {
        let metrics = Metrics::new();
        let queues = WorkqueueMetrics::register(&metrics);
        let config_refused = metrics.counter(
            "kvrs_kubevirt_config_refused_total",
            "KubeVirt CR configurations refused (the last good one stays in use), by reason",
            &["reason"],
        );
        DaemonMetrics {
            state: ServeState::new(metrics, component),
            queues,
            config_refused,
        }
    }

    /// The registry, for a daemon's own series.
    pub fn registry(&self) -> &Metrics {
        self.state.metrics()
    }

    /// The work-queue series of queue `name` (KubeVirt's queue names, e.g.
    /// `virt-controller-vmi`).
    pub fn queue(&self, name: &str) -> QueueMetrics {
        self.queues.queue(name)
    }

    /// Binds `addr` and serves `/metrics`, `/healthz`, `/readyz` and `/leader` in a task until
    /// the process ends; returns the address bound (port 0 picks one).
    pub async fn serve(&self, addr: SocketAddr) -> Result<SocketAddr, ServeError> {
        let endpoints = Endpoints::bind(addr, self.state.clone()).await?;
        let local = endpoints.local_addr();
        tokio::spawn(async move {
            if let Err(e) = endpoints.run(std::future::pending()).await {
                error!("metrics endpoint stopped: {e}");
            }
        });
        Ok(local)
    }

    /// As [`serve`](Self::serve), over HTTPS with `tls` (see [`crate::kube::https`]).
    pub async fn serve_https(
        &self,
        addr: SocketAddr,
        tls: std::sync::Arc<tokio_rustls::rustls::ServerConfig>,
    ) -> Result<SocketAddr, ServeError> {
        let endpoints = Endpoints::bind(addr, self.state.clone()).await?;
        let local = endpoints.local_addr();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        tokio::spawn(async move {
            let handshake = move |stream| acceptor.accept(stream);
            if let Err(e) = endpoints.run_with(std::future::pending(), handshake).await {
                error!("metrics endpoint stopped: {e}");
            }
        });
        Ok(local)
    }

    /// `/leader` as KubeVirt's virt-controller answers it (200 on a standby too, the leadership
    /// in the body); see [`ServeState::set_kubevirt_leader_probe`](crate::kube::serve::ServeState::set_kubevirt_leader_probe).
    pub fn set_kubevirt_leader_probe(&self, on: bool) {
        self.state.set_kubevirt_leader_probe(on);
    }

    /// Mirrors a leader election (`LeaderElector::leading`) into the leader gauge and `/leader`.
    pub fn watch_leading(&self, leading: tokio::sync::watch::Receiver<bool>) {
        let state = self.state.clone();
        tokio::spawn(async move { state.follow_leading(leading).await });
    }

    /// Sets the leader gauge and `/leader` (no election: always leading).
    pub fn set_leading(&self, leading: bool) {
        self.state.set_leading(leading);
    }

    /// `/readyz` and the readiness gauge.
    pub fn set_ready(&self, ready: bool) {
        self.state.set_ready(ready);
    }

    /// The KubeVirt CR's configuration was refused with `label`.
    pub fn config_refused(&self, label: &str) {
        self.config_refused.with(&[label]).inc();
    }
}

impl std::fmt::Debug for DaemonMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonMetrics").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_daemons_flags_lay_gates_and_emulation_over_the_cr() {
        let o = flag_overrides(&["HostDisk".into(), " Sidecar ,".into()], true).unwrap();
        assert_eq!(
            o.feature_gates.iter().collect::<Vec<_>>(),
            ["HostDisk", "Sidecar"]
        );
        assert!(o.allow_emulation);
        assert_eq!(o.launcher_image, None);
        assert!(!o.admit_created_vmis);
        let err = flag_overrides(&["Nope".into()], false).unwrap_err();
        assert_eq!(err.to_string(), "--feature-gates");
        assert_eq!(err.label(), "unknown_feature_gate");
    }

    #[test]
    fn a_configuration_is_read_as_kubevirt_reads_it_with_the_flags_over_it() {
        let overrides = flag_overrides(&["Sidecar".into()], true).unwrap();
        let conf = serde_json::json!({"developerConfiguration": {
            "featureGates": ["HostDisk"], "useEmulation": false}});
        let cr = configuration_of(&overrides, conf).unwrap();
        assert!(cr.config.gate("HostDisk") && cr.config.gate("Sidecar"));
        assert!(cr.config.use_emulation);
        let wrong = serde_json::json!({"developerConfiguration": {"useEmulation": "yes"}});
        assert_eq!(
            configuration_of(&overrides, wrong).unwrap_err().label(),
            "wrong_type"
        );
    }

    #[test]
    fn one_registry_serves_the_shared_families() {
        let m = DaemonMetrics::new("virt-handler");
        m.queue("virt-handler-vm").adds.inc();
        m.config_refused("invalid_value");
        m.set_ready(true);
        let text = m.registry().render();
        for line in [
            "kubevirt_workqueue_adds_total{name=\"virt-handler-vm\"} 1",
            "kvrs_kubevirt_config_refused_total{reason=\"invalid_value\"} 1",
            "kubevirt_virt_handler_ready_status 1",
            "kubevirt_virt_handler_leading_status 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}
