//! The proxies themselves: a listener (a unix socket in the source pod, or a TCP port on the
//! target node) whose every connection is joined to a fresh connection the other way (TLS to
//! the target node, or the target pod's unix socket), bytes copied both ways until both sides
//! are done — or until the proxy is stopped, which also ends the connections it carries (as
//! KubeVirt's stop channel does).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::{debug, info, warn};

use super::ProxyError;
use super::cert_dir::TlsSource;

/// How long a peer has to finish its TLS handshake: a connection that never does holds no task
/// beyond it.
const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// A unix socket of the target pod, named beneath the pod's root (as the node sees it, e.g.
/// `/proc/<pid>/root`): it is opened with `openat2(RESOLVE_IN_ROOT)` at every connection, so a
/// symlink the pod made is followed as the pod would follow it — an absolute target or `..`
/// stays inside the root — and the proxy can never be pointed at a file of the node.
/// (The launcher's own `virtqemud-sock` is such a link when it runs the monolithic daemon.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSocket {
    /// The pod's root as the node sees it (paths and symlinks resolve as if it were `/`).
    pub root: PathBuf,
    /// The socket beneath it.
    pub relative: PathBuf,
}

impl TargetSocket {
    /// `root/relative`, for names and logs.
    pub fn display(&self) -> String {
        self.root.join(&self.relative).display().to_string()
    }

    fn open(&self) -> std::io::Result<File> {
        let dir = File::open(&self.root)?;
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .mode(Mode::empty())
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = openat2(&dir, self.relative.as_path(), how).map_err(std::io::Error::from)?;
        Ok(File::from(fd))
    }

    async fn dial(&self) -> std::io::Result<UnixStream> {
        let opened = self.open()?;
        UnixStream::connect(format!("/proc/self/fd/{}", opened.as_raw_fd())).await
    }
}

/// A running proxy. Stopping it (or dropping it) closes its listener and its connections.
#[derive(Debug)]
pub struct Proxy {
    stop: watch::Sender<bool>,
    local_port: u16,
    socket_file: Option<PathBuf>,
}

impl Proxy {
    /// Stops listening and ends every connection it carries; removes its socket file.
    pub fn stop(self) {
        drop(self);
    }

    /// The TCP port a target proxy listens on (0 for a source proxy).
    pub fn local_port(&self) -> u16 {
        self.local_port
    }

    /// The unix socket a source proxy listens on.
    pub fn socket_file(&self) -> Option<&Path> {
        self.socket_file.as_deref()
    }

    /// A target proxy: TCP (mutual TLS when `tls` gives a server configuration, taken afresh
    /// for each connection) on a fresh port of every address, each connection joined to
    /// `socket`.
    pub async fn target(
        socket: TargetSocket,
        tls: TlsSource,
        key: &str,
    ) -> Result<Proxy, ProxyError> {
        // Every address, as KubeVirt's (`::` also takes IPv4 where the kernel is dual-stack).
        let listener =
            match TcpListener::bind(("::", 0)).await {
                Ok(l) => l,
                Err(_) => TcpListener::bind(("0.0.0.0", 0)).await.map_err(|source| {
                    ProxyError::Listen {
                        what: "a TCP port".into(),
                        source,
                    }
                })?,
            };
        let local_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let (stop, stopped) = watch::channel(false);
        let key = key.to_string();
        info!(key, port = local_port, outbound = %socket.display(), "target proxy listening");
        tokio::spawn(async move {
            loop {
                let mut stopped_now = stopped.clone();
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = stopped_now.wait_for(|s| *s) => return,
                };
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        warn!(key, error = %e, "target proxy: accept failed");
                        return;
                    }
                };
                let (tls, socket, stopped, key) =
                    (tls.clone(), socket.clone(), stopped.clone(), key.clone());
                tokio::spawn(async move {
                    let server = match tls.current() {
                        Ok(current) => current.server,
                        Err(e) => {
                            warn!(key, %peer, error = %e,
                                "target proxy: no migration certificates, connection refused");
                            return;
                        }
                    };
                    // The peer proves itself before anything of the pod is dialled.
                    match server {
                        Some(config) => {
                            match tokio::time::timeout(
                                HANDSHAKE,
                                TlsAcceptor::from(config).accept(tcp),
                            )
                            .await
                            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
                            {
                                Ok(tls) => {
                                    info!(key, %peer, version = ?tls.get_ref().1.protocol_version(),
                                        "target proxy: mutual TLS connection accepted, client certificate verified");
                                    if let Some(outbound) = dial_logged(&socket, &key).await {
                                        join(tls, outbound, stopped, &key).await;
                                    }
                                }
                                Err(e) => {
                                    warn!(key, %peer, error = %e, "target proxy: TLS handshake refused");
                                }
                            }
                        }
                        None => {
                            info!(key, %peer, "target proxy: plain TCP connection (migrations.disableTLS)");
                            if let Some(outbound) = dial_logged(&socket, &key).await {
                                join(tcp, outbound, stopped, &key).await;
                            }
                        }
                    }
                });
            }
        });
        Ok(Proxy {
            stop,
            local_port,
            socket_file: None,
        })
    }

    /// A source proxy: a unix socket at `file` (bound privately, then given to `owner`), each
    /// connection joined to `address` over TCP (mutual TLS when `tls` gives a client
    /// configuration, taken afresh for each connection).
    pub async fn source(
        file: &Path,
        address: String,
        tls: TlsSource,
        owner: Option<(u32, u32)>,
        key: &str,
    ) -> Result<Proxy, ProxyError> {
        let listener = kvrs_ipc::transport::bind_private(file, 0o660, owner).map_err(|e| {
            ProxyError::Listen {
                what: file.display().to_string(),
                source: std::io::Error::other(e.to_string()),
            }
        })?;
        let (stop, stopped) = watch::channel(false);
        let key = key.to_string();
        info!(key, socket = %file.display(), outbound = address, "source proxy listening");
        tokio::spawn(async move {
            loop {
                let mut stopped_now = stopped.clone();
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = stopped_now.wait_for(|s| *s) => return,
                };
                let unix = match accepted {
                    Ok((u, _)) => u,
                    Err(e) => {
                        warn!(key, error = %e, "source proxy: accept failed");
                        return;
                    }
                };
                let (tls, address, stopped, key) =
                    (tls.clone(), address.clone(), stopped.clone(), key.clone());
                tokio::spawn(async move {
                    let client = match tls.current() {
                        Ok(current) => current.client,
                        Err(e) => {
                            warn!(key, address, error = %e,
                                "source proxy: no migration certificates, connection refused");
                            return;
                        }
                    };
                    let tcp = match TcpStream::connect(&address).await {
                        Ok(t) => t,
                        Err(e) => {
                            warn!(key, address, error = %e,
                                "source proxy: unable to create the outbound leg");
                            return;
                        }
                    };
                    let _ = tcp.set_nodelay(true);
                    match client {
                        // The peer is known by its certificate, not its name (tls.rs).
                        Some(config) => match TlsConnector::from(config)
                            .connect(
                                ServerName::IpAddress(std::net::Ipv4Addr::UNSPECIFIED.into()),
                                tcp,
                            )
                            .await
                        {
                            Ok(tls) => {
                                info!(key, address, version = ?tls.get_ref().1.protocol_version(),
                                    "source proxy: mutual TLS connection to the target, its certificate verified");
                                join(unix, tls, stopped, &key).await
                            }
                            Err(e) => warn!(key, address, error = %e,
                                "source proxy: TLS handshake with the target failed"),
                        },
                        None => {
                            info!(
                                key,
                                address,
                                "source proxy: plain TCP connection (migrations.disableTLS)"
                            );
                            join(unix, tcp, stopped, &key).await
                        }
                    }
                });
            }
        });
        Ok(Proxy {
            stop,
            local_port: 0,
            socket_file: Some(file.to_path_buf()),
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(file) = &self.socket_file {
            let _ = std::fs::remove_file(file);
        }
    }
}

async fn dial_logged(socket: &TargetSocket, key: &str) -> Option<UnixStream> {
    match socket.dial().await {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(key, error = %e, socket = %socket.display(),
                "target proxy: unable to create the outbound leg");
            None
        }
    }
}

/// Copies both ways until both directions end (a half-close is passed on), or the proxy stops.
async fn join<A, B>(mut a: A, mut b: B, mut stopped: watch::Receiver<bool>, key: &str)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut a, &mut b) => match copied {
            Ok((there, back)) => debug!(key, there, back, "proxy connection done"),
            Err(e) => debug!(key, error = %e, "proxy connection ended"),
        },
        _ = stopped.wait_for(|s| *s) => debug!(key, "proxy stopped: connection closed"),
    }
}
