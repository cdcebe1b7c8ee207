//! Why a device plugin could not be served or registered (it is retried with backoff).

use std::path::PathBuf;

/// A failed round of serving and registering one device plugin.
#[derive(Debug, thiserror::Error)]
pub enum DevicePluginError {
    /// The plugin's socket could not be created (a missing device-plugin directory: no kubelet
    /// on this node yet, or the directory is not mounted).
    #[error("device plugin {resource}: socket {path}: {reason}")]
    Socket {
        /// The extended resource.
        resource: String,
        /// The socket.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The kubelet did not accept the registration (not running, refused, or no answer).
    #[error("device plugin {resource}: registering with {kubelet}: {reason}")]
    Register {
        /// The extended resource.
        resource: String,
        /// The kubelet's registration socket.
        kubelet: PathBuf,
        /// Why.
        reason: String,
    },
    /// The plugin's gRPC server ended on its own.
    #[error("device plugin {resource}: server on {path} stopped: {reason}")]
    Server {
        /// The extended resource.
        resource: String,
        /// The socket.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl DevicePluginError {
    /// A short, stable name of the failure kind, for logs and tests.
    pub fn label(&self) -> &'static str {
        match self {
            DevicePluginError::Socket { .. } => "socket",
            DevicePluginError::Register { .. } => "register",
            DevicePluginError::Server { .. } => "server",
        }
    }
}
