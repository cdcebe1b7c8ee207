//! The virt-handler end-to-end harness. Real components everywhere:
//! - a real kube-apiserver + etcd (kvrs-test-cluster), kvrs's CRDs and virt-handler's RBAC from
//!   `bins/deploy`, the handler running with its ServiceAccount's token;
//! - per launcher pod, what a kubelet would set up: a network namespace with a veth as the pod's
//!   `eth0` carrying the pod IP, the pod's emptyDirs as directories (the `sockets` one where the
//!   kubelet keeps it, under the pods directory), a private `/dev/net/tun` node as the
//!   device plugin would give, and the `compute` container's command —
//!   kvrs's `virt-launcher-monitor` — as UID 107 in its own mount namespace;
//! - real libvirt and QEMU (TCG) booting the Debian kernel + busybox guest of kvrs-test-guest.
//!
//! There is no virt-controller and no kubelet: the test plays both, creating the admitted VMI
//! and writing the `Scheduled` status the VMI controller would write.

#![allow(dead_code)]

pub mod aggregated;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kvrs_test_cluster::{Options, TestCluster, free_loopback_port};
use kvrs_test_guest::pod::MonitorCommand;
use serde_json::{Value, json};

/// The node the handler runs as.
pub const NODE: &str = "kvrs-node-e2e";
/// The namespace of the test VMIs.
pub const NS: &str = "kvrs-e2e";

pub use kvrs_test_guest::pod::{repo_root as root, run, target_dir};

/// Tests of this binary boot guests: one at a time keeps the 2-core machine responsive.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

pub use kvrs_test_cluster::wait_for;

/// The cluster, with the CRDs, the handler's RBAC and this test's Node.
pub struct Cluster {
    pub cluster: TestCluster,
    pub handler_kubeconfig: PathBuf,
}

impl Cluster {
    pub fn start() -> Self {
        let cluster =
            TestCluster::start(Options::apiserver_only()).expect("a real kube-apiserver and etcd");
        let deploy = root().join("bins/deploy");
        cluster
            .install_kubevirt_crds(&deploy)
            .expect("CRDs established");
        cluster
            .apply_path(&deploy.join("virt-controller/00-namespace.yaml"))
            .expect("namespace");
        cluster
            .apply_path(&deploy.join("virt-handler"))
            .expect("virt-handler manifests");
        let token = cluster.service_account_token("kubevirt", "kvrs-handler");
        let handler_kubeconfig = cluster.kubeconfig_for_token(&token);
        let c = Self {
            cluster,
            handler_kubeconfig,
        };
        c.apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
        c.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
        c
    }

    /// `kubectl apply` of one object.
    pub fn apply(&self, obj: &Value) {
        let out = self
            .cluster
            .kubectl_with_stdin(["apply", "-f", "-"], &obj.to_string());
        assert!(
            out.status.success(),
            "apply {obj}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl get -o json`, or `None` when it does not exist.
    pub fn get(&self, kind: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let mut args = vec!["get", kind, name, "-o", "json"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        let out = self.cluster.kubectl(args);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).expect("kubectl JSON"))
    }

    pub fn vmi(&self, name: &str) -> Option<Value> {
        self.get("virtualmachineinstances", Some(NS), name)
    }

    /// A merge patch (the VMI CRD has no status subresource: status is patched on the object).
    pub fn merge_patch(&self, kind: &str, name: &str, patch: &Value) {
        let out = self.cluster.kubectl([
            "patch",
            kind,
            name,
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ]);
        assert!(
            out.status.success(),
            "patch {kind} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Requests the API server counted for `verb` on `resource` (its own `/metrics`).
    pub fn requests(&self, verb: &str, resource: &str) -> u64 {
        let out = self.cluster.kubectl(["get", "--raw", "/metrics"]);
        assert!(out.status.success(), "apiserver /metrics");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| {
                l.contains(&format!("verb=\"{verb}\""))
                    && l.contains(&format!("resource=\"{resource}\""))
            })
            .map(|l| {
                // Prometheus writes counters as Go floats ("12", "1e+06"): every value must
                // read back as a whole number, or the count would silently shrink.
                let v = l.rsplit(' ').next().unwrap_or_default();
                let f: f64 = v.parse().unwrap_or_else(|_| panic!("counter value {v:?}"));
                format!("{f:.0}")
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("counter value {v:?}"))
            })
            .sum()
    }

    /// Creates the VMI `spec` (admitted as virt-api would) and returns its UID.
    pub fn create_vmi(&self, vmi: Value) -> String {
        let typed: kvrs_api::VirtualMachineInstance = serde_json::from_value(vmi).expect("a VMI");
        let admitted = kvrs_admission::admit(typed, &kvrs_admission::ClusterConfig::default())
            .expect("the test VMI is admitted");
        let mut obj = serde_json::to_value(&admitted).unwrap();
        obj["metadata"]["finalizers"] = json!(["kubevirt.io/foregroundDeleteVirtualMachine"]);
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let out = self
            .cluster
            .kubectl_with_stdin(["create", "-f", "-"], &obj.to_string());
        assert!(
            out.status.success(),
            "create VMI: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.vmi(&name).unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// What the VMI controller writes once the launcher pod runs: Scheduled to this node.
    pub fn schedule(&self, name: &str, pod_uid: &str) {
        self.merge_patch(
            "virtualmachineinstances",
            name,
            &json!({
                "metadata": {"labels": {"kubevirt.io/nodeName": NODE}},
                "status": {
                    "phase": "Scheduled",
                    "nodeName": NODE,
                    "activePods": {pod_uid: NODE},
                    "runtimeUser": 107,
                    "launcherContainerImageVersion": "kvrs",
                }
            }),
        );
    }

    /// Removes the VMI's finalizers (what virt-controller does once it is final).
    pub fn release(&self, name: &str) {
        self.merge_patch(
            "virtualmachineinstances",
            name,
            &json!({"metadata": {"finalizers": null}}),
        );
    }
}

/// A running virt-handler.
pub struct Handler {
    pub child: Child,
    pub log: PathBuf,
    pub metrics_port: u16,
}

impl Handler {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The node's directories: the kubelet's pods dir, the handler's share and private dirs.
pub struct NodeDirs {
    pub root: PathBuf,
}

impl NodeDirs {
    pub fn new(tag: &str) -> Self {
        // Short: a launcher socket path under the pods directory must fit a Unix socket
        // address (107 bytes), as KubeVirt's `/pods` does on a node.
        let tag: String = tag.chars().take(1).collect();
        let root = PathBuf::from(format!("/tmp/kh{tag}{}", std::process::id() % 100_000));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["p", "share", "private"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Self { root }
    }
    pub fn pods(&self) -> PathBuf {
        self.root.join("p")
    }

    /// Starts virt-handler for this node with `extra` flags.
    pub fn start_handler(&self, cluster: &Cluster, run: usize, extra: &[&str]) -> Handler {
        self.start_handler_as(cluster, NODE, run, extra)
    }

    /// Starts virt-handler as node `node` (a Node the test created) with `extra` flags.
    pub fn start_handler_as(
        &self,
        cluster: &Cluster,
        node: &str,
        run: usize,
        extra: &[&str],
    ) -> Handler {
        let port = free_loopback_port();
        let log = self.root.join(format!("virt-handler-{run}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_virt-handler"))
            .arg("--kubeconfig")
            .arg(&cluster.handler_kubeconfig)
            .args(["--hostname-override", node])
            .arg("--pods-dir")
            .arg(self.pods())
            .arg("--kubevirt-share-dir")
            .arg(self.root.join("share"))
            .arg("--private-dir")
            .arg(self.root.join("private"))
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .arg("--allow-emulation")
            // No kubelet here: nothing registers with a real one that may run on this machine.
            .arg("--device-plugins=false")
            .args(extra)
            .env("RUST_LOG", "info,kvrs_virt_handler=debug")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start virt-handler");
        Handler {
            child,
            log,
            metrics_port: port,
        }
    }

    /// Starts virt-handler with its REST server on `127.0.0.1:port` (the certificates virt-api
    /// issued, in `cert_dir`) and lists it as virt-api finds handlers: a `kubevirt.io:
    /// virt-handler` pod `pod` on this node whose IP is `127.0.0.1`.
    pub fn start_rest_handler(
        &self,
        cluster: &Cluster,
        port: u16,
        cert_dir: &std::path::Path,
        pod: &str,
    ) -> Handler {
        let handler = self.start_handler(
            cluster,
            0,
            &[
                "--console-server-port",
                &port.to_string(),
                "--listen-address",
                "127.0.0.1",
                "--server-cert-dir",
                cert_dir.to_str().expect("a UTF-8 path"),
            ],
        );
        cluster.apply(&json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "kubevirt",
                "labels": {"kubevirt.io": "virt-handler"}},
            "spec": {"nodeName": NODE, "serviceAccountName": "kvrs-handler",
                "automountServiceAccountToken": false,
                "containers": [{"name": "virt-handler", "image": "kvrs/virt-handler:v0.1.0"}]}}));
        let out = cluster.cluster.kubectl([
            "patch",
            "pod",
            pod,
            "-n",
            "kubevirt",
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}"#,
        ]);
        assert!(
            out.status.success(),
            "the handler pod's status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        handler
    }
}

impl Drop for NodeDirs {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// One launcher pod, set up the way a kubelet would.
pub struct LauncherPod {
    pub name: String,
    pub uid: String,
    pub netns: String,
    pub host_veth: String,
    pub pod_ip: String,
    /// The pod's `/run` (bound over `/run` in its mount namespace).
    pub run_dir: PathBuf,
    /// The `sockets` emptyDir, under the kubelet's pods directory.
    pub sockets_dir: PathBuf,
    /// The `private` emptyDir (the pod's `/var/run/kubevirt-private`, where QEMU's serial
    /// socket is), beside `sockets`.
    pub private_dir: PathBuf,
    pub monitor: Option<Child>,
    pub log: PathBuf,
}

impl LauncherPod {
    /// Network namespace `kvrs-h<n>` with `eth0` = 10.250.<n>.2/24 (the pod IP), the host end
    /// 10.250.<n>.1 as its default gateway, and the pod's directories.
    pub fn new(dirs: &NodeDirs, n: u8, vmi_name: &str) -> Self {
        let uid = format!("0000000{n}-e2e0-4000-8000-0000000000{n:02}");
        let netns = format!("kvrs-h{n}-{}", std::process::id());
        let host_veth = format!("kvh{n}-{}", std::process::id() % 10000);
        let pod_ip = format!("10.250.{n}.2");
        let _ = Command::new("ip").args(["netns", "del", &netns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &host_veth])
            .output();
        run(Command::new("ip").args(["netns", "add", &netns]));
        run(Command::new("ip").args([
            "link", "add", &host_veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
        ]));
        run(Command::new("ip").args([
            "addr",
            "add",
            &format!("10.250.{n}.1/24"),
            "dev",
            &host_veth,
        ]));
        run(Command::new("ip").args(["link", "set", &host_veth, "up"]));
        let in_ns = |args: &[&str]| {
            run(Command::new("ip")
                .args(["netns", "exec", &netns])
                .args(args));
        };
        in_ns(&["ip", "link", "set", "lo", "up"]);
        in_ns(&["ip", "addr", "add", &format!("{pod_ip}/24"), "dev", "eth0"]);
        in_ns(&["ip", "link", "set", "eth0", "up"]);
        in_ns(&[
            "ip",
            "route",
            "add",
            "default",
            "via",
            &format!("10.250.{n}.1"),
        ]);
        // KubeVirt's launcher pod sets this sysctl: the DHCP server binds port 67 as UID 107.
        in_ns(&[
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_unprivileged_port_start=0",
        ]);

        let run_dir = dirs.root.join(format!("pod-{n}"));
        // Image volumes (KubeVirt v1.9.0's default) as the kubelet mounts them: the kernel-boot
        // image and the container disk, each under its own mount point.
        for sub in [
            "kubevirt/container-disks",
            "kubevirt-private",
            "kubevirt-ephemeral-disks",
            "kubevirt/sockets",
            "kubevirt-image-volume/disk_0/disk",
            "kubevirt-kernel-boot/boot",
        ] {
            std::fs::create_dir_all(run_dir.join(sub)).unwrap();
        }
        let sockets_dir = kvrs_ipc::layout::pod_sockets_dir_on_host(&dirs.pods(), &uid).unwrap();
        std::fs::create_dir_all(&sockets_dir).unwrap();
        let private_dir = sockets_dir.with_file_name("private");
        std::fs::create_dir_all(&private_dir).unwrap();
        let guest = kvrs_test_guest::guest(&target_dir());
        let kb = run_dir.join("kubevirt-kernel-boot/boot");
        std::fs::copy(&guest.kernel, kb.join("vmlinuz")).unwrap();
        std::fs::copy(&guest.initrd, kb.join("initramfs.gz")).unwrap();
        run(Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(run_dir.join("kubevirt-image-volume/disk_0/disk/disk.qcow2"))
            .arg("64M"));
        // The device plugin's device nodes, private to the pod (root-owned until the handler
        // claims them for UID 107).
        run(Command::new("mknod")
            .arg(run_dir.join("dev-net-tun"))
            .args(["c", "10", "200"]));
        for d in [&run_dir, &sockets_dir, &private_dir] {
            run(Command::new("chown").arg("-R").arg("107:107").arg(d));
        }
        run(Command::new("chown")
            .arg("0:0")
            .arg(run_dir.join("dev-net-tun")));
        run(Command::new("chmod")
            .arg("600")
            .arg(run_dir.join("dev-net-tun")));
        run(Command::new("chmod").arg("755").arg(&run_dir));
        Self {
            name: vmi_name.to_string(),
            uid,
            netns,
            host_veth,
            pod_ip,
            log: run_dir.with_extension("log"),
            run_dir,
            sockets_dir,
            private_dir,
            monitor: None,
        }
    }

    /// Starts the `compute` container: the monitor as UID 107, in the pod's network namespace
    /// and its own mount namespace, for the VMI with `vmi_uid`.
    pub fn start(&mut self, vmi_uid: &str) {
        self.start_waiting(vmi_uid, "120s");
    }

    /// [`Self::start`] with the launcher waiting `qemu_timeout` for its domain (a migration
    /// target's arrives only with the migration).
    pub fn start_waiting(&mut self, vmi_uid: &str, qemu_timeout: &str) {
        let log = std::fs::File::create(&self.log).unwrap();
        let mut monitor = MonitorCommand::new(NS, &self.name, vmi_uid, &self.run_dir);
        monitor.qemu_timeout = qemu_timeout.into();
        monitor.grace_period_seconds = 20;
        monitor.image_volume = true;
        monitor.netns = Some(self.netns.clone());
        monitor
            .binds
            .push((self.sockets_dir.clone(), "/run/kubevirt/sockets".into()));
        monitor
            .binds
            .push((self.private_dir.clone(), "/run/kubevirt-private".into()));
        monitor
            .binds
            .push((self.run_dir.join("dev-net-tun"), "/dev/net/tun".into()));
        let child = monitor
            .command()
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start virt-launcher-monitor");
        self.monitor = Some(child);
    }

    pub fn serial_log(&self, vmi_uid: &str) -> String {
        std::fs::read(self.private_dir.join(format!("{vmi_uid}/virt-serial0-log")))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The launcher's `GetGuestInfo` answer (what virt-api serves as the VMI's guestosinfo).
    pub fn guest_info(&self) -> Value {
        let socket = self.sockets_dir.join("launcher-sock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let json = rt
            .block_on(async {
                let client = kvrs_ipc::LauncherClient::connect(&socket).await?;
                client.get_guest_info().await
            })
            .unwrap_or_else(|e| panic!("GetGuestInfo on {}: {e}", socket.display()));
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("guest info {json:?}: {e}"))
    }

    pub fn launcher_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the monitor (the pod's PID 1) has exited (it is a zombie until reaped).
    pub fn exited(&self) -> bool {
        let Some(c) = self.monitor.as_ref() else {
            return true;
        };
        std::fs::read_to_string(format!("/proc/{}/stat", c.id()))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                    == Some("Z")
            })
            .unwrap_or(true)
    }

    /// The virt-launcher process (the monitor's child).
    pub fn launcher_pid(&self) -> Option<u32> {
        let monitor = self.monitor.as_ref()?.id();
        descendants(monitor).into_iter().find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "virt-launcher")
        })
    }

    /// Links and nftables rules inside the pod's network namespace.
    pub fn netns_state(&self) -> String {
        let out = |args: &[&str]| {
            Command::new("ip")
                .args(["netns", "exec", &self.netns])
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        format!(
            "{}\n{}",
            out(&["ip", "-br", "link"]),
            out(&["nft", "list", "ruleset"])
        )
    }

    /// What the kubelet does when the pod is deleted: SIGTERM, grace, SIGKILL, and the netns
    /// with its links and rules removed.
    pub fn delete(&mut self) {
        if let Some(mut c) = self.monitor.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .output();
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_veth])
            .output();
    }
}

impl Drop for LauncherPod {
    fn drop(&mut self) {
        self.delete();
    }
}

/// Every descendant of `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let children: Vec<u32> = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect();
        stack.extend(&children);
        out.extend(children);
    }
    out
}

/// A VMI booting the test guest from its kernel-boot container, with the pod network bound by
/// masquerade (KubeVirt's default) and a cloud-init disk.
pub fn guest_vmi(name: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "domain": {
                "firmware": {"kernelBoot": {
                    "kernelArgs": "console=ttyS0 panic=-1",
                    "container": {"image": "example/kernel-boot", "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initramfs.gz"}
                }},
                "resources": {"requests": {"memory": "128Mi"}},
                "devices": {
                    "disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}, {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}]
                }
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [
                {"name": "rootdisk", "containerDisk": {"image": "example/disk"}},
                {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config\n"}}
            ]
        }
    })
}

/// The test guest with a shell on its serial console (a `KVRS-RUN` line of its user-data).
pub fn guest_with_shell(name: &str) -> Value {
    let mut vmi = guest_vmi(name);
    vmi["spec"]["volumes"][1]["cloudInitNoCloud"]["userData"] =
        json!("#cloud-config\nKVRS-RUN: sh -i </dev/ttyS0 >/dev/ttyS0 2>&1\n");
    vmi
}

/// `status.phase` of a VMI JSON.
pub fn phase(vmi: &Value) -> &str {
    vmi["status"]["phase"].as_str().unwrap_or("")
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The VMI's condition of type `kind`.
pub fn condition<'v>(vmi: &'v Value, kind: &str) -> Option<&'v Value> {
    vmi["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// What a failed wait on VMI `name` prints: its status, the handler's and the launcher's logs.
pub fn guest_context(
    cluster: &Cluster,
    handler: &Handler,
    pod: &LauncherPod,
    name: &str,
) -> String {
    format!(
        "--- VMI ---\n{}\n--- handler ---\n{}\n--- launcher ---\n{}",
        cluster
            .vmi(name)
            .map(|v| v["status"].to_string())
            .unwrap_or_default(),
        tail(&handler.log(), 40),
        tail(&pod.launcher_log(), 30)
    )
}

/// Creates the guest VMI `name` (with its agent) in launcher pod `n`, schedules it and waits
/// until it runs with its agent connected and the agent's OS in the VMI's status; returns the
/// VMI's UID and its pod.
pub fn boot_guest_with_agent(
    cluster: &Cluster,
    dirs: &NodeDirs,
    handler: &Handler,
    n: u8,
    name: &str,
) -> (String, LauncherPod) {
    boot_vmi_with_agent(cluster, dirs, handler, n, guest_vmi(name))
}

/// [`boot_guest_with_agent`] for the VMI `vmi` (the test guest's, changed).
pub fn boot_vmi_with_agent(
    cluster: &Cluster,
    dirs: &NodeDirs,
    handler: &Handler,
    n: u8,
    vmi: Value,
) -> (String, LauncherPod) {
    let name = vmi["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    let name = name.as_str();
    let uid = cluster.create_vmi(vmi);
    let mut pod = LauncherPod::new(dirs, n, name);
    pod.start(&uid);
    cluster.schedule(name, &pod.uid);
    kvrs_test_cluster::wait_for(
        "the guest Running with its agent connected and its OS reported",
        Duration::from_secs(300),
        || {
            let v = cluster.vmi(name)?;
            // The agent's OS reaches the VMI a poll after it connects.
            (phase(&v) == "Running"
                && condition(&v, "AgentConnected").is_some_and(|c| c["status"] == "True")
                && v["status"]["guestOSInfo"]["id"] == kvrs_test_guest::OS_ID)
                .then_some(())
        },
        || guest_context(cluster, handler, &pod, name),
    );
    (uid, pod)
}
