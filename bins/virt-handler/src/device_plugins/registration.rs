//! One plugin's life with the kubelet: serve its socket, register on `kubelet.sock`, and start
//! over when the kubelet restarts — KubeVirt's `controlledDevice` loop and `Start`.
//!
//! A restarting kubelet removes every socket in the device-plugin directory and creates a new
//! `kubelet.sock`; it forgets every plugin. Each tick the plugin checks that its own socket and
//! the kubelet's are the files it served and registered with; when either changed it stops,
//! waits a second and serves + registers again. A failed round is retried after 1, 2, 5, then
//! every 10 s (KubeVirt's backoff).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kvrs_ipc::proto::deviceplugin::v1beta1::{
    RegisterRequest, device_plugin_server::DevicePluginServer,
    registration_client::RegistrationClient,
};
use kvrs_ipc::tonic;
use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tracing::{debug, info, warn};

use super::error::DevicePluginError;
use super::health::node_path;
use super::plan::{API_VERSION, Health, KUBELET_SOCKET, PluginSpec};
use super::server::PluginService;

/// How long connecting to and registering with the kubelet may take (KubeVirt: 5 s to
/// connect).
const KUBELET_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything one plugin's loop needs.
pub struct PluginRunner {
    /// The plugin.
    pub spec: PluginSpec,
    /// Devices advertised.
    pub count: usize,
    /// Cgroup permissions granted.
    pub permissions: &'static str,
    /// The kubelet's device-plugin directory.
    pub plugin_dir: PathBuf,
    /// The host's `/` as this process sees it (for the pre-open).
    pub device_root: PathBuf,
    /// How often the sockets are checked.
    pub poll_interval: Duration,
    /// Waits between rounds: the first after a kubelet restart, then one more per failure.
    pub backoff: Vec<Duration>,
    /// The devices' health.
    pub health: watch::Receiver<Health>,
    /// Registered with the current kubelet.
    pub registered: Arc<AtomicBool>,
}

/// Why a round ended without an error.
enum Ended {
    /// The plugins are stopping.
    Stopped,
    /// The kubelet restarted (or something else replaced a socket): serve and register again.
    Restarted,
}

/// A socket file's identity, `None` when it is gone: its inode, and its change time because a
/// socket removed and bound again often gets the same inode number back.
type Identity = (u64, u64, i64, i64);

fn identity(path: &Path) -> Option<Identity> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// One running gRPC server of the plugin.
struct Serving {
    socket: PathBuf,
    identity: Option<Identity>,
    done: watch::Sender<bool>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Serving {
    /// Withdraws the devices from open ListAndWatch streams, stops serving (a second at most,
    /// as KubeVirt waits), and removes the socket unless it is no longer ours.
    async fn stop(mut self) {
        let _ = self.done.send(true);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if tokio::time::timeout(Duration::from_secs(1), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
        if self.identity.is_some() && identity(&self.socket) == self.identity {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

impl PluginRunner {
    fn resource(&self) -> String {
        self.spec.resource_name()
    }

    /// Serves and registers until `stop` becomes true, starting over after kubelet restarts
    /// and failures.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let resource = self.resource();
        let mut failures = 0usize;
        let mut last_error: Option<String> = None;
        loop {
            let wait = match self.round(&mut stop).await {
                Ok(Ended::Stopped) => return,
                Ok(Ended::Restarted) => {
                    failures = 0;
                    last_error = None;
                    self.backoff_at(0)
                }
                Err(e) => {
                    let message = e.to_string();
                    if last_error.as_deref() == Some(message.as_str()) {
                        debug!(resource, label = e.label(), "{message} (again)");
                    } else {
                        warn!(resource, label = e.label(), "{message}; retrying");
                    }
                    last_error = Some(message);
                    failures = failures.saturating_add(1);
                    self.backoff_at(failures)
                }
            };
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn backoff_at(&self, i: usize) -> Duration {
        let last = self.backoff.len().saturating_sub(1);
        self.backoff
            .get(i.min(last))
            .copied()
            .unwrap_or(Duration::from_secs(1))
    }

    /// Serves, registers and watches the sockets until one of them changes or `stop`.
    async fn round(&self, stop: &mut watch::Receiver<bool>) -> Result<Ended, DevicePluginError> {
        let serving = self.serve()?;
        let kubelet = self.plugin_dir.join(KUBELET_SOCKET);
        let kubelet_identity = identity(&kubelet);
        let registered = tokio::select! {
            _ = stop.wait_for(|s| *s) => None,
            r = self.register(&kubelet) => Some(r),
        };
        match registered {
            None => {
                serving.stop().await;
                return Ok(Ended::Stopped);
            }
            Some(Err(e)) => {
                serving.stop().await;
                return Err(e);
            }
            Some(Ok(())) => {}
        }
        self.registered.store(true, Ordering::SeqCst);
        let resource = self.resource();
        info!(resource, socket = %serving.socket.display(), "device plugin registered");

        let mut tick = tokio::time::interval(self.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break Ok(Ended::Stopped),
                _ = tick.tick() => {}
            }
            if identity(&serving.socket) != serving.identity {
                info!(
                    resource,
                    "device plugin socket removed, the kubelet probably restarted"
                );
                break Ok(Ended::Restarted);
            }
            if identity(&kubelet) != kubelet_identity {
                info!(resource, "kubelet.sock replaced, the kubelet restarted");
                break Ok(Ended::Restarted);
            }
            if serving.task.is_finished() {
                break Err(DevicePluginError::Server {
                    resource: resource.clone(),
                    path: serving.socket.clone(),
                    reason: "the gRPC server ended".into(),
                });
            }
        };
        self.registered.store(false, Ordering::SeqCst);
        serving.stop().await;
        if matches!(ended, Ok(Ended::Stopped)) {
            info!(resource, "device plugin stopped");
        }
        ended
    }

    /// Starts the plugin's gRPC server on a fresh socket.
    fn serve(&self) -> Result<Serving, DevicePluginError> {
        let socket = self.plugin_dir.join(self.spec.socket_name());
        let fail = |reason: String| DevicePluginError::Socket {
            resource: self.resource(),
            path: socket.clone(),
            reason,
        };
        match std::fs::remove_file(&socket) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(format!("removing the old socket: {e}"))),
        }
        if self.spec.pre_open {
            // Loads the module behind the node (tun, vhost_net) if it is not loaded yet.
            let _ = std::fs::File::open(node_path(&self.device_root, &self.spec));
        }
        let listener = UnixListener::bind(&socket).map_err(|e| fail(e.to_string()))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| fail(format!("chmod 0600: {e}")))?;
        let (done, done_rx) = watch::channel(false);
        let (shutdown, shutdown_rx) = oneshot::channel::<()>();
        let service = PluginService {
            spec: self.spec.clone(),
            count: self.count,
            permissions: self.permissions,
            health: self.health.clone(),
            done: done_rx,
        };
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = shutdown_rx.await;
                }),
        );
        Ok(Serving {
            identity: identity(&socket),
            socket,
            done,
            shutdown: Some(shutdown),
            task,
        })
    }

    /// `Register` on the kubelet's socket with the plugin's endpoint and resource.
    async fn register(&self, kubelet: &Path) -> Result<(), DevicePluginError> {
        let fail = |reason: String| DevicePluginError::Register {
            resource: self.resource(),
            kubelet: kubelet.to_path_buf(),
            reason,
        };
        let channel = kvrs_ipc::transport::dial(kubelet, KUBELET_TIMEOUT)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let mut request = tonic::Request::new(RegisterRequest {
            version: API_VERSION.into(),
            endpoint: self.spec.socket_name(),
            resource_name: self.resource(),
            options: None,
        });
        request.set_timeout(KUBELET_TIMEOUT);
        match tokio::time::timeout(
            KUBELET_TIMEOUT,
            RegistrationClient::new(channel).register(request),
        )
        .await
        {
            Err(_) => Err(fail(format!("no answer within {KUBELET_TIMEOUT:?}"))),
            Ok(Err(status)) => Err(fail(format!("{:?}: {}", status.code(), status.message()))),
            Ok(Ok(_)) => Ok(()),
        }
    }
}
