//! Command-line flags, named as KubeVirt's virt-handler names them where it has them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Parser;
use kvrs_runtime::kube::https::CertPair;

/// Where KubeVirt's operator mounts the Secret `kubevirt-virt-handler-server-certs` (its
/// `--tls-cert-file` / `--tls-key-file` defaults' directory). kvrs's own DaemonSet mounts its REST
/// server's Secret at the same place (`--server-cert-dir`).
pub const KUBEVIRT_SERVER_CERT_DIR: &str = "/etc/virt-handler/servercertificates";

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
    /// virt-handler's private state (pod interface caches), kept across restarts (KubeVirt's
    /// `--kubevirt-private-dir`, accepted too).
    #[arg(
        long,
        alias = "kubevirt-private-dir",
        default_value = "/var/run/kubevirt-private"
    )]
    pub private_dir: PathBuf,
    /// Seconds between the periodic `GetDomain` of every launcher (KubeVirt: 300; its
    /// `--domain-resync-period-seconds`, accepted too).
    #[arg(long, alias = "domain-resync-period-seconds", default_value_t = 300)]
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
    /// KubeVirt's `--port` (its DaemonSet passes 8443): the port of the metrics and health
    /// endpoints, overriding `--metrics-addr`'s. Given, the command line is KubeVirt's
    /// DaemonSet's, whose probes speak HTTPS (see [`Flags::health_tls`]).
    #[arg(long)]
    pub port: Option<u16>,
    /// KubeVirt's `--listen`: the address of the metrics and health endpoints and of the REST
    /// server, overriding `--metrics-addr`'s and `--listen-address`.
    #[arg(long)]
    pub listen: Option<IpAddr>,
    /// The certificate of the health endpoints (KubeVirt's `--tls-cert-file`, default
    /// `/etc/virt-handler/servercertificates/tls.crt`). Served over HTTPS when it and
    /// `--tls-key-file` exist and the command line is KubeVirt's (`--port`) or this flag is
    /// given; plain HTTP otherwise.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `--tls-cert-file` (KubeVirt's `--tls-key-file`).
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
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
    /// Address the REST server listens on (KubeVirt's `--listen` sets it too).
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
    /// The ConfigMap (in this handler's namespace) whose `ca-bundle` verifies virt-api's client
    /// certificate when `--server-cert-dir` has no `ca.crt`: KubeVirt's operator keeps the CA
    /// there (`kubevirt-ca`, KubeVirt's default) and mounts a Secret with `tls.crt`/`tls.key`
    /// only, so kvrs's handler dropped in under it reads the CA as KubeVirt's does.
    #[arg(long, default_value = crate::kubevirt_ca::DEFAULT_CONFIGMAP)]
    pub ca_configmap_name: String,
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
    /// KubeVirt's flags kvrs has no use for: accepted so KubeVirt's DaemonSet starts this
    /// binary, and named once in the start-up log.
    #[command(flatten)]
    pub kubevirt_only: KubevirtOnly,
}

/// KubeVirt v1.9.0's virt-handler flags (cmd/virt-handler, pkg/service, client-go's and klog's)
/// with no kvrs setting behind them. Each keeps its raw value, unchecked: nothing reads it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KubevirtOnly {
    /// KubeVirt's log verbosity (`-v 2`); kvrs's level is `RUST_LOG`.
    #[arg(short = 'v', long = "v")]
    pub verbosity: Option<String>,
    /// Concurrent `/metrics` requests (kvrs's endpoints cap connections themselves).
    #[arg(long)]
    pub max_metric_requests: Option<String>,
    /// KubeVirt's `/v1/vmstats` server (kvrs has none).
    #[arg(long)]
    pub vmstats_server_port: Option<String>,
    /// How long KubeVirt waits for migration connections at shutdown (kvrs's proxies end
    /// with their migrations).
    #[arg(long)]
    pub graceful_shutdown_seconds: Option<String>,
    /// KubeVirt's `--master`: kvrs reads the kubeconfig.
    #[arg(long)]
    pub master: Option<String>,
    /// KubeVirt's `--kubelet-root`: no kvrs setting.
    #[arg(long, hide = true)]
    pub kubelet_root: Option<String>,
    /// KubeVirt's `--client-cert-file`: no kvrs setting.
    #[arg(long, hide = true)]
    pub client_cert_file: Option<String>,
    /// KubeVirt's `--client-key-file`: no kvrs setting.
    #[arg(long, hide = true)]
    pub client_key_file: Option<String>,
    /// KubeVirt's `--migration-client-cert-file`: kvrs's is `--migration-cert-dir`.
    #[arg(long, hide = true)]
    pub migration_client_cert_file: Option<String>,
    /// KubeVirt's `--migration-client-key-file`: kvrs's is `--migration-cert-dir`.
    #[arg(long, hide = true)]
    pub migration_client_key_file: Option<String>,
    /// KubeVirt's `--externally-managed`: no kvrs setting.
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub externally_managed: Option<String>,
    /// KubeVirt's `--watchdog-timeout`: no kvrs setting.
    #[arg(long, hide = true)]
    pub watchdog_timeout: Option<String>,
    /// KubeVirt's `--enable-node-labeller`: no kvrs setting.
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub enable_node_labeller: Option<String>,
    /// KubeVirt's `--migration-cn-types`: no kvrs setting.
    #[arg(long, hide = true)]
    pub migration_cn_types: Vec<String>,
    /// KubeVirt's `--vsock-client-cert-file`: no kvrs setting.
    #[arg(long, hide = true)]
    pub vsock_client_cert_file: Option<String>,
    /// KubeVirt's `--vsock-client-key-file`: no kvrs setting.
    #[arg(long, hide = true)]
    pub vsock_client_key_file: Option<String>,
}

impl KubevirtOnly {
    /// The flags given, by their command-line names, in a stable order.
    pub fn given(&self) -> Vec<&'static str> {
        let all = [
            ("-v", self.verbosity.is_some()),
            ("--max-metric-requests", self.max_metric_requests.is_some()),
            ("--vmstats-server-port", self.vmstats_server_port.is_some()),
            (
                "--graceful-shutdown-seconds",
                self.graceful_shutdown_seconds.is_some(),
            ),
            ("--master", self.master.is_some()),
            ("--kubelet-root", self.kubelet_root.is_some()),
            ("--client-cert-file", self.client_cert_file.is_some()),
            ("--client-key-file", self.client_key_file.is_some()),
            (
                "--migration-client-cert-file",
                self.migration_client_cert_file.is_some(),
            ),
            (
                "--migration-client-key-file",
                self.migration_client_key_file.is_some(),
            ),
            ("--externally-managed", self.externally_managed.is_some()),
            ("--watchdog-timeout", self.watchdog_timeout.is_some()),
            (
                "--enable-node-labeller",
                self.enable_node_labeller.is_some(),
            ),
            ("--migration-cn-types", !self.migration_cn_types.is_empty()),
            (
                "--vsock-client-cert-file",
                self.vsock_client_cert_file.is_some(),
            ),
            (
                "--vsock-client-key-file",
                self.vsock_client_key_file.is_some(),
            ),
        ];
        all.into_iter()
            .filter(|(_, given)| *given)
            .map(|(name, _)| name)
            .collect()
    }
}

impl Flags {
    /// Where the metrics and health endpoints listen: `--metrics-addr` with KubeVirt's
    /// `--listen` and `--port` laid over it.
    pub fn health_addr(&self) -> SocketAddr {
        SocketAddr::new(
            self.listen.unwrap_or(self.metrics_addr.ip()),
            self.port.unwrap_or(self.metrics_addr.port()),
        )
    }

    /// Where the REST server listens (its port is `--console-server-port`).
    pub fn rest_ip(&self) -> IpAddr {
        self.listen.unwrap_or(self.listen_address)
    }

    /// The certificate the health endpoints are served with over HTTPS, or `None` for plain
    /// HTTP: KubeVirt's pair (`/etc/virt-handler/servercertificates/tls.{crt,key}` unless
    /// `--tls-cert-file`/`--tls-key-file` say otherwise) when both files exist and either the
    /// command line is KubeVirt's DaemonSet's (`--port`: its probes speak HTTPS) or a
    /// certificate flag was given. kvrs's own DaemonSet mounts its REST server's Secret at that
    /// same directory but passes neither, and probes over HTTP.
    pub fn health_tls(&self) -> Option<CertPair> {
        let asked =
            self.port.is_some() || self.tls_cert_file.is_some() || self.tls_key_file.is_some();
        let dir = std::path::Path::new(KUBEVIRT_SERVER_CERT_DIR);
        let pair = CertPair {
            cert: self
                .tls_cert_file
                .clone()
                .unwrap_or_else(|| dir.join("tls.crt")),
            key: self
                .tls_key_file
                .clone()
                .unwrap_or_else(|| dir.join("tls.key")),
        };
        (asked && pair.present()).then_some(pair)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The command line KubeVirt v1.9.0's virt-operator renders for the virt-handler DaemonSet
    /// (components/daemonsets.go, `NewHandlerDaemonSet`, verbosity 2), `$(NODE_NAME)` and
    /// `$(MY_POD_IP)` expanded by the kubelet.
    const KUBEVIRT_ARGV: [&str; 19] = [
        "virt-handler",
        "--port",
        "8443",
        "--hostname-override",
        "node01",
        "--pod-ip-address",
        "10.244.0.7",
        "--max-metric-requests",
        "3",
        "--console-server-port",
        "8186",
        "--vmstats-server-port",
        "8187",
        "--graceful-shutdown-seconds",
        "315",
        "-v",
        "2",
        // Not rendered by the operator, but a `customizeComponents.flags` entry may add any.
        "--kubevirt-private-dir=/var/run/kubevirt-private",
        "--domain-resync-period-seconds=120",
    ];

    #[test]
    fn kubevirts_daemonset_command_line_is_accepted_and_mapped() {
        let flags = Flags::try_parse_from(KUBEVIRT_ARGV).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(flags.health_addr(), "0.0.0.0:8443".parse().unwrap());
        assert_eq!(flags.node_name().unwrap(), "node01");
        assert_eq!(flags.pod_ip_address.as_deref(), Some("10.244.0.7"));
        assert_eq!(flags.console_server_port, Some(8186));
        assert_eq!(flags.rest_ip(), "0.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(
            flags.private_dir,
            PathBuf::from("/var/run/kubevirt-private")
        );
        assert_eq!(flags.resync_period_seconds, 120);
        // KubeVirt's DaemonSet mounts the kubelet's pods directory at /pods: kvrs's default.
        assert_eq!(flags.pods_dir, PathBuf::from("/pods"));
        assert_eq!(
            flags.kubevirt_only.given(),
            [
                "-v",
                "--max-metric-requests",
                "--vmstats-server-port",
                "--graceful-shutdown-seconds"
            ],
            "the flags without a kvrs setting, named for the start-up log"
        );
    }

    #[test]
    fn kubevirts_other_flags_are_accepted() {
        let flags = Flags::try_parse_from([
            "virt-handler",
            "--listen",
            "127.0.0.1",
            "--port",
            "9443",
            "--console-server-port",
            "9186",
            "--externally-managed",
            "--enable-node-labeller=false",
            "--migration-cn-types",
            "virt-handler",
            "--migration-cn-types",
            "migration",
            "--watchdog-timeout",
            "30s",
            "--kubelet-root",
            "/var/lib/kubelet",
            "--v=3",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(flags.health_addr(), "127.0.0.1:9443".parse().unwrap());
        assert_eq!(flags.rest_ip(), "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(
            flags.kubevirt_only.given(),
            [
                "-v",
                "--kubelet-root",
                "--externally-managed",
                "--watchdog-timeout",
                "--enable-node-labeller",
                "--migration-cn-types"
            ]
        );
        let own = Flags::try_parse_from(["virt-handler", "--metrics-addr", "127.0.0.1:1"]).unwrap();
        assert_eq!(own.health_addr(), "127.0.0.1:1".parse().unwrap());
        assert!(own.kubevirt_only.given().is_empty());
    }

    #[test]
    fn health_is_https_only_with_kubevirts_command_line_and_its_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let flags = |port: bool| {
            let mut argv = vec![
                "virt-handler".to_string(),
                format!("--tls-cert-file={}", crt.display()),
                format!("--tls-key-file={}", key.display()),
            ];
            if port {
                argv.extend(["--port".into(), "8443".into()]);
            }
            Flags::try_parse_from(argv).unwrap()
        };
        assert_eq!(flags(true).health_tls(), None, "the Secret is optional");
        std::fs::write(&crt, "c").unwrap();
        std::fs::write(&key, "k").unwrap();
        assert_eq!(
            flags(true).health_tls(),
            Some(CertPair {
                cert: crt.clone(),
                key: key.clone()
            })
        );
        assert!(flags(false).health_tls().is_some(), "asked by the flag");
        // kvrs's own DaemonSet: its REST Secret may sit where KubeVirt's would, still HTTP.
        let own = Flags::try_parse_from([
            "virt-handler",
            "--server-cert-dir",
            KUBEVIRT_SERVER_CERT_DIR,
        ])
        .unwrap();
        assert_eq!(own.health_tls(), None);
    }
}
