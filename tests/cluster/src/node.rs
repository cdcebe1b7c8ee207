//! A real Kubernetes node: containerd v2, runc and the CNI plugins (built by
//! `scripts/node-components.sh` from `tests/node`), the kubelet and kube-proxy (built with the
//! control plane by `scripts/kube-components.sh`), joined to a [`TestCluster`] started with
//! [`TestCluster::start_for_node`].
//!
//! ```no_run
//! use kvrs_test_cluster::{Options, RealNode, TestCluster};
//!
//! let cluster = TestCluster::start_for_node(Options::full())?;
//! let node = RealNode::start(&cluster)?; // Ready, kube-proxy synced, pause image imported
//! node.import_image("my-image.tar".as_ref())?; // an OCI archive (scripts/lib/oci_image.py)
//! // ... kubectl apply pods with `imagePullPolicy: Never` (no registry is reachable) ...
//! node.stop()?; // everything torn down, and checked: Err names whatever is left
//! # Ok::<(), kvrs_test_cluster::ClusterError>(())
//! ```
//!
//! Drop the node before its cluster (declare it after the cluster): the cluster owns the bridge.
//!
//! # Layout on the machine
//!
//! One node cluster runs per machine (the first node's kubelet directory is the standard one):
//! the cluster takes the lock file `/run/kvrs-node.lock` in [`TestCluster::start_for_node`] (a
//! second such cluster waits for it), and a cluster holds at most two [`RealNode`]s: the first
//! ([`RealNode::start`], laid out as below) and a second one beside it
//! ([`RealNode::start_second`]: node `kvrs-node-b` on its own bridge `kvrs-cni1`
//! `10.252.1.1/24`, directory `/var/lib/kvrs-node-b`, cgroup `kvrs-node-b`, its own containerd,
//! no kube-proxy, and its own mount namespace where `/var/lib/kubelet` and the paths it is given
//! are its own directories — [`node_layout`](crate::node_layout) says why). Stop the second
//! node before the first.
//!
//! | what | where |
//! |---|---|
//! | node name, address | [`NODE_NAME`] `kvrs-node`, InternalIP [`NODE_IP`] `10.252.0.1` |
//! | pod network | bridge [`NODE_BRIDGE`] `kvrs-cni0` with `10.252.0.1/24` (created by the cluster, which binds kube-apiserver there), pods get `10.252.0.10`-`.254` from host-local |
//! | kubelet root | [`KUBELET_ROOT`] `/var/lib/kubelet` (the shipped virt-handler DaemonSet mounts it and `/var/lib/kubelet/pods`), device plugins in `/var/lib/kubelet/device-plugins` |
//! | everything else | [`NODE_DIR`] `/var/lib/kvrs-node`: `containerd/` (root, state, sockets; `containerd/containerd.sock`), `s/` (shim sockets), `cni/` (`net.d/` config, `ipam/` leases), `config/` (containerd.toml, kubelet.yaml, kube-proxy.yaml, kubeconfig, CA), `pod-logs/` (the kubelet's `podLogsDir`), `logs/` (containerd.log, kubelet.log, kube-proxy.log), `run/` (pid files) |
//! | cgroups | `kvrs-node` in every hierarchy: `kvrs-node/runtime` holds containerd (so every shim), the kubelet and kube-proxy; the kubelet's `cgroupRoot` is `/kvrs-node`, so pods are under `kvrs-node/kubepods` |
//! | nftables | kube-proxy's tables `ip kube-proxy` / `ip6 kube-proxy`; the portmap plugin's `cni_hostport` (only when a pod has host ports) |
//!
//! Logs: [`RealNode::log_path`] (`/var/lib/kvrs-node/logs/{containerd,kubelet,kube-proxy}.log`).
//! A panicking test prints their last lines and keeps a copy of them in a `/tmp/kvrs-node-logs-*`
//! directory (named on stderr); so does any teardown when `KVRS_KEEP_NODE_DIR` or
//! `KVRS_KEEP_CLUSTER_DIR` is set.
//!
//! # Teardown
//!
//! [`RealNode::stop`] (or Drop) stops kube-proxy and the kubelet, deletes the Node object, then
//! runs `node-teardown.sh` (this crate's `src/`): SIGTERM to every pod process, then SIGKILL to
//! everything in the `kvrs-node` cgroups (containerd, shims, runc, containers), unmounts every
//! mount under `/var/lib/kubelet` and `/var/lib/kvrs-node` deepest first (the kubelet's shared
//! bind mount of its root, overlays, image volumes, network namespace files, secret tmpfs),
//! removes the cgroups, the pod veths, kube-proxy's and portmap's nftables tables, the kubelet's
//! `/var/log/containers` links, libcni's cached results (`/var/lib/cni/results`, a path go-cni
//! does not let containerd change), restores the kernel settings listed below, and removes both
//! directories (and `/var/log/containers`, `/var/lib/cni` when the node created them). A watchdog shell runs the same script when the test process dies without
//! unwinding. [`node_leftovers`] checks the machine for anything of a node (processes, mounts,
//! cgroups, links, network namespaces, nftables tables, directories); [`RealNode::stop`] returns
//! an error naming every leftover, kernel settings included. A node left by a run that was
//! SIGKILLed together with its watchdog is cleaned up by the next [`RealNode::start`].
//!
//! # Settings this kernel and VM need, and why
//!
//! The machines are Firecracker VMs: cgroup v1 hierarchies (plus an empty cgroup2 at
//! `/sys/fs/cgroup/unified`), no systemd, no loadable kernel modules, no container registry.
//!
//! containerd (`config/containerd.toml`, config `version = 4`, containerd 2.4's own schema:
//! version 3 is accepted but migrated with a warning at every start; 4 only moves the
//! `[grpc]`/`[ttrpc]` addresses into the `io.containerd.server.v1.*` plugins):
//! - `root`, `state`, both socket addresses, the shim manager's `socket_dir` (else
//!   `/run/containerd/s`), runc's `Root` (else `/run/containerd/runc`), the `opt` plugin's path
//!   (else it creates `/opt/containerd`), CNI `bin_dirs`/`conf_dir`: all under `NODE_DIR`, so
//!   nothing of the host's (or a Debian containerd's) paths is touched.
//! - `netns_mounts_under_state_dir = true`: pod network namespaces are bind-mounted under the
//!   state directory instead of `/run/netns`, where teardown finds them with the other mounts.
//! - `SystemdCgroup = false` (runc's cgroupfs driver; there is no systemd) — the kubelet reads
//!   the driver from containerd's CRI RuntimeConfig, and `cgroupDriver: cgroupfs` says the same.
//! - `device_ownership_from_security_context = true`: device nodes handed to a container (device
//!   plugins, e.g. `/dev/kvm` for virt-launcher) are owned by the container's runAsUser/Group,
//!   as KubeVirt's deployment guide requires for non-root launchers.
//! - `pinned_images.sandbox = kvrs.local/pause:1`: our own pause binary
//!   (`tests/node/pause/pause.c`), imported from `pause.tar` before the kubelet starts, since
//!   `registry.k8s.io/pause` cannot be pulled here.
//! - `restrict_oom_score_adj = true`: the kubelet asks for `oom_score_adj` -998 for sandboxes
//!   (and -997 for Guaranteed pods), but lowering it needs CAP_SYS_RESOURCE, which is not in this
//!   session's capability bounding set (`CapBnd` 0x1fffeffffff lacks bit 24): runc's nsexec then
//!   fails every sandbox with "failed to update /proc/self/oom_score_adj: Permission denied".
//!   The option clamps containers' values to containerd's own (0), as for rootless containerd.
//!   For the same reason the kubelet's and kube-proxy's own `oomScoreAdj` are 0, not -999.
//! - NRI disabled (it would create `/var/run/nri`). Image volumes need no switch in containerd
//!   2.1+ (the CRI mount's `image` field is always honoured); they are mounted under the CRI
//!   state dir `image-volumes/`.
//! - containerd warns at every start that cgroup v1 support is deprecated (removal "no later
//!   than May 2029"); it works.
//!
//! kubelet (`config/kubelet.yaml`, flags `--hostname-override`, `--node-ip`):
//! - `failCgroupV1: false`: kubelets since 1.35 refuse cgroup v1 hosts unless told otherwise.
//! - `cgroupDriver: cgroupfs`, `cgroupRoot: /kvrs-node`: pods' cgroups go under one cgroup of
//!   ours (the kubelet requires it to exist in every hierarchy; the harness creates it, copying
//!   `cpuset.cpus`/`cpuset.mems` so tasks can join), which teardown empties and removes.
//! - ImageVolume: no gate needed; it is GA and locked on in 1.36.
//! - `podLogsDir`, `volumePluginDir`: under `NODE_DIR` (defaults `/var/log/pods`,
//!   `/usr/libexec/kubernetes/...`). `/var/log/containers` is hard-coded in the kubelet; its links
//!   into our pod logs are removed at teardown (and the directory, if the node created it).
//! - `failSwapOn: false`, `shutdownGracePeriod: 0s` (graceful node shutdown needs systemd-logind),
//!   `imageGCHighThresholdPercent: 100` (imported images cannot be pulled again, so image GC must
//!   never delete them), `evictionHard` at 512Mi disk / 100Mi memory (a busy test machine must not
//!   evict the pods under test: 1% of this machine's 252 GB disk is 2.5 GB, which a cold CI
//!   clone building its own target directory can go below: the kubelet evicted virt-handler).
//! - `address: 10.252.0.1`, healthz on `127.0.0.1:10248`, read-only port off; clients are
//!   authenticated by x509 (the cluster CA: the API server's kubelet client certificate) or
//!   bearer token (TokenReview), authorized by SubjectAccessReview (`Webhook`).
//! - Kernel settings: with `protectKernelDefaults: false` (the default) the kubelet sets
//!   `vm.overcommit_memory=1`, `vm.panic_on_oom=0`, `kernel.panic=10`, `kernel.panic_on_oops=1`,
//!   `kernel.keys.root_maxkeys`, `kernel.keys.root_maxbytes`; with `true` it refuses to start on
//!   this VM's values (`kernel.panic=1`, `panic_on_oops=0`, `overcommit_memory=0`). So the harness
//!   records them (and `net.ipv4.ip_forward`, which the bridge plugin turns on for a gateway
//!   bridge) before the node starts and restores them at teardown.
//!
//! kube-proxy (`config/kube-proxy.yaml`): `mode: nftables` (Debian's `nft` 1.0.6 and this kernel
//! have everything it checks for; there is no iptables binary), `clusterCIDR`/`detectLocalMode:
//! ClusterCIDR` (the node has no podCIDR), `nodePortAddresses: [10.252.0.1/32]` (NodePorts only on
//! the bridge address), conntrack settings all 0 (leave the host's sysctls alone), healthz and
//! metrics on 127.0.0.1. Pods reach the API server as in any cluster: `KUBERNETES_SERVICE_HOST`
//! is the `kubernetes` Service's ClusterIP 10.0.0.1, kube-proxy DNATs it to the EndpointSlice
//! the API server maintains (10.252.0.1:PORT, its advertise address). No kernel module is
//! needed: the packets are routed to a local address, not bridged between pods.
//!
//! CNI (`cni/net.d/10-kvrs.conflist`): `bridge` on `kvrs-cni0` (`isGateway`,
//! `isDefaultGateway`, `ipMasq: false` — nothing leaves the machine, `hairpinMode`), `host-local`
//! IPAM on `10.252.0.0/24` with its leases under `NODE_DIR`, then `portmap` with the nftables
//! backend. containerd itself runs the `loopback` plugin for every pod's `lo`.

use std::collections::BTreeSet;
use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::node_layout::{Layout, NodeSlot, SECOND};
use crate::{
    ClusterError, TestCluster, etcd_http, run_components_script, stop_process, tail_file,
    workspace_root, write_kubeconfig,
};

/// The Node's name.
pub const NODE_NAME: &str = "kvrs-node";
/// The CNI bridge (created by [`TestCluster::start_for_node`]).
pub const NODE_BRIDGE: &str = "kvrs-cni0";
/// The bridge's host address: the Node's InternalIP, and where kube-apiserver listens.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 252, 0, 1);
/// The pods' subnet (host-local IPAM hands out `.10`-`.254`).
pub const POD_SUBNET: &str = "10.252.0.0/24";
/// The kubelet's root directory (the standard one: KubeVirt's DaemonSet mounts it).
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";
/// Everything else of the node (see the [module documentation](self)).
pub const NODE_DIR: &str = "/var/lib/kvrs-node";
/// containerd's sandbox image, built by `scripts/node-components.sh` and imported at start.
pub const PAUSE_IMAGE: &str = "kvrs.local/pause:1";

const NODE_LOCK: &str = "/run/kvrs-node.lock";
const MARKER: &str = ".kvrs-test-node";
const TEARDOWN: &str = include_str!("node-teardown.sh");
/// What `scripts/node-components.sh` puts in its bin directory.
const NODE_BIN_FILES: [&str; 10] = [
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "pause",
    "pause.tar",
    "cni/bridge",
    "cni/host-local",
    "cni/loopback",
    "cni/portmap",
];
/// Kernel settings the kubelet or the bridge plugin change, restored at teardown.
const SYSCTLS: [&str; 7] = [
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
];
const KUBE_PROXY_HEALTHZ_PORT: u16 = 10256;
const KUBE_PROXY_METRICS_PORT: u16 = 10249;
const LOCK_WAIT: Duration = Duration::from_secs(15 * 60);
const CONTAINERD_READY_TIMEOUT: Duration = Duration::from_secs(60);
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(180);
const KUBE_PROXY_READY_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(10);
const LOG_TAIL_LINES: usize = 40;

fn node_err(msg: impl Into<String>) -> ClusterError {
    ClusterError::Node(msg.into())
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let context = context.into();
    move |e| ClusterError::io(context, e)
}

// --- the network a node cluster owns -----------------------------------------------------------

/// The machine-wide node lock and the bridge; owned by a [`TestCluster`] started for a node.
#[derive(Debug)]
pub(crate) struct NodeNetwork {
    _lock: fs::File,
    node_claimed: Arc<AtomicBool>,
    second_claimed: Arc<AtomicBool>,
}

impl NodeNetwork {
    /// Takes the lock (waiting up to 15 minutes for another node cluster to finish), then creates
    /// the bridge with the host address, replacing one a dead run left.
    pub(crate) fn create() -> Result<NodeNetwork, ClusterError> {
        let lock = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(NODE_LOCK)
            .map_err(io_err(format!("opening {NODE_LOCK}")))?;
        let begun = Instant::now();
        let mut said = false;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) => {
                    if !said {
                        eprintln!(
                            "kvrs-test-cluster: another node cluster holds {NODE_LOCK}; waiting"
                        );
                        said = true;
                    }
                    if begun.elapsed() > LOCK_WAIT {
                        return Err(node_err(format!(
                            "{NODE_LOCK} still held by another test after {LOCK_WAIT:?}"
                        )));
                    }
                    thread::sleep(Duration::from_millis(250));
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(ClusterError::io(format!("locking {NODE_LOCK}"), e));
                }
            }
        }
        if link_exists(NODE_BRIDGE) {
            run(Command::new("ip").args(["link", "del", NODE_BRIDGE]))?;
        }
        run(Command::new("ip").args(["link", "add", NODE_BRIDGE, "type", "bridge"]))?;
        // From here on, dropping `network` deletes the bridge.
        let network = NodeNetwork {
            _lock: lock,
            node_claimed: Arc::new(AtomicBool::new(false)),
            second_claimed: Arc::new(AtomicBool::new(false)),
        };
        run(Command::new("ip").args([
            "addr",
            "add",
            &format!("{NODE_IP}/24"),
            "dev",
            NODE_BRIDGE,
        ]))?;
        run(Command::new("ip").args(["link", "set", NODE_BRIDGE, "up"]))?;
        Ok(network)
    }
}

impl Drop for NodeNetwork {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", NODE_BRIDGE])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // The lock is released when the file closes, right after this.
    }
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Runs `cmd`, failing with its stderr.
fn run(cmd: &mut Command) -> Result<Output, ClusterError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("running {cmd:?}")))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(ClusterError::Command {
            command: format!("{cmd:?}"),
            status: out.status.to_string(),
            stderr: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        })
    }
}

// --- binaries ------------------------------------------------------------------------------------

/// The directory of containerd, ctr, the runc shim, runc, `cni/` and the pause image archive:
/// `KVRS_NODE_BIN` if set (checked, never built), else the output of
/// `scripts/node-components.sh` (which builds them on first use; run once per test process).
pub fn locate_node_binaries() -> Result<PathBuf, ClusterError> {
    let check = |dir: &Path| crate::check_files(dir, &NODE_BIN_FILES);
    if let Some(dir) = std::env::var_os("KVRS_NODE_BIN") {
        let dir = PathBuf::from(dir);
        check(&dir).map_err(|e| ClusterError::Binaries(format!("KVRS_NODE_BIN: {e}")))?;
        return Ok(dir);
    }
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = run_components_script("node-components.sh")?;
            check(&dir)?;
            Ok(dir)
        })
        .clone()
        .map_err(ClusterError::Binaries)
}

/// Writes an OCI image archive of `rootfs` named `reference` to `out` with kvrs's writer
/// (`scripts/lib/oci_image.py`; `extra` takes its other flags, e.g. `--entrypoint '["/x"]'`),
/// ready for [`RealNode::import_image`].
pub fn oci_archive(
    rootfs: &Path,
    reference: &str,
    out: &Path,
    extra: &[&str],
) -> Result<(), ClusterError> {
    let root = workspace_root().ok_or_else(|| node_err("no workspace root"))?;
    run(Command::new("python3")
        .arg(root.join("scripts/lib/oci_image.py"))
        .arg("--rootfs")
        .arg(rootfs)
        .args(["--ref", reference])
        .arg("--out")
        .arg(out)
        .args(extra))?;
    Ok(())
}

// --- the node ------------------------------------------------------------------------------------

/// A process of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeComponent {
    /// containerd (its shims and runc log into the same file).
    Containerd,
    /// The kubelet.
    Kubelet,
    /// kube-proxy.
    KubeProxy,
}

impl NodeComponent {
    /// The binary's (and its log file's) name.
    pub fn binary(self) -> &'static str {
        match self {
            NodeComponent::Containerd => "containerd",
            NodeComponent::Kubelet => "kubelet",
            NodeComponent::KubeProxy => "kube-proxy",
        }
    }
}

/// A real node of a [`TestCluster`]; see the [module documentation](self).
#[derive(Debug)]
pub struct RealNode {
    layout: Layout,
    /// The second node's mount-namespace holder (`sleep` inside `unshare --mount`).
    holder: Option<Child>,
    /// The host paths the second node sees as its own directories (canonical).
    private_paths: Vec<PathBuf>,
    /// Host directories the second node created to mount its own over (removed at teardown).
    made_paths: Vec<PathBuf>,
    bin_dir: PathBuf,
    kube_bin_dir: PathBuf,
    containerd: Option<Child>,
    kubelet: Option<Child>,
    kube_proxy: Option<Child>,
    watchdog: Option<Child>,
    /// `name=value` of [`SYSCTLS`] as they were before the node started.
    sysctls: Vec<String>,
    claim: Arc<AtomicBool>,
    torn_down: bool,
    started_in: Duration,
    /// Paths given to [`remove_on_teardown`](Self::remove_on_teardown) (canonical).
    extra_paths: std::sync::Mutex<Vec<PathBuf>>,
    /// Multus as the node's CNI ([`start_with_multus`](Self::start_with_multus)).
    multus: Option<crate::Multus>,
}

impl RealNode {
    /// Starts containerd, the kubelet and kube-proxy on this machine as node [`NODE_NAME`] of
    /// `cluster` (which must come from [`TestCluster::start_for_node`]) and waits until the
    /// Node is Ready and kube-proxy has programmed the Services. Cleans up what a killed earlier
    /// run left first. Fails, with the end of the relevant log, if anything does not come up.
    pub fn start(cluster: &TestCluster) -> Result<RealNode, ClusterError> {
        Self::start_in(cluster, NodeSlot::First, &[], None)
    }

    /// Like [`start`](Self::start), with Multus as the node's CNI (see
    /// [`multus`](crate::multus)): the node's bridge stays the cluster default network, and
    /// the NetworkAttachmentDefinition CRD is applied and established before this returns, so
    /// pods can ask for secondary networks.
    pub fn start_with_multus(
        cluster: &TestCluster,
        multus: &crate::Multus,
    ) -> Result<RealNode, ClusterError> {
        let node = Self::start_in(cluster, NodeSlot::First, &[], Some(multus.clone()))?;
        let crd = multus.crd.display().to_string();
        for args in [
            vec!["apply", "-f", crd.as_str()],
            vec![
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                crate::multus::NAD_CRD,
            ],
        ] {
            let out = cluster.kubectl(&args);
            if !out.status.success() {
                return Err(node_err(format!(
                    "kubectl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
        }
        Ok(node)
    }

    /// Starts a second node, [`SECOND_NODE_NAME`](crate::SECOND_NODE_NAME), beside the one
    /// [`start`](Self::start) started on `cluster` (which must run): its own containerd, kubelet,
    /// bridge and pod subnet, cgroup and directory, no kube-proxy, in a mount namespace of its
    /// own where `/var/lib/kubelet` and each of `private_host_paths` (e.g. virt-handler's
    /// `/var/run/kubevirt`) are directories of this node, made shared there — see
    /// [`node_layout`](crate::node_layout) for why. Stop it before the first node.
    pub fn start_second(
        cluster: &TestCluster,
        private_host_paths: &[&Path],
    ) -> Result<RealNode, ClusterError> {
        Self::start_in(cluster, NodeSlot::Second, private_host_paths, None)
    }

    fn start_in(
        cluster: &TestCluster,
        slot: NodeSlot,
        private_host_paths: &[&Path],
        multus: Option<crate::Multus>,
    ) -> Result<RealNode, ClusterError> {
        let begun = Instant::now();
        let layout = Layout::of(slot);
        let network = cluster.node_network.as_ref().ok_or_else(|| {
            node_err("the cluster was not started with TestCluster::start_for_node")
        })?;
        let flag = match slot {
            NodeSlot::First => &network.node_claimed,
            NodeSlot::Second => {
                if !network.node_claimed.load(Ordering::SeqCst) {
                    return Err(node_err(
                        "start the first node (RealNode::start) before the second one",
                    ));
                }
                &network.second_claimed
            }
        };
        if flag
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(node_err(format!(
                "a RealNode already runs as {} on this cluster",
                layout.name
            )));
        }
        let claim = Arc::clone(flag);
        let kube_bin_dir = cluster.bin_dir().to_path_buf();
        let bin_dir = match locate_node_binaries() {
            Ok(dir) => dir,
            Err(e) => {
                claim.store(false, Ordering::SeqCst);
                return Err(e);
            }
        };
        let mut private_paths = Vec::new();
        if layout.second() {
            private_paths.push(PathBuf::from(KUBELET_ROOT));
            for path in private_host_paths {
                let path = canonical(path);
                if !path.is_absolute() || path.components().count() < 3 {
                    claim.store(false, Ordering::SeqCst);
                    return Err(node_err(format!(
                        "refusing to make {} private to the second node",
                        path.display()
                    )));
                }
                if !private_paths.contains(&path) {
                    private_paths.push(path);
                }
            }
        }
        let mut node = RealNode {
            layout,
            holder: None,
            private_paths,
            made_paths: Vec::new(),
            bin_dir,
            kube_bin_dir,
            containerd: None,
            kubelet: None,
            kube_proxy: None,
            watchdog: None,
            sysctls: Vec::new(),
            claim,
            // Nothing to tear down until the leftovers of an earlier run are gone.
            torn_down: true,
            started_in: Duration::ZERO,
            extra_paths: std::sync::Mutex::new(Vec::new()),
            multus,
        };
        node.clean_earlier_run()?;
        node.torn_down = false;
        // From here on, an error drops `node`, which tears down whatever was started.
        node.prepare()?;
        node.write_configs(cluster)?;
        node.start_containerd()?;
        node.import_image(&node.bin_dir.join("pause.tar"))?;
        node.start_kubelet()?;
        if !layout.second() {
            node.start_kube_proxy()?;
        }
        node.started_in = begun.elapsed();
        Ok(node)
    }

    /// The Node's name ([`NODE_NAME`], or the second node's).
    pub fn name(&self) -> &'static str {
        self.layout.name
    }

    /// The Node's InternalIP (its bridge's address).
    pub fn ip(&self) -> Ipv4Addr {
        self.layout.ip
    }

    /// Which slot of the machine this node occupies.
    pub fn slot(&self) -> NodeSlot {
        self.layout.slot
    }

    /// `ctr -n k8s.io IMPORT archive`: makes an OCI image archive (from
    /// `scripts/lib/oci_image.py`, [`oci_archive`], or `ctr images export`) available to pods
    /// under the name in its index (use `imagePullPolicy: Never` or `IfNotPresent` with a tag
    /// other than `latest`; no registry is reachable).
    pub fn import_image(&self, archive: &Path) -> Result<(), ClusterError> {
        let out = self.ctr([
            "images".as_ref(),
            "import".as_ref(),
            "--local".as_ref(),
            archive.as_os_str(),
        ]);
        if out.status.success() {
            Ok(())
        } else {
            Err(node_err(format!(
                "ctr images import {} failed ({}): {}{}",
                archive.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            )))
        }
    }

    /// Runs this node's `ctr` in namespace `k8s.io` (the CRI's) with `args`.
    ///
    /// # Panics
    /// If ctr cannot be run at all.
    pub fn ctr<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Command::new(self.bin_dir.join("ctr"))
            .arg("--address")
            .arg(self.layout.containerd_socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin_dir.join("ctr").display()))
    }

    /// The first node's containerd socket (the kubelet's `containerRuntimeEndpoint`).
    pub fn containerd_socket() -> PathBuf {
        crate::node_layout::FIRST.containerd_socket()
    }

    /// This node's containerd socket.
    pub fn runtime_socket(&self) -> PathBuf {
        self.layout.containerd_socket()
    }

    /// The log of `component` (stdout and stderr).
    pub fn log_path(&self, component: NodeComponent) -> PathBuf {
        self.layout
            .logs_dir()
            .join(format!("{}.log", component.binary()))
    }

    /// The last `lines` lines of `component`'s log.
    pub fn log_tail(&self, component: NodeComponent, lines: usize) -> String {
        tail_file(&self.log_path(component), lines)
    }

    /// The directory of the node's logs.
    pub fn logs_dir(&self) -> PathBuf {
        self.layout.logs_dir()
    }

    /// The kubeconfig the kubelet and kube-proxy use (the cluster's admin token).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.layout.config_dir().join("kubeconfig")
    }

    /// The directory of containerd, runc, `cni/` and the pause image in use.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// How long [`start`](Self::start) took (binaries already built or not).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Adds a host path the node's pods create (a hostPath directory, e.g. virt-handler's
    /// `/var/run/kubevirt`, `/var/run/kubevirt-private`, `/var/run/kubevirt-libvirt-runtimes`) to
    /// the teardown: every mount under it is unmounted and it is removed, by [`stop`](Self::stop),
    /// Drop and the watchdog alike, and `stop` fails if it is still there. Symlinks in it are
    /// resolved (`/var/run` is `/run`). Refuses top-level and system directories.
    pub fn remove_on_teardown(&self, path: &Path) -> Result<(), ClusterError> {
        let path = canonical(path);
        let refused = [
            "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/opt", "/proc", "/root",
            "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/log",
            "/var/run", "/var/tmp",
        ];
        if !path.is_absolute()
            || path.components().count() < 3
            || refused.iter().any(|r| path == Path::new(r))
        {
            return Err(node_err(format!(
                "refusing to remove {} on teardown",
                path.display()
            )));
        }
        // A path the second node sees as its own lives in its directory on the machine.
        let path = self.machine_path(&path);
        let mut paths = self.extra_paths.lock().unwrap_or_else(|e| e.into_inner());
        if !paths.contains(&path) {
            paths.push(path);
        }
        let text: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
        write(&self.layout.dir().join("run/extra-paths"), &text)
    }

    /// Where `path`, as this node's pods see it, is on the machine: itself, except under a
    /// private path of the second node.
    fn machine_path(&self, path: &Path) -> PathBuf {
        for private in &self.private_paths {
            if let Ok(rest) = path.strip_prefix(private) {
                return self.layout.private_store(private).join(rest);
            }
        }
        path.to_path_buf()
    }

    /// `program` run in the node's mount namespace (the host's for the first node).
    fn in_node_ns(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.holder {
            Some(holder) => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--mount=/proc/{}/ns/mnt", holder.id()))
                    .arg("--")
                    .arg(program);
                cmd
            }
            None => Command::new(program),
        }
    }

    /// Prepares a host directory that pods mount with `mountPropagation: Bidirectional` (e.g.
    /// virt-handler's `/var/run/kubevirt`): the runtime refuses such a mount unless the host
    /// path is on a shared mount, and on a host without systemd `/` is private. The directory is
    /// created, bind-mounted onto itself and made shared (as the kubelet does with its own root),
    /// and [`remove_on_teardown`](Self::remove_on_teardown) unmounts and removes it at teardown.
    /// On the second node, a path it holds privately is shared already (and removed with its
    /// directory); any other path is shared inside its mount namespace.
    pub fn share_on_host(&self, path: &Path) -> Result<(), ClusterError> {
        if self.private_paths.contains(&canonical(path)) {
            return Ok(());
        }
        self.remove_on_teardown(path)?;
        let path = canonical(path);
        let on_machine = self.machine_path(&path);
        fs::create_dir_all(&on_machine)
            .map_err(|e| node_err(format!("creating {}: {e}", on_machine.display())))?;
        let mountinfo = match &self.holder {
            Some(holder) => format!("/proc/{}/mountinfo", holder.id()),
            None => "/proc/self/mountinfo".to_owned(),
        };
        let mounted = fs::read_to_string(mountinfo)
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(&*path.to_string_lossy()));
        let mut steps: Vec<Vec<&str>> = Vec::new();
        let p = path
            .to_str()
            .ok_or_else(|| node_err("a path that is not UTF-8"))?;
        if !mounted {
            steps.push(vec!["--bind", p, p]);
        }
        steps.push(vec!["--make-rshared", p]);
        for args in steps {
            let out = self
                .in_node_ns("mount")
                .args(&args)
                .output()
                .map_err(|e| node_err(format!("mount {}: {e}", args.join(" "))))?;
            if !out.status.success() {
                return Err(node_err(format!(
                    "mount {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        Ok(())
    }

    /// Kills the kubelet as a crash would (SIGKILL) and starts it again with the same
    /// configuration, waiting until the Node is Ready: for fault tests. The pods keep running
    /// under containerd meanwhile, as on a real node.
    pub fn restart_kubelet(&mut self) -> Result<(), ClusterError> {
        if let Some(mut kubelet) = self.kubelet.take() {
            let _ = kubelet.kill();
            let _ = kubelet.wait();
        }
        self.start_kubelet()
    }

    /// The ids of the node's own processes (containerd, kubelet, kube-proxy).
    pub fn pids(&self) -> Vec<u32> {
        [&self.containerd, &self.kubelet, &self.kube_proxy]
            .into_iter()
            .flatten()
            .map(Child::id)
            .collect()
    }

    /// Tears the node down (see the [module documentation](self)) and checks the machine: an
    /// error lists everything left (processes, mounts, cgroups, links, network namespaces,
    /// nftables tables, directories, kernel settings not restored).
    pub fn stop(mut self) -> Result<(), ClusterError> {
        self.teardown()
    }

    // --- start-up ------------------------------------------------------------------------------

    /// Removes what a run killed together with its watchdog left (only ever a node of ours: the
    /// kubelet directory must carry our marker or not exist).
    fn clean_earlier_run(&self) -> Result<(), ClusterError> {
        let kubelet_root = Path::new(KUBELET_ROOT);
        if !self.layout.second()
            && kubelet_root.exists()
            && !kubelet_root.join(MARKER).exists()
            && !Path::new(NODE_DIR).exists()
        {
            return Err(node_err(format!(
                "{KUBELET_ROOT} exists and was not made by kvrs-test-cluster; refusing to touch it"
            )));
        }
        // A second node a dead run left goes first (the first node's sweep would leave its
        // cgroup and directory), then, when starting the first node, the first node's things.
        let mut layouts = vec![SECOND];
        if !self.layout.second() {
            layouts.push(self.layout);
        }
        for layout in layouts {
            let left = if layout.second() {
                leftovers_of(&layout, false)
            } else {
                node_leftovers()
            };
            if left.is_empty() {
                continue;
            }
            // The kernel settings the dead run recorded, if it got that far.
            let saved = fs::read_to_string(layout.dir().join("sysctls.orig"))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            eprintln!(
                "kvrs-test-cluster: cleaning up node {} an earlier run left behind",
                layout.name
            );
            let (ok, messages) = self.run_teardown_script(&layout, &saved);
            let left = if layout.second() {
                leftovers_of(&layout, false)
            } else {
                node_leftovers()
            };
            if !ok || !left.is_empty() {
                return Err(node_err(format!(
                    "could not clean up the node an earlier run left: {messages}{}",
                    left.join("; ")
                )));
            }
        }
        Ok(())
    }

    fn prepare(&mut self) -> Result<(), ClusterError> {
        let layout = self.layout;
        let node_dir = layout.dir();
        for sub in [
            "logs",
            "run",
            "config",
            "cni/net.d",
            "cni/ipam",
            "containerd",
            "s",
            "pod-logs",
            "kubelet-plugins/volume/exec",
            "kubectl-cache",
        ] {
            fs::create_dir_all(node_dir.join(sub))
                .map_err(io_err(format!("creating {}/{sub}", layout.dir)))?;
        }
        let kubelet_store = Path::new(layout.kubelet_store);
        fs::create_dir_all(kubelet_store)
            .map_err(io_err(format!("creating {}", kubelet_store.display())))?;
        fs::write(kubelet_store.join(MARKER), "kvrs-test-cluster RealNode\n")
            .map_err(io_err("writing the kubelet directory's marker"))?;
        if !layout.second() {
            for (dir, marker) in [
                ("/var/log/containers", "made-var-log-containers"),
                ("/var/lib/cni", "made-var-lib-cni"),
            ] {
                if !Path::new(dir).exists() {
                    fs::write(node_dir.join("run").join(marker), "")
                        .map_err(io_err(format!("recording {dir}")))?;
                }
            }
            self.sysctls = SYSCTLS
                .iter()
                .map(|k| {
                    let path = sysctl_path(k);
                    fs::read_to_string(&path)
                        .map(|v| format!("{k}={}", v.trim()))
                        .map_err(io_err(format!("reading {}", path.display())))
                })
                .collect::<Result<_, _>>()?;
            fs::write(
                node_dir.join("sysctls.orig"),
                self.sysctls.join("\n") + "\n",
            )
            .map_err(io_err("recording the kernel settings"))?;
        }
        self.watchdog = Some(self.spawn_watchdog()?);
        // Our cgroup in every hierarchy, and `runtime` below it for the daemons.
        for hierarchy in cgroup_hierarchies() {
            let top = hierarchy.join(layout.cgroup);
            let runtime = top.join("runtime");
            fs::create_dir_all(&runtime)
                .map_err(io_err(format!("creating {}", runtime.display())))?;
            if hierarchy.join("cpuset.cpus").exists() {
                // A new cpuset is empty: tasks cannot join it until it has CPUs and memory nodes.
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    for (from, to) in [(&hierarchy, &top), (&top, &runtime)] {
                        let value = fs::read_to_string(from.join(file))
                            .map_err(io_err(format!("reading {}", from.join(file).display())))?;
                        fs::write(to.join(file), value.trim())
                            .map_err(io_err(format!("writing {}", to.join(file).display())))?;
                    }
                }
            }
        }
        if layout.second() {
            self.create_bridge()?;
            self.start_mount_namespace()?;
        }
        Ok(())
    }

    /// The second node's own bridge (the first node's belongs to the cluster).
    fn create_bridge(&self) -> Result<(), ClusterError> {
        let bridge = self.layout.bridge;
        if link_exists(bridge) {
            run(Command::new("ip").args(["link", "del", bridge]))?;
        }
        run(Command::new("ip").args(["link", "add", bridge, "type", "bridge"]))?;
        run(Command::new("ip").args([
            "addr",
            "add",
            &format!("{}/24", self.layout.ip),
            "dev",
            bridge,
        ]))?;
        run(Command::new("ip").args(["link", "set", bridge, "up"]))?;
        Ok(())
    }

    /// The second node's mount namespace: a holder process in its cgroup unshares from the
    /// host's namespace (private propagation: nothing mounted there reaches the machine),
    /// unmounts its copies of whatever the machine had mounted on each private path (the first
    /// node's shared bind of `/var/run/kubevirt`, the first kubelet's root: containerd checks
    /// the *first* mount of a path for `Bidirectional` and would find the private copy beneath),
    /// binds a directory of the node there and makes it shared, then sleeps; the daemons join it
    /// with `nsenter`. Its mounts go away with its last process.
    fn start_mount_namespace(&mut self) -> Result<(), ClusterError> {
        let mut pairs = Vec::new();
        for path in self.private_paths.clone() {
            if !path.exists() {
                fs::create_dir_all(&path)
                    .map_err(io_err(format!("creating {}", path.display())))?;
                self.made_paths.push(path.clone());
                let made: String = self
                    .made_paths
                    .iter()
                    .map(|p| format!("{}\n", p.display()))
                    .collect();
                write(&self.layout.dir().join("run/made-paths"), &made)?;
            }
            let store = self.layout.private_store(&path);
            if path != Path::new(KUBELET_ROOT) {
                fs::create_dir_all(&store)
                    .map_err(io_err(format!("creating {}", store.display())))?;
                pairs.push((store, path));
            } else {
                pairs.push((PathBuf::from(self.layout.kubelet_store), path));
            }
        }
        let log = self.layout.logs_dir().join("mount-namespace.log");
        let file = fs::File::create(&log).map_err(io_err(format!("creating {}", log.display())))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(
                "for f in $KVRS_CGROUP_PROCS; do echo $$ > \"$f\" || exit 125; done; \
                 unset KVRS_CGROUP_PROCS; \
                 exec unshare --mount --propagation private sh -c \"$KVRS_NS_SCRIPT\" holder \"$@\"",
            )
            .arg("kvrs-node-mount-namespace");
        for (store, path) in &pairs {
            cmd.arg(store).arg(path);
        }
        let mut holder = cmd
            .env("KVRS_CGROUP_PROCS", self.runtime_cgroup_procs().join(" "))
            .env(
                "KVRS_NS_SCRIPT",
                "set -e; while [ $# -gt 0 ]; do \
                 while mountpoint -q \"$2\"; do umount -R -l \"$2\"; done; \
                 mount --bind \"$1\" \"$2\"; mount --make-rshared \"$2\"; shift 2; done; \
                 echo ready; exec sleep infinity",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .map_err(io_err("starting the mount namespace's holder"))?;
        let mut line = String::new();
        let stdout = holder.stdout.take().expect("piped");
        let read = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        self.holder = Some(holder);
        if read.is_err() || line.trim() != "ready" {
            return Err(node_err(format!(
                "the second node's mount namespace did not come up: {}",
                tail_file(&log, LOG_TAIL_LINES)
            )));
        }
        write(
            &self.layout.dir().join("run/mount-namespace.pid"),
            &self.holder.as_ref().map_or(0, Child::id).to_string(),
        )
    }

    /// The `cgroup.procs` files of the node's `runtime` cgroup, one per hierarchy.
    fn runtime_cgroup_procs(&self) -> Vec<String> {
        cgroup_hierarchies()
            .iter()
            .map(|h| {
                h.join(self.layout.cgroup)
                    .join("runtime/cgroup.procs")
                    .display()
                    .to_string()
            })
            .collect()
    }

    fn spawn_watchdog(&self) -> Result<Child, ClusterError> {
        Command::new("sh")
            .arg("-c")
            .arg(
                "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; shift; \
                 exec sh -c \"$KVRS_NODE_TEARDOWN\" node-teardown \"$@\"",
            )
            .arg("kvrs-node-watchdog")
            .arg(std::process::id().to_string())
            .args(teardown_args(&self.layout, &self.sysctls))
            .envs(self.teardown_env(&self.layout))
            .env("KVRS_NODE_TEARDOWN", TEARDOWN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(io_err("starting the node's watchdog shell"))
    }

    fn write_configs(&self, cluster: &TestCluster) -> Result<(), ClusterError> {
        let layout = self.layout;
        let config = layout.config_dir();
        let ca = config.join("ca.crt");
        fs::copy(cluster.ca_cert_path(), &ca).map_err(io_err("copying the cluster CA"))?;
        write_kubeconfig(
            &config.join("kubeconfig"),
            cluster.server_url(),
            Some(&ca),
            Some(cluster.admin_token()),
        )
        .map_err(io_err("writing the node's kubeconfig"))?;
        let bin = self.bin_dir.display();
        let dir = layout.dir;
        let stream_port = layout.stream_port;
        // With Multus, containerd also searches the multus binary's own directory.
        let cni_bin_dirs = std::iter::once(self.bin_dir.join("cni"))
            .chain(self.multus.iter().map(|m| m.bin_dir().to_path_buf()))
            .map(|d| format!("'{}'", d.display()))
            .collect::<Vec<_>>()
            .join(", ");
        let containerd = format!(
            r#"# kvrs-test-cluster RealNode (see tests/cluster/src/node.rs for every setting's reason)
version = 4
root = '{dir}/containerd/root'
state = '{dir}/containerd/state'
imports = []

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '{dir}/containerd/containerd.sock'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '{dir}/containerd/containerd.sock.ttrpc'
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '{dir}/s'
  [plugins.'io.containerd.internal.v1.opt']
    path = '{dir}/containerd/opt'
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '{stream_port}'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{PAUSE_IMAGE}'
  [plugins.'io.containerd.cri.v1.runtime']
    device_ownership_from_security_context = true
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{bin}/runc'
          Root = '{dir}/containerd/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [{cni_bin_dirs}]
      conf_dir = '{dir}/cni/net.d'
"#
        );
        write(&config.join("containerd.toml"), &containerd)?;
        let cni = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": layout.cni_network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": layout.bridge,
                    "isGateway": true,
                    "isDefaultGateway": true,
                    "ipMasq": false,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{
                            "subnet": layout.subnet,
                            "rangeStart": layout.range_start,
                            "gateway": layout.ip.to_string(),
                        }]],
                        "dataDir": format!("{dir}/cni/ipam"),
                    },
                },
                { "type": "portmap", "capabilities": { "portMappings": true }, "backend": "nftables" },
            ],
        });
        write(
            &layout.dir().join("cni/net.d/10-kvrs.conflist"),
            &serde_json::to_string_pretty(&cni).expect("JSON"),
        )?;
        if self.multus.is_some() {
            write(
                &layout.dir().join(crate::multus::DEFAULT_DELEGATE),
                &serde_json::to_string_pretty(&crate::multus::default_delegate(&cni))
                    .expect("JSON"),
            )?;
            let conf = crate::multus::multus_conf(&layout, &self.bin_dir.join("cni"));
            write(
                &layout
                    .dir()
                    .join("cni/net.d")
                    .join(crate::multus::MULTUS_CONF),
                &serde_json::to_string_pretty(&conf).expect("JSON"),
            )?;
        }
        let kubelet = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": format!("/{}", layout.cgroup),
            "containerRuntimeEndpoint": format!("unix://{}", layout.containerd_socket().display()),
            "address": layout.ip.to_string(),
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": layout.kubelet_healthz_port,
            "authentication": {
                "anonymous": { "enabled": false },
                "webhook": { "enabled": true },
                "x509": { "clientCAFile": ca },
            },
            "authorization": { "mode": "Webhook" },
            "failSwapOn": false,
            "oomScoreAdj": 0,
            "shutdownGracePeriod": "0s",
            "shutdownGracePeriodCriticalPods": "0s",
            "podLogsDir": format!("{dir}/pod-logs"),
            "volumePluginDir": format!("{dir}/kubelet-plugins/volume/exec"),
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "512Mi",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "512Mi",
            },
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": false,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
        });
        write(
            &config.join("kubelet.yaml"),
            &serde_json::to_string_pretty(&kubelet).expect("JSON"),
        )?;
        let proxy = serde_json::json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "clientConnection": { "kubeconfig": config.join("kubeconfig") },
            "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP.to_string(),
            "healthzBindAddress": format!("127.0.0.1:{KUBE_PROXY_HEALTHZ_PORT}"),
            "metricsBindAddress": format!("127.0.0.1:{KUBE_PROXY_METRICS_PORT}"),
            "clusterCIDR": POD_SUBNET,
            "detectLocalMode": "ClusterCIDR",
            "oomScoreAdj": 0,
            "nodePortAddresses": [format!("{NODE_IP}/32")],
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "nftables": { "syncPeriod": "30s", "minSyncPeriod": "0s" },
        });
        write(
            &config.join("kube-proxy.yaml"),
            &serde_json::to_string_pretty(&proxy).expect("JSON"),
        )?;
        Ok(())
    }

    fn start_containerd(&mut self) -> Result<(), ClusterError> {
        let args = vec![
            "--config".to_owned(),
            self.layout
                .config_dir()
                .join("containerd.toml")
                .display()
                .to_string(),
        ];
        self.containerd = Some(self.spawn(NodeComponent::Containerd, &args)?);
        self.wait_ready(
            NodeComponent::Containerd,
            CONTAINERD_READY_TIMEOUT,
            |node| {
                let out = node.ctr(["version"]);
                if out.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
                }
            },
        )
    }

    fn start_kubelet(&mut self) -> Result<(), ClusterError> {
        let config = self.layout.config_dir();
        let name = self.layout.name;
        let args = vec![
            format!("--config={}", config.join("kubelet.yaml").display()),
            format!("--kubeconfig={}", config.join("kubeconfig").display()),
            // The second node's kubelet sees its own root there, in its mount namespace.
            format!("--root-dir={KUBELET_ROOT}"),
            format!("--hostname-override={name}"),
            format!("--node-ip={}", self.layout.ip),
            "--v=2".to_owned(),
        ];
        self.kubelet = Some(self.spawn(NodeComponent::Kubelet, &args)?);
        self.wait_ready(NodeComponent::Kubelet, NODE_READY_TIMEOUT, |node| {
            let out = node.kubectl([
                "get",
                "node",
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.status.conditions[?(@.type==\"Ready\")].message}",
            ]);
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if out.status.success() && text.starts_with("True") {
                Ok(())
            } else if out.status.success() {
                Err(format!("Node Ready condition: {text}"))
            } else {
                Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
            }
        })
    }

    fn start_kube_proxy(&mut self) -> Result<(), ClusterError> {
        let args = vec![
            format!(
                "--config={}",
                self.layout.config_dir().join("kube-proxy.yaml").display()
            ),
            "--v=2".to_owned(),
        ];
        self.kube_proxy = Some(self.spawn(NodeComponent::KubeProxy, &args)?);
        self.wait_ready(NodeComponent::KubeProxy, KUBE_PROXY_READY_TIMEOUT, |_| {
            match etcd_http(
                KUBE_PROXY_HEALTHZ_PORT,
                "GET",
                "/healthz",
                &serde_json::Value::Null,
            ) {
                Ok((200, _)) => {}
                Ok((status, body)) => return Err(format!("/healthz answered {status}: {body}")),
                Err(e) => return Err(e.to_string()),
            }
            // Synced: the `kubernetes` Service's ClusterIP is in kube-proxy's table.
            let out = Command::new("nft")
                .args(["list", "table", "ip", "kube-proxy"])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("running nft: {e}"))?;
            let rules = String::from_utf8_lossy(&out.stdout);
            if rules.contains("10.0.0.1") {
                Ok(())
            } else {
                Err("no rule for the kubernetes Service (10.0.0.1) yet".to_owned())
            }
        })
    }

    /// Starts `component` in cgroup `kvrs-node/runtime` of every hierarchy (a shell joins them,
    /// then execs the binary), logging to its file, its pid in `run/`.
    fn spawn(&self, component: NodeComponent, args: &[String]) -> Result<Child, ClusterError> {
        let program = match component {
            NodeComponent::Containerd => self.bin_dir.join("containerd"),
            NodeComponent::Kubelet => self.kube_bin_dir.join("kubelet"),
            NodeComponent::KubeProxy => self.kube_bin_dir.join("kube-proxy"),
        };
        let log = self.log_path(component);
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io_err(format!("opening {}", log.display())))?;
        let err = file
            .try_clone()
            .map_err(io_err("duplicating a log file handle"))?;
        let procs = self.runtime_cgroup_procs();
        let path = format!(
            "{}:{}",
            self.bin_dir.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".to_owned())
        );
        let child = self
            .in_node_ns("sh")
            .arg("-c")
            .arg(
                "for f in $KVRS_CGROUP_PROCS; do echo $$ > \"$f\" || exit 125; done; \
                 unset KVRS_CGROUP_PROCS; exec \"$@\"",
            )
            .arg(component.binary())
            .arg(&program)
            .args(args)
            .env("KVRS_CGROUP_PROCS", procs.join(" "))
            .env("PATH", path)
            .env_remove("KUBECONFIG")
            .current_dir(self.layout.dir)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(io_err(format!("starting {}", program.display())))?;
        write(
            &self
                .layout
                .dir()
                .join(format!("run/{}.pid", component.binary())),
            &child.id().to_string(),
        )?;
        Ok(child)
    }

    fn child_mut(&mut self, component: NodeComponent) -> Option<&mut Child> {
        match component {
            NodeComponent::Containerd => self.containerd.as_mut(),
            NodeComponent::Kubelet => self.kubelet.as_mut(),
            NodeComponent::KubeProxy => self.kube_proxy.as_mut(),
        }
    }

    /// Polls `check` until it passes, the process exits, or `timeout` runs out.
    fn wait_ready(
        &mut self,
        component: NodeComponent,
        timeout: Duration,
        check: impl Fn(&RealNode) -> Result<(), String>,
    ) -> Result<(), ClusterError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child_mut(component) {
                let exited = child
                    .try_wait()
                    .map_err(io_err(format!("waiting for {}", component.binary())))?;
                if let Some(status) = exited {
                    return Err(node_err(format!(
                        "{} exited ({status}); last lines of {}:\n{}",
                        component.binary(),
                        self.log_path(component).display(),
                        self.log_tail(component, LOG_TAIL_LINES)
                    )));
                }
            }
            let last = match check(self) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                return Err(node_err(format!(
                    "{} not ready within {timeout:?} (last check: {last}); last lines of {}:\n{}",
                    component.binary(),
                    self.log_path(component).display(),
                    self.log_tail(component, LOG_TAIL_LINES)
                )));
            }
            thread::sleep(Duration::from_millis(250));
        }
    }

    fn kubectl<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Command::new(self.kube_bin_dir.join("kubectl"))
            .arg(format!("--kubeconfig={}", self.kubeconfig_path().display()))
            .arg("--request-timeout=10s")
            .args(args)
            .env("KUBECACHEDIR", self.layout.dir().join("kubectl-cache"))
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running kubectl: {e}"))
    }

    // --- teardown ------------------------------------------------------------------------------

    /// The node's binaries by absolute path (for the teardown's stray-process sweep).
    fn exes(&self) -> String {
        let mut exes: Vec<PathBuf> = ["containerd", "containerd-shim-runc-v2", "runc"]
            .iter()
            .map(|b| self.bin_dir.join(b))
            .collect();
        exes.push(self.kube_bin_dir.join("kubelet"));
        exes.push(self.kube_bin_dir.join("kube-proxy"));
        exes.iter()
            .map(|p| {
                fs::canonicalize(p)
                    .unwrap_or_else(|_| p.clone())
                    .display()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The teardown script's settings for `layout`: the second node's sweep must not touch
    /// what the first node shares with it (the binaries' processes, kube-proxy's tables).
    fn teardown_env(&self, layout: &Layout) -> Vec<(&'static str, String)> {
        if layout.second() {
            vec![
                ("KVRS_NODE_EXES", String::new()),
                ("KVRS_NODE_NFT_TABLES", "none".to_owned()),
                ("KVRS_NODE_CNI_NETWORK", layout.cni_network.to_owned()),
                ("KVRS_NODE_OWN_BRIDGE", "1".to_owned()),
            ]
        } else {
            vec![
                ("KVRS_NODE_EXES", self.exes()),
                ("KVRS_NODE_CNI_NETWORK", layout.cni_network.to_owned()),
            ]
        }
    }

    /// Runs `node-teardown.sh` for `layout`; returns whether it reported success, and its
    /// messages.
    fn run_teardown_script(&self, layout: &Layout, sysctls: &[String]) -> (bool, String) {
        let out = Command::new("sh")
            .arg("-c")
            .arg(TEARDOWN)
            .arg("node-teardown")
            .args(teardown_args(layout, sysctls))
            .envs(self.teardown_env(layout))
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(out) => (
                out.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            ),
            Err(e) => (false, format!("running the teardown script: {e}")),
        }
    }

    fn teardown(&mut self) -> Result<(), ClusterError> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let panicking = thread::panicking();
        if panicking {
            for c in [
                NodeComponent::Containerd,
                NodeComponent::Kubelet,
                NodeComponent::KubeProxy,
            ] {
                let log = self.log_path(c);
                if log.exists() {
                    eprintln!(
                        "--- last lines of {} ---\n{}",
                        log.display(),
                        tail_file(&log, 15)
                    );
                }
            }
        }
        let keep = ["KVRS_KEEP_NODE_DIR", "KVRS_KEEP_CLUSTER_DIR"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
        if panicking || keep {
            keep_logs(&self.layout.logs_dir());
        }
        for child in [self.kube_proxy.take(), self.kubelet.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = stop_process(&mut child, STOP_GRACE);
        }
        // Without its kubelet the Node would linger NotReady with its pods; the pod garbage
        // collector removes those once the Node is gone.
        if self.kube_bin_dir.join("kubectl").exists() && self.kubeconfig_path().exists() {
            let _ = self.kubectl([
                "delete",
                "node",
                self.layout.name,
                "--ignore-not-found",
                "--wait=false",
            ]);
        }
        let (ok, messages) = self.run_teardown_script(&self.layout, &self.sysctls);
        for child in [self.containerd.take(), self.holder.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        self.claim.store(false, Ordering::SeqCst);
        // The second node's mount points on the machine (its mounts were in its namespace).
        // (One the first node's pods have written into stays: the first node removes it.)
        for path in self.made_paths.iter().rev() {
            let _ = fs::remove_dir(path);
        }
        let layout = self.layout;
        let leftovers = move || {
            if layout.second() {
                leftovers_of(&layout, false)
            } else {
                node_leftovers()
            }
        };
        // Killed processes are reaped by whoever inherited them (the shims' parent is init),
        // a moment after the teardown saw their cgroups empty.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut left = leftovers();
        while !left.is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(200));
            left = leftovers();
        }
        let extra = self
            .extra_paths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for path in &extra {
            if path.exists() {
                left.push(format!("path {}", path.display()));
            }
            for (mount_point, fstype) in mountinfo() {
                if Path::new(&mount_point).starts_with(path) {
                    left.push(format!("mount {mount_point} ({fstype})"));
                }
            }
        }
        for saved in &self.sysctls {
            let (key, want) = saved.split_once('=').expect("name=value");
            let now = fs::read_to_string(sysctl_path(key)).unwrap_or_default();
            if now.trim() != want {
                left.push(format!(
                    "kernel setting {key} is {} (was {want})",
                    now.trim()
                ));
            }
        }
        if ok && left.is_empty() {
            Ok(())
        } else {
            Err(node_err(format!(
                "teardown left something behind: {}{}",
                messages.trim(),
                left.iter().map(|l| format!("\n  {l}")).collect::<String>()
            )))
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("kvrs-test-cluster: {e}");
        }
    }
}

/// Copies the node's logs into a new `/tmp/kvrs-node-logs-*` directory that stays.
fn keep_logs(logs_dir: &Path) {
    let Ok(dir) = tempfile::Builder::new()
        .prefix("kvrs-node-logs-")
        .tempdir()
        .map(tempfile::TempDir::keep)
    else {
        return;
    };
    if let Ok(entries) = fs::read_dir(logs_dir) {
        for entry in entries.flatten() {
            let _ = fs::copy(entry.path(), dir.join(entry.file_name()));
        }
    }
    eprintln!(
        "kvrs-test-cluster: the node's logs are kept in {}",
        dir.display()
    );
}

/// The teardown script's arguments for `layout` (see `node-teardown.sh`).
fn teardown_args(layout: &Layout, sysctls: &[String]) -> Vec<String> {
    let mut args = vec![
        layout.dir.to_owned(),
        layout.kubelet_store.to_owned(),
        layout.cgroup.to_owned(),
        layout.bridge.to_owned(),
    ];
    args.extend(sysctls.iter().cloned());
    args
}

fn write(path: &Path, text: &str) -> Result<(), ClusterError> {
    fs::write(path, text).map_err(io_err(format!("writing {}", path.display())))
}

/// `path` with symlinks resolved as far as it exists (the rest appended as given).
fn canonical(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = fs::canonicalize(&existing) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

/// The mount points of the cgroup hierarchies under `/sys/fs/cgroup` (v1 and v2).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let mut found = BTreeSet::new();
    for line in mountinfo() {
        let (mount_point, fstype) = (&line.0, &line.1);
        if (fstype == "cgroup" || fstype == "cgroup2") && mount_point.starts_with("/sys/fs/cgroup/")
        {
            found.insert(PathBuf::from(mount_point));
        }
    }
    found.into_iter().collect()
}

/// (mount point, file system type) of every mount of this mount namespace.
fn mountinfo() -> Vec<(String, String)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            let mount_point = fields.get(4)?.replace("\\040", " ");
            Some((mount_point, (*fields.get(sep + 1)?).to_owned()))
        })
        .collect()
}

/// Everything of a node (either of the machine's two) still on this machine, one line each
/// (empty: nothing): processes of the node's binaries or in its cgroups, mounts under its
/// directories, its cgroups, pod veths on the bridges, `cni-*` network namespaces, kube-proxy's
/// and portmap's nftables tables, its directories and the kubelet's default ones,
/// `/var/log/containers` links into its pod logs, libcni's cached results for its networks in
/// `/var/lib/cni/results`, the second node's bridge. (The first node's bridge belongs to the
/// cluster: it goes when the cluster is dropped.)
pub fn node_leftovers() -> Vec<String> {
    let mut left = leftovers_of(&crate::node_layout::FIRST, true);
    left.extend(leftovers_of(&SECOND, false));
    left
}

/// What of the node of `layout` is still on this machine; `by_name` adds every process of the
/// node binaries' names wherever it runs (the second node's own check leaves those out: the
/// first node's daemons have the same names).
pub(crate) fn leftovers_of(layout: &Layout, by_name: bool) -> Vec<String> {
    let mut left = Vec::new();
    let names = [
        "containerd",
        "containerd-shim-runc-v2",
        "kubelet",
        "kube-proxy",
    ];
    let cgroup_name = layout.cgroup;
    if let Ok(procs) = fs::read_dir("/proc") {
        for entry in procs.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let exe = fs::read_link(entry.path().join("exe")).unwrap_or_default();
            let base = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let cgroup = fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
            let in_cgroup = cgroup.lines().any(|l| {
                l.contains(&format!(":/{cgroup_name}/")) || l.ends_with(&format!(":/{cgroup_name}"))
            });
            if (by_name && names.contains(&base)) || in_cgroup {
                let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                let comm = stat
                    .split_once(" (")
                    .and_then(|(_, rest)| rest.rsplit_once(") "))
                    .map_or("", |(comm, _)| comm);
                let state = stat
                    .rsplit_once(") ")
                    .map_or("", |(_, rest)| &rest[..1.min(rest.len())]);
                left.push(format!(
                    "process {pid} {comm} (state {state}, {})",
                    exe.display()
                ));
            }
        }
    }
    for (mount_point, fstype) in mountinfo() {
        let under = |dir: &str| mount_point == dir || mount_point.starts_with(&format!("{dir}/"));
        let first_only = !layout.second()
            && (under(KUBELET_ROOT)
                || under("/run/containerd")
                || mount_point.starts_with("/run/netns/cni-"));
        if under(layout.dir) || first_only {
            left.push(format!("mount {mount_point} ({fstype})"));
        }
    }
    for hierarchy in cgroup_hierarchies() {
        let dir = hierarchy.join(cgroup_name);
        if dir.exists() {
            left.push(format!("cgroup {}", dir.display()));
        }
    }
    let bridge = layout.bridge;
    if let Ok(ports) = fs::read_dir(Path::new("/sys/class/net").join(bridge).join("brif")) {
        for port in ports.flatten() {
            left.push(format!(
                "link {} on {bridge}",
                port.file_name().to_string_lossy()
            ));
        }
    }
    if layout.second() && link_exists(bridge) {
        left.push(format!("bridge {bridge}"));
    }
    if !layout.second() {
        if let Ok(netns) = fs::read_dir("/run/netns") {
            for ns in netns.flatten() {
                if ns.file_name().to_string_lossy().starts_with("cni-") {
                    left.push(format!("network namespace {}", ns.path().display()));
                }
            }
        }
        if let Ok(out) = Command::new("nft")
            .args(["list", "tables"])
            .stdin(Stdio::null())
            .output()
        {
            for table in String::from_utf8_lossy(&out.stdout).lines() {
                if table.ends_with(" kube-proxy") || table.ends_with(" cni_hostport") {
                    left.push(format!("nftables {table}"));
                }
            }
        }
    }
    let keep_dir = std::env::var_os("KVRS_KEEP_NODE_DIR").is_some_and(|v| !v.is_empty());
    let dirs: &[&str] = if layout.second() {
        &[layout.dir]
    } else {
        &[
            KUBELET_ROOT,
            NODE_DIR,
            "/run/containerd",
            "/opt/containerd",
            "/var/log/pods",
            "/usr/libexec/kubernetes",
            "/etc/cni/net.d",
            "/var/run/nri",
        ]
    };
    for dir in dirs {
        if Path::new(dir).exists() && !(keep_dir && *dir == layout.dir) {
            left.push(format!("directory {dir}"));
        }
    }
    let results_prefix = format!("{}-", layout.cni_network);
    if let Ok(results) = fs::read_dir("/var/lib/cni/results") {
        for result in results.flatten() {
            if result
                .file_name()
                .to_string_lossy()
                .starts_with(&results_prefix)
            {
                left.push(format!("CNI result {}", result.path().display()));
            }
        }
    }
    if let Ok(links) = fs::read_dir("/var/log/containers") {
        for link in links.flatten() {
            if fs::read_link(link.path()).is_ok_and(|t| t.starts_with(layout.dir)) {
                left.push(format!("link {}", link.path().display()));
            }
        }
    }
    left
}
