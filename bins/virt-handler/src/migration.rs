//! virt-handler's side of live migration outside the decisions: the node's migration proxies
//! ([`Proxies`]), the address the target publishes ([`migration_address`]), the TLS material
//! ([`load_tls`]), and which of KubeVirt's three per-node controllers a sync runs
//! ([`Controllers`]).
//!
//! KubeVirt runs the VM, migration-source and migration-target controllers over the same node.
//! kvrs runs them in one sync of a key, one after another (VM controller, source, target), and
//! stops after the first that wrote the VMI's status: the write comes back through the watch and
//! queues the key again, so the next controller decides from the VMI as written instead of
//! failing its resourceVersion `test`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::handler::{Decision, HandlerPlan};
use kvrs_decide::{Action, NodeStep};

pub use crate::migration_proxy::cert_dir::{CertError, load_tls};
use crate::migration_proxy::{MigrationTls, ProxyError, ProxyManager, TargetSocket, TlsSource};

/// KubeVirt's dedicated migration interface (`v1.MigrationInterfaceName`): when the handler's
/// network namespace has it, its address is the migration address.
pub const MIGRATION_INTERFACE: &str = "migration0";

/// The launcher's run directory, where the target's sockets are (relative to it in the steps).
const LAUNCHER_RUN_DIR: &str = "/var/run";
/// The launcher's KubeVirt directory, under which the source proxy's sockets go.
const LAUNCHER_KUBEVIRT_DIR: &str = "/var/run/kubevirt";

/// Why a migration proxy step failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// Neither certificates nor `disableTLS`: kvrs never falls back to plaintext silently.
    #[error(
        "migration TLS is not configured: start virt-handler with --migration-cert-dir (tls.crt, tls.key, ca.crt), or set spec.configuration.migrations.disableTLS: true in the KubeVirt CR"
    )]
    TlsNotConfigured,
    /// `--migration-cert-dir` is given but holds no usable certificates (yet: virt-api writes
    /// the Secret the DaemonSet mounts there).
    #[error("migration TLS: {0}")]
    TlsUnavailable(#[from] CertError),
    /// The launcher pod's process is not known (its launcher did not answer).
    #[error("{0}: the launcher's PID is not known")]
    NoPod(&'static str),
    /// The pod's directory could not be resolved inside its root.
    #[error("{step}: resolving {path} in the launcher pod: {why}")]
    PodPath {
        /// The step.
        step: &'static str,
        /// The path inside the pod.
        path: &'static str,
        /// Why.
        why: String,
    },
    /// The proxy refused.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
}

/// The `status.selinuxContext` fact: `none` on a node without SELinux (no selinuxfs at
/// `/sys/fs/selinux`), as KubeVirt's handler writes it. The migration controller renders no
/// target pod until the VMI carries it (KubeVirt's `SELinux context not set on VMI status`).
/// On an SELinux node KubeVirt reads the launcher's process context; kvrs leaves the fact unset
/// there (no SELinux node to test it on), so such migrations keep waiting with that message.
pub fn selinux_context_fact() -> Option<String> {
    selinux_context_for(Path::new("/sys/fs/selinux/enforce").exists())
}

fn selinux_context_for(selinux_present: bool) -> Option<String> {
    (!selinux_present).then(|| "none".to_string())
}

/// Where this node's migration address comes from, in KubeVirt's order with kvrs's explicit
/// flag first: `--migration-address`, the [`MIGRATION_INTERFACE`]'s address, the pod IP
/// (`--pod-ip-address`, `$MY_POD_IP` in KubeVirt's DaemonSet), then the Node's `InternalIP`
/// (a handler run as a host process, as `kvrs run` and the tests do, has no pod IP).
pub fn migration_address(
    flag: Option<&str>,
    interface: Option<IpAddr>,
    pod_ip: Option<&str>,
    node_internal_ip: Option<&str>,
) -> Option<String> {
    let given = |s: Option<&str>| s.map(str::trim).filter(|s| !s.is_empty()).map(String::from);
    given(flag)
        .or_else(|| interface.map(|ip| ip.to_string()))
        .or_else(|| given(pod_ip))
        .or_else(|| given(node_internal_ip))
}

/// The first global unicast address of [`MIGRATION_INTERFACE`] (KubeVirt's `FindMigrationIP`).
pub fn migration_interface_address() -> Option<IpAddr> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    addrs
        .filter(|a| a.interface_name == MIGRATION_INTERFACE)
        .filter_map(|a| {
            let addr = a.address?;
            if let Some(v4) = addr.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .find(|ip| is_global_unicast(*ip))
}

/// Go's `IP.IsGlobalUnicast`: not unspecified, loopback, link-local, multicast or broadcast.
fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// Whether the VMI's migration runs without TLS: the KubeVirt CR's `migrations.disableTLS` as
/// virt-controller copied it into `status.migrationState.migrationConfiguration` when the
/// migration started (KubeVirt's handler reads the live CR instead; see [`Proxies`]).
pub fn tls_disabled(vmi: Option<&VirtualMachineInstance>) -> bool {
    vmi.and_then(|v| v.status.as_ref())
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|m| m.migration_configuration.as_ref())
        .and_then(|c| c.disable_tls)
        == Some(true)
}

/// The node's migration proxies: one manager presenting the node's certificates (when
/// `--migration-cert-dir` gave them) and one without TLS, each VMI's proxies started on the one
/// its migration asks for. Stopping and port lookups ask both: a VMI only ever has proxies on
/// one of them.
#[derive(Clone)]
pub struct Proxies {
    tls: Option<ProxyManager>,
    plain: ProxyManager,
}

impl Proxies {
    /// Proxies with `tls` (`None`: no certificates given; only `disableTLS` migrations run).
    /// Source sockets are given to the pod's QEMU user, as the launcher's libvirt and QEMU
    /// connect to them as that user in non-root VMIs.
    pub fn new(tls: Option<TlsSource>, socket_owner: Option<(u32, u32)>) -> Proxies {
        Proxies {
            tls: tls.map(|t| ProxyManager::new(t, socket_owner)),
            plain: ProxyManager::new(MigrationTls::disabled(), socket_owner),
        }
    }

    fn pick(&self, tls_disabled: bool) -> Result<&ProxyManager, MigrationError> {
        if tls_disabled {
            return Ok(&self.plain);
        }
        let manager = self.tls.as_ref().ok_or(MigrationError::TlsNotConfigured)?;
        manager.current_tls()?;
        Ok(manager)
    }

    fn all(&self) -> impl Iterator<Item = &ProxyManager> {
        self.tls.iter().chain(std::iter::once(&self.plain))
    }

    /// The key's target ports (TCP port as text → libvirt port), from whichever manager has them.
    pub fn target_ports(&self, key: &str) -> BTreeMap<String, u16> {
        self.all()
            .map(|m| m.target_listener_ports(key))
            .find(|p| !p.is_empty())
            .unwrap_or_default()
    }

    /// Starts the target listeners for `sockets` (relative to `run_dir`, the pod's `/var/run`).
    pub async fn start_target(
        &self,
        key: &str,
        run_dir: &Path,
        sockets: &[String],
        tls_disabled: bool,
    ) -> Result<(), MigrationError> {
        let manager = self.pick(tls_disabled)?;
        // A switch of `disableTLS` between two attempts leaves no proxies on the other manager.
        self.all()
            .filter(|m| !std::ptr::eq(*m, manager))
            .for_each(|m| m.stop_target_listener(key));
        let sockets = target_sockets(run_dir, sockets);
        manager.start_target_listener(key, sockets).await?;
        Ok(())
    }

    /// Starts the source listeners under `base_dir` (the pod's `/var/run/kubevirt`).
    pub async fn start_source(
        &self,
        key: &str,
        target_address: &str,
        ports: &BTreeMap<String, u16>,
        base_dir: &Path,
        tls_disabled: bool,
    ) -> Result<(), MigrationError> {
        let manager = self.pick(tls_disabled)?;
        self.all()
            .filter(|m| !std::ptr::eq(*m, manager))
            .for_each(|m| m.stop_source_listener(key));
        manager
            .start_source_listener(key, target_address, ports, base_dir)
            .await?;
        Ok(())
    }

    /// Stops the key's source proxies.
    pub fn stop_source(&self, key: &str) {
        self.all().for_each(|m| m.stop_source_listener(key));
    }

    /// Stops the key's target proxies.
    pub fn stop_target(&self, key: &str) {
        self.all().for_each(|m| m.stop_target_listener(key));
    }

    /// Refuses new proxies (shutdown); running migrations keep theirs.
    pub fn initiate_graceful_shutdown(&self) {
        self.all()
            .for_each(ProxyManager::initiate_graceful_shutdown);
    }
}

/// The target sockets of a `StartTargetProxy` step under the pod's run directory.
pub fn target_sockets(run_dir: &Path, sockets: &[String]) -> Vec<TargetSocket> {
    sockets
        .iter()
        .map(|relative| TargetSocket {
            root: run_dir.to_path_buf(),
            relative: PathBuf::from(relative),
        })
        .collect()
}

/// The launcher pod's run directory (`/var/run`) as this node sees it, resolved inside the pod's
/// root (`/var/run` is usually a symlink the pod's root must stand under).
pub fn pod_run_dir(root: &Path, step: &'static str) -> Result<PathBuf, MigrationError> {
    resolve(root, LAUNCHER_RUN_DIR, step)
}

/// The launcher pod's `/var/run/kubevirt`, the source proxy's base directory.
pub fn pod_kubevirt_dir(root: &Path, step: &'static str) -> Result<PathBuf, MigrationError> {
    resolve(root, LAUNCHER_KUBEVIRT_DIR, step)
}

fn resolve(root: &Path, path: &'static str, step: &'static str) -> Result<PathBuf, MigrationError> {
    kvrs_ipc::layout::resolve_in_root(root, path).map_err(|why| MigrationError::PodPath {
        step,
        path,
        why,
    })
}

/// Which controllers, after the VM controller, look at a key this sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controllers {
    /// The VM controller wrote the status: the key comes back through the watch.
    Done,
    /// The source and target controllers decide too.
    Migration,
}

impl Controllers {
    /// After the VM controller's `plan`, whose status write went through or not.
    pub fn after_vm(status_written: bool) -> Controllers {
        if status_written {
            Controllers::Done
        } else {
            Controllers::Migration
        }
    }
}

/// Whether a migration controller's plan is about the key at all (KubeVirt's controllers skip
/// VMIs outside their informers: no work, no queue change).
pub fn involved(plan: &HandlerPlan) -> bool {
    plan.decision != Decision::MigrationNotInvolved || !plan.plan.actions.is_empty()
}

/// Cuts a target plan right after its `StartTargetProxy` step, returning the step's key.
///
/// KubeVirt's target controller starts the proxy and then, in the same sync, publishes the
/// ports it listens on; a kvrs decision reads those ports from the facts, gathered before the
/// step ran. So the shell runs the plan up to the step, then decides again with the ports (that
/// decision sees the target prepared and writes the status with them). Only while no ports are
/// known and the step has not failed: a failed step's plan is run whole (it writes the error).
pub fn cut_after_target_proxy(plan: &mut HandlerPlan) -> Option<String> {
    let at = plan
        .plan
        .actions
        .iter()
        .position(|a| matches!(a, Action::Node(NodeStep::StartTargetProxy { .. })))?;
    let key = match &plan.plan.actions[at] {
        Action::Node(NodeStep::StartTargetProxy { key, .. }) => key.clone(),
        _ => return None,
    };
    plan.plan.actions.truncate(at + 1);
    Some(key)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use kvrs_decide::Plan;
    use kvrs_decide::handler::LauncherCall;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_migration_address_follows_kubevirts_order_after_the_flag() {
        let iface = Some(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)));
        assert_eq!(
            migration_address(Some("192.0.2.1"), iface, Some("10.0.0.2"), Some("10.0.0.3")),
            Some("192.0.2.1".into())
        );
        assert_eq!(
            migration_address(Some(" "), iface, Some("10.0.0.2"), None),
            Some("10.9.0.1".into()),
            "migration0 wins over the pod IP"
        );
        assert_eq!(
            migration_address(None, None, Some("10.0.0.2"), Some("10.0.0.3")),
            Some("10.0.0.2".into())
        );
        assert_eq!(
            migration_address(None, None, Some(""), Some("10.0.0.3")),
            Some("10.0.0.3".into())
        );
        assert_eq!(migration_address(None, None, None, None), None);
    }

    #[test]
    fn only_global_unicast_addresses_count() {
        assert!(is_global_unicast(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        assert!(!is_global_unicast(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert!(!is_global_unicast(IpAddr::V4(Ipv4Addr::new(
            169, 254, 1, 1
        ))));
        assert!(!is_global_unicast(IpAddr::V6("fe80::1".parse().unwrap())));
        assert!(is_global_unicast(IpAddr::V6(
            "fd00::1".parse::<Ipv6Addr>().unwrap()
        )));
    }

    #[test]
    fn tls_is_disabled_only_by_the_migrations_configuration() {
        let vmi = |conf: serde_json::Value| -> VirtualMachineInstance {
            serde_json::from_value(json!({
                "metadata": {"name": "v"},
                "spec": {"domain": {"devices": {}}},
                "status": {"migrationState": {"migrationConfiguration": conf}},
            }))
            .unwrap()
        };
        assert!(tls_disabled(Some(&vmi(json!({"disableTLS": true})))));
        assert!(!tls_disabled(Some(&vmi(json!({"disableTLS": false})))));
        assert!(!tls_disabled(Some(&vmi(json!({})))));
        assert!(!tls_disabled(None));
    }

    #[tokio::test]
    async fn without_certificates_only_a_tls_disabled_migration_gets_a_proxy() {
        let proxies = Proxies::new(None, None);
        let dir = tempfile::tempdir().unwrap();
        let err = proxies
            .start_target("uid", dir.path(), &["libvirt/virtqemud-sock".into()], false)
            .await
            .unwrap_err();
        assert!(matches!(err, MigrationError::TlsNotConfigured), "{err}");
        assert!(err.to_string().contains("--migration-cert-dir"));
        assert!(err.to_string().contains("migrations.disableTLS"));
        assert!(proxies.target_ports("uid").is_empty());

        proxies
            .start_target("uid", dir.path(), &["libvirt/virtqemud-sock".into()], true)
            .await
            .unwrap();
        let ports = proxies.target_ports("uid");
        assert_eq!(ports.len(), 1);
        assert_eq!(ports.values().copied().collect::<Vec<_>>(), [0]);
        proxies.stop_target("uid");
        assert!(proxies.target_ports("uid").is_empty());
    }

    #[test]
    fn the_target_sockets_are_under_the_pods_run_directory() {
        let s = target_sockets(
            Path::new("/proc/7/root/run"),
            &[
                "libvirt/virtqemud-sock".into(),
                "kubevirt/migrationproxy/u-49152-source.sock".into(),
            ],
        );
        assert_eq!(s[0].root, Path::new("/proc/7/root/run"));
        assert_eq!(
            s[1].relative,
            Path::new("kubevirt/migrationproxy/u-49152-source.sock")
        );
    }

    #[test]
    fn the_pods_directories_resolve_inside_its_root() {
        // A launcher image's `/var/run` is an absolute symlink to `/run`: followed from the
        // node it must land in the pod's `/run`, not the node's.
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("run/kubevirt")).unwrap();
        std::fs::create_dir_all(root.path().join("var")).unwrap();
        std::os::unix::fs::symlink("/run", root.path().join("var/run")).unwrap();
        assert_eq!(
            pod_run_dir(root.path(), "startTargetProxy").unwrap(),
            root.path().join("run")
        );
        assert_eq!(
            pod_kubevirt_dir(root.path(), "startSourceProxy").unwrap(),
            root.path().join("run/kubevirt")
        );
    }

    #[test]
    fn a_target_plan_is_cut_after_its_proxy_step() {
        let plan_of = |decision| HandlerPlan {
            decision,
            plan: Plan::idle(),
            status: None,
            io_error_retry: None,
        };
        let mut plan = plan_of(Decision::MigrationTargetSync);
        plan.plan.actions = vec![
            Action::Node(NodeStep::MountContainerDisks),
            Action::Launcher(LauncherCall::SyncMigrationTarget),
            Action::Node(NodeStep::StartTargetProxy {
                key: "uid".into(),
                sockets: vec![],
            }),
            Action::Launcher(LauncherCall::GetGuestInfo),
        ];
        assert_eq!(cut_after_target_proxy(&mut plan).as_deref(), Some("uid"));
        assert_eq!(plan.plan.actions.len(), 3);
        assert!(involved(&plan));

        let mut idle = plan_of(Decision::MigrationNotInvolved);
        assert_eq!(cut_after_target_proxy(&mut idle), None);
        assert!(!involved(&idle));
        assert_eq!(Controllers::after_vm(true), Controllers::Done);
        assert_eq!(Controllers::after_vm(false), Controllers::Migration);
    }

    #[test]
    fn a_node_without_selinux_reports_none_and_one_with_it_leaves_the_fact_unset() {
        assert_eq!(selinux_context_for(false).as_deref(), Some("none"));
        assert_eq!(selinux_context_for(true), None);
    }
}
