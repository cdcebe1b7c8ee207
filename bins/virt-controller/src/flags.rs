//! Command-line flags, named as KubeVirt's virt-controller names them where it has them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

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
    /// Lease duration in seconds (KubeVirt: 15).
    #[arg(long, default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Renew deadline in seconds (KubeVirt: 10).
    #[arg(long, default_value_t = 10)]
    pub renew_deadline_seconds: u64,
    /// Retry period in seconds (KubeVirt: 2).
    #[arg(long, default_value_t = 2)]
    pub retry_period_seconds: u64,
    /// Address of `/metrics`, `/healthz`, `/readyz` and `/leader`.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub metrics_addr: SocketAddr,
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
    /// Base of virt-launcher's `--qemu-timeout` in seconds (a random 0..119 s is added per pod).
    #[arg(long, default_value_t = 240)]
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
}

impl Flags {
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
}
