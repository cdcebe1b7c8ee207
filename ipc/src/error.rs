//! The one error type of kvrs-ipc: every way talking to a peer over its socket can fail, each
//! variant naming the socket or the RPC so a log line alone says what went wrong.

use std::path::PathBuf;
use std::time::Duration;

/// Why a connection, a handshake, a call or a server failed.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// No file at the socket path: the peer never started, or already cleaned up.
    #[error("{}: no such socket (is the peer running?)", path.display())]
    SocketMissing {
        /// The socket path dialled.
        path: PathBuf,
    },
    /// The socket file exists but nothing listens on it: a stale socket left by a process that
    /// exited without removing it.
    #[error("{}: connection refused: stale socket, no process is listening on it", path.display())]
    Refused {
        /// The socket path dialled.
        path: PathBuf,
    },
    /// Something other than a socket sits at the path.
    #[error("{}: not a Unix socket", path.display())]
    NotASocket {
        /// The path dialled.
        path: PathBuf,
    },
    /// The socket exists but we may not connect to it (its mode lets only its owner in).
    #[error("{}: permission denied", path.display())]
    PermissionDenied {
        /// The socket path dialled.
        path: PathBuf,
    },
    /// `connect(2)` itself did not finish in time.
    #[error("{}: connecting timed out after {after:?}", path.display())]
    ConnectTimeout {
        /// The socket path dialled.
        path: PathBuf,
        /// The configured connect timeout.
        after: Duration,
    },
    /// The peer accepted the connection but did not answer the version handshake in time: a hung
    /// process, or something that does not speak gRPC.
    #[error("{}: peer accepted the connection but did not answer {service}.Info within {after:?}", path.display())]
    Unresponsive {
        /// The socket path dialled.
        path: PathBuf,
        /// `CmdInfo` or `NotifyInfo`.
        service: &'static str,
        /// The handshake timeout.
        after: Duration,
    },
    /// The version handshake succeeded but the peer speaks none of our protocol versions.
    #[error(
        "{}: {service} version mismatch: peer supports versions {peer:?}, we support {ours:?}; no common version",
        path.display()
    )]
    NoCommonVersion {
        /// The socket path dialled.
        path: PathBuf,
        /// `cmd` or `notify`.
        service: &'static str,
        /// The versions the peer announced.
        peer: Vec<u32>,
        /// The versions we speak.
        ours: Vec<u32>,
    },
    /// The handshake call itself failed with a gRPC status.
    #[error("{}: could not check the {service} server version: {status_message}", path.display())]
    Handshake {
        /// The socket path dialled.
        path: PathBuf,
        /// `CmdInfo` or `NotifyInfo`.
        service: &'static str,
        /// The status as text.
        status_message: String,
    },
    /// Any other IO error on the socket path (bind, rename, chmod, connect).
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The call did not complete before its deadline.
    #[error("{rpc}: timed out after {after:?}")]
    Timeout {
        /// The RPC name, e.g. `SyncVirtualMachine`.
        rpc: &'static str,
        /// The deadline that passed.
        after: Duration,
    },
    /// The connection broke while the call was in flight (the peer exited or closed it).
    #[error("{rpc}: connection to the peer was lost: {detail}")]
    Disconnected {
        /// The RPC name.
        rpc: &'static str,
        /// What the transport reported.
        detail: String,
    },
    /// The peer does not implement this RPC (gRPC `Unimplemented`).
    #[error("{rpc}: not implemented by the peer: {message}")]
    Unimplemented {
        /// The RPC name.
        rpc: &'static str,
        /// The peer's status message.
        message: String,
    },
    /// The peer answered with another gRPC error status.
    #[error("{rpc}: gRPC error {code:?}: {message}")]
    Status {
        /// The RPC name.
        rpc: &'static str,
        /// The status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// The peer ran the command and reported failure (`Response.success == false`).
    #[error("server error. command {rpc} failed: {message:?}")]
    Failed {
        /// The RPC name.
        rpc: &'static str,
        /// The peer's `Response.message`.
        message: String,
    },
    /// `RedefineCheckpoint` failed because the launcher found the checkpoint invalid.
    #[error("RedefineCheckpoint: checkpoint invalid: {message}")]
    CheckpointInvalid {
        /// The launcher's message.
        message: String,
    },
    /// A payload could not be serialized to JSON before sending.
    #[error("{what}: cannot encode as JSON: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The server stopped with a transport error, or did not become ready.
    #[error("{}: server: {detail}", path.display())]
    Server {
        /// The socket the server was bound to.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

impl IpcError {
    /// True when the peer is gone or unreachable, the cases where virt-handler drops its cached
    /// client and dials again later.
    pub fn is_disconnected(&self) -> bool {
        matches!(
            self,
            IpcError::Disconnected { .. }
                | IpcError::SocketMissing { .. }
                | IpcError::Refused { .. }
        )
    }

    /// True when the peer answered `Unimplemented`.
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, IpcError::Unimplemented { .. })
    }

    /// Classifies a gRPC status returned by a call of `rpc` made with deadline `deadline`.
    pub(crate) fn from_status(
        rpc: &'static str,
        status: tonic::Status,
        deadline: Duration,
    ) -> Self {
        use std::error::Error as _;
        let code = status.code();
        // A status synthesised by the client from a broken transport carries the transport
        // error as its source; one received from the peer never has a source.
        let transport = status.source().is_some();
        if is_deadline(&status) {
            return IpcError::Timeout {
                rpc,
                after: deadline,
            };
        }
        match code {
            tonic::Code::Unimplemented if !transport => IpcError::Unimplemented {
                rpc,
                message: status.message().to_string(),
            },
            tonic::Code::Unavailable | tonic::Code::Cancelled => IpcError::Disconnected {
                rpc,
                detail: describe(&status),
            },
            _ if transport => IpcError::Disconnected {
                rpc,
                detail: describe(&status),
            },
            _ => IpcError::Status {
                rpc,
                code,
                message: status.message().to_string(),
            },
        }
    }

    /// Classifies an IO error from dialling `path`.
    pub(crate) fn from_connect(path: PathBuf, source: std::io::Error) -> Self {
        use std::io::ErrorKind;
        match source.kind() {
            ErrorKind::NotFound => IpcError::SocketMissing { path },
            ErrorKind::ConnectionRefused => {
                // Linux answers ECONNREFUSED for a regular file too; tell the two apart.
                let is_socket = std::fs::symlink_metadata(&path)
                    .map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
                    .unwrap_or(true);
                if is_socket {
                    IpcError::Refused { path }
                } else {
                    IpcError::NotASocket { path }
                }
            }
            ErrorKind::PermissionDenied => IpcError::PermissionDenied { path },
            _ => IpcError::Io { path, source },
        }
    }
}

/// True when the status says the deadline passed: `DeadlineExceeded` from the peer, or the
/// client's own `grpc-timeout` enforcement (`Cancelled` caused by [`tonic::TimeoutExpired`]).
pub(crate) fn is_deadline(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    if status.code() == tonic::Code::DeadlineExceeded {
        return true;
    }
    let mut source = status.source();
    while let Some(err) = source {
        if err.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// The status message followed by the chain of transport errors behind it.
fn describe(status: &tonic::Status) -> String {
    use std::error::Error as _;
    let mut text = status.message().to_string();
    let mut source = status.source();
    while let Some(err) = source {
        let part = err.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = err.source();
    }
    text
}
