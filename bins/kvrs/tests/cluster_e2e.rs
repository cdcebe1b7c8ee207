//! The full cluster end to end: a real kube-apiserver, etcd, kube-controller-manager and
//! kube-scheduler (kvrs-test-cluster, built from the Go module proxy); kvrs's CRDs and the RBAC
//! of `bins/deploy`; the real `virt-controller` and `virt-handler` binaries running with their
//! ServiceAccounts' tokens; `kvrs kubelet` as the node's kubelet (registering the Node with
//! KubeVirt's device resources, so kube-scheduler places the launcher pod on it); kvrs's
//! launcher with real libvirt and QEMU (TCG) booting the Debian kernel + busybox guest.
//!
//! `kubectl apply` a VirtualMachine → the guest boots and answers ping; stop, start, delete →
//! nothing is left (no VMI, no pod, no network namespace, no launcher process).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvrs_test_cluster::{Options, TestCluster, free_loopback_port, wait_for};
use kvrs_test_guest::pod::{is_root, launcher_binaries, repo_root, target_dir, workspace_binary};
use serde_json::Value;

const NODE: &str = "kvrs-cluster-node";
const NS: &str = "kvrs-cluster";

/// A daemon of the test, stopped with SIGTERM (then killed) when dropped.
struct Daemon {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(name: &'static str, mut cmd: Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Self { name, child, log }
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- {} (last 40 lines)\n{}",
            self.name,
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    fn stop(&mut self, grace: Duration) {
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
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(60));
    }
}

fn kubectl_json(cluster: &TestCluster, args: &[&str]) -> Option<Value> {
    let out = cluster.kubectl(args.iter().copied().chain(["-o", "json"]));
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

fn netns() -> BTreeSet<String> {
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

fn launcher_processes() -> usize {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| {
                ["virt-launcher", "virt-launcher-m", "qemu-system-x86"].contains(&c.trim())
            })
        })
        .count()
}

fn pings(args: &[&str]) -> bool {
    Command::new("ping")
        .args(["-c", "2", "-W", "2"])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn a_vm_applied_with_kubectl_boots_answers_ping_stops_starts_and_is_deleted_without_a_trace() {
    assert!(
        is_root(),
        "the cluster e2e runs launcher pods (network namespaces, mounts, UID 107): run as root"
    );
    let deploy = repo_root().join("bins/deploy");
    let cluster = TestCluster::start(Options::full())
        .expect("kube-apiserver, etcd, kube-controller-manager, kube-scheduler");
    cluster.apply_path(&deploy.join("crds")).expect("CRDs");
    cluster
        .wait_for_crds(
            &[
                "virtualmachines.kubevirt.io",
                "virtualmachineinstances.kubevirt.io",
            ],
            Duration::from_secs(60),
        )
        .expect("CRDs established");
    // The namespace, ServiceAccounts and RBAC of both daemons; their Deployment and DaemonSet
    // are not applied: the daemons run as processes here (kvrs kubelet runs launcher pods, not
    // container images).
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
        .kubeconfig_for_token(&cluster.service_account_token("kubevirt", "kubevirt-controller"));
    let handler_kc = cluster
        .kubeconfig_for_token(&cluster.service_account_token("kubevirt", "kubevirt-handler"));

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
    let pods_dir = PathBuf::from(format!("/tmp/kc{}", std::process::id() % 10_000));
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
    let mut kubelet = Daemon::start("kvrs kubelet", kubelet_cmd, dir.join("kubelet.log"));

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
        .env("RUST_LOG", "info");
    let mut controller = Daemon::start(
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
        .env("RUST_LOG", "info");
    let mut handler = Daemon::start("virt-handler", handler_cmd, dir.join("virt-handler.log"));

    let logs = || {
        let vmi = cluster.kubectl(["get", "vmi,pods", "-A", "-o", "wide"]);
        let events = cluster.kubectl(["get", "events", "-A"]);
        format!(
            "{}\n{}\n{}\n{}\n{}\n{}",
            String::from_utf8_lossy(&vmi.stdout),
            String::from_utf8_lossy(&events.stdout),
            kubelet.log(),
            controller.log(),
            handler.log(),
            cluster.log_tail(kvrs_test_cluster::Component::Scheduler, 20)
        )
    };

    // The node as the device plugins and virt-handler publish it.
    let node = wait_for(
        "the node schedulable with KubeVirt's devices",
        Duration::from_secs(60),
        || {
            kubectl_json(&cluster, &["get", "node", NODE]).filter(|n| {
                n["metadata"]["labels"]["kubevirt.io/schedulable"] == "true"
                    && n["status"]["allocatable"]["devices.kubevirt.io/tun"].is_string()
            })
        },
        logs,
    );
    assert!(
        node["status"]["allocatable"]["devices.kubevirt.io/kvm"].is_string(),
        "{node}"
    );

    let vm = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .unwrap()
        .replace("namespace: default", &format!("namespace: {NS}"));
    let out = cluster.kubectl(["create", "namespace", NS]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cluster.kubectl_with_stdin(["apply", "-f", "-"], &vm);
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let boot = |round: &str| {
        let vmi = wait_for(
            &format!("the VMI Running ({round})"),
            Duration::from_secs(240),
            || {
                kubectl_json(&cluster, &["get", "vmi", "-n", NS, "guest"])
                    .filter(|v| v["status"]["phase"] == "Running")
            },
            logs,
        );
        assert_eq!(
            vmi["status"]["nodeName"], NODE,
            "kube-scheduler placed the launcher pod on the kvrs node"
        );
        let pod_ip = vmi["status"]["interfaces"][0]["ipAddress"]
            .as_str()
            .expect("the guest's address")
            .to_string();
        let ns = wait_for(
            "the pod's network namespace",
            Duration::from_secs(10),
            || netns().difference(&netns_before).next().cloned(),
            logs,
        );
        // The guest itself (10.0.2.2 behind the masquerade bridge of its pod), and through the
        // pod IP from the node (KubeVirt's DNAT to the guest).
        wait_for(
            "the guest to answer ping from its pod",
            Duration::from_secs(120),
            || {
                Command::new("ip")
                    .args([
                        "netns", "exec", &ns, "ping", "-c", "1", "-W", "2", "10.0.2.2",
                    ])
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(drop)
            },
            logs,
        );
        assert!(
            pings(&[&pod_ip]),
            "the guest answers ping on the pod IP {pod_ip}\n{}",
            logs()
        );
    };
    let gone = |what: &str| {
        wait_for(
            what,
            Duration::from_secs(180),
            || {
                let vmis = kubectl_json(&cluster, &["get", "vmi", "-n", NS])?;
                let pods = kubectl_json(&cluster, &["get", "pods", "-n", NS])?;
                (vmis["items"].as_array()?.is_empty()
                    && pods["items"].as_array()?.is_empty()
                    && netns() == netns_before
                    && launcher_processes() == launchers_before)
                    .then_some(())
            },
            logs,
        )
    };

    boot("first start");
    let halt = cluster.kubectl([
        "patch",
        "vm",
        "-n",
        NS,
        "guest",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"runStrategy":"Halted"}}"#,
    ]);
    assert!(
        halt.status.success(),
        "{}",
        String::from_utf8_lossy(&halt.stderr)
    );
    gone("the VM stopped: no VMI, pod, netns or launcher");
    let start = cluster.kubectl([
        "patch",
        "vm",
        "-n",
        NS,
        "guest",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"runStrategy":"Always"}}"#,
    ]);
    assert!(
        start.status.success(),
        "{}",
        String::from_utf8_lossy(&start.stderr)
    );
    boot("after a stop");
    let delete = cluster.kubectl(["delete", "vm", "-n", NS, "guest", "--wait=false"]);
    assert!(
        delete.status.success(),
        "{}",
        String::from_utf8_lossy(&delete.stderr)
    );
    gone("the VM deleted: no VMI, pod, netns or launcher");
    assert!(
        kubectl_json(&cluster, &["get", "vm", "-n", NS, "guest"]).is_none(),
        "the VM is gone"
    );

    handler.stop(Duration::from_secs(30));
    controller.stop(Duration::from_secs(30));
    kubelet.stop(Duration::from_secs(60));
    assert!(
        !Path::new(&pods_dir)
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()),
        "no pod directory left in {}",
        pods_dir.display()
    );
    let _ = std::fs::remove_dir_all(&pods_dir);
}
