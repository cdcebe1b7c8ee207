//! The migration proxy (KubeVirt v1.9.0's `pkg/virt-handler/migration-proxy`): during a live
//! migration the source pod's libvirt and QEMU talk to the target pod's through the two
//! nodes' virt-handlers, never directly, so no pod needs a route to another node's pods:
//!
//! ```text
//! source pod                 source handler              target handler           target pod
//! virtqemud ──unix──▶ <base>/migrationproxy/UID-source.sock ──TLS──▶ :port ──unix──▶ virtqemud sock
//! QEMU      ──unix──▶ <base>/migrationproxy/UID-49152-source.sock ──TLS──▶ :port ──unix──▶ QEMU's
//! ```
//!
//! The target handler listens first ([`ProxyManager::start_target_listener`]: one TCP port per
//! unix socket of the target pod, on every address) and publishes its ports
//! ([`ProxyManager::target_listener_ports`]: TCP port → the libvirt port it stands for, 0 for
//! the libvirt daemon's socket) in the VMI's migration state; the source handler then opens a
//! unix socket in the source pod per published port ([`ProxyManager::start_source_listener`]),
//! named by [`proxy_key`] and [`source_unix_file`] exactly as KubeVirt names them, because the
//! source launcher (kvrs's or KubeVirt's) builds its migration URIs from those names.
//!
//! The names and the port bookkeeping are plain functions here; [`forward`] is the shell
//! (listeners and byte copying), [`tls`] the mutual-TLS configurations, [`cert_dir`] the
//! certificates read again at each connection. Differences from
//! KubeVirt, both deliberate: the source socket is bound without following a path the pod can
//! change (kvrs-ipc's private bind: KubeVirt removes and binds by path in a pod-writable
//! directory), and the target dials the pod's sockets through a descriptor opened with
//! `openat2(RESOLVE_IN_ROOT)`, so no path the pod controls leads outside it (KubeVirt dials the
//! path).

pub mod cert_dir;
pub mod forward;
pub mod peer;
pub mod tls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing::info;

pub use cert_dir::{CertError, MigrationCertDir, TlsSource};
pub use forward::{Proxy, TargetSocket};
pub use tls::MigrationTls;

/// QEMU's migration stream port, as libvirt numbers it (KubeVirt's
/// `LibvirtDirectMigrationPort`).
pub const LIBVIRT_DIRECT_MIGRATION_PORT: u16 = 49152;
/// The block-migration (NBD) port (`LibvirtBlockMigrationPort`).
pub const LIBVIRT_BLOCK_MIGRATION_PORT: u16 = 49153;

/// The libvirt ports a migration needs besides the daemon's socket: the direct stream, and the
/// block stream when disks are copied.
pub fn migration_ports(block_migration: bool) -> Vec<u16> {
    let mut ports = vec![LIBVIRT_DIRECT_MIGRATION_PORT];
    if block_migration {
        ports.push(LIBVIRT_BLOCK_MIGRATION_PORT);
    }
    ports
}

/// `id`, or `id-PORT` for a libvirt port (`ConstructProxyKey`; port 0 is the daemon's socket).
pub fn proxy_key(id: &str, port: u16) -> String {
    if port == 0 {
        id.to_string()
    } else {
        format!("{id}-{port}")
    }
}

/// The source pod's socket for `key` under `base_dir` (`SourceUnixFile`).
pub fn source_unix_file(base_dir: &Path, key: &str) -> PathBuf {
    base_dir
        .join("migrationproxy")
        .join(format!("{key}-source.sock"))
}

/// The libvirt port a target socket path stands for: the first of KubeVirt's migration ports
/// whose key (`id-PORT`) the path contains, else 0 (the daemon's socket).
pub fn libvirt_port_of(id: &str, socket_path: &str) -> u16 {
    [LIBVIRT_DIRECT_MIGRATION_PORT, LIBVIRT_BLOCK_MIGRATION_PORT]
        .into_iter()
        .find(|&port| socket_path.contains(&proxy_key(id, port)))
        .unwrap_or(0)
}

/// Why a proxy could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// virt-handler is shutting down (KubeVirt's message).
    #[error("unable to process new migration connections during virt-handler shutdown")]
    ShuttingDown,
    /// A listener could not be bound.
    #[error("listening on {what}: {source}")]
    Listen {
        /// The socket file or address.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A port of the target's map is not a port.
    #[error("target port {0:?} is not a port number")]
    BadPort(String),
}

impl ProxyError {
    /// A stable label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ProxyError::ShuttingDown => "shutting_down",
            ProxyError::Listen { .. } => "listen",
            ProxyError::BadPort(_) => "bad_port",
        }
    }
}

#[derive(Default)]
struct State {
    /// Source proxies by VMI key, with the `host:port` each forwards to.
    sources: BTreeMap<String, Vec<(String, Proxy)>>,
    /// Target proxies by VMI key, with the socket each forwards to and its libvirt port.
    targets: BTreeMap<String, Vec<(TargetSocket, u16, Proxy)>>,
    shutting_down: bool,
}

/// The node's migration proxies (`ProxyManager`). Cheap to clone.
#[derive(Clone)]
pub struct ProxyManager {
    state: Arc<Mutex<State>>,
    tls: TlsSource,
    /// UID and GID given to the source sockets (the pod's QEMU user: 107 in KubeVirt).
    socket_owner: Option<(u32, u32)>,
}

impl ProxyManager {
    /// A manager using `tls` (plain TCP where it holds no configuration: the KubeVirt CR's
    /// `migrations.disableTLS`), giving source sockets to `socket_owner`.
    pub fn new(tls: impl Into<TlsSource>, socket_owner: Option<(u32, u32)>) -> ProxyManager {
        ProxyManager {
            state: Arc::new(Mutex::new(State::default())),
            tls: tls.into(),
            socket_owner,
        }
    }

    /// The configurations a connection starting now would use: whether the certificates are
    /// there at all is asked before a proxy starts, so a migration without them fails with
    /// the reason instead of at its first connection.
    pub fn current_tls(&self) -> Result<MigrationTls, CertError> {
        self.tls.current()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses new proxies from now on (existing ones keep running).
    pub fn initiate_graceful_shutdown(&self) {
        self.state().shutting_down = true;
    }

    /// How many VMIs have a source or target proxy.
    pub fn open_listener_count(&self) -> usize {
        let s = self.state();
        s.sources.len() + s.targets.len()
    }

    /// Listens on a fresh TCP port of every address for each of `sockets` (the target pod's
    /// libvirt daemon socket and its QEMU migration sockets). The same sockets again are a
    /// no-op; other sockets replace the key's proxies.
    pub async fn start_target_listener(
        &self,
        key: &str,
        sockets: Vec<TargetSocket>,
    ) -> Result<(), ProxyError> {
        {
            let mut s = self.state();
            if s.shutting_down {
                return Err(ProxyError::ShuttingDown);
            }
            if let Some(current) = s.targets.get(key) {
                let same = current.len() == sockets.len()
                    && current.iter().all(|(t, _, _)| sockets.contains(t));
                if same {
                    return Ok(());
                }
                info!(
                    key,
                    "stopping the target proxies: new unix socket locations"
                );
            }
            if let Some(old) = s.targets.remove(key) {
                old.into_iter().for_each(|(_, _, p)| p.stop());
            }
        }
        let mut started = Vec::new();
        for socket in sockets {
            let port = libvirt_port_of(key, &socket.display());
            let proxy = Proxy::target(socket.clone(), self.tls.clone(), key).await?;
            started.push((socket, port, proxy));
        }
        info!(key, proxies = started.len(), "target proxies listening");
        let mut s = self.state();
        if s.shutting_down {
            started.into_iter().for_each(|(_, _, p)| p.stop());
            return Err(ProxyError::ShuttingDown);
        }
        if let Some(raced) = s.targets.insert(key.to_string(), started) {
            raced.into_iter().for_each(|(_, _, p)| p.stop());
        }
        Ok(())
    }

    /// The key's target ports: TCP port (as text, the VMI's `targetDirectMigrationNodePorts`
    /// shape) → the libvirt port it stands for (0: the daemon's socket).
    pub fn target_listener_ports(&self, key: &str) -> BTreeMap<String, u16> {
        self.state()
            .targets
            .get(key)
            .map(|ps| {
                ps.iter()
                    .map(|(_, port, p)| (p.local_port().to_string(), *port))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops the key's target proxies.
    pub fn stop_target_listener(&self, key: &str) {
        if let Some(old) = self.state().targets.remove(key) {
            info!(key, "stopping the target proxies");
            old.into_iter().for_each(|(_, _, p)| p.stop());
        }
    }

    /// Opens a unix socket under `base_dir/migrationproxy` for each published target port
    /// (`dest_src_ports`: target TCP port → libvirt port), forwarding to
    /// `target_address:port`. The same target again is a no-op; another replaces them.
    pub async fn start_source_listener(
        &self,
        key: &str,
        target_address: &str,
        dest_src_ports: &BTreeMap<String, u16>,
        base_dir: &Path,
    ) -> Result<(), ProxyError> {
        let mut wanted = Vec::new();
        for (dest, src) in dest_src_ports {
            let port: u16 = dest
                .parse()
                .map_err(|_| ProxyError::BadPort(dest.clone()))?;
            wanted.push((join_host_port(target_address, port), *src));
        }
        {
            let mut s = self.state();
            if s.shutting_down {
                return Err(ProxyError::ShuttingDown);
            }
            if let Some(current) = s.sources.get(key) {
                let same = current.len() == wanted.len()
                    && current
                        .iter()
                        .all(|(addr, _)| wanted.iter().any(|(w, _)| w == addr));
                if same {
                    return Ok(());
                }
                info!(key, "stopping the source proxies: new target location");
            }
            if let Some(old) = s.sources.remove(key) {
                old.into_iter().for_each(|(_, p)| p.stop());
            }
        }
        let mut started = Vec::new();
        for (address, src) in wanted {
            let file = source_unix_file(base_dir, &proxy_key(key, src));
            let proxy = Proxy::source(
                &file,
                address.clone(),
                self.tls.clone(),
                self.socket_owner,
                key,
            )
            .await;
            match proxy {
                Ok(p) => started.push((address, p)),
                Err(e) => {
                    started.into_iter().for_each(|(_, p)| p.stop());
                    return Err(e);
                }
            }
        }
        info!(
            key,
            proxies = started.len(),
            target_address,
            "source proxies listening"
        );
        let mut s = self.state();
        if let Some(raced) = s.sources.insert(key.to_string(), started) {
            raced.into_iter().for_each(|(_, p)| p.stop());
        }
        Ok(())
    }

    /// The key's source socket files.
    pub fn source_listener_files(&self, key: &str) -> Vec<PathBuf> {
        self.state()
            .sources
            .get(key)
            .map(|ps| {
                ps.iter()
                    .filter_map(|(_, p)| p.socket_file().map(Path::to_path_buf))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops the key's source proxies and removes their socket files.
    pub fn stop_source_listener(&self, key: &str) {
        if let Some(old) = self.state().sources.remove(key) {
            info!(key, "stopping the source proxies");
            old.into_iter().for_each(|(_, p)| p.stop());
        }
    }
}

/// `host:port`, with an IPv6 host in brackets (Go's `net.JoinHostPort`).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kubevirts() {
        assert_eq!(proxy_key("uid", 0), "uid");
        assert_eq!(proxy_key("uid", 49152), "uid-49152");
        assert_eq!(
            source_unix_file(Path::new("/var/run/kubevirt"), "uid-49152"),
            Path::new("/var/run/kubevirt/migrationproxy/uid-49152-source.sock")
        );
        assert_eq!(migration_ports(false), vec![49152]);
        assert_eq!(migration_ports(true), vec![49152, 49153]);
    }

    #[test]
    fn a_target_socket_is_known_by_the_port_in_its_name() {
        assert_eq!(
            libvirt_port_of("uid", "/pods/x/migrationproxy/uid-49153-target.sock"),
            49153
        );
        assert_eq!(
            libvirt_port_of("uid", "/pods/x/libvirt/virtqemud-sock"),
            0,
            "the daemon's socket"
        );
        assert_eq!(libvirt_port_of("other", "/x/uid-49152"), 0);
    }

    #[test]
    fn host_and_port_join_as_go_joins_them() {
        assert_eq!(join_host_port("10.0.0.1", 4), "10.0.0.1:4");
        assert_eq!(join_host_port("fd00::1", 4), "[fd00::1]:4");
        assert_eq!(join_host_port("node01", 4), "node01:4");
    }
}
