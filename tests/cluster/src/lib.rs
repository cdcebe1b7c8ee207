//! A real Kubernetes control plane for kvrs's end-to-end tests.
//!
//! [`TestCluster::start`] runs etcd and kube-apiserver (and, on request, kube-controller-manager
//! and kube-scheduler) built from the Go modules in `tests/kube` by `scripts/kube-components.sh`,
//! all on free loopback ports, with their certificates, keys, data and logs in one temporary
//! directory. The API server enforces RBAC, knows one static admin token (group
//! `system:masters`) and signs ServiceAccount tokens, so a test can run a controller with a
//! ServiceAccount token and see a missing permission fail as it would in a real cluster.
//!
//! Dropping the [`TestCluster`] kills every process it started and removes the directory
//! (kept, for a look at the logs, when `KVRS_KEEP_CLUSTER_DIR` is set to anything). The
//! processes share one process group led by a small watchdog shell that also kills the group
//! when the test process dies without unwinding (SIGKILL, abort), so nothing outlives a test run.
//!
//! The binaries come from `KVRS_KUBE_BIN` (a directory holding `etcd`, `kube-apiserver`,
//! `kube-controller-manager`, `kube-scheduler` and `kubectl`) when that is set, and otherwise
//! from running `scripts/kube-components.sh` (which builds them once into a cache). A missing
//! binary or a failed build is an error, never a skipped test.
//!
//! [`TestCluster::start_for_node`] starts the same control plane for a real node: the API server
//! listens on the bridge address pods reach, and [`RealNode::start`] joins containerd v2, runc,
//! the CNI plugins, the kubelet and kube-proxy to it, as node [`NODE_NAME`]. The [`node`]
//! module documents the node's layout, its teardown, and every kubelet, containerd and kube-proxy
//! setting this kernel and VM need, with the reason.
//!
//! The API server runs with `--watch-cache=false`, so watches are served by etcd and
//! [`TestCluster::compact_etcd`] makes a watch from an older resourceVersion fail with
//! `410 Gone` at once (with the watch cache, an old resourceVersion stays watchable until it
//! leaves the cache's window, whatever etcd compacted).
//!
//! ```no_run
//! use kvrs_test_cluster::{Options, TestCluster};
//!
//! let mut cluster = TestCluster::start(Options::full())?;
//! let out = cluster.kubectl(["get", "ns", "default"]);
//! assert!(out.status.success());
//! cluster.kubectl(["create", "serviceaccount", "ctrl", "-n", "default"]);
//! let token = cluster.service_account_token("default", "ctrl");
//! let kubeconfig = cluster.kubeconfig_for_token(&token); // for the controller under test
//! # let _ = kubeconfig;
//! cluster.restart_apiserver()?; // cuts every watch stream
//! cluster.compact_etcd()?; // older resourceVersions now answer 410 Gone
//! # Ok::<(), kvrs_test_cluster::ClusterError>(())
//! ```

use std::collections::hash_map::RandomState;
use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub mod multus;
pub mod node;
pub mod node_layout;
pub use multus::{Multus, locate_multus};
pub use node::{
    KUBELET_ROOT, NODE_BRIDGE, NODE_DIR, NODE_IP, NODE_NAME, NodeComponent, PAUSE_IMAGE,
    POD_SUBNET, RealNode, locate_node_binaries, node_leftovers, oci_archive,
};
pub use node_layout::{
    NodeSlot, SECOND_NODE_BRIDGE, SECOND_NODE_DIR, SECOND_NODE_IP, SECOND_NODE_NAME,
    SECOND_POD_SUBNET,
};

/// The Kubernetes release the binaries are built from (`tests/kube/go.mod`).
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// The names of the binaries a bin directory must hold (the node's `kubelet` and `kube-proxy`
/// are built with the control plane, from the same module set).
pub const BINARIES: [&str; 7] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "kube-proxy",
];

/// The Service CIDR given to kube-apiserver (addresses are only allocated, never reached).
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/24";

/// The ServiceAccount token issuer the API server uses.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(60);
const APISERVER_READY_TIMEOUT: Duration = Duration::from_secs(180);
const COMPONENT_READY_TIMEOUT: Duration = Duration::from_secs(120);
const APISERVER_STOP_GRACE: Duration = Duration::from_secs(10);
const POLL_INTERVAL: Duration = Duration::from_millis(250);
const LOG_TAIL_LINES: usize = 40;

/// A process of the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Component {
    /// etcd.
    Etcd,
    /// kube-apiserver.
    ApiServer,
    /// kube-controller-manager.
    ControllerManager,
    /// kube-scheduler.
    Scheduler,
}

impl Component {
    /// The binary's (and its log file's) name.
    pub fn binary(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.binary())
    }
}

/// Why a cluster could not be started or operated.
///
/// `Debug` prints the same text as `Display`, so `.expect()` in a test shows log tails with
/// their line breaks.
#[derive(thiserror::Error)]
pub enum ClusterError {
    /// The binaries are missing, or `scripts/kube-components.sh` failed to build them.
    #[error("Kubernetes binaries unavailable: {0}")]
    Binaries(String),
    /// A file system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A helper command (openssl, kubectl, kill) exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error (and output).
        stderr: String,
    },
    /// A CustomResourceDefinition was not Established in time.
    #[error("CRD {crd} not established within {timeout:?}")]
    CrdNotEstablished {
        /// The CRD's name.
        crd: String,
        /// How long it was waited for.
        timeout: Duration,
    },
    /// A component did not become healthy in time.
    #[error(
        "{component} did not become ready within {timeout:?} (last check: {last_check}); last lines of {}:\n{log_tail}",
        log.display()
    )]
    NotReady {
        /// The component.
        component: Component,
        /// How long it was waited for.
        timeout: Duration,
        /// What the last health check said.
        last_check: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A component exited while it should be running.
    #[error("{component} exited ({status}); last lines of {}:\n{log_tail}", log.display())]
    Exited {
        /// The component.
        component: Component,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A component was asked to start while it is running.
    #[error("{0} is already running")]
    AlreadyRunning(Component),
    /// etcd's HTTP gateway answered unexpectedly.
    #[error("etcd: {0}")]
    Etcd(String),
    /// The real node (containerd, kubelet, kube-proxy) could not be started, operated or torn
    /// down; the text says which step and carries the end of the relevant log.
    #[error("real node: {0}")]
    Node(String),
}

impl fmt::Debug for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl ClusterError {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        ClusterError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Which components to run besides etcd and kube-apiserver.
///
/// Without the controller manager nothing creates the `default` ServiceAccount of a namespace,
/// so the API server then runs without the `ServiceAccount` admission plugin (as envtest does),
/// and pods can still be created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Run kube-controller-manager (all its default controllers: garbage collector,
    /// namespace, serviceaccount, serviceaccount-token, root CA publisher, ...).
    pub controller_manager: bool,
    /// Run kube-scheduler.
    pub scheduler: bool,
}

impl Options {
    /// etcd and kube-apiserver only.
    pub fn apiserver_only() -> Self {
        Options::default()
    }

    /// Every component: controller manager and scheduler too.
    pub fn full() -> Self {
        Options {
            controller_manager: true,
            scheduler: true,
        }
    }
}

/// A running process with its log file.
#[derive(Debug)]
struct Proc {
    child: Child,
    log: PathBuf,
}

/// A running control plane; see the [crate documentation](crate).
#[derive(Debug)]
pub struct TestCluster {
    dir: tempfile::TempDir,
    bin_dir: PathBuf,
    options: Options,
    server_url: String,
    etcd_client_port: u16,
    ca_cert_pem: String,
    admin_token: String,
    admin_kubeconfig: PathBuf,
    apiserver_args: Vec<String>,
    watchdog: Option<Child>,
    pgid: u32,
    etcd: Option<Proc>,
    apiserver: Option<Proc>,
    controller_manager: Option<Proc>,
    scheduler: Option<Proc>,
    kubeconfig_counter: AtomicU64,
    started_in: Duration,
    /// Set by [`start_for_node`](Self::start_for_node): the machine-wide node lock and the
    /// bridge the API server listens on.
    node_network: Option<node::NodeNetwork>,
}

impl TestCluster {
    /// Starts etcd and kube-apiserver, plus the components `options` asks for, and waits until
    /// each is healthy (`/readyz` for the API server, `/healthz` for the others).
    ///
    /// Fails if the binaries are missing or cannot be built, or a component does not become
    /// ready in time (the error carries the end of its log).
    pub fn start(options: Options) -> Result<TestCluster, ClusterError> {
        Self::start_inner(options, None)
    }

    /// Like [`start`](Self::start), for a cluster a [`RealNode`] joins: first takes the
    /// machine-wide node lock (waiting while another such cluster runs), creates the bridge
    /// [`NODE_BRIDGE`] with the host address [`NODE_IP`] (`/24` of [`POD_SUBNET`]), and runs
    /// kube-apiserver on that address instead of 127.0.0.1, so pods reach it: its
    /// [`server_url`](Self::server_url) is `https://10.252.0.1:PORT`, it advertises that address
    /// (the `kubernetes` Service's EndpointSlice points there, which kube-proxy then routes the
    /// Service's ClusterIP to), and it authenticates to the kubelet with a client certificate
    /// of group `system:masters` (for `kubectl logs` and `exec`). Nothing listens outside this
    /// machine. Dropping the cluster removes the bridge and releases the lock.
    pub fn start_for_node(options: Options) -> Result<TestCluster, ClusterError> {
        let network = node::NodeNetwork::create()?;
        Self::start_inner(options, Some(network))
    }

    /// Whether the cluster was started with [`start_for_node`](Self::start_for_node).
    pub fn is_for_node(&self) -> bool {
        self.node_network.is_some()
    }

    fn start_inner(
        options: Options,
        node_network: Option<node::NodeNetwork>,
    ) -> Result<TestCluster, ClusterError> {
        let begun = Instant::now();
        let bin_dir = locate_binaries()?;
        let dir = tempfile::Builder::new()
            .prefix("kvrs-cluster-")
            .tempdir()
            .map_err(|e| ClusterError::io("creating the cluster's temporary directory", e))?;
        let root = dir.path().to_path_buf();
        for sub in ["logs", "pki", "kubeconfigs", "kubectl-cache"] {
            fs::create_dir_all(root.join(sub))
                .map_err(|e| ClusterError::io(format!("creating {sub}/"), e))?;
        }

        let watchdog = spawn_watchdog(&root, node_network.is_some())?;
        let pgid = watchdog.id();
        let mut cluster = TestCluster {
            dir,
            bin_dir,
            options,
            server_url: String::new(),
            etcd_client_port: 0,
            ca_cert_pem: String::new(),
            admin_token: random_hex(32),
            admin_kubeconfig: root.join("kubeconfigs/admin.kubeconfig"),
            apiserver_args: Vec::new(),
            watchdog: Some(watchdog),
            pgid,
            etcd: None,
            apiserver: None,
            controller_manager: None,
            scheduler: None,
            kubeconfig_counter: AtomicU64::new(0),
            started_in: Duration::ZERO,
            node_network,
        };
        // From here on, an error drops `cluster`, which kills whatever was started.
        cluster.generate_pki()?;
        cluster.start_etcd()?;
        cluster.prepare_apiserver()?;
        cluster.start_apiserver()?;
        if options.controller_manager {
            cluster.start_controller_manager()?;
        }
        if options.scheduler {
            cluster.start_scheduler()?;
        }
        cluster.started_in = begun.elapsed();
        Ok(cluster)
    }

    /// The API server's URL, `https://127.0.0.1:PORT`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The PEM of the CA that signed the API server's serving certificate.
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The CA certificate's file.
    pub fn ca_cert_path(&self) -> PathBuf {
        self.pki("ca.crt")
    }

    /// A bearer token of user `kvrs-admin` in group `system:masters`.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A kube-apiserver and etcd alone, with namespace `ns` created: what a test of one
    /// client's writes needs. Panics, saying why, if either cannot be had.
    pub fn apiserver_with_namespace(ns: &str) -> TestCluster {
        let cluster =
            Self::start(Options::apiserver_only()).expect("a real kube-apiserver and etcd");
        let out = cluster.kubectl(["create", "namespace", ns]);
        assert!(out.status.success(), "creating namespace {ns}: {out:?}");
        cluster
    }

    /// A kubeconfig file (server, CA file, admin token) for the admin.
    pub fn admin_kubeconfig_path(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// Writes a new kubeconfig file for this cluster that authenticates with `token` (for
    /// instance a [ServiceAccount token](Self::service_account_token)) and returns its path.
    ///
    /// # Panics
    /// If the file cannot be written.
    pub fn kubeconfig_for_token(&self, token: &str) -> PathBuf {
        let n = self.kubeconfig_counter.fetch_add(1, Ordering::Relaxed);
        let path = self
            .root()
            .join(format!("kubeconfigs/token-{n}.kubeconfig"));
        write_kubeconfig(
            &path,
            &self.server_url,
            Some(&self.ca_cert_path()),
            Some(token),
        )
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// Runs the cluster's kubectl with the admin kubeconfig and `args`, and returns its output.
    ///
    /// # Panics
    /// If kubectl cannot be run at all (its failures are in the returned status).
    pub fn kubectl<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_with_kubeconfig(&self.admin_kubeconfig, args)
    }

    /// `method` on the API server's `path` with `body` of `content_type`, as the admin, through
    /// curl (kubectl would reformat a refusal's causes): the HTTP code and the JSON answer
    /// (`null` when the answer is no JSON).
    ///
    /// # Panics
    /// If curl cannot be run or prints no status code.
    pub fn admin_request(
        &self,
        method: &str,
        content_type: &str,
        path: &str,
        body: &str,
    ) -> (u16, serde_json::Value) {
        let out = Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}", "-X", method, "--cacert"])
            .arg(self.ca_cert_path())
            .arg("-H")
            .arg(format!("Content-Type: {content_type}"))
            .arg("-H")
            .arg(format!("Authorization: Bearer {}", self.admin_token()))
            .args(["--data-binary", "@-"])
            .arg(format!("{}{path}", self.server_url()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(body.as_bytes())?;
                }
                child.wait_with_output()
            })
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (json, code) = text.rsplit_once('\n').expect("a status code line");
        (
            code.trim().parse().unwrap_or(0),
            serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
        )
    }

    /// `kubectl apply -f path` (a file or a directory), failing with kubectl's stderr.
    pub fn apply_path(&self, path: &Path) -> Result<(), ClusterError> {
        let out = self.kubectl([OsStr::new("apply"), OsStr::new("-f"), path.as_os_str()]);
        if out.status.success() {
            return Ok(());
        }
        Err(ClusterError::Command {
            command: format!("kubectl apply -f {}", path.display()),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Applies KubeVirt's CRDs from `deploy_dir/crds` (kvrs's `bins/deploy`) and waits until
    /// the VirtualMachine and VirtualMachineInstance CRDs are Established.
    pub fn install_kubevirt_crds(&self, deploy_dir: &Path) -> Result<(), ClusterError> {
        self.apply_path(&deploy_dir.join("crds"))?;
        self.wait_for_crds(
            &[
                "virtualmachines.kubevirt.io",
                "virtualmachineinstances.kubevirt.io",
            ],
            Duration::from_secs(60),
        )
    }

    /// Waits until each CRD in `names` is Established (`kubectl wait` fails on a CRD whose
    /// status is not written yet, so this polls).
    pub fn wait_for_crds(&self, names: &[&str], timeout: Duration) -> Result<(), ClusterError> {
        let start = std::time::Instant::now();
        for crd in names {
            loop {
                let out = self.kubectl([
                    "get",
                    "crd",
                    crd,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
                ]);
                if out.stdout == b"True" {
                    break;
                }
                if start.elapsed() > timeout {
                    return Err(ClusterError::CrdNotEstablished {
                        crd: (*crd).to_string(),
                        timeout,
                    });
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(())
    }

    /// Like [`kubectl`](Self::kubectl), but writes `stdin` to kubectl's standard input
    /// (for `kubectl apply -f -`).
    ///
    /// # Panics
    /// If kubectl cannot be run at all.
    pub fn kubectl_with_stdin<I, S>(&self, args: I, stdin: &str) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.kubectl_command(&self.admin_kubeconfig);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin("kubectl").display()));
        let mut pipe = child.stdin.take().expect("piped stdin");
        let input = stdin.to_owned();
        let writer = thread::spawn(move || {
            // kubectl may exit before reading everything; its status tells.
            let _ = pipe.write_all(input.as_bytes());
        });
        let output = child.wait_with_output().expect("waiting for kubectl");
        let _ = writer.join();
        output
    }

    /// Runs the cluster's kubectl with `kubeconfig` (for instance one from
    /// [`kubeconfig_for_token`](Self::kubeconfig_for_token)) and `args`.
    ///
    /// # Panics
    /// If kubectl cannot be run at all.
    pub fn kubectl_with_kubeconfig<I, S>(&self, kubeconfig: &Path, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_command(kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin("kubectl").display()))
    }

    /// A token for ServiceAccount `namespace/name` (which must exist), valid for an hour, from
    /// `kubectl create token`.
    ///
    /// # Panics
    /// If kubectl fails (for instance when the ServiceAccount does not exist).
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let out = self.kubectl(["create", "token", name, "-n", namespace, "--duration=1h"]);
        assert!(
            out.status.success(),
            "kubectl create token {name} -n {namespace} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Stops kube-apiserver (SIGTERM, then SIGKILL after a grace period), cutting every watch
    /// stream. etcd and its data stay. Does nothing if it is not running.
    pub fn stop_apiserver(&mut self) -> Result<(), ClusterError> {
        if let Some(mut proc) = self.apiserver.take() {
            stop_process(&mut proc.child, APISERVER_STOP_GRACE)?;
        }
        Ok(())
    }

    /// Starts kube-apiserver again (same port, flags and certificates) and waits for
    /// `/readyz`. Fails with [`ClusterError::AlreadyRunning`] if it runs.
    pub fn start_apiserver(&mut self) -> Result<(), ClusterError> {
        if self.apiserver.is_some() {
            return Err(ClusterError::AlreadyRunning(Component::ApiServer));
        }
        let proc = self.spawn(Component::ApiServer, &self.apiserver_args.clone())?;
        self.apiserver = Some(proc);
        self.wait_ready(Component::ApiServer, APISERVER_READY_TIMEOUT, |c| {
            c.apiserver_readyz()
        })
    }

    /// [`stop_apiserver`](Self::stop_apiserver), then [`start_apiserver`](Self::start_apiserver).
    pub fn restart_apiserver(&mut self) -> Result<(), ClusterError> {
        self.stop_apiserver()?;
        self.start_apiserver()
    }

    /// Whether kube-apiserver is running (it is, unless [stopped](Self::stop_apiserver)).
    pub fn apiserver_running(&self) -> bool {
        self.apiserver.is_some()
    }

    /// Compacts etcd to its current revision (physically) through etcd's HTTP gateway and
    /// returns that revision: a watch from any older resourceVersion then fails with
    /// `410 Gone` ("too old resource version").
    pub fn compact_etcd(&self) -> Result<i64, ClusterError> {
        let revision = self.etcd_revision()?;
        let body = serde_json::json!({ "revision": revision.to_string(), "physical": true });
        let (status, text) = etcd_http(self.etcd_client_port, "POST", "/v3/kv/compaction", &body)?;
        if status != 200 {
            return Err(ClusterError::Etcd(format!(
                "compaction to revision {revision} answered {status}: {text}"
            )));
        }
        Ok(revision)
    }

    /// etcd's current revision (which is the newest resourceVersion of the cluster).
    pub fn etcd_revision(&self) -> Result<i64, ClusterError> {
        // A range over one (absent) key returns the store's header revision.
        let body = serde_json::json!({ "key": "AA==" });
        let (status, text) = etcd_http(self.etcd_client_port, "POST", "/v3/kv/range", &body)?;
        if status != 200 {
            return Err(ClusterError::Etcd(format!(
                "range answered {status}: {text}"
            )));
        }
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ClusterError::Etcd(format!("range answer {text:?}: {e}")))?;
        let revision = &value["header"]["revision"];
        revision
            .as_str()
            .and_then(|s| s.parse().ok())
            .or_else(|| revision.as_i64())
            .ok_or_else(|| ClusterError::Etcd(format!("no header.revision in {text}")))
    }

    /// etcd's client URL, `http://127.0.0.1:PORT` (plain HTTP, no authentication).
    pub fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_client_port)
    }

    /// The log file of `component` (stdout and stderr; restarts append).
    pub fn log_path(&self, component: Component) -> PathBuf {
        self.root()
            .join("logs")
            .join(format!("{}.log", component.binary()))
    }

    /// The directory of every component's log.
    pub fn logs_dir(&self) -> PathBuf {
        self.root().join("logs")
    }

    /// The last `lines` lines of `component`'s log.
    pub fn log_tail(&self, component: Component, lines: usize) -> String {
        tail_file(&self.log_path(component), lines)
    }

    /// The cluster's temporary directory (certificates, data, logs, kubeconfigs); removed on
    /// drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The directory of the binaries in use.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> Options {
        self.options
    }

    /// How long [`start`](Self::start) took (binaries already built or not).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The ids of the running processes (for checks that nothing leaks).
    pub fn pids(&self) -> Vec<u32> {
        [
            &self.etcd,
            &self.apiserver,
            &self.controller_manager,
            &self.scheduler,
        ]
        .into_iter()
        .flatten()
        .map(|p| p.child.id())
        .collect()
    }

    // --- internals --------------------------------------------------------------------------

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn pki(&self, name: &str) -> PathBuf {
        self.root().join("pki").join(name)
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    fn kubectl_command(&self, kubeconfig: &Path) -> Command {
        let mut cmd = Command::new(self.bin("kubectl"));
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .env("KUBECACHEDIR", self.root().join("kubectl-cache"))
            .env_remove("KUBECONFIG");
        cmd
    }

    fn generate_pki(&mut self) -> Result<(), ClusterError> {
        let pki = self.root().join("pki");
        let server_ext = pki.join("server.ext");
        fs::write(
            &server_ext,
            "basicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth,clientAuth\n\
             subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,\
             DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.0.0.1,\
             IP:10.252.0.1\n",
        )
        .map_err(|e| ClusterError::io("writing server.ext", e))?;
        let p = |n: &str| pki.join(n).display().to_string();
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.crt"),
            "-days",
            "3650",
            "-subj",
            "/CN=kvrs-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ])?;
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &p("server.key"),
            "-out",
            &p("server.csr"),
            "-subj",
            "/CN=kube-apiserver",
        ])?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-set_serial",
            "2",
            "-days",
            "3650",
            "-extfile",
            &p("server.ext"),
            "-out",
            &p("server.crt"),
        ])?;
        openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &p("sa.key"),
        ])?;
        openssl(&["pkey", "-in", &p("sa.key"), "-pubout", "-out", &p("sa.pub")])?;
        // Client certificates signed by the cluster CA: `NAME.key`, `NAME.crt` for `subject`.
        fs::write(
            pki.join("client.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=clientAuth\n",
        )
        .map_err(|e| ClusterError::io("writing client.ext", e))?;
        let client_cert = |name: &str, subject: &str, serial: &str| -> Result<(), ClusterError> {
            let (key, csr, crt) = (
                p(&format!("{name}.key")),
                p(&format!("{name}.csr")),
                p(&format!("{name}.crt")),
            );
            openssl(&[
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
                subject,
            ])?;
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &p("ca.crt"),
                "-CAkey",
                &p("ca.key"),
                "-set_serial",
                serial,
                "-days",
                "3650",
                "-extfile",
                &p("client.ext"),
                "-out",
                &crt,
            ])
        };
        // The aggregator's client certificate towards aggregated API servers (virt-api's
        // subresources): signed by the requestheader CA, named as the allowed name says.
        client_cert("proxy-client", "/CN=front-proxy-client", "4")?;
        if self.node_network.is_some() {
            // The API server's client certificate towards the kubelet (logs, exec, port-forward).
            client_cert(
                "kubelet-client",
                "/O=system:masters/CN=kvrs-apiserver-kubelet-client",
                "3",
            )?;
        }
        self.ca_cert_pem = fs::read_to_string(pki.join("ca.crt"))
            .map_err(|e| ClusterError::io("reading ca.crt", e))?;
        fs::write(
            pki.join("tokens.csv"),
            format!(
                "{},kvrs-admin,kvrs-admin-uid,\"system:masters\"\n",
                self.admin_token
            ),
        )
        .map_err(|e| ClusterError::io("writing tokens.csv", e))?;
        Ok(())
    }

    fn start_etcd(&mut self) -> Result<(), ClusterError> {
        let client = free_port()?;
        let peer = free_port()?;
        self.etcd_client_port = client;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let args = vec![
            "--name=kvrs-test".to_owned(),
            format!("--data-dir={}", self.root().join("etcd").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=kvrs-test={peer_url}"),
            "--initial-cluster-state=new".to_owned(),
            "--unsafe-no-fsync".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        self.etcd = Some(self.spawn(Component::Etcd, &args)?);
        self.wait_ready(Component::Etcd, ETCD_READY_TIMEOUT, |c| {
            let empty = serde_json::Value::Null;
            match etcd_http(c.etcd_client_port, "GET", "/health", &empty) {
                Ok((200, body)) if body.contains("\"true\"") => Ok(()),
                Ok((status, body)) => Err(format!("/health answered {status}: {body}")),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn prepare_apiserver(&mut self) -> Result<(), ClusterError> {
        let port = free_port()?;
        let address = if self.node_network.is_some() {
            NODE_IP
        } else {
            Ipv4Addr::LOCALHOST
        };
        self.server_url = format!("https://{address}:{port}");
        write_kubeconfig(
            &self.admin_kubeconfig,
            &self.server_url,
            Some(&self.pki("ca.crt")),
            Some(&self.admin_token),
        )
        .map_err(|e| ClusterError::io("writing the admin kubeconfig", e))?;
        let p = |n: &str| self.pki(n).display().to_string();
        let mut args = vec![
            format!("--etcd-servers={}", self.etcd_url()),
            format!("--bind-address={address}"),
            format!("--advertise-address={address}"),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", p("")),
            format!("--tls-cert-file={}", p("server.crt")),
            format!("--tls-private-key-file={}", p("server.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            // The front-proxy settings components read from extension-apiserver-authentication.
            format!("--requestheader-client-ca-file={}", p("ca.crt")),
            "--requestheader-allowed-names=front-proxy-client".to_owned(),
            "--requestheader-username-headers=X-Remote-User".to_owned(),
            "--requestheader-group-headers=X-Remote-Group".to_owned(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
            // The aggregator proxies with this certificate, to the APIService's endpoints (a
            // test serves an aggregated API on a local address, there is no kube-proxy).
            format!("--proxy-client-cert-file={}", p("proxy-client.crt")),
            format!("--proxy-client-key-file={}", p("proxy-client.key")),
            "--enable-aggregator-routing=true".to_owned(),
            format!("--token-auth-file={}", p("tokens.csv")),
            "--authorization-mode=RBAC".to_owned(),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--allow-privileged=true".to_owned(),
            // Watches are served by etcd, so compaction expires old resourceVersions at once.
            "--watch-cache=false".to_owned(),
            // On SIGTERM, close open watches within 2 s instead of waiting for them to end.
            "--shutdown-watch-termination-grace-period=2s".to_owned(),
            "--v=1".to_owned(),
        ];
        if self.node_network.is_some() {
            // The `kubernetes` Service's endpoint is this address (lease reconciler, the default).
            args.push(format!(
                "--kubelet-client-certificate={}",
                p("kubelet-client.crt")
            ));
            args.push(format!("--kubelet-client-key={}", p("kubelet-client.key")));
            args.push("--kubelet-preferred-address-types=InternalIP".to_owned());
        } else {
            // Endpoints may not hold a loopback address: leave the `kubernetes` Service without.
            args.push("--endpoint-reconciler-type=none".to_owned());
        }
        if !self.options.controller_manager {
            args.push("--disable-admission-plugins=ServiceAccount".to_owned());
        }
        self.apiserver_args = args;
        Ok(())
    }

    fn start_controller_manager(&mut self) -> Result<(), ClusterError> {
        let port = free_port()?;
        let admin = self.admin_kubeconfig.display().to_string();
        let p = |n: &str| self.pki(n).display().to_string();
        let args = vec![
            format!("--kubeconfig={admin}"),
            format!("--authentication-kubeconfig={admin}"),
            format!("--authorization-kubeconfig={admin}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!(
                "--cert-dir={}",
                self.root().join("controller-manager").display()
            ),
            "--leader-elect=false".to_owned(),
            "--controllers=*".to_owned(),
            format!("--service-account-private-key-file={}", p("sa.key")),
            format!("--root-ca-file={}", p("ca.crt")),
            format!("--cluster-signing-cert-file={}", p("ca.crt")),
            format!("--cluster-signing-key-file={}", p("ca.key")),
            "--use-service-account-credentials=false".to_owned(),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            // Else it creates /usr/libexec/kubernetes/kubelet-plugins/volume/exec on the host.
            format!(
                "--flex-volume-plugin-dir={}",
                self.root().join("controller-manager/flexvolume").display()
            ),
            "--v=1".to_owned(),
        ];
        self.controller_manager = Some(self.spawn(Component::ControllerManager, &args)?);
        self.wait_component_healthz(Component::ControllerManager, port)
    }

    fn start_scheduler(&mut self) -> Result<(), ClusterError> {
        let port = free_port()?;
        let admin = self.admin_kubeconfig.display().to_string();
        let args = vec![
            format!("--kubeconfig={admin}"),
            format!("--authentication-kubeconfig={admin}"),
            format!("--authorization-kubeconfig={admin}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", self.root().join("scheduler").display()),
            "--leader-elect=false".to_owned(),
            "--v=1".to_owned(),
        ];
        self.scheduler = Some(self.spawn(Component::Scheduler, &args)?);
        self.wait_component_healthz(Component::Scheduler, port)
    }

    /// Waits for `/healthz` of a component serving a self-signed certificate on `port`.
    fn wait_component_healthz(
        &mut self,
        component: Component,
        port: u16,
    ) -> Result<(), ClusterError> {
        let kubeconfig = self.root().join(format!(
            "kubeconfigs/{}-healthz.kubeconfig",
            component.binary()
        ));
        // The admin token (checked by the component through a TokenReview): with no
        // credentials at all kubectl would prompt for a user name.
        write_kubeconfig(
            &kubeconfig,
            &format!("https://127.0.0.1:{port}"),
            None,
            Some(&self.admin_token),
        )
        .map_err(|e| ClusterError::io("writing a healthz kubeconfig", e))?;
        self.wait_ready(component, COMPONENT_READY_TIMEOUT, |c| {
            let out = c.kubectl_with_kubeconfig(&kubeconfig, ["get", "--raw", "/healthz"]);
            check_ok(&out)
        })
    }

    fn apiserver_readyz(&self) -> Result<(), String> {
        check_ok(&self.kubectl(["get", "--raw", "/readyz"]))
    }

    fn proc_mut(&mut self, component: Component) -> Option<&mut Proc> {
        match component {
            Component::Etcd => self.etcd.as_mut(),
            Component::ApiServer => self.apiserver.as_mut(),
            Component::ControllerManager => self.controller_manager.as_mut(),
            Component::Scheduler => self.scheduler.as_mut(),
        }
    }

    /// Polls `check` until it passes, the process exits, or `timeout` runs out.
    fn wait_ready(
        &mut self,
        component: Component,
        timeout: Duration,
        check: impl Fn(&TestCluster) -> Result<(), String>,
    ) -> Result<(), ClusterError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(proc) = self.proc_mut(component) {
                let exited = proc
                    .child
                    .try_wait()
                    .map_err(|e| ClusterError::io(format!("waiting for {component}"), e))?;
                if let Some(status) = exited {
                    let log = proc.log.clone();
                    return Err(ClusterError::Exited {
                        component,
                        status: status.to_string(),
                        log_tail: tail_file(&log, LOG_TAIL_LINES),
                        log,
                    });
                }
            }
            let last = match check(self) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                let log = self.log_path(component);
                return Err(ClusterError::NotReady {
                    component,
                    timeout,
                    last_check: last,
                    log_tail: tail_file(&log, LOG_TAIL_LINES),
                    log,
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Starts `component` in the cluster's process group, its output appended to its log.
    fn spawn(&self, component: Component, args: &[String]) -> Result<Proc, ClusterError> {
        let log = self.log_path(component);
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| ClusterError::io(format!("opening {}", log.display()), e))?;
        let err = file
            .try_clone()
            .map_err(|e| ClusterError::io("duplicating a log file handle", e))?;
        let child = Command::new(self.bin(component.binary()))
            .args(args)
            .current_dir(self.root())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .process_group(i32::try_from(self.pgid).expect("a process group id is a pid_t"))
            .spawn()
            .map_err(|e| {
                ClusterError::io(
                    format!("starting {}", self.bin(component.binary()).display()),
                    e,
                )
            })?;
        Ok(Proc { child, log })
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if thread::panicking() {
            for c in [
                Component::Etcd,
                Component::ApiServer,
                Component::ControllerManager,
                Component::Scheduler,
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
        // The whole group at once (watchdog included), then each child by pid, and reap all.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.pgid)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let procs = [
            self.scheduler.take(),
            self.controller_manager.take(),
            self.apiserver.take(),
            self.etcd.take(),
        ];
        for mut proc in procs.into_iter().flatten() {
            let _ = proc.child.kill();
            let _ = proc.child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        // The bridge goes and the machine-wide node lock is released.
        self.node_network.take();
        if std::env::var_os("KVRS_KEEP_CLUSTER_DIR").is_some_and(|v| !v.is_empty()) {
            self.dir.disable_cleanup(true);
            eprintln!("kvrs-test-cluster: kept {}", self.dir.path().display());
        }
        // Otherwise `self.dir` (a TempDir) removes the directory when it drops, right after this.
    }
}

// --- binaries ------------------------------------------------------------------------------

/// The directory holding the five binaries: `KVRS_KUBE_BIN` if set (checked, never built),
/// else the output of `scripts/kube-components.sh` (which builds them on first use; run once
/// per test process).
pub fn locate_binaries() -> Result<PathBuf, ClusterError> {
    if let Some(dir) = std::env::var_os("KVRS_KUBE_BIN") {
        let dir = PathBuf::from(dir);
        check_bin_dir(&dir).map_err(|e| ClusterError::Binaries(format!("KVRS_KUBE_BIN: {e}")))?;
        return Ok(dir);
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = run_components_script("kube-components.sh")?;
            check_bin_dir(&dir)?;
            Ok(dir)
        })
        .clone()
        .map_err(ClusterError::Binaries)
}

/// The workspace root: the nearest ancestor of this crate holding `scripts/kube-components.sh`.
pub fn workspace_root() -> Option<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("scripts/kube-components.sh").is_file())
        .map(Path::to_path_buf)
}

/// Runs `scripts/NAME` (a build script whose last stdout line is its bin directory).
fn run_components_script(name: &str) -> Result<PathBuf, String> {
    let root = workspace_root()
        .ok_or_else(|| format!("no scripts/{name} above {}", env!("CARGO_MANIFEST_DIR")))?;
    let script = root.join("scripts").join(name);
    // Progress goes to stderr, shown as it happens; the bin dir is stdout's last line.
    let out = Command::new("bash")
        .arg(&script)
        .current_dir(&root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}); see its messages above. stdout: {stdout}",
            script.display(),
            out.status
        ));
    }
    stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| format!("{} printed no bin directory", script.display()))
}

fn check_bin_dir(dir: &Path) -> Result<(), String> {
    check_files(dir, &BINARIES)
}

/// `Ok` when every one of `files` is a file in `dir`; otherwise which are missing.
pub(crate) fn check_files(dir: &Path, files: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = files
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("{} lacks {}", dir.display(), missing.join(", ")))
    }
}

// --- processes -----------------------------------------------------------------------------

/// A shell that leads the cluster's process group and kills the group once the test process
/// is gone (for a node cluster, after deleting the bridge). Its command line names the cluster
/// directory, so `pgrep -f DIR` finds it too.
fn spawn_watchdog(dir: &Path, node_network: bool) -> Result<Child, ClusterError> {
    let script = if node_network {
        format!(
            "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; \
             ip link del {NODE_BRIDGE} 2>/dev/null; kill -s KILL 0"
        )
    } else {
        "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; kill -s KILL 0".to_owned()
    };
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("kvrs-cluster-watchdog")
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| ClusterError::io("starting the watchdog shell", e))
}

/// SIGTERM, then SIGKILL if `child` has not exited within `grace`; reaps it.
fn stop_process(child: &mut Child, grace: Duration) -> Result<ExitStatus, ClusterError> {
    if let Some(status) = child
        .try_wait()
        .map_err(|e| ClusterError::io("checking a process", e))?
    {
        return Ok(status);
    }
    let _ = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| ClusterError::io("waiting for a process", e))?
        {
            return Ok(status);
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child
        .wait()
        .map_err(|e| ClusterError::io("waiting for a killed process", e))
}

fn openssl(args: &[&str]) -> Result<(), ClusterError> {
    let out = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ClusterError::io("running openssl (is it installed?)", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ClusterError::Command {
            command: format!("openssl {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// `Ok` when kubectl succeeded and printed `ok`.
fn check_ok(out: &Output) -> Result<(), String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.trim() == "ok" {
        Ok(())
    } else {
        Err(format!(
            "{}: {}{}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

// --- files ---------------------------------------------------------------------------------

/// Writes a kubeconfig (JSON, which is YAML too) for `server`, trusting `ca` (or skipping TLS
/// verification without one), authenticating with `token` (or anonymously).
fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: Option<&Path>,
    token: Option<&str>,
) -> io::Result<()> {
    let cluster = match ca {
        Some(ca) => serde_json::json!({ "server": server, "certificate-authority": ca }),
        None => serde_json::json!({ "server": server, "insecure-skip-tls-verify": true }),
    };
    let user = match token {
        Some(token) => serde_json::json!({ "token": token }),
        None => serde_json::json!({}),
    };
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "kvrs-test", "cluster": cluster }],
        "users": [{ "name": "kvrs-test-user", "user": user }],
        "contexts": [{
            "name": "kvrs-test",
            "context": { "cluster": "kvrs-test", "user": "kvrs-test-user" },
        }],
        "current-context": "kvrs-test",
    });
    let text = serde_json::to_string_pretty(&config).map_err(io::Error::other)?;
    fs::write(path, text)
}

/// The last `lines` lines of the file at `path` (or why it cannot be read).
fn tail_file(path: &Path, lines: usize) -> String {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("(cannot read {}: {e})", path.display()),
    };
    let mut tail = VecDeque::with_capacity(lines + 1);
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        tail.push_back(line);
        if tail.len() > lines {
            tail.pop_front();
        }
    }
    Vec::from(tail).join("\n")
}

// --- ports, randomness, etcd HTTP ----------------------------------------------------------

fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(nanos);
    h.finish()
}

fn random_hex(chars: usize) -> String {
    let mut s = String::with_capacity(chars + 16);
    while s.len() < chars {
        s.push_str(&format!("{:016x}", random_u64()));
    }
    s.truncate(chars);
    s
}

/// A free loopback port below the kernel's ephemeral range (so no outgoing connection takes
/// it before the component binds it), never handed out twice in this process.
fn free_port() -> Result<u16, ClusterError> {
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    const LOW: u64 = 20000;
    const SPAN: u64 = 12000;
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    for _ in 0..1000 {
        let port = u16::try_from(LOW + random_u64() % SPAN).expect("LOW + SPAN < 65536");
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            given.insert(port);
            return Ok(port);
        }
    }
    Err(ClusterError::io(
        "finding a free loopback port",
        io::Error::new(io::ErrorKind::AddrInUse, "1000 candidates were taken"),
    ))
}

/// One HTTP/1.0 request to etcd's client port; returns the status code and body.
fn etcd_http(
    port: u16,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> Result<(u16, String), ClusterError> {
    let err = |e: io::Error| ClusterError::io(format!("etcd {method} {path}"), e);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(err)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(err)?;
    let payload = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).map_err(err)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(err)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| ClusterError::Etcd(format!("malformed answer to {path}: {response:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ClusterError::Etcd(format!("no status in answer to {path}: {head:?}")))?;
    Ok((status, body.to_owned()))
}

/// A loopback TCP port free right now (for a daemon's metrics address in a test).
///
/// # Panics
/// If no port can be bound at all.
pub fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics after `timeout` naming `what`
/// with `context()` (logs, object dumps): the one wait of the end-to-end tests.
pub fn wait_for<T>(
    what: &str,
    timeout: std::time::Duration,
    mut probe: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}\n{}",
            context()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_bin_dir_names_every_missing_binary() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_bin_dir(dir.path()).unwrap_err();
        for b in BINARIES {
            assert!(err.contains(b), "{err}");
        }
        fs::write(dir.path().join("kubectl"), "").unwrap();
        let err = check_bin_dir(dir.path()).unwrap_err();
        assert!(!err.contains("kubectl"), "{err}");
    }

    #[test]
    fn ports_are_distinct_and_outside_the_ephemeral_range() {
        let ports: HashSet<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        assert_eq!(ports.len(), 50);
        assert!(ports.iter().all(|p| (20000..32000).contains(p)));
    }

    #[test]
    fn tokens_are_hex_and_differ() {
        let a = random_hex(32);
        let b = random_hex(32);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn kubeconfig_is_json_with_token_and_ca() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        write_kubeconfig(
            &path,
            "https://127.0.0.1:1",
            Some(Path::new("/ca.crt")),
            Some("t"),
        )
        .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["users"][0]["user"]["token"], "t");
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority"],
            "/ca.crt"
        );
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        fs::write(&path, "1\n2\n3\n4\n").unwrap();
        assert_eq!(tail_file(&path, 2), "3\n4");
        assert!(tail_file(&dir.path().join("none"), 2).contains("cannot read"));
    }
}
