//! Every way the hook sidecars can fail the launcher, each naming the sidecar (its container's
//! directory and socket, and the name it gave itself) so one log line or one sync error says
//! which hook to look at. [`HookError::label`] is the stable reason for metrics and tests.

use std::path::PathBuf;
use std::time::Duration;

use kvrs_ipc::hooks::HookCallError;

/// Which sidecar: `hook-sidecar-0/shim-ab12.sock ("shim")`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookName {
    /// The socket, relative to the hooks directory (`<container>/<socket>`).
    pub socket: String,
    /// The name the sidecar gave in its `Info` answer (empty before the handshake).
    pub name: String,
}

impl std::fmt::Display for HookName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.is_empty() {
            write!(f, "hook sidecar {}", self.socket)
        } else {
            write!(f, "hook sidecar {} ({:?})", self.socket, self.name)
        }
    }
}

/// Why collecting or calling the hook sidecars failed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The hooks directory (or a sidecar's directory in it) could not be read.
    #[error("read hooks directory {}: {source}", dir.display())]
    Directory {
        /// The directory read.
        dir: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Fewer sidecars answered than the pod asked for (`--hook-sidecars`) within the timeout.
    #[error(
        "only {found} of {expected} hook sidecars answered within {after:?} (--qemu-timeout); ready: {ready:?}"
    )]
    CollectTimeout {
        /// `--hook-sidecars`.
        expected: u32,
        /// Sockets that answered the handshake.
        found: usize,
        /// Their names.
        ready: Vec<String>,
        /// The timeout.
        after: Duration,
    },
    /// A sidecar accepted the connection but its `Info` handshake failed or timed out.
    #[error("{hook}: Info handshake failed: {source}")]
    Handshake {
        /// The sidecar.
        hook: HookName,
        /// The call's failure.
        source: Box<HookCallError>,
    },
    /// A sidecar serves none of the `Callbacks` versions the launcher speaks.
    #[error(
        "{hook}: serves none of the supported Callbacks versions (offered {offered:?}, supported [\"v1alpha3\", \"v1alpha2\", \"v1alpha1\"])"
    )]
    UnsupportedVersion {
        /// The sidecar.
        hook: HookName,
        /// What it offered.
        offered: Vec<String>,
    },
    /// A hook call failed: the sidecar exited, answered with an error, or did not answer in time.
    #[error("{hook}: {hook_point} failed: {source}")]
    Call {
        /// The sidecar.
        hook: HookName,
        /// `OnDefineDomain`, `PreCloudInitIso` or `Shutdown`.
        hook_point: &'static str,
        /// The call's failure.
        source: Box<HookCallError>,
    },
    /// What `OnDefineDomain` returned is not a libvirt domain the launcher can define.
    #[error("{hook}: OnDefineDomain returned a malformed domain XML: {reason}")]
    MalformedDomain {
        /// The sidecar.
        hook: HookName,
        /// What is wrong with it.
        reason: String,
    },
    /// `OnDefineDomain` renamed the domain: the launcher finds its domain by name, so a renamed
    /// one would be defined and then lost.
    #[error("{hook}: OnDefineDomain renamed the domain from {from:?} to {to:?}")]
    RenamedDomain {
        /// The sidecar.
        hook: HookName,
        /// The launcher's name.
        from: String,
        /// The hook's.
        to: String,
    },
    /// What `PreCloudInitIso` returned is not cloud-init data.
    #[error("{hook}: PreCloudInitIso returned malformed cloud-init data: {reason}")]
    MalformedCloudInit {
        /// The sidecar.
        hook: HookName,
        /// What is wrong with it.
        reason: String,
    },
    /// The launcher could not encode what it sends to the hooks.
    #[error("encode the {what} for the hook sidecars: {reason}")]
    Encode {
        /// `domain XML`, `VMI`, `cloud-init data`.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

impl HookError {
    /// A stable, lower-case reason for metrics, logs and tests.
    pub fn label(&self) -> &'static str {
        match self {
            HookError::Directory { .. } => "hooks_directory",
            HookError::CollectTimeout { .. } => "collect_timeout",
            HookError::Handshake { .. } => "handshake_failed",
            HookError::UnsupportedVersion { .. } => "unsupported_version",
            HookError::Call { source, .. } => match **source {
                HookCallError::Timeout { .. } => "hook_timeout",
                HookCallError::Connect(_) => "hook_unreachable",
                _ => "hook_failed",
            },
            HookError::MalformedDomain { .. } => "malformed_domain",
            HookError::RenamedDomain { .. } => "renamed_domain",
            HookError::MalformedCloudInit { .. } => "malformed_cloud_init",
            HookError::Encode { .. } => "encode",
        }
    }
}
