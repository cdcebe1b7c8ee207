//! `kvrs kubelet`: this machine as a node of a real cluster for virt-launcher pods — the same
//! pod runner `kvrs run` embeds, against any API server. It registers the Node with KubeVirt's
//! device resources (what KubeVirt's device plugins publish), runs the launcher pods scheduled
//! to it with kvrs's launcher binaries — each pod's `compute` container an OCI container run by
//! runc, as a Kubernetes node runs it — and reports their status. With virt-controller and
//! virt-handler on the same cluster, VMs boot here without containerd or a kubelet.

use std::path::{Path, PathBuf};

use crate::input::CliError;

/// Arguments of `kvrs kubelet`.
#[derive(clap::Args, Clone, Debug)]
#[command(
    after_help = "Examples:\n  kvrs kubelet --kubeconfig ~/.kube/config --node-name node01 --images ~/.cache/kvrs/images"
)]
pub struct Args {
    /// The cluster's kubeconfig (default: in-cluster, $KUBECONFIG, ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name.
    #[arg(long)]
    pub node_name: String,
    /// Where pods' emptyDirs live (virt-handler's `--pods-dir`); short, the launcher's socket
    /// path under it must fit a Unix socket address.
    #[arg(long, default_value = "/run/kvrs/pods")]
    pub pods_dir: PathBuf,
    /// The kubelet's own state (each pod's container bundle, runc's state, the logs).
    #[arg(long, default_value = "/var/lib/kvrs/kubelet")]
    pub state_dir: PathBuf,
    /// Where container-disk and kernel-boot images are (see `kvrs run --help`).
    #[arg(long, value_name = "DIR")]
    pub images: Option<PathBuf>,
    /// A map file of `reference=path` lines.
    #[arg(long, value_name = "FILE")]
    pub image_map: Option<PathBuf>,
    /// The entrypoint of a container image, for a container the pod runs without a `command`
    /// (a hook sidecar's): `REFERENCE=/PATH [ARG...]` (see `kvrs run --help`). Repeatable.
    #[arg(long, value_name = "REF=PATH")]
    pub image_entrypoint: Vec<String>,
    /// Extra labels for the Node, `key=value`, repeatable (e.g.
    /// `machine-type.node.kubevirt.io/q35=true`, which KubeVirt's node labeller would set).
    #[arg(long = "node-label", value_name = "KEY=VALUE")]
    pub node_labels: Vec<String>,
    /// Bind pods that name no node to this one (a cluster without kube-scheduler).
    #[arg(long)]
    pub bind_unscheduled: bool,
    /// The OCI runtime that runs the containers (a name on `PATH` or a path).
    /// Default: the runc 1.5.3 `scripts/node-components.sh` builds into
    /// `~/.cache/kvrs/node/bin/runc` when it is there, else `runc` on `PATH`. A runc without the
    /// November 2025 fixes (CVE-2025-31133, -52565, -52881; fixed in 1.2.8, 1.3.3, 1.4.0-rc.3),
    /// such as Debian 12's 1.1.5, is refused unless --allow-vulnerable-runtime.
    #[arg(long, value_name = "PATH", default_value_os_t = kvrs_kubelet::runc::default_runtime())]
    pub runtime: PathBuf,
    /// Run pods even with a runc that lacks the November 2025 fixes (a loud warning instead of
    /// refusing to start).
    #[arg(long)]
    pub allow_vulnerable_runtime: bool,
    /// The seccomp profile of a pod container that names none, as the kubelet's
    /// `--seccomp-default`: true (kvrs's default) gives the container runtime's default profile,
    /// false leaves it unconfined (the kubelet's own default). KubeVirt's passt binding needs
    /// false: libvirt's `passt` creates a user namespace, which the default profile refuses.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub seccomp_default: bool,
}

/// The image map of `--images`, `--image-map` and `--image-entrypoint`.
pub fn image_map(
    images: Option<&Path>,
    map_file: Option<&Path>,
    entrypoints: &[String],
) -> Result<kvrs_kubelet::ImageMap, CliError> {
    let mut map = match images {
        Some(dir) => kvrs_kubelet::ImageMap::from_dir(dir),
        None => kvrs_kubelet::ImageMap::default(),
    };
    if let Some(file) = map_file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::Input(format!("--image-map {}: {e}", file.display())))?;
        map.parse_map_file(&text, file.parent().unwrap_or(Path::new(".")))
            .map_err(|e| CliError::Input(format!("--image-map {}: {e}", file.display())))?;
    }
    for e in entrypoints {
        map.parse_entrypoint(e)
            .map_err(|e| CliError::Input(format!("--image-entrypoint: {e}")))?;
    }
    Ok(map)
}

/// A kubelet configuration running kvrs's launcher (next to this executable) with the default
/// runc (the callers' `--runtime` replaces it).
pub fn config(
    node: &str,
    pods_dir: PathBuf,
    state_dir: PathBuf,
    images: kvrs_kubelet::ImageMap,
) -> Result<kvrs_kubelet::KubeletConfig, CliError> {
    let exe =
        std::env::current_exe().map_err(|e| CliError::Failed(format!("locating kvrs: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut config = kvrs_kubelet::KubeletConfig::new(node, pods_dir, state_dir);
    config.images = images;
    config.binaries = kvrs_kubelet::BinaryMap::kubevirt_launcher(&dir);
    config.register_node = true;
    Ok(config)
}

/// Runs `kvrs kubelet` until SIGTERM or Ctrl-C, then stops its pods gracefully.
pub fn run(args: Args) -> Result<(), CliError> {
    let mut config = config(
        &args.node_name,
        args.pods_dir.clone(),
        args.state_dir.clone(),
        image_map(
            args.images.as_deref(),
            args.image_map.as_deref(),
            &args.image_entrypoint,
        )?,
    )?;
    config.bind_unscheduled = args.bind_unscheduled;
    config.runtime = args.runtime.clone();
    config.allow_vulnerable_runtime = args.allow_vulnerable_runtime;
    config.seccomp_default = args.seccomp_default;
    for label in &args.node_labels {
        let (k, v) = label.split_once('=').ok_or_else(|| {
            CliError::Input(format!("--node-label {label:?}: expected KEY=VALUE"))
        })?;
        config.node_labels.insert(k.to_string(), v.to_string());
    }
    kvrs_runtime::kube::setup::init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("starting the async runtime: {e}")))?;
    runtime.block_on(async move {
        let client =
            kvrs_runtime::kube::setup::connect_as("kvrs-kubelet", args.kubeconfig.as_deref())
                .await
                .map_err(|e| CliError::Failed(e.to_string()))?;
        let mut signals = super::run::Signals::new()?;
        kvrs_kubelet::Kubelet::new(client, config)
            .run(async move { signals.recv().await })
            .await
            .map_err(|e| CliError::Failed(format!("kubelet: {e}")))
    })
}
