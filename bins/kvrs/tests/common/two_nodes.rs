//! What a test on the two real nodes reads about one guest (`tests/real_migration.rs`,
//! `tests/real_migration_faults.rs`):
//! its VMI, launcher pods, console and migrations in a namespace, and the processes each node
//! runs, told apart by the cgroup each node's kubelet puts its pods under.

use std::process::Command;
use std::time::Duration;

use kvrs_test_cluster::{NODE_NAME, SECOND_NODE_NAME, wait_for};
use kvrs_test_guest::pod::repo_root;
use kvrs_test_guest::ticks::{TICK_LOOP, ticks};
use serde_json::Value;

use super::real_node::{Deployed, node_schedulable};
use super::{http_get, kubectl_json};

/// The port the guest's busybox httpd listens on.
pub const GUEST_PORT: u16 = 8080;

/// KubeVirt's `HostModelCPULabel` and `SupportedHostModelMigrationCPU` label prefixes.
const HOST_MODEL_LABEL: &str = "host-model-cpu.node.kubevirt.io/";
const MIGRATION_CPU_LABEL: &str = "cpu-model-migration.node.kubevirt.io/";

/// Waits until virt-handler's node labeller (from its init container's libvirt capabilities)
/// has labelled both nodes with their host CPU model, each one the other node accepts: a VMI
/// with the default `host-model` CPU is migrated only to a node whose
/// `cpu-model-migration.node.kubevirt.io/<model>` includes the source's
/// `host-model-cpu.node.kubevirt.io/<model>` (the target pod selects it). Both nodes are the
/// same machine, so each accepts the other's model.
pub fn wait_host_model_labels(d: &Deployed) {
    let models = |node: &str, prefix: &str| -> Vec<String> {
        kubectl_json(&d.cluster, &["get", "node", node])
            .and_then(|n| n["metadata"]["labels"].as_object().cloned())
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| (v == "true").then(|| k.strip_prefix(prefix).map(String::from)))
            .flatten()
            .collect()
    };
    for node in [NODE_NAME, SECOND_NODE_NAME] {
        let other = other_node(node);
        wait_for(
            &format!("{node}'s host CPU model labelled and accepted by {other}"),
            Duration::from_secs(120),
            || {
                let host = models(node, HOST_MODEL_LABEL);
                let accepted = models(other, MIGRATION_CPU_LABEL);
                (!host.is_empty() && host.iter().all(|m| accepted.contains(m))).then_some(())
            },
            || d.logs(),
        );
    }
}

/// The fixture VM in namespace `ns` with `evictionStrategy: LiveMigrate`, an httpd on
/// [`GUEST_PORT`] and the tick loop (counter, boot id, RAM pattern) on its console.
pub fn live_migrate_vm(ns: &str) -> String {
    let hello = "              KVRS-E2E: hello from cloud-init";
    let vm = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the fixture VM")
        .replace("namespace: default", &format!("namespace: {ns}"));
    assert!(vm.contains(hello), "the fixture's cloud-init line");
    let spec = "    spec:\n      domain:\n";
    assert!(vm.contains(spec), "the fixture's template spec");
    vm.replace(
        hello,
        &format!(
            "{hello}\n              KVRS-RUN: httpd -p {GUEST_PORT} -h /etc\n              {TICK_LOOP}"
        ),
    )
    .replace(
        spec,
        "    spec:\n      evictionStrategy: LiveMigrate\n      domain:\n",
    )
}

/// kvrs deployed on both real nodes with the KubeVirt CR `cr` (`Deployed::start_two`), both
/// nodes schedulable with KubeVirt's devices and labelled with their host CPU model (the
/// emulation taken where KVM does not run guests), and the [`live_migrate_vm`] applied in
/// namespace `ns`.
pub fn deploy_with_guest(ns: &'static str, cr: &str, use_emulation: bool) -> Deployed {
    let d = Deployed::start_two(ns, cr);
    for node in [NODE_NAME, SECOND_NODE_NAME] {
        wait_for(
            &format!("{node} schedulable with KubeVirt's devices"),
            Duration::from_secs(120),
            || kubectl_json(&d.cluster, &["get", "node", node]).filter(node_schedulable),
            || d.logs(),
        );
    }
    wait_host_model_labels(&d);
    if use_emulation {
        d.wait_emulation_taken();
    }
    d.kubectl_ok(&["create", "namespace", ns]);
    let out = d
        .cluster
        .kubectl_with_stdin(["apply", "-f", "-"], &live_migrate_vm(ns));
    assert!(
        out.status.success(),
        "kubectl apply of the VM: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// The other one of the two real nodes.
pub fn other_node(node: &str) -> &'static str {
    if node == NODE_NAME {
        SECOND_NODE_NAME
    } else {
        NODE_NAME
    }
}

/// The cgroup under which `node`'s kubelet runs its pods (`tests/cluster/src/node_layout.rs`).
fn pods_cgroup(node: &str) -> String {
    format!(":/{node}/kubepods")
}

/// PIDs of the processes whose `comm` starts with `comm` in `node`'s pods (other tests on this
/// machine may run their own guests and handlers outside them).
pub fn processes_on_node(node: &str, comm: &str) -> Vec<u32> {
    let cgroup = pods_cgroup(node);
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let c = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let cg = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
            (c.trim().starts_with(comm) && cg.contains(&cgroup)).then_some(pid)
        })
        .collect()
}

/// The guest QEMU processes of each node's pods: `(first node's, second node's)`. A QEMU that
/// runs no guest — libvirt's capability probe when a launcher's daemon starts (`-machine
/// none`, no `-name guest=`), the node labeller's `-machine help` — is no copy of the guest.
pub fn qemu_per_node() -> (Vec<u32>, Vec<u32>) {
    let guests = |node: &str| -> Vec<u32> {
        processes_on_node(node, "qemu-system")
            .into_iter()
            .filter(|pid| runs_a_guest(*pid))
            .collect()
    };
    (guests(NODE_NAME), guests(SECOND_NODE_NAME))
}

/// Every QEMU process of both nodes' pods with its command line (guests and probes alike), for
/// a failure's message.
pub fn qemu_command_lines() -> Vec<String> {
    [NODE_NAME, SECOND_NODE_NAME]
        .into_iter()
        .flat_map(|node| {
            processes_on_node(node, "qemu-system")
                .into_iter()
                .map(move |pid| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                        .unwrap_or_default();
                    format!(
                        "{node} {pid}: {}",
                        cmd.chars().take(300).collect::<String>()
                    )
                })
        })
        .collect()
}

/// Whether QEMU process `pid` was started for a domain (libvirt passes `-name guest=NAME,...`).
fn runs_a_guest(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| c.split(|b| *b == 0).any(|arg| arg.starts_with(b"guest=")))
        .unwrap_or(false)
}

/// The nodes running a QEMU for a guest, one entry per process.
pub fn qemu_nodes() -> Vec<&'static str> {
    let (a, b) = qemu_per_node();
    a.iter()
        .map(|_| NODE_NAME)
        .chain(b.iter().map(|_| SECOND_NODE_NAME))
        .collect()
}

/// One guest (`guest`) in namespace `ns` of a deployment on the two real nodes.
pub struct Guest<'a> {
    pub d: &'a Deployed,
    pub ns: &'static str,
}

impl Guest<'_> {
    pub fn vmi(&self) -> Option<Value> {
        kubectl_json(&self.d.cluster, &["get", "vmi", "-n", self.ns, "guest"])
    }

    pub fn launcher_pods(&self) -> Vec<Value> {
        kubectl_json(
            &self.d.cluster,
            &[
                "get",
                "pods",
                "-n",
                self.ns,
                "-l",
                "kubevirt.io=virt-launcher",
            ],
        )
        .and_then(|p| p["items"].as_array().cloned())
        .unwrap_or_default()
    }

    /// The launcher pod that is neither done nor being deleted on `node`.
    pub fn pod_on(&self, node: &str) -> Option<Value> {
        self.launcher_pods().into_iter().find(|p| {
            p["spec"]["nodeName"] == node
                && p["metadata"]["deletionTimestamp"].is_null()
                && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
    }

    /// The guest's serial console as the pod's `guest-console-log` container prints it.
    pub fn console(&self, pod: &str) -> String {
        let out = self.d.cluster.kubectl([
            "logs",
            "-n",
            self.ns,
            pod,
            "-c",
            "guest-console-log",
            "--tail=-1",
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn migration(&self, name: &str) -> Option<Value> {
        kubectl_json(
            &self.d.cluster,
            &[
                "get",
                "virtualmachineinstancemigration",
                "-n",
                self.ns,
                name,
            ],
        )
    }

    pub fn migrations(&self) -> Vec<Value> {
        kubectl_json(
            &self.d.cluster,
            &["get", "virtualmachineinstancemigrations", "-n", self.ns],
        )
        .and_then(|p| p["items"].as_array().cloned())
        .unwrap_or_default()
    }

    pub fn create_migration(&self, name: &str) {
        let vmim = format!(
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n  vmiName: guest\n",
            self.ns
        );
        let out = self
            .d
            .cluster
            .kubectl_with_stdin(["create", "-f", "-"], &vmim);
        assert!(
            out.status.success(),
            "kubectl create of the migration: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until migration `name` runs — its phase Running and the VMI's `migrationState`
    /// naming it as started — and its target pod is on `away`: (that pod, the migration's UID).
    pub fn wait_migration_running(&self, name: &str, away: &str) -> (Value, Value) {
        wait_for(
            &format!("migration {name} running, its target pod on {away}"),
            Duration::from_secs(180),
            || {
                let m = self.migration(name)?;
                let state = &self.vmi()?["status"]["migrationState"];
                let running = m["status"]["phase"] == "Running"
                    && state["migrationUid"] == m["metadata"]["uid"]
                    && state["startTimestamp"].is_string();
                running
                    .then(|| self.pod_on(away).map(|p| (p, m["metadata"]["uid"].clone())))
                    .flatten()
            },
            || self.context(),
        )
    }

    /// Waits for three ticks of the guest's loop on `pod`'s console: (the ticks, the console).
    pub fn wait_ticks(&self, pod: &str, what: &str) -> (Vec<(u64, String)>, String) {
        wait_for(
            &format!("three ticks {what}"),
            Duration::from_secs(120),
            || {
                let log = self.console(pod);
                let t = ticks(&log);
                (t.len() >= 3).then_some((t, log))
            },
            || format!("{}\n--- console\n{}", self.context(), self.console(pod)),
        )
    }

    /// Waits until the guest answers ping and HTTP on `ip`.
    pub fn wait_answering(&self, ip: &str, what: &str) {
        let body = wait_for(
            &format!("the guest answering ping and HTTP on {ip} ({what})"),
            Duration::from_secs(180),
            || {
                let ping = Command::new("ping")
                    .args(["-c", "1", "-W", "2", ip])
                    .output()
                    .ok()?;
                if !ping.status.success() {
                    return None;
                }
                http_get(ip, GUEST_PORT, "/os-release")
            },
            || self.context(),
        );
        assert!(
            body.contains(kvrs_test_guest::OS_PRETTY_NAME),
            "the guest's httpd served its /etc/os-release: {body}"
        );
    }

    /// The virt-handler pod of `node`.
    pub fn handler_pod(&self, node: &str) -> Option<Value> {
        kubectl_json(
            &self.d.cluster,
            &[
                "get",
                "pods",
                "-n",
                "kubevirt",
                "-l",
                "kubevirt.io=virt-handler",
                "--field-selector",
                &format!("spec.nodeName={node}"),
            ],
        )
        .and_then(|p| p["items"].as_array()?.first().cloned())
    }

    /// Everything a failing wait prints: the deployment's logs, the migrations, the VMI, the
    /// QEMU processes of each node.
    pub fn context(&self) -> String {
        let vmims = self.d.cluster.kubectl([
            "get",
            "virtualmachineinstancemigrations",
            "-n",
            self.ns,
            "-o",
            "yaml",
        ]);
        let vmi = self
            .d
            .cluster
            .kubectl(["get", "vmi", "-n", self.ns, "-o", "yaml"]);
        let handlers = self.d.cluster.kubectl([
            "logs",
            "-n",
            "kubevirt",
            "-l",
            "kubevirt.io=virt-handler",
            "--tail",
            "120",
            "--prefix",
        ]);
        format!(
            "{}\n--- migrations\n{}\n--- vmi\n{}\n--- handlers (longer)\n{}\n--- QEMU per node {:?}",
            self.d.logs(),
            String::from_utf8_lossy(&vmims.stdout),
            String::from_utf8_lossy(&vmi.stdout),
            String::from_utf8_lossy(&handlers.stdout),
            qemu_per_node(),
        )
    }
}
