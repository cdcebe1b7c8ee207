//! Command-line flags, named as KubeVirt's virt-controller names them where it has them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kvrs_runtime::kube::https::CertPair;

/// Where KubeVirt's operator mounts the Secret `kubevirt-controller-certs` (its
/// `--prom-cert-file` / `--prom-key-file` defaults' directory).
pub const KUBEVIRT_CERT_DIR: &str = "/etc/virt-controller/certificates";

/// kvrs virt-controller: KubeVirt v1.9.0's VM and VMI controllers, leader-elected.
///
/// Example, against the cluster of the current kubeconfig:
///   virt-controller --kubeconfig ~/.kube/config --namespace kubevirt
#[derive(Debug, Clone, Parser)]
#[command(name = "virt-controller", version)]
pub struct Flags {
    /// Kubeconfig to use; without it the in-cluster service account (or $KUBECONFIG) is used.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// KubeVirt's install namespace: the leader-election Lease and the KubeVirt CR whose
    /// `spec.configuration` is applied live (flags override it, see `--feature-gates`).
    #[arg(long, default_value = "kubevirt")]
    pub namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "virt-controller")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else the host name and PID).
    #[arg(long)]
    pub identity: Option<String>,
    /// Run without leader election (a single replica only).
    #[arg(long = "no-leader-elect", action = clap::ArgAction::SetFalse)]
    pub leader_elect: bool,
    /// Lease duration in seconds (KubeVirt: 15; its `--leader-elect-lease-duration 15s` sets it).
    #[arg(long, default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Renew deadline in seconds (KubeVirt: 10; its `--leader-elect-renew-deadline`).
    #[arg(long, default_value_t = 10)]
    pub renew_deadline_seconds: u64,
    /// Retry period in seconds (KubeVirt: 2; its `--leader-elect-retry-period`).
    #[arg(long, default_value_t = 2)]
    pub retry_period_seconds: u64,
    /// KubeVirt's `--leader-elect-lease-duration` (a Go duration, `15s`): overrides
    /// `--lease-duration-seconds`.
    #[arg(long, value_parser = go_duration)]
    pub leader_elect_lease_duration: Option<Duration>,
    /// KubeVirt's `--leader-elect-renew-deadline`: overrides `--renew-deadline-seconds`.
    #[arg(long, value_parser = go_duration)]
    pub leader_elect_renew_deadline: Option<Duration>,
    /// KubeVirt's `--leader-elect-retry-period`: overrides `--retry-period-seconds`.
    #[arg(long, value_parser = go_duration)]
    pub leader_elect_retry_period: Option<Duration>,
    /// Address of `/metrics`, `/healthz`, `/readyz` and `/leader`.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub metrics_addr: SocketAddr,
    /// KubeVirt's `--port` (its operator passes 8443): the port of the metrics and health
    /// endpoints, overriding `--metrics-addr`'s. Given, the command line is KubeVirt's
    /// Deployment's, whose probes speak HTTPS (see [`Flags::health_tls`]).
    #[arg(long)]
    pub port: Option<u16>,
    /// KubeVirt's `--listen`: the address of the metrics and health endpoints, overriding
    /// `--metrics-addr`'s.
    #[arg(long)]
    pub listen: Option<IpAddr>,
    /// The certificate of the health endpoints (KubeVirt's `--prom-cert-file`; its operator
    /// mounts the Secret `kubevirt-controller-certs` there). Served over HTTPS when it and
    /// `--prom-key-file` exist and the command line is KubeVirt's (`--port`) or this flag is
    /// given; plain HTTP otherwise.
    #[arg(long)]
    pub prom_cert_file: Option<PathBuf>,
    /// The key of `--prom-cert-file` (KubeVirt's `--prom-key-file`).
    #[arg(long)]
    pub prom_key_file: Option<PathBuf>,
    /// Workers of the VMI controller: KubeVirt's `--vmi-controller-threads` (accepted too),
    /// default 10 as KubeVirt's. Each worker runs one sync at a time and waits on the API
    /// server's answers; raise it on a busy cluster.
    #[arg(long, alias = "vmi-controller-threads", default_value_t = 10)]
    pub vmi_workers: usize,
    /// Workers of the VM controller: KubeVirt's `--vm-controller-threads` (accepted too),
    /// default 3 as KubeVirt's. A burst of new VMs is paced by these workers: each VM start
    /// waits on a few API round trips in a row.
    #[arg(long, alias = "vm-controller-threads", default_value_t = 3)]
    pub vm_workers: usize,
    /// Workers of the migration controller: KubeVirt's `--migration-controller-threads`
    /// (accepted too), default 3 as KubeVirt's.
    #[arg(long, alias = "migration-controller-threads", default_value_t = 3)]
    pub migration_workers: usize,
    /// The virt-launcher image rendered into launcher pods: kvrs's own (`scripts/images.sh`
    /// builds it) unless set; `quay.io/kubevirt/virt-launcher:v1.9.0` selects KubeVirt's Go
    /// launcher, which speaks the same handler protocol (a mixed fleet).
    #[arg(long, default_value = concat!("kvrs/virt-launcher:v", env!("CARGO_PKG_VERSION")))]
    pub launcher_image: String,
    /// Feature gates enabled beyond KubeVirt's defaults, comma-separated; added to the KubeVirt
    /// CR's `developerConfiguration.featureGates`.
    #[arg(long, value_delimiter = ',')]
    pub feature_gates: Vec<String>,
    /// Base of virt-launcher's `--qemu-timeout` in seconds (a random 0..119 s is added per pod);
    /// KubeVirt's `--launcher-qemu-timeout` (accepted too).
    #[arg(long, alias = "launcher-qemu-timeout", default_value_t = 240)]
    pub qemu_timeout_seconds: u32,
    /// KubeVirt's `developerConfiguration.useEmulation`: launcher pods request no
    /// `devices.kubevirt.io/kvm` and run QEMU under TCG when the node has no usable /dev/kvm.
    /// Forces it on whatever the KubeVirt CR says; without the flag the CR decides.
    #[arg(long)]
    pub allow_emulation: bool,
    /// KubeVirt's virt-api webhooks run in front of this cluster's API server: VMIs are created
    /// bare and the webhook mutates them. Without it (a kvrs cluster, the default), the VM
    /// controller stores each VMI it creates as that webhook would return it.
    #[arg(long)]
    pub virt_api_webhooks: bool,
    /// Log lines on stderr: `text` (coloured only on a terminal) or `json` (one object a line).
    #[arg(long, default_value = "text")]
    pub log_format: kvrs_runtime::kube::setup::LogFormat,
    /// KubeVirt's flags kvrs has no use for: accepted so KubeVirt's Deployment starts this
    /// binary, and named once in the start-up log.
    #[command(flatten)]
    pub kubevirt_only: KubevirtOnly,
}

/// KubeVirt v1.9.0's virt-controller flags (pkg/virt-controller/watch/application.go,
/// pkg/service, the leader-election and klog flags) with no kvrs setting behind them. Each
/// keeps its raw value, unchecked: nothing reads it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KubevirtOnly {
    /// KubeVirt's log verbosity (`-v 2`); kvrs's level is `RUST_LOG`.
    #[arg(short = 'v', long = "v")]
    pub verbosity: Option<String>,
    /// The export server image (kvrs has no export controller). Only KubeVirt's operator passes
    /// it: its presence says KubeVirt's virt-api is in front ([`Flags::webhooks_in_front`]).
    #[arg(long)]
    pub exporter_image: Option<String>,
    /// The API server's address (client-go's `--master`); kvrs reads the kubeconfig.
    #[arg(long)]
    pub master: Option<String>,
    /// `--leader-elect-resource-lock`: kvrs always uses a Lease (KubeVirt's default).
    #[arg(long)]
    pub leader_elect_resource_lock: Option<String>,
    /// KubeVirt's `--image-pull-secret`: no kvrs setting.
    #[arg(long, hide = true)]
    pub image_pull_secret: Option<String>,
    /// KubeVirt's `--kubevirt-share-dir`: no kvrs setting.
    #[arg(long, hide = true)]
    pub kubevirt_share_dir: Option<String>,
    /// KubeVirt's `--ephemeral-disk-dir`: no kvrs setting.
    #[arg(long, hide = true)]
    pub ephemeral_disk_dir: Option<String>,
    /// KubeVirt's `--container-disk-dir`: no kvrs setting.
    #[arg(long, hide = true)]
    pub container_disk_dir: Option<String>,
    /// KubeVirt's `--hotplug-disk-dir`: no kvrs setting.
    #[arg(long, hide = true)]
    pub hotplug_disk_dir: Option<String>,
    /// KubeVirt's `--node-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub node_controller_threads: Option<String>,
    /// KubeVirt's `--rs-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub rs_controller_threads: Option<String>,
    /// KubeVirt's `--pool-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub pool_controller_threads: Option<String>,
    /// KubeVirt's `--evacuation-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub evacuation_controller_threads: Option<String>,
    /// KubeVirt's `--disruption-budget-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub disruption_budget_controller_threads: Option<String>,
    /// KubeVirt's `--launcher-subgid`: no kvrs setting.
    #[arg(long, hide = true)]
    pub launcher_subgid: Option<String>,
    /// KubeVirt's `--snapshot-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub snapshot_controller_threads: Option<String>,
    /// KubeVirt's `--restore-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub restore_controller_threads: Option<String>,
    /// KubeVirt's `--export-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub export_controller_threads: Option<String>,
    /// KubeVirt's `--snapshot-controller-resync-period`: no kvrs setting.
    #[arg(long, hide = true)]
    pub snapshot_controller_resync_period: Option<String>,
    /// KubeVirt's `--node-topology-update-period`: no kvrs setting.
    #[arg(long, hide = true)]
    pub node_topology_update_period: Option<String>,
    /// KubeVirt's `--clone-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub clone_controller_threads: Option<String>,
    /// KubeVirt's `--backup-controller-threads`: no kvrs setting.
    #[arg(long, hide = true)]
    pub backup_controller_threads: Option<String>,
    /// KubeVirt's `--additional-launcher-annotations-sync`: no kvrs setting.
    #[arg(long, hide = true)]
    pub additional_launcher_annotations_sync: Option<String>,
    /// KubeVirt's `--additional-launcher-labels-sync`: no kvrs setting.
    #[arg(long, hide = true)]
    pub additional_launcher_labels_sync: Option<String>,
}

impl KubevirtOnly {
    /// The flags given, by their command-line names, in a stable order.
    pub fn given(&self) -> Vec<&'static str> {
        let all = [
            ("-v", &self.verbosity),
            ("--exporter-image", &self.exporter_image),
            ("--master", &self.master),
            (
                "--leader-elect-resource-lock",
                &self.leader_elect_resource_lock,
            ),
            ("--image-pull-secret", &self.image_pull_secret),
            ("--kubevirt-share-dir", &self.kubevirt_share_dir),
            ("--ephemeral-disk-dir", &self.ephemeral_disk_dir),
            ("--container-disk-dir", &self.container_disk_dir),
            ("--hotplug-disk-dir", &self.hotplug_disk_dir),
            ("--node-controller-threads", &self.node_controller_threads),
            ("--rs-controller-threads", &self.rs_controller_threads),
            ("--pool-controller-threads", &self.pool_controller_threads),
            (
                "--evacuation-controller-threads",
                &self.evacuation_controller_threads,
            ),
            (
                "--disruption-budget-controller-threads",
                &self.disruption_budget_controller_threads,
            ),
            ("--launcher-subgid", &self.launcher_subgid),
            (
                "--snapshot-controller-threads",
                &self.snapshot_controller_threads,
            ),
            (
                "--restore-controller-threads",
                &self.restore_controller_threads,
            ),
            (
                "--export-controller-threads",
                &self.export_controller_threads,
            ),
            (
                "--snapshot-controller-resync-period",
                &self.snapshot_controller_resync_period,
            ),
            (
                "--node-topology-update-period",
                &self.node_topology_update_period,
            ),
            ("--clone-controller-threads", &self.clone_controller_threads),
            (
                "--backup-controller-threads",
                &self.backup_controller_threads,
            ),
            (
                "--additional-launcher-annotations-sync",
                &self.additional_launcher_annotations_sync,
            ),
            (
                "--additional-launcher-labels-sync",
                &self.additional_launcher_labels_sync,
            ),
        ];
        all.into_iter()
            .filter(|(_, v)| v.is_some())
            .map(|(name, _)| name)
            .collect()
    }
}

/// A Go `time.Duration` as KubeVirt's flags take it (`15s`, `1m30s`, `500ms`, `1.5h`): a
/// sequence of decimal numbers each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), or `0`.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() || text.starts_with('-') {
        return Err(format!("{text:?}: not a duration (e.g. 15s, 1m30s)"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: missing unit (ns, us, ms, s, m, h)"))?;
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("{text:?}: not a duration (e.g. 15s, 1m30s)"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => return Err(format!("{text:?}: unknown unit {unit:?}")),
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("{text:?}: {e}"))
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

    /// The certificate the health endpoints are served with over HTTPS, or `None` for plain
    /// HTTP: KubeVirt's pair (`/etc/virt-controller/certificates/tls.{crt,key}` unless
    /// `--prom-cert-file`/`--prom-key-file` say otherwise) when both files exist and either the
    /// command line is KubeVirt's Deployment's (`--port`: its probes speak HTTPS) or a
    /// certificate flag was given. kvrs's own Deployment passes neither and probes over HTTP.
    pub fn health_tls(&self) -> Option<CertPair> {
        let asked =
            self.port.is_some() || self.prom_cert_file.is_some() || self.prom_key_file.is_some();
        let pair = CertPair {
            cert: self
                .prom_cert_file
                .clone()
                .unwrap_or_else(|| std::path::Path::new(KUBEVIRT_CERT_DIR).join("tls.crt")),
            key: self
                .prom_key_file
                .clone()
                .unwrap_or_else(|| std::path::Path::new(KUBEVIRT_CERT_DIR).join("tls.key")),
        };
        (asked && pair.present()).then_some(pair)
    }

    /// Whether KubeVirt's virt-api webhooks mutate the VMIs this controller creates:
    /// `--virt-api-webhooks`, or KubeVirt's virt-operator's command line, recognised by
    /// `--exporter-image`. The operator renders that flag into its virt-controller Deployment
    /// only (kvrs's manifests and `kvrs run` never pass it), and the same install always
    /// deploys KubeVirt's virt-api with its VMI mutating webhook (`virt-api-mutator`): a
    /// controller started by it has that webhook in front, and admitting its VMIs itself too
    /// would default them twice. Read from the command line rather than by looking the webhook
    /// up, so it needs no permission KubeVirt's ClusterRole lacks and cannot flap.
    pub fn webhooks_in_front(&self) -> bool {
        self.virt_api_webhooks || self.kubevirt_only.exporter_image.is_some()
    }

    /// The Lease timings: the seconds flags, KubeVirt's Go-duration flags over them.
    pub fn lease_timings(&self) -> (Duration, Duration, Duration) {
        let or = |go: Option<Duration>, secs: u64| go.unwrap_or(Duration::from_secs(secs));
        (
            or(
                self.leader_elect_lease_duration,
                self.lease_duration_seconds,
            ),
            or(
                self.leader_elect_renew_deadline,
                self.renew_deadline_seconds,
            ),
            or(self.leader_elect_retry_period, self.retry_period_seconds),
        )
    }

    /// The identity written into the Lease.
    pub fn identity(&self) -> String {
        if let Some(id) = &self.identity {
            return id.clone();
        }
        if let Ok(pod) = std::env::var("POD_NAME") {
            return pod;
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "virt-controller".into());
        format!("{host}-{}", std::process::id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Deployment in `bins/deploy` must start this binary with flags it accepts.
    #[test]
    fn the_deployment_passes_flags_the_binary_accepts() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/virt-controller/deployment.yaml"
        );
        let text = std::fs::read_to_string(path).expect("deployment.yaml");
        let doc: serde_norway::Value = serde_norway::from_str(&text).expect("yaml");
        let container = &doc["spec"]["template"]["spec"]["containers"][0];
        let mut argv = vec!["virt-controller".to_string()];
        for a in container["args"].as_sequence().expect("args") {
            argv.push(a.as_str().expect("string arg").to_string());
        }
        let flags = Flags::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert!(flags.leader_elect);
        assert_eq!(flags.namespace, "kubevirt");
        assert_eq!(flags.metrics_addr.port(), 8443);
    }

    #[test]
    fn worker_counts_default_to_kubevirts_and_take_its_flag_names() {
        let flags = Flags::try_parse_from(["virt-controller"]).unwrap();
        assert_eq!(
            (flags.vm_workers, flags.vmi_workers, flags.migration_workers),
            (3, 10, 3)
        );
        let flags = Flags::try_parse_from([
            "virt-controller",
            "--vm-controller-threads",
            "8",
            "--vmi-controller-threads",
            "12",
            "--migration-controller-threads",
            "2",
        ])
        .unwrap();
        assert_eq!(
            (flags.vm_workers, flags.vmi_workers, flags.migration_workers),
            (8, 12, 2)
        );
    }

    #[test]
    fn leader_election_can_be_turned_off() {
        let flags = Flags::try_parse_from(["virt-controller", "--no-leader-elect"]).unwrap();
        assert!(!flags.leader_elect);
    }

    /// The command line KubeVirt v1.9.0's virt-operator renders for the virt-controller
    /// Deployment (components/deployments.go, `NewControllerDeployment`, verbosity 2), with
    /// the drop-in patch's launcher image in place.
    const KUBEVIRT_ARGV: [&str; 9] = [
        "virt-controller",
        "--launcher-image",
        "kvrs/virt-launcher:v0.1.0",
        "--exporter-image",
        "quay.io/kubevirt/virt-exportserver:v1.9.0",
        "--port",
        "8443",
        "-v",
        "2",
    ];

    #[test]
    fn kubevirts_deployment_command_line_is_accepted_and_mapped() {
        let flags = Flags::try_parse_from(KUBEVIRT_ARGV).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(flags.launcher_image, "kvrs/virt-launcher:v0.1.0");
        assert_eq!(flags.health_addr(), "0.0.0.0:8443".parse().unwrap());
        // Everything else as kvrs's defaults, which are KubeVirt's.
        assert!(flags.leader_elect);
        assert_eq!(flags.namespace, "kubevirt");
        assert_eq!(flags.lease_name, "virt-controller");
        assert_eq!(
            (flags.vm_workers, flags.vmi_workers, flags.migration_workers),
            (3, 10, 3)
        );
        assert_eq!(flags.qemu_timeout_seconds, 240);
        assert_eq!(
            flags.kubevirt_only.given(),
            ["-v", "--exporter-image"],
            "the flags without a kvrs setting, named for the start-up log"
        );
        assert_eq!(flags.kubevirt_only.verbosity.as_deref(), Some("2"));
        assert!(
            flags.webhooks_in_front(),
            "KubeVirt's operator deploys its virt-api with the controller"
        );
    }

    #[test]
    fn kubevirts_other_flag_names_map_to_kvrs_settings() {
        let flags = Flags::try_parse_from([
            "virt-controller",
            "--listen",
            "127.0.0.1",
            "--port",
            "9443",
            "--launcher-qemu-timeout",
            "100",
            "--leader-elect-lease-duration",
            "30s",
            "--leader-elect-renew-deadline",
            "1m0s",
            "--leader-elect-retry-period",
            "1500ms",
            "--v=4",
            "--leader-elect-resource-lock=leases",
            "--node-controller-threads",
            "5",
            "--additional-launcher-labels-sync",
            "vendor.io/*",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(flags.health_addr(), "127.0.0.1:9443".parse().unwrap());
        assert_eq!(flags.qemu_timeout_seconds, 100);
        assert_eq!(
            flags.lease_timings(),
            (
                Duration::from_secs(30),
                Duration::from_secs(60),
                Duration::from_millis(1500)
            )
        );
        assert_eq!(
            flags.kubevirt_only.given(),
            [
                "-v",
                "--leader-elect-resource-lock",
                "--node-controller-threads",
                "--additional-launcher-labels-sync"
            ]
        );
        // Without KubeVirt's flags: kvrs's own, unchanged.
        let plain =
            Flags::try_parse_from(["virt-controller", "--metrics-addr", "127.0.0.1:1"]).unwrap();
        assert_eq!(plain.health_addr(), "127.0.0.1:1".parse().unwrap());
        assert_eq!(
            plain.lease_timings(),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert!(plain.kubevirt_only.given().is_empty());
        assert!(
            !plain.webhooks_in_front(),
            "kvrs's own install admits its VMIs"
        );
        assert!(
            !flags.webhooks_in_front(),
            "no operator's `--exporter-image`"
        );
        let asked = Flags::try_parse_from(["virt-controller", "--virt-api-webhooks"]).unwrap();
        assert!(asked.webhooks_in_front());
    }

    #[test]
    fn a_bad_go_duration_is_refused_naming_the_flag() {
        let err = Flags::try_parse_from(["virt-controller", "--leader-elect-lease-duration", "15"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--leader-elect-lease-duration"), "{err}");
        assert!(err.contains("missing unit"), "{err}");
    }

    #[test]
    fn go_durations_read_as_go_reads_them() {
        for (text, want) in [
            ("0", Duration::ZERO),
            ("15s", Duration::from_secs(15)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5h", Duration::from_secs(5400)),
            ("250ms", Duration::from_millis(250)),
            ("2us", Duration::from_micros(2)),
        ] {
            assert_eq!(go_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "-1s", "15", "3d", "s"] {
            assert!(go_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn health_is_https_only_with_kubevirts_command_line_and_its_certificate() {
        let dir = std::env::temp_dir().join(format!("kvrs-ctl-flags-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let cert_flags = |port: bool| {
            let mut argv = vec![
                "virt-controller".to_string(),
                "--prom-cert-file".into(),
                crt.display().to_string(),
                "--prom-key-file".into(),
                key.display().to_string(),
            ];
            if port {
                argv.extend(["--port".into(), "8443".into()]);
            }
            Flags::try_parse_from(argv).unwrap()
        };
        // The Secret is mounted `optional`: absent files mean plain HTTP.
        assert_eq!(cert_flags(true).health_tls(), None);
        std::fs::write(&crt, "c").unwrap();
        std::fs::write(&key, "k").unwrap();
        let pair = cert_flags(true).health_tls().expect("HTTPS");
        assert_eq!((pair.cert, pair.key), (crt.clone(), key.clone()));
        assert!(
            cert_flags(false).health_tls().is_some(),
            "asked by the flag"
        );
        // kvrs's own command line (no `--port`, no certificate flag): plain HTTP, whatever is
        // mounted where KubeVirt's certificate would be.
        let own =
            Flags::try_parse_from(["virt-controller", "--metrics-addr", "0.0.0.0:8443"]).unwrap();
        assert_eq!(own.health_tls(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
