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
    /// Kubernetes events launchers ask to record (KubeVirt's `HandleK8SEvent`), for
    /// [`forward_launcher_events`], which needs the VMI cache and the API client.
    pub launcher_events: tokio::sync::mpsc::UnboundedSender<LauncherEvent>,
}

/// A `core/v1.Event` a launcher sent about its VMI, reduced to what is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherEvent {
    /// `namespace/name` of the involved VMI.
    pub key: String,
    /// The UID the launcher names: an event for an older VMI of the same name is dropped.
    pub uid: Option<String>,
    /// `Normal` or `Warning`.
    pub warning: bool,
    /// CamelCase reason (`IOerror`, ...).
    pub reason: String,
    /// The message.
    pub message: String,
}

/// Why a launcher's event JSON is not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LauncherEventError {
    /// Not a `core/v1.Event`.
    #[error("Error unmarshalling k8s event: {0}")]
    Json(String),
    /// No `involvedObject.name` / `namespace`.
    #[error("involvedObject: namespace and name are required")]
    NoObject,
}

impl LauncherEvent {
    /// Reads the JSON KubeVirt's launcher sends (`core/v1.Event` with `involvedObject` the VMI).
    pub fn from_json(json: &[u8]) -> Result<LauncherEvent, LauncherEventError> {
        let event: k8s_openapi::api::core::v1::Event =
            serde_json::from_slice(json).map_err(|e| LauncherEventError::Json(e.to_string()))?;
        let object = event.involved_object;
        let (Some(namespace), Some(name)) = (object.namespace, object.name) else {
            return Err(LauncherEventError::NoObject);
        };
        Ok(LauncherEvent {
            key: format!("{namespace}/{name}"),
            uid: object.uid,
            warning: event.type_.as_deref() == Some("Warning"),
            reason: event.reason.unwrap_or_default(),
            message: event.message.unwrap_or_default(),
        })
    }
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
        match LauncherEvent::from_json(&event_json) {
            Ok(event) => {
                info!(vmi = %event.key, reason = %event.reason, message = %event.message, "launcher event");
                let _ = self.launcher_events.send(event);
                Ok(())
            }
            Err(e) => Err(kvrs_ipc::CmdError::failed(e.to_string())),
        }
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

/// Records the events launchers send on their VMIs (KubeVirt's handler does it in its notify
/// server): the VMI must be in this node's cache with the UID the launcher names, so an event
/// from a launcher of an older VMI of the same name never lands on the new one.
pub async fn forward_launcher_events(
    mut events: tokio::sync::mpsc::UnboundedReceiver<LauncherEvent>,
    vmis: kube::runtime::reflector::Store<kvrs_api::VirtualMachineInstance>,
    mut api: kvrs_runtime::kube::api::KubeApi,
) {
    use kvrs_runtime::Api as _;
    while let Some(event) = events.recv().await {
        let Some((namespace, name)) = event.key.split_once('/') else {
            continue;
        };
        let reference = kube::runtime::reflector::ObjectRef::new(name).within(namespace);
        let Some(vmi) = vmis.get(&reference) else {
            warn!(vmi = %event.key, reason = %event.reason, "launcher event for a VMI not on this node: dropped");
            continue;
        };
        if event.uid.is_some() && vmi.metadata.uid != event.uid {
            warn!(vmi = %event.key, reason = %event.reason, "launcher event for another VMI of that name: dropped");
            continue;
        }
        let object = kvrs_decide::ObjectRef {
            kind: "VirtualMachineInstance".into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: vmi.metadata.uid.clone(),
        };
        let recorded = if event.warning {
            kvrs_decide::Event::warning(object, &event.reason, event.message)
        } else {
            kvrs_decide::Event::normal(object, &event.reason, event.message)
        };
        api.event(&recorded).await;
    }
}

#[cfg(test)]
mod launcher_event_tests {
    use super::*;

    #[test]
    fn kubevirts_launcher_event_json_is_read() {
        // The shape KubeVirt's notify client sends: a core/v1.Event whose involvedObject is
        // the VMI reference.
        let json = br#"{"metadata":{"creationTimestamp":null},
            "involvedObject":{"kind":"VirtualMachineInstance","namespace":"ns","name":"vm",
                "uid":"u-1","apiVersion":"kubevirt.io/v1"},
            "reason":"IOerror","message":"VM Paused due to not enough space on volume: rootdisk",
            "source":{},"firstTimestamp":null,"lastTimestamp":null,"eventTime":null,
            "reportingComponent":"","reportingInstance":"","type":"Warning"}"#;
        let event = LauncherEvent::from_json(json).unwrap();
        assert_eq!(
            event,
            LauncherEvent {
                key: "ns/vm".into(),
                uid: Some("u-1".into()),
                warning: true,
                reason: "IOerror".into(),
                message: "VM Paused due to not enough space on volume: rootdisk".into(),
            }
        );
    }

    #[test]
    fn events_without_an_object_or_not_json_are_refused() {
        assert_eq!(
            LauncherEvent::from_json(br#"{"reason":"x"}"#),
            Err(LauncherEventError::NoObject)
        );
        assert!(matches!(
            LauncherEvent::from_json(b"{"),
            Err(LauncherEventError::Json(_))
        ));
    }
}
