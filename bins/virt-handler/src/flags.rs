//! Command-line flags, named as KubeVirt's virt-handler names them where it has them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// kvrs virt-handler: KubeVirt v1.9.0's node daemon.
///
/// It watches the VMIs scheduled to this node, reaches their launchers through the kubelet's
/// pods directory, prepares each launcher pod (container disks, pod network, devices) and keeps
/// the VMI status in line with the domain.
///
/// By hand on a node (as root), against the cluster of a kubeconfig:
///   virt-handler --kubeconfig /etc/kubernetes/admin.conf --hostname-override node01 \
///     --pods-dir /var/lib/kubelet/pods
#[derive(Debug, Clone, Parser)]
#[command(name = "virt-handler", version)]
pub struct Flags {
    /// Kubeconfig to use; without it the in-cluster service account (or $KUBECONFIG) is used.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name (KubeVirt: `--hostname-override`, else $NODE_NAME, else the host name).
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The kubelet's pods directory as this process sees it (KubeVirt mounts it at /pods).
    #[arg(long, default_value = kvrs_ipc::layout::DEFAULT_PODS_DIR)]
    pub pods_dir: PathBuf,
    /// The directory shared with the launchers (`virtShareDir`): the notify socket lives here.
    #[arg(long, default_value = kvrs_ipc::layout::DEFAULT_SHARE_DIR)]
    pub kubevirt_share_dir: PathBuf,
    /// virt-handler's private state (pod interface caches), kept across restarts.
    #[arg(long, default_value = "/var/run/kubevirt-private")]
    pub private_dir: PathBuf,
    /// Seconds between the periodic `GetDomain` of every launcher (KubeVirt: 300).
    #[arg(long, default_value_t = 300)]
    pub resync_period_seconds: u64,
    /// Seconds between node heartbeats (KubeVirt: 60).
    #[arg(long, default_value_t = 60)]
    pub heartbeat_seconds: u64,
    /// Concurrent VMI syncs (KubeVirt: 10).
    #[arg(long, default_value_t = 10)]
    pub workers: usize,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub metrics_addr: SocketAddr,
    /// Software emulation is allowed (KubeVirt's `developerConfiguration.useEmulation`): a node
    /// without `/dev/kvm` runs guests under TCG, and vhost-net is not required.
    /// Forces it on whatever the KubeVirt CR says; without the flag the CR decides.
    #[arg(long)]
    pub allow_emulation: bool,
    /// Feature gates enabled beyond KubeVirt's defaults, comma-separated; added to the KubeVirt
    /// CR's `developerConfiguration.featureGates`.
    #[arg(long, value_delimiter = ',')]
    pub feature_gates: Vec<String>,
    /// KubeVirt's install namespace: the KubeVirt CR whose `spec.configuration` is applied live.
    #[arg(long, default_value = "kubevirt")]
    pub namespace: String,
    /// Serve KubeVirt's device plugins to the kubelet (`devices.kubevirt.io/kvm`, `tun`,
    /// `vhost-net`, and `vhost-vsock` with the `VSOCK` gate); `--device-plugins=false` where
    /// something else provides those resources (`kvrs run`'s own kubelet).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub device_plugins: bool,
    /// The kubelet's device-plugin directory (its `kubelet.sock` and the plugins' sockets).
    #[arg(long, default_value = "/var/lib/kubelet/device-plugins")]
    pub device_plugin_dir: PathBuf,
    /// Devices each plugin advertises: the most VMIs this node can run (KubeVirt: 1000).
    #[arg(long, default_value_t = 1000)]
    pub max_devices: usize,
    /// The node labeller's directory (KubeVirt's), where the DaemonSet's init container writes
    /// the launcher QEMU's machine types (`qemu-machines.txt`) and libvirt's capabilities
    /// (`virsh_domcapabilities.xml`, `supported_features.xml`, `capabilities.xml`); this node
    /// gets KubeVirt's machine-type and CPU labels from them. Without the machine list the
    /// node's labeller labels are left alone.
    #[arg(long, default_value = "/var/lib/kubevirt-node-labeller")]
    pub node_labeller_dir: PathBuf,
    /// Port of the REST server virt-api forwards the VMI subresources to (`pause`,
    /// `unpause`, `softreboot`, `guestosinfo`, ...; KubeVirt's `--console-server-port`, 8186 in
    /// its DaemonSet). Without it the server is not started (`kvrs run` and tests that do not
    /// need it bind nothing).
    #[arg(long)]
    pub console_server_port: Option<u16>,
    /// Address the REST server listens on (KubeVirt's `--listen-address`).
    #[arg(long, default_value = "0.0.0.0")]
    pub listen_address: std::net::IpAddr,
    /// Directory holding the REST server's `tls.crt`, `tls.key` and the client CA `ca.crt`
    /// (the Secret `kvrs-virt-handler-certs` virt-api issues, mounted); re-read while running.
    #[arg(long, default_value = "/etc/virt-handler/servercertificates")]
    pub server_cert_dir: PathBuf,
    /// The address the migration target listeners are published at
    /// (`status.migrationState.targetNodeAddress`). Without it: the address of the
    /// `migration0` interface, else `--pod-ip-address`, else the Node's `InternalIP`.
    #[arg(long)]
    pub migration_address: Option<String>,
    /// This handler pod's IP (KubeVirt's `--pod-ip-address`); without it `$MY_POD_IP`, as
    /// KubeVirt's DaemonSet passes it.
    #[arg(long)]
    pub pod_ip_address: Option<String>,
    /// Directory holding the migration proxies' certificates: `tls.crt`/`tls.key` (presented by
    /// the target listeners), `ca.crt` (verifying the peer handler), and optionally
    /// `client.crt`/`client.key` (presented as the source; without them `tls.crt` is, and must
    /// then allow client authentication too). virt-api writes all five into the Secret
    /// `kvrs-virt-handler-certs` (the DaemonSet mounts it and passes its directory here). Read
    /// again at each migration connection, so a rotated Secret is used without a restart.
    /// Without it only migrations whose configuration says `disableTLS: true` run; the others
    /// fail with an error naming this flag.
    #[arg(long)]
    pub migration_cert_dir: Option<PathBuf>,
    /// The node's mount namespace, where hotplugged volumes are mounted into the launcher
    /// pods' `hotplug-disks` directories (KubeVirt's `virt-chroot --mount /proc/1/ns/mnt`);
    /// entered when it is not this process's own and the pods are seen at `/pods` (the
    /// DaemonSet) or `--kubelet-pods-dir` is given.
    #[arg(long, default_value = "/proc/1/ns/mnt")]
    pub node_mount_namespace: PathBuf,
    /// The kubelet's pods directory as that namespace sees it; without it
    /// `/var/lib/kubelet/pods` when the namespace is entered, else `--pods-dir`.
    #[arg(long)]
    pub kubelet_pods_dir: Option<PathBuf>,
    /// Log lines on stderr: `text` (coloured only on a terminal) or `json` (one object a line).
    #[arg(long, default_value = "text")]
    pub log_format: kvrs_runtime::kube::setup::LogFormat,
}

impl Flags {
    /// The node name: the flag, $NODE_NAME, or the kernel's host name.
    pub fn node_name(&self) -> anyhow::Result<String> {
        if let Some(n) = self.hostname_override.as_deref().filter(|n| !n.is_empty()) {
            return Ok(n.to_string());
        }
        if let Some(n) = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()) {
            return Ok(n);
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        if host.is_empty() {
            anyhow::bail!("no node name: pass --hostname-override or set NODE_NAME");
        }
        Ok(host)
    }
}
