//! kvrs deployed on a real node as an operator deploys it, shared by the real-node test and the
//! density bench (`tests/density.rs`): kvrs's images from `scripts/images.sh`, a real control
//! plane and `kvrs_test_cluster::RealNode`, the manifests of `bins/deploy` applied unchanged
//! (the controller told `--virt-api-webhooks` by the shipped patch), a KubeVirt CR, and both
//! daemons Ready through their probes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kvrs_test_cluster::{NODE_NAME, Options, RealNode, TestCluster, wait_for};
use kvrs_test_guest::pod::repo_root;
use serde_json::Value;

use super::kubectl_json;

/// The directories on the host that virt-handler's DaemonSet mounts (created by the kubelet).
pub const HOST_DIRS: [&str; 3] = [
    "/var/run/kubevirt",
    "/var/run/kubevirt-private",
    "/var/run/kubevirt-libvirt-runtimes",
];

/// kvrs's images for this tree, built by `scripts/images.sh` from the test build's binaries.
pub fn build_images() -> Vec<PathBuf> {
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/images.sh"))
        .env("KVRS_IMAGE_PROFILE", "dev")
        .current_dir(repo_root())
        .output()
        .expect("running scripts/images.sh");
    assert!(
        out.status.success(),
        "scripts/images.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archives: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.ends_with(".tar"))
        .map(PathBuf::from)
        .collect();
    assert!(
        archives.len() >= 6,
        "scripts/images.sh printed the archives of the controller, virt-api, handler, launcher and guest \
         images: {archives:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "images built in {:.1} s:\n{}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    archives
}

/// The control plane and the real node with kvrs deployed on it. Dropping it tears the node
/// down (`RealNode`'s drop) and stops the control plane.
pub struct Deployed {
    pub cluster: TestCluster,
    pub node: Option<RealNode>,
    /// The second node ([`start_two`](Self::start_two)); stopped before the first one.
    pub second: Option<RealNode>,
    /// The namespace whose launcher pods [`logs`](Self::logs) shows.
    pub ns: &'static str,
}

impl Deployed {
    /// Builds the images, starts the control plane and the node, imports the images, applies
    /// the CRDs and the manifests of `bins/deploy` unchanged (the controller patched for
    /// virt-api's webhooks), the KubeVirt CR (with `useEmulation` if `use_emulation`), and
    /// waits until virt-controller, virt-api and virt-handler are Ready through their probes.
    pub fn start(ns: &'static str, use_emulation: bool) -> Deployed {
        Self::start_nodes(ns, &kubevirt_cr(use_emulation), false, None)
    }

    /// Waits (2 min) until the first node is schedulable with KubeVirt's devices
    /// ([`node_schedulable`]) and returns its Node object.
    pub fn wait_node_schedulable(&self) -> Value {
        wait_for(
            "the node schedulable with KubeVirt's devices",
            Duration::from_secs(120),
            || kubectl_json(&self.cluster, &["get", "node", NODE_NAME]).filter(node_schedulable),
            || self.logs(),
        )
    }

    /// [`wait_node_schedulable`](Self::wait_node_schedulable), then its
    /// `kubernetes.io/hostname` label (what a local PersistentVolume's node affinity names).
    pub fn wait_schedulable_host(&self) -> String {
        let node = self.wait_node_schedulable();
        node["metadata"]["labels"]["kubernetes.io/hostname"]
            .as_str()
            .expect("the node's kubernetes.io/hostname label")
            .to_string()
    }

    /// Like [`start`](Self::start) with Multus as the node's CNI (`RealNode::start_with_multus`).
    pub fn start_with_multus(
        ns: &'static str,
        use_emulation: bool,
        multus: &kvrs_test_cluster::Multus,
    ) -> Deployed {
        Self::start_nodes(ns, &kubevirt_cr(use_emulation), false, Some(multus))
    }

    /// Like [`start`](Self::start) on two real nodes (`RealNode::start_second` beside the
    /// first, holding virt-handler's host directories as its own), with the KubeVirt CR `cr`:
    /// the same manifests, so the DaemonSet runs a handler on each node.
    pub fn start_two(ns: &'static str, cr: &str) -> Deployed {
        Self::start_nodes(ns, cr, true, None)
    }

    fn start_nodes(
        ns: &'static str,
        cr: &str,
        two: bool,
        multus: Option<&kvrs_test_cluster::Multus>,
    ) -> Deployed {
        let archives = build_images();

        let cluster = TestCluster::start_for_node(Options::full()).expect("the control plane");
        let node = match multus {
            Some(m) => RealNode::start_with_multus(&cluster, m),
            None => RealNode::start(&cluster),
        }
        .expect("the real node");
        for dir in HOST_DIRS {
            node.remove_on_teardown(Path::new(dir))
                .expect("registering a host directory for teardown");
        }
        // virt-handler mounts it Bidirectional (container disks and hotplug reach the launchers).
        node.share_on_host(Path::new(HOST_DIRS[0]))
            .expect("a shared mount for /var/run/kubevirt");
        let second = two.then(|| {
            let dirs: Vec<&Path> = HOST_DIRS.iter().map(Path::new).collect();
            RealNode::start_second(&cluster, &dirs).expect("the second real node")
        });
        for n in std::iter::once(&node).chain(second.as_ref()) {
            for archive in &archives {
                n.import_image(archive).unwrap_or_else(|e| {
                    panic!("importing {} on {}: {e}", archive.display(), n.name())
                });
            }
        }
        let deployed = Deployed {
            cluster,
            node: Some(node),
            second,
            ns,
        };

        // The operator's commands (README, "On a cluster"): CRDs, then both components, unchanged.
        let deploy = repo_root().join("bins/deploy");
        deployed
            .cluster
            .install_kubevirt_crds(&deploy)
            .expect("kvrs's CRDs");
        for dir in ["virt-controller", "virt-handler", "virt-api"] {
            deployed.kubectl_ok(&["apply", "-f", deploy.join(dir).to_str().unwrap()]);
        }
        // With virt-api in front, the controller stores the VMIs it creates as they are and lets
        // the webhook admit them (bins/deploy/README.md, "Apply").
        deployed.kubectl_ok(&[
            "-n",
            "kubevirt",
            "patch",
            "deployment",
            "kvrs-virt-controller",
            "--type",
            "json",
            "--patch-file",
            deploy
                .join("patches/virt-controller-webhooks.patch.json")
                .to_str()
                .unwrap(),
        ]);
        let out = deployed
            .cluster
            .kubectl_with_stdin(["apply", "-f", "-"], cr);
        assert!(
            out.status.success(),
            "the KubeVirt CR: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        deployed.wait_ready();
        deployed
    }

    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.cluster.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn logs(&self) -> String {
        let objects = self
            .cluster
            .kubectl(["get", "vm,vmi,pods,ds,deploy", "-A", "-o", "wide"]);
        let events = self.cluster.kubectl(["get", "events", "-A"]);
        // A node under disk or memory pressure evicts the pods under test and taints itself:
        // its conditions say so where the pod list only shows Evicted and Pending.
        let conditions = self.cluster.kubectl([
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*].status.conditions[*]}{.type}={.status} ({.message}){\"\\n\"}{end}",
        ]);
        let mut text = format!(
            "{}\n--- node conditions\n{}\n{}",
            String::from_utf8_lossy(&objects.stdout),
            String::from_utf8_lossy(&conditions.stdout),
            String::from_utf8_lossy(&events.stdout)
        );
        for (what, selector) in [
            ("virt-controller", "kubevirt.io=virt-controller"),
            ("virt-api", "kubevirt.io=virt-api"),
            ("virt-handler", "kubevirt.io=virt-handler"),
        ] {
            let out = self.cluster.kubectl([
                "logs",
                "-n",
                "kubevirt",
                "-l",
                selector,
                "--tail",
                "40",
                "--all-containers",
            ]);
            text.push_str(&format!(
                "\n--- {what}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let out = self.cluster.kubectl([
            "logs",
            "-n",
            self.ns,
            "-l",
            "kubevirt.io=virt-launcher",
            "--tail",
            "40",
            "--all-containers",
        ]);
        text.push_str(&format!(
            "\n--- virt-launcher\n{}",
            String::from_utf8_lossy(&out.stdout)
        ));
        for node in self.node.iter().chain(self.second.as_ref()) {
            text.push_str(&format!(
                "\n--- kubelet of {}\n{}",
                node.name(),
                node.log_tail(kvrs_test_cluster::NodeComponent::Kubelet, 30)
            ));
        }
        text
    }

    pub fn wait_ready(&self) {
        for (kind, name) in [
            ("deployment", "kvrs-virt-controller"),
            ("deployment", "kvrs-virt-api"),
            ("daemonset", "kvrs-virt-handler"),
        ] {
            wait_for(
                &format!("{kind}/{name} ready through its probes"),
                Duration::from_secs(240),
                || {
                    let o = kubectl_json(&self.cluster, &["get", kind, "-n", "kubevirt", name])?;
                    let status = &o["status"];
                    let ready = match kind {
                        "deployment" => status["readyReplicas"].as_u64(),
                        _ => status["numberReady"].as_u64(),
                    };
                    let wanted = match kind {
                        "deployment" => o["spec"]["replicas"].as_u64(),
                        _ => status["desiredNumberScheduled"].as_u64(),
                    };
                    (ready.is_some() && ready == wanted && wanted > Some(0)).then_some(())
                },
                || self.logs(),
            );
        }
    }

    /// Waits until virt-controller and virt-handler log that they took `useEmulation` from the
    /// KubeVirt CR.
    pub fn wait_emulation_taken(&self) {
        for (what, selector) in [
            ("virt-controller", "kubevirt.io=virt-controller"),
            ("virt-handler", "kubevirt.io=virt-handler"),
        ] {
            wait_for(
                &format!("{what} taking useEmulation from the CR, live"),
                Duration::from_secs(60),
                || {
                    let out = self
                        .cluster
                        .kubectl(["logs", "-n", "kubevirt", "-l", selector, "--tail", "-1"]);
                    String::from_utf8_lossy(&out.stdout)
                        .contains("use_emulation=true")
                        .then_some(())
                },
                || self.logs(),
            );
        }
    }
}

impl Drop for Deployed {
    /// The second node goes before the first (it shares the first node's kernel settings and
    /// host directories); the fields then drop as they always did.
    fn drop(&mut self) {
        if let Some(Err(e)) = self.second.take().map(RealNode::stop) {
            eprintln!("the second node's teardown: {e}");
        }
    }
}

/// PIDs of QEMU processes on the machine (launcher pods share its kernel).
pub fn qemu_processes() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            comm.trim().starts_with("qemu-system").then_some(pid)
        })
        .collect()
}

/// The KubeVirt CR README's "On a cluster" applies (`fixtures/cluster/kubevirt-cr.yaml`: the
/// ImageVolume gate), with `useEmulation` where KVM does not run guests (as its comment says).
pub fn kubevirt_cr(use_emulation: bool) -> String {
    let cr = std::fs::read_to_string(repo_root().join("fixtures/cluster/kubevirt-cr.yaml"))
        .expect("fixtures/cluster/kubevirt-cr.yaml");
    let marker = "    developerConfiguration:\n";
    assert!(cr.contains(marker), "the CR has a developerConfiguration");
    if use_emulation {
        cr.replace(marker, &format!("{marker}      useEmulation: true\n"))
    } else {
        cr
    }
}

/// Whether the node has the devices virt-handler's device plugins advertise for every VM: the
/// `kubevirt.io/schedulable` label, `devices.kubevirt.io/tun` allocatable and a `kvm` capacity.
pub fn node_schedulable(node: &Value) -> bool {
    node["metadata"]["labels"]["kubevirt.io/schedulable"] == "true"
        && allocatable(node, "tun")
        && node["status"]["capacity"]["devices.kubevirt.io/kvm"].is_string()
}

/// Whether `devices.kubevirt.io/RESOURCE` is allocatable on the node (and not zero).
pub fn allocatable(node: &Value, resource: &str) -> bool {
    node["status"]["allocatable"][format!("devices.kubevirt.io/{resource}")]
        .as_str()
        .is_some_and(|q| q != "0")
}
