//! The domain cache: what each launcher on this node last reported about its domain.
//!
//! Two sources feed it, as in KubeVirt: the notify server (launchers push every domain event
//! through the pipe socket the handler placed in their pod) and a periodic resync that asks
//! every launcher socket on the node for its domain (`GetDomain`). Both write the cache and queue
//! the VMI's key, so one worker sees a key whatever woke it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvrs_decide::handler::Domain;
use kvrs_ipc::notify::event_type;
use kvrs_ipc::{ClientConfig, CmdResult, DomainEvent, LauncherClient, NotifyService};
use kvrs_queue::AsyncQueue;
use tracing::{debug, info, warn};

use crate::lock;

/// The domains by VMI key (`namespace/name`).
#[derive(Default)]
pub struct DomainCache {
    domains: Mutex<HashMap<String, Domain>>,
}

/// The key of a reported domain: its namespace and VMI name.
pub fn key_of(domain: &Domain) -> Option<String> {
    let m = &domain.meta;
    (!m.name.is_empty()).then(|| format!("{}/{}", m.namespace, m.name))
}

impl DomainCache {
    /// The cached domain of `key`.
    pub fn get(&self, key: &str) -> Option<Domain> {
        lock(&self.domains).get(key).cloned()
    }

    /// Stores `domain` as the latest of its key; returns the key.
    pub fn put(&self, domain: Domain) -> Option<String> {
        let key = key_of(&domain)?;
        lock(&self.domains).insert(key.clone(), domain);
        Some(key)
    }

    /// Forgets the domain of `key`.
    pub fn remove(&self, key: &str) {
        lock(&self.domains).remove(key);
    }

    /// Keys of every cached domain.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.domains).keys().cloned().collect()
    }
}

/// The handler's notify server: domain events from launchers into the cache and the queue.
pub struct Notifications {
    /// The cache.
    pub cache: Arc<DomainCache>,
    /// The VMI queue.
    pub queue: AsyncQueue<String>,
}

#[kvrs_ipc::async_trait]
impl NotifyService for Notifications {
    async fn handle_domain_event(&self, event: DomainEvent) -> CmdResult {
        if event.event_type == event_type::ERROR {
            warn!(
                status = %String::from_utf8_lossy(&event.status_json),
                "a launcher reported an error"
            );
            return Ok(());
        }
        let domain: Domain = match serde_json::from_slice(&event.domain_json) {
            Ok(d) => d,
            Err(e) => {
                warn!(kind = %event.event_type, "unreadable domain in a launcher event: {e}");
                return Ok(());
            }
        };
        let Some(key) = key_of(&domain) else {
            warn!(kind = %event.event_type, "a launcher event names no VMI");
            return Ok(());
        };
        debug!(key, kind = %event.event_type, status = %domain.status.status, "domain event");
        if event.event_type == event_type::DELETED {
            self.cache.remove(&key);
        } else {
            self.cache.put(domain);
        }
        self.queue.add(key);
        Ok(())
    }

    async fn handle_k8s_event(&self, event_json: Vec<u8>) -> CmdResult {
        // KubeVirt forwards these to the VMI as Kubernetes events; kvrs logs them for now.
        info!(event = %String::from_utf8_lossy(&event_json), "launcher event");
        Ok(())
    }
}

/// Every launcher socket under the kubelet's pods directory
/// (`<pods>/<uid>/volumes/kubernetes.io~empty-dir/sockets/launcher-sock`).
pub fn launcher_sockets(pods_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(pods_dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let uid = e.file_name().into_string().ok()?;
            let socket = kvrs_ipc::layout::launcher_socket_on_host(pods_dir, &uid).ok()?;
            socket.exists().then_some(socket)
        })
        .collect()
}

/// Asks one launcher for its domain.
pub async fn get_domain(socket: &Path) -> Result<Option<Domain>, String> {
    let config = ClientConfig {
        connect_timeout: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    let client = LauncherClient::connect_with(socket, config)
        .await
        .map_err(|e| e.to_string())?;
    let Some(json) = client.get_domain().await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    serde_json::from_str(&json)
        .map(Some)
        .map_err(|e| format!("unreadable domain from {}: {e}", socket.display()))
}

/// One resync: `GetDomain` on every launcher socket of the node; each answer replaces the cached
/// domain and queues its key. Keys whose launcher has no domain any more are queued too, so a
/// lost DELETED notification is noticed within one period.
pub async fn resync(pods_dir: &Path, cache: &DomainCache, queue: &AsyncQueue<String>) {
    let mut seen = Vec::new();
    for socket in launcher_sockets(pods_dir) {
        match get_domain(&socket).await {
            Ok(Some(domain)) => {
                if let Some(key) = cache.put(domain) {
                    seen.push(key);
                }
            }
            Ok(None) => {}
            Err(e) => debug!(socket = %socket.display(), "resync: {e}"),
        }
    }
    for key in cache.keys() {
        queue.add(key);
    }
    for key in seen {
        queue.add(key);
    }
}
