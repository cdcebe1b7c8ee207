//! What every kvrs daemon does first: log to stderr (text or JSON lines) filtered by `RUST_LOG`,
//! and build a client from a kubeconfig, or from the in-cluster service account /
//! `$KUBECONFIG` / `~/.kube/config`.

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

/// A client for the cluster of `kubeconfig`, or of the environment when it is `None`, sending
/// the User-Agent `kvrs/<version> (<os>/<arch>)` (see [`connect_as`]).
pub async fn connect(kubeconfig: Option<&Path>) -> Result<kube::Client, ConnectError> {
    connect_as("kvrs", kubeconfig).await
}

/// The User-Agent of `component`'s requests, in client-go's shape
/// (`<component>/v<version> (<os>/<arch>) kvrs`): audit logs and API priority and fairness tell
/// kvrs's daemons apart from each other and from other clients (kube-rs sends none of its own).
pub fn user_agent(component: &str) -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!(
        "{component}/v{} ({}/{arch}) kvrs",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS
    )
}

/// [`connect`] for `component` (e.g. `virt-controller`), named in every request's User-Agent.
pub async fn connect_as(
    component: &str,
    kubeconfig: Option<&Path>,
) -> Result<kube::Client, ConnectError> {
    let mut config = match kubeconfig {
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
    let agent = http::HeaderValue::from_str(&user_agent(component))
        .map_err(|e| ConnectError::Client(format!("User-Agent for {component:?}: {e}")))?;
    config.headers.push((http::header::USER_AGENT, agent));
    kube::Client::try_from(config).map_err(|e| ConnectError::Client(e.to_string()))
}

/// How a daemon writes its log lines to stderr (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines; coloured only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `message` and the event's
    /// fields at the top level, plus the spans it is in), for log collectors.
    Json,
}

/// A `--log-format` value that is neither `text` nor `json`.
#[derive(Debug, thiserror::Error)]
#[error("log format {0:?}: expected text or json")]
pub struct UnknownLogFormat(String);

impl std::str::FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(UnknownLogFormat(other.to_string())),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Logs to stderr as text, filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    init_logging_as(LogFormat::Text, "info");
}

/// Logs to stderr as text, filtered by `RUST_LOG`, or by `default` when it is unset (`kvrs run`
/// prints its own progress and keeps the components' logs to warnings).
pub fn init_logging_with_default(default: &str) {
    init_logging_as(LogFormat::Text, default);
}

/// The one logging set-up of every kvrs daemon: stderr in `format`, filtered by `RUST_LOG` or
/// `default`. Text carries ANSI colours only when stderr is a terminal, so a pod log or a pipe
/// gets plain lines.
pub fn init_logging_as(format: LogFormat, default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
            .init(),
        LogFormat::Json => builder.json().flatten_event(true).with_target(true).init(),
    }
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
