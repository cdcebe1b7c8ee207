//! KubeVirt's device manager: the kubelet device plugins that make `devices.kubevirt.io/kvm`,
//! `tun`, `vhost-net` (and `vhost-vsock` with the `VSOCK` gate) schedulable resources of this
//! node, so launcher pods requesting them get the host's device nodes.
//!
//! - [`plan`]: which plugins, how many devices, which permissions, which health (pure);
//! - `health`: the host's device nodes under watch, one health channel per plugin;
//! - `server`: the `v1beta1.DevicePlugin` service the kubelet calls;
//! - `registration`: serving each plugin's socket, registering it on `kubelet.sock`, and doing
//!   both again when the kubelet restarts.

mod error;
mod health;
pub mod plan;
mod registration;
mod server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

pub use error::DevicePluginError;
pub use health::observe;
pub use plan::{DeviceFacts, Health, Plan, PlanInputs, PluginSpec, Probe};

use health::HealthWatch;
use registration::PluginRunner;

/// Where the host's `/` is seen from virt-handler's pod (it shares the host's PID namespace):
/// the device nodes are looked at there, as KubeVirt does, because a container's own `/dev`
/// does not follow the host's.
pub const HOST_ROOT: &str = "/proc/1/root";

/// How the device plugins run.
#[derive(Clone, Debug)]
pub struct DevicePluginConfig {
    /// The kubelet's device-plugin directory: `kubelet.sock` and the plugins' sockets.
    pub plugin_dir: PathBuf,
    /// The host's `/` as this process sees it ([`HOST_ROOT`]); the device nodes granted to
    /// pods are still named by their host paths (`/dev/kvm`).
    pub device_root: PathBuf,
    /// The plugins and their devices.
    pub plan: Plan,
    /// How often device nodes and sockets are looked at.
    pub poll_interval: Duration,
    /// Waits between attempts (KubeVirt: 1, 2, 5, 10 s).
    pub backoff: Vec<Duration>,
}

impl DevicePluginConfig {
    /// KubeVirt's plugins for this host: `max_devices` each, `rwm` on a unified cgroup v2
    /// hierarchy, `vhost-vsock` with the `VSOCK` gate; nodes looked at under [`HOST_ROOT`].
    pub fn for_host(plugin_dir: PathBuf, max_devices: usize, vsock: bool) -> Self {
        DevicePluginConfig {
            plugin_dir,
            device_root: host_root(),
            plan: plan::plan(&PlanInputs {
                max_devices,
                cgroup2_unified: kvrs_node::host_devices::cgroup2_unified(),
                vsock,
            }),
            poll_interval: Duration::from_secs(1),
            backoff: [1, 2, 5, 10].map(Duration::from_secs).to_vec(),
        }
    }
}

/// [`HOST_ROOT`] where this process may look into it, `/` otherwise: a sandboxed host's PID 1
/// may refuse `/proc/1/root` even to root, and a privileged container's own `/dev` then holds
/// the host's device nodes (the runtime gives it all of them), as a process on the host sees
/// them directly.
fn host_root() -> PathBuf {
    if std::fs::read_dir(Path::new(HOST_ROOT).join("dev")).is_ok() {
        PathBuf::from(HOST_ROOT)
    } else {
        tracing::info!(
            host_root = HOST_ROOT,
            "the host's root is not readable here: device nodes are looked at under /"
        );
        PathBuf::from("/")
    }
}

/// The running device plugins. [`DevicePlugins::stop`] withdraws the devices and removes the
/// sockets.
pub struct DevicePlugins {
    stop: watch::Sender<bool>,
    registered: Vec<(String, Arc<AtomicBool>)>,
    plugins: Vec<JoinHandle<()>>,
    health: JoinHandle<()>,
}

impl DevicePlugins {
    /// Observes the devices once, then serves and registers every plugin of `config.plan` in
    /// the background (call within a tokio runtime).
    pub fn start(config: DevicePluginConfig) -> DevicePlugins {
        let (watch, receivers) = HealthWatch::new(&config.device_root, &config.plan.plugins);
        let health = tokio::spawn(watch.run(config.poll_interval));
        let (stop, stop_rx) = watch::channel(false);
        let mut registered = Vec::new();
        let mut plugins = Vec::new();
        for (spec, health) in config.plan.plugins.iter().zip(receivers) {
            let flag = Arc::new(AtomicBool::new(false));
            registered.push((spec.resource_name(), flag.clone()));
            let runner = PluginRunner {
                spec: spec.clone(),
                count: config.plan.devices_per_plugin,
                permissions: config.plan.permissions,
                plugin_dir: config.plugin_dir.clone(),
                device_root: config.device_root.clone(),
                poll_interval: config.poll_interval,
                backoff: config.backoff.clone(),
                health,
                registered: flag,
            };
            plugins.push(tokio::spawn(runner.run(stop_rx.clone())));
        }
        info!(
            dir = %config.plugin_dir.display(),
            resources = ?registered.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(),
            devices = config.plan.devices_per_plugin,
            permissions = config.plan.permissions,
            "starting device plugins"
        );
        DevicePlugins {
            stop,
            registered,
            plugins,
            health,
        }
    }

    /// Every plugin is registered with the current kubelet (KubeVirt's `Initialized`, which
    /// its heartbeat requires before it labels the node schedulable).
    pub fn initialized(&self) -> bool {
        self.registered
            .iter()
            .all(|(_, r)| r.load(Ordering::SeqCst))
    }

    /// The resources whose plugin is registered now.
    pub fn registered_resources(&self) -> Vec<String> {
        self.registered
            .iter()
            .filter(|(_, r)| r.load(Ordering::SeqCst))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Withdraws the devices (an empty list on each open ListAndWatch), stops the servers and
    /// removes their sockets.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        for plugin in std::mem::take(&mut self.plugins) {
            let _ = plugin.await;
        }
    }
}

impl Drop for DevicePlugins {
    /// Dropped without [`DevicePlugins::stop`] (an error path): the plugins still stop.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.health.abort();
    }
}
