//! Watching the host's device nodes: each plugin's [`Health`] as a `watch` channel that its
//! ListAndWatch streams follow.
//!
//! KubeVirt watches the nodes' directories with inotify; kvrs polls (a few `stat`s per tick),
//! which also catches a node replaced between two ticks (its inode changes). KVM is probed again
//! only when its node changed or while it is unhealthy, so a healthy node costs one `stat`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kvrs_node::host_devices;
use tokio::sync::watch;
use tracing::{info, warn};

use super::plan::{DeviceFacts, Health, PluginSpec, Probe, health};

/// Where `spec`'s device node is seen from this process: `root` is the host's `/`
/// (`/proc/1/root` in a pod sharing the host's PID namespace, as KubeVirt reads it).
pub fn node_path(root: &Path, spec: &PluginSpec) -> PathBuf {
    root.join(spec.device_path.trim_start_matches('/'))
}

/// What the host shows of `spec`'s device now.
pub fn observe(root: &Path, spec: &PluginSpec) -> DeviceFacts {
    let path = node_path(root, spec);
    let present = host_devices::device_present(&path);
    let kvm = (present && spec.probe == Probe::KvmWorks)
        .then(|| host_devices::kvm_check_at(&path).map_err(|e| e.to_string()));
    DeviceFacts { present, kvm }
}

/// The node's identity (inode, device number, change time), `None` when it is missing.
type Fingerprint = (u64, u64, u64, i64, i64);

fn fingerprint(path: &Path) -> Option<Fingerprint> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.rdev(), m.ctime(), m.ctime_nsec()))
}

/// One device under watch.
struct Watched {
    spec: PluginSpec,
    path: PathBuf,
    fingerprint: Option<Fingerprint>,
    facts: DeviceFacts,
    health: watch::Sender<Health>,
}

/// The current health of each plugin's devices, kept up to date by [`HealthWatch::run`].
pub struct HealthWatch {
    root: PathBuf,
    devices: Vec<Watched>,
}

impl HealthWatch {
    /// Observes every plugin's device once; returns the watch and one receiver per plugin (in
    /// the order of `specs`).
    pub fn new(root: &Path, specs: &[PluginSpec]) -> (Self, Vec<watch::Receiver<Health>>) {
        let mut receivers = Vec::with_capacity(specs.len());
        let devices = specs
            .iter()
            .map(|spec| {
                let path = node_path(root, spec);
                let facts = observe(root, spec);
                let now = health(spec.probe, &facts);
                log_health(spec, &facts, now, true);
                let (tx, rx) = watch::channel(now);
                receivers.push(rx);
                Watched {
                    spec: spec.clone(),
                    fingerprint: fingerprint(&path),
                    path,
                    facts,
                    health: tx,
                }
            })
            .collect();
        (
            HealthWatch {
                root: root.to_path_buf(),
                devices,
            },
            receivers,
        )
    }

    /// Looks at every device again; a changed health is sent to its watchers.
    pub fn tick(&mut self) {
        for d in &mut self.devices {
            let fingerprint = fingerprint(&d.path);
            let unhealthy = *d.health.borrow() == Health::Unhealthy;
            if fingerprint == d.fingerprint && !(unhealthy && d.facts.present) {
                continue;
            }
            d.fingerprint = fingerprint;
            let facts = observe(&self.root, &d.spec);
            let now = health(d.spec.probe, &facts);
            let changed = d.health.send_if_modified(|h| {
                let changed = *h != now;
                *h = now;
                changed
            });
            if changed || facts.present != d.facts.present {
                log_health(&d.spec, &facts, now, false);
            }
            d.facts = facts;
        }
    }

    /// Ticks every `period` until the task is dropped.
    pub async fn run(mut self, period: Duration) {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            self.tick();
        }
    }
}

fn log_health(spec: &PluginSpec, facts: &DeviceFacts, health: Health, first: bool) {
    let device = spec.device_path;
    let resource = spec.resource_name();
    match (health, facts) {
        (Health::Healthy, _) if first => info!(device, resource, "device is present"),
        (Health::Healthy, _) => info!(device, resource, "monitored device appeared"),
        (
            Health::Unhealthy,
            DeviceFacts {
                present: true,
                kvm: Some(Err(reason)),
            },
        ) => warn!(
            device,
            resource, "KVM does not work here, the devices are unhealthy: {reason}"
        ),
        (Health::Unhealthy, _) if first => warn!(
            device,
            resource, "device is not present, its devices are advertised unhealthy"
        ),
        (Health::Unhealthy, _) => warn!(device, resource, "monitored device disappeared"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_plugins::plan::{PlanInputs, plan};

    fn specs() -> Vec<PluginSpec> {
        plan(&PlanInputs {
            max_devices: 1,
            cgroup2_unified: false,
            vsock: false,
        })
        .plugins
    }

    /// A host root whose `dev/` holds symlinks to real nodes.
    fn root_with(devices: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("dev/net")).unwrap();
        for (rel, target) in devices {
            std::os::unix::fs::symlink(target, root.path().join("dev").join(rel)).unwrap();
        }
        root
    }

    #[test]
    fn a_character_device_that_is_not_kvm_leaves_kvm_unhealthy() {
        let root = root_with(&[("kvm", "/dev/null")]);
        let kvm = &specs()[0];
        let facts = observe(root.path(), kvm);
        assert!(facts.present);
        assert!(matches!(&facts.kvm, Some(Err(reason)) if reason.contains("dev/kvm")));
        assert_eq!(health(kvm.probe, &facts), Health::Unhealthy);
    }

    #[test]
    fn nodes_are_looked_at_under_the_host_root() {
        let root = root_with(&[("net/tun", "/dev/null")]);
        let specs = specs();
        assert_eq!(
            node_path(root.path(), &specs[1]),
            root.path().join("dev/net/tun")
        );
        assert!(observe(root.path(), &specs[1]).present);
        assert!(!observe(root.path(), &specs[2]).present);
        assert_eq!(observe(root.path(), &specs[2]).kvm, None);
    }

    #[test]
    fn a_tick_sends_only_changes() {
        let root = root_with(&[]);
        let specs = specs();
        let (mut watch, mut receivers) = HealthWatch::new(root.path(), &specs[1..2]);
        let tun = &mut receivers[0];
        assert_eq!(*tun.borrow_and_update(), Health::Unhealthy);
        watch.tick();
        assert!(!tun.has_changed().unwrap());
        std::os::unix::fs::symlink("/dev/null", root.path().join("dev/net/tun")).unwrap();
        watch.tick();
        assert!(tun.has_changed().unwrap());
        assert_eq!(*tun.borrow_and_update(), Health::Healthy);
        watch.tick();
        assert!(!tun.has_changed().unwrap());
    }
}
