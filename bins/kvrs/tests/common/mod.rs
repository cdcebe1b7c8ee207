//! The cluster the end-to-end tests run kvrs in: a real kube-apiserver, etcd,
//! kube-controller-manager and kube-scheduler (kvrs-test-cluster, built from the Go module
//! proxy); kvrs's CRDs and the RBAC of `bins/deploy`; the real `virt-controller` and
//! `virt-handler` binaries with their ServiceAccounts' tokens; `kvrs kubelet` as the node's
//! kubelet (registering the Node with KubeVirt's device resources, so kube-scheduler places
//! launcher pods on it); kvrs's launcher with real libvirt and QEMU (TCG) booting the Debian
//! kernel + busybox guest of `fixtures/run/guest-vm.yaml`.

#![allow(dead_code)] // each test binary uses its part

pub mod host_leaks;
pub mod lines;
pub mod run_driver;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvrs_test_cluster::{Options, TestCluster, free_loopback_port, wait_for};
use kvrs_test_guest::pod::{launcher_binaries, repo_root, target_dir, workspace_binary};
use serde_json::Value;

pub mod real_node;
pub mod two_nodes;
pub mod volumes;

pub const NODE: &str = "kvrs-cluster-node";
pub const NS: &str = "kvrs-cluster";

/// A daemon of the test, stopped with SIGTERM (then killed) when dropped.
pub struct Daemon {
    name: &'static str,
    cmd: Command,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn spawn(name: &'static str, cmd: &mut Command, log: &Path) -> Child {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"))
    }

    pub fn start(name: &'static str, mut cmd: Command, log: PathBuf) -> Self {
        let child = Self::spawn(name, &mut cmd, &log);
        Self {
            name,
            cmd,
            child,
            log,
        }
    }

    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- {} (last 40 lines)\n{}",
            self.name,
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    pub fn stop(&mut self, grace: Duration) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGKILL, then the same command again (its log continues).
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.name, &mut self.cmd, &self.log);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(60));
    }
}

pub fn kubectl_json(cluster: &TestCluster, args: &[&str]) -> Option<Value> {
    let out = cluster.kubectl(args.iter().copied().chain(["-o", "json"]));
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

pub fn netns() -> BTreeSet<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// PIDs of this stack's pod processes whose `comm` is one of `names` (`comm` is cut at 15
/// bytes): those in the cgroups `kvrs kubelet` made for node [`NODE`]'s pods, so that another
/// test's VM on this machine is neither counted nor killed.
pub fn processes(names: &[&str]) -> Vec<u32> {
    processes_on(NODE, names)
}

/// [`processes`] of the pods of node `node` (`kvrs run --node-name`).
pub fn processes_on(node: &str, names: &[&str]) -> Vec<u32> {
    let cgroup = format!("/kvrs-kubelet-{node}/");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| names.contains(&c.trim()))
                && std::fs::read_to_string(e.path().join("cgroup"))
                    .is_ok_and(|c| c.contains(&cgroup))
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The per-VM processes: launcher, monitor, QEMU, and the pod's libvirt daemons.
pub const VM_PROCESSES: &[&str] = &[
    "virt-launcher",
    "virt-launcher-m",
    "qemu-system-x86",
    "libvirtd",
    "virtqemud",
    "virtlogd",
];

pub fn launcher_processes() -> usize {
    processes(VM_PROCESSES).len()
}

/// A plain HTTP/1.0 GET over TCP; the body when the server answered 200.
pub fn http_get(ip: &str, port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = format!("{ip}:{port}").parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    (status.starts_with("HTTP/1.") && status.split_whitespace().nth(1) == Some("200"))
        .then(|| body.to_string())
}

pub fn pings(args: &[&str]) -> bool {
    Command::new("ping")
        .args(["-c", "2", "-W", "2"])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The whole cluster with kvrs on it.
pub struct Stack {
    pub cluster: TestCluster,
    pub kubelet: Daemon,
    pub controller: Daemon,
    pub handler: Daemon,
    pub pods_dir: PathBuf,
    pub netns_before: BTreeSet<String>,
    pub launchers_before: usize,
}

impl Stack {
    pub fn start() -> Stack {
        Stack::start_on(PathBuf::from(format!(
            "/tmp/kc{}",
            std::process::id() % 10_000
        )))
    }

    /// [`Stack::start`] with the kubelet's pod directories (emptyDirs: the ephemeral disk
    /// overlays, sockets) under `pods_dir`, e.g. a small filesystem the test fills.
    pub fn start_on(pods_dir: PathBuf) -> Stack {
        let deploy = repo_root().join("bins/deploy");
        let cluster = TestCluster::start(Options::full())
            .expect("kube-apiserver, etcd, kube-controller-manager, kube-scheduler");
        cluster
            .install_kubevirt_crds(&deploy)
            .expect("CRDs established");
        // The namespace, ServiceAccounts and RBAC of both daemons; their Deployment and
        // DaemonSet are not applied: the daemons run as processes here (kvrs kubelet runs
        // launcher pods, not container images).
        for f in [
            "virt-controller/00-namespace.yaml",
            "virt-controller/serviceaccount.yaml",
            "virt-controller/clusterrole.yaml",
            "virt-controller/clusterrolebinding.yaml",
            "virt-controller/role.yaml",
            "virt-controller/rolebinding.yaml",
            "virt-handler/serviceaccount.yaml",
            "virt-handler/clusterrole.yaml",
            "virt-handler/clusterrolebinding.yaml",
        ] {
            cluster
                .apply_path(&deploy.join(f))
                .unwrap_or_else(|e| panic!("{f}: {e}"));
        }
        let controller_kc = cluster
            .kubeconfig_for_token(&cluster.service_account_token("kubevirt", "kvrs-controller"));
        let handler_kc = cluster
            .kubeconfig_for_token(&cluster.service_account_token("kubevirt", "kvrs-handler"));

        let (monitor, _) = launcher_binaries();
        let kvrs = PathBuf::from(env!("CARGO_BIN_EXE_kvrs"));
        assert_eq!(
            monitor.parent(),
            kvrs.parent(),
            "the launcher binaries are built beside kvrs"
        );
        let images = target_dir().join("kvrs-run-images");
        kvrs_test_guest::write_images(&target_dir(), &images).expect("guest images");
        let dir = cluster.dir().to_path_buf();
        let netns_before = netns();
        let launchers_before = launcher_processes();

        let mut kubelet_cmd = Command::new(&kvrs);
        kubelet_cmd
            .arg("kubelet")
            .arg("--kubeconfig")
            .arg(cluster.admin_kubeconfig_path())
            .args(["--node-name", NODE])
            .arg("--pods-dir")
            .arg(&pods_dir)
            .arg("--state-dir")
            .arg(dir.join("kubelet"))
            .arg("--images")
            .arg(&images)
            .args(["--node-label", "machine-type.node.kubevirt.io/q35=true"])
            .env("RUST_LOG", "info");
        let kubelet = Daemon::start("kvrs kubelet", kubelet_cmd, dir.join("kubelet.log"));

        let mut controller_cmd =
            Command::new(workspace_binary("kvrs-virt-controller", "virt-controller"));
        controller_cmd
            .arg("--kubeconfig")
            .arg(&controller_kc)
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{}", free_loopback_port()),
            ])
            .arg("--allow-emulation")
            // Every sync, write and watch event: a failure prints the log's last lines.
            .env(
                "RUST_LOG",
                "info,kvrs_virt_controller=debug,kvrs_runtime=debug,kvrs_executor=debug",
            );
        let controller = Daemon::start(
            "virt-controller",
            controller_cmd,
            dir.join("virt-controller.log"),
        );

        let mut handler_cmd = Command::new(workspace_binary("kvrs-virt-handler", "virt-handler"));
        handler_cmd
            .arg("--kubeconfig")
            .arg(&handler_kc)
            .args(["--hostname-override", NODE])
            .arg("--pods-dir")
            .arg(&pods_dir)
            .arg("--kubevirt-share-dir")
            .arg(dir.join("share"))
            .arg("--private-dir")
            .arg(dir.join("private"))
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{}", free_loopback_port()),
            ])
            .arg("--allow-emulation")
            // `kvrs kubelet` invents KubeVirt's device resources: no device plugins here (and
            // none registering with a real kubelet another test may run on this machine).
            .arg("--device-plugins=false")
            // `KVRS_E2E_HANDLER_LOG=debug` to read every sync when chasing a race.
            .env(
                "RUST_LOG",
                std::env::var("KVRS_E2E_HANDLER_LOG").unwrap_or_else(|_| "info".into()),
            );
        let handler = Daemon::start("virt-handler", handler_cmd, dir.join("virt-handler.log"));

        let stack = Stack {
            cluster,
            kubelet,
            controller,
            handler,
            pods_dir,
            netns_before,
            launchers_before,
        };
        // The node as the device plugins and virt-handler publish it.
        let node = wait_for(
            "the node schedulable with KubeVirt's devices",
            Duration::from_secs(60),
            || {
                kubectl_json(&stack.cluster, &["get", "node", NODE]).filter(|n| {
                    n["metadata"]["labels"]["kubevirt.io/schedulable"] == "true"
                        && n["status"]["allocatable"]["devices.kubevirt.io/tun"].is_string()
                })
            },
            || stack.logs(),
        );
        assert!(
            node["status"]["allocatable"]["devices.kubevirt.io/kvm"].is_string(),
            "{node}"
        );
        let out = stack.cluster.kubectl(["create", "namespace", NS]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stack
    }

    pub fn logs(&self) -> String {
        let vmi = self
            .cluster
            .kubectl(["get", "vm,vmi,pods", "-A", "-o", "wide"]);
        let events = self.cluster.kubectl(["get", "events", "-A"]);
        format!(
            "{}\n{}\n{}\n{}\n{}\n{}",
            String::from_utf8_lossy(&vmi.stdout),
            String::from_utf8_lossy(&events.stdout),
            self.kubelet.log(),
            self.controller.log(),
            self.handler.log(),
            self.cluster
                .log_tail(kvrs_test_cluster::Component::Scheduler, 20)
        )
    }

    /// `kubectl apply` of the fixture VM (in [`NS`]) with `runStrategy`.
    pub fn apply_vm(&self, run_strategy: &str) {
        self.apply_vm_with(run_strategy, &[]);
    }

    /// [`Stack::apply_vm`] with extra cloud-init user-data lines (the guest runs each
    /// `KVRS-RUN: <shell>` line in the background at boot).
    pub fn apply_vm_with(&self, run_strategy: &str, user_data: &[&str]) {
        let hello = "              KVRS-E2E: hello from cloud-init";
        let mut extra = String::from(hello);
        for line in user_data {
            extra.push_str("\n              ");
            extra.push_str(line);
        }
        let vm = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
            .unwrap()
            .replace("namespace: default", &format!("namespace: {NS}"));
        assert!(vm.contains(hello), "the fixture's cloud-init line");
        let vm = vm.replace(hello, &extra);
        assert!(
            vm.contains("runStrategy: Always"),
            "the fixture runs Always"
        );
        let vm = vm.replace(
            "runStrategy: Always",
            &format!("runStrategy: {run_strategy}"),
        );
        let out = self.cluster.kubectl_with_stdin(["apply", "-f", "-"], &vm);
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl patch vm guest` to `runStrategy`.
    pub fn set_run_strategy(&self, run_strategy: &str) {
        let patch = format!(r#"{{"spec":{{"runStrategy":"{run_strategy}"}}}}"#);
        let out = self.cluster.kubectl([
            "patch", "vm", "-n", NS, "guest", "--type", "merge", "-p", &patch,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits for the VMI to run on the kvrs node and its guest to answer ping from its pod
    /// and on the pod IP; returns the VMI.
    pub fn wait_booted(&self, round: &str, timeout: Duration) -> Value {
        // The VMI seen Running may be the one a fault is killing right now (virt-handler has
        // not marked it Failed yet), and the one pod namespace then is that VMI's, about to go.
        // So every probe reads the VMI and the pod's namespace afresh and pings the guest
        // (10.0.2.2 behind the masquerade bridge of its pod): only a guest answering in the pod
        // that exists now counts.
        let vmi = wait_for(
            &format!("the VMI Running and its guest answering ping from its pod ({round})"),
            timeout + Duration::from_secs(150),
            || {
                let vmi = kubectl_json(&self.cluster, &["get", "vmi", "-n", NS, "guest"]).filter(
                    |v| {
                        v["status"]["phase"] == "Running"
                            && v["metadata"]["deletionTimestamp"].is_null()
                            && v["status"]["interfaces"][0]["ipAddress"].is_string()
                    },
                )?;
                let ns = self.pod_netns()?;
                Command::new("ip")
                    .args([
                        "netns", "exec", &ns, "ping", "-c", "1", "-W", "2", "10.0.2.2",
                    ])
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(|_| vmi)
            },
            || format!("{}\n{}", self.logs(), self.pod_files_tail()),
        );
        assert_eq!(
            vmi["status"]["nodeName"], NODE,
            "kube-scheduler placed the launcher pod on the kvrs node"
        );
        // And through the pod IP from the node (KubeVirt's DNAT to the guest).
        let pod_ip = vmi["status"]["interfaces"][0]["ipAddress"]
            .as_str()
            .expect("the guest's address")
            .to_string();
        assert!(
            pings(&[&pod_ip]),
            "the guest answers ping on the pod IP {pod_ip}\n{}",
            self.logs()
        );
        vmi
    }

    /// The last lines of each log file under the pods' directories (the guest's serial
    /// console log, the launcher's and libvirt's logs): what a guest that never answers ping
    /// printed is the first thing to read.
    pub fn pod_files_tail(&self) -> String {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match entry.file_type() {
                    Ok(t) if t.is_dir() => walk(&path, out),
                    Ok(t) if t.is_file() => {
                        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                        if name.ends_with("-log") || name.ends_with(".log") {
                            out.push(path);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut files = Vec::new();
        walk(&self.pods_dir, &mut files);
        let mut text = String::new();
        for file in files {
            let body = std::fs::read(&file).unwrap_or_default();
            let body = String::from_utf8_lossy(&body);
            let lines: Vec<&str> = body.lines().collect();
            text.push_str(&format!(
                "--- {} (last 30 lines)\n{}\n",
                file.display(),
                lines[lines.len().saturating_sub(30)..].join("\n")
            ));
        }
        text
    }

    /// The one network namespace the kvrs kubelet made for a pod, if there is exactly one.
    pub fn pod_netns(&self) -> Option<String> {
        let new: Vec<String> = netns().difference(&self.netns_before).cloned().collect();
        (new.len() == 1).then(|| new[0].clone())
    }

    /// Waits until no VMI, pod, network namespace or VM process is left.
    pub fn wait_gone(&self, what: &str) {
        wait_for(
            what,
            Duration::from_secs(180),
            || {
                let vmis = kubectl_json(&self.cluster, &["get", "vmi", "-n", NS])?;
                let pods = kubectl_json(&self.cluster, &["get", "pods", "-n", NS])?;
                (vmis["items"].as_array()?.is_empty()
                    && pods["items"].as_array()?.is_empty()
                    && netns() == self.netns_before
                    && launcher_processes() == self.launchers_before)
                    .then_some(())
            },
            || {
                // Which of the conditions is still unmet, before the logs.
                let left: Vec<String> = processes(VM_PROCESSES)
                    .iter()
                    .map(|pid| {
                        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .unwrap_or_default();
                        format!("{pid} {}", comm.trim())
                    })
                    .collect();
                format!(
                    "VM processes now {left:?} (before: {}); network namespaces now {:?} \
                     (before: {:?})\n{}",
                    self.launchers_before,
                    netns(),
                    self.netns_before,
                    self.logs()
                )
            },
        )
    }

    /// Stops the daemons; checks no pod directory is left.
    pub fn stop(mut self) {
        self.handler.stop(Duration::from_secs(30));
        self.controller.stop(Duration::from_secs(30));
        self.kubelet.stop(Duration::from_secs(60));
        assert!(
            !Path::new(&self.pods_dir)
                .read_dir()
                .is_ok_and(|mut d| d.next().is_some()),
            "no pod directory left in {}",
            self.pods_dir.display()
        );
        let _ = std::fs::remove_dir_all(&self.pods_dir);
    }
}

/// xorshift64*: a fault test's only randomness, from its seed (0 counts as 1).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Up to `max` milliseconds.
    pub fn millis(&mut self, max: u64) -> std::time::Duration {
        std::time::Duration::from_millis(self.below(max))
    }
}

/// The number in environment variable `name`, else `default`; a value that is not one fails.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?}: a number"))
        })
        .unwrap_or(default)
}
