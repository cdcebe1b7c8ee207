//! What every kvrs daemon does first: log to stderr with `RUST_LOG`, and build a client from a
//! kubeconfig, or from the in-cluster service account / `$KUBECONFIG` / `~/.kube/config`.

use std::path::Path;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig named on the command line could not be read or used.
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// No kubeconfig given and none found.
    #[error("no kubeconfig given and none found (in-cluster, $KUBECONFIG, ~/.kube/config): {0}")]
    NotFound(String),
    /// The client itself could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(String),
}

impl ConnectError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            ConnectError::Kubeconfig { .. } => "kubeconfig",
            ConnectError::NotFound(_) => "no_kubeconfig",
            ConnectError::Client(_) => "client",
        }
    }
}

/// A client for the cluster of `kubeconfig`, or of the environment when it is `None`.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<kube::Client, ConnectError> {
    let config = match kubeconfig {
        Some(path) => {
            let bad = |reason: String| ConnectError::Kubeconfig {
                path: path.display().to_string(),
                reason,
            };
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| bad(e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ConnectError::NotFound(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| ConnectError::Client(e.to_string()))
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    init_logging_with_default("info");
}

/// Logs to stderr, filtered by `RUST_LOG`, or by `default` when it is unset (`kvrs run` prints
/// its own progress and keeps the components' logs to warnings).
pub fn init_logging_with_default(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
}

/// Resolves on the first SIGTERM or Ctrl-C: what stops a daemon. If the SIGTERM handler cannot
/// be installed, only Ctrl-C stops it (logged).
pub async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
            }
        }
        Err(e) => {
            tracing::error!("installing the SIGTERM handler: {e}; only Ctrl-C stops this process");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
