//! The notify pipe: a socket the handler creates inside a launcher pod that forwards every
//! connection, byte for byte, to the handler's own notify server.
//!
//! The launcher can then always dial `<share dir>/domain-notify-pipe.sock` in its own mount
//! namespace, whatever node path the handler's socket has, and the handler never has to expose
//! its socket directory to pods.

use std::path::{Path, PathBuf};

use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use crate::error::IpcError;
use crate::transport::bind_private;

/// A running pipe. Dropping it stops accepting and removes the pipe socket; connections already
/// piped finish on their own.
#[derive(Debug)]
pub struct PipeHandle {
    socket: PathBuf,
    task: JoinHandle<()>,
}

impl PipeHandle {
    /// The pipe socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for PipeHandle {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Listens on `pipe_socket` (mode `mode`, handed to `owner` — the launcher's user for non-root
/// VMIs) and forwards each connection to a fresh connection to `handler_socket`.
pub fn serve_notify_pipe(
    pipe_socket: &Path,
    handler_socket: &Path,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<PipeHandle, IpcError> {
    let _ = std::fs::remove_file(pipe_socket);
    let listener = bind_private(pipe_socket, mode, owner)?;
    let target = handler_socket.to_path_buf();
    let pipe = pipe_socket.to_path_buf();
    let task = tokio::spawn(async move {
        loop {
            let mut inbound = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(pipe = %pipe.display(), error = %e, "notify pipe accept failed");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            };
            let target = target.clone();
            tokio::spawn(async move {
                match UnixStream::connect(&target).await {
                    Ok(mut outbound) => {
                        if let Err(e) =
                            tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await
                        {
                            tracing::debug!(error = %e, "notify pipe connection closed");
                        }
                    }
                    Err(e) => {
                        tracing::error!(handler = %target.display(), error = %e, "notify pipe cannot reach the handler");
                    }
                }
            });
        }
    });
    Ok(PipeHandle {
        socket: pipe_socket.to_path_buf(),
        task,
    })
}
