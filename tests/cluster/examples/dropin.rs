//! The drop-in run (issue 48, Deliver 2): kvrs's virt-controller, virt-handler and launcher
//! swapped into a cluster that KubeVirt v1.9.0's own virt-operator installed and manages, through
//! the KubeVirt CR's `spec.customizeComponents`, and swapped back.
//!
//! Run by `benches/dropin/run.sh` (outside CI: it needs KubeVirt's images, built from a KubeVirt
//! source snapshot by `benches/dropin/build-kubevirt-images.sh`, and the operator's manifests,
//! generated from the same snapshot's own tools). On a real kubelet + containerd node
//! (`kvrs_test_cluster::RealNode`, one at a time on the machine: run.sh holds
//! `/tmp/kvrs-real-node.lock`) it:
//!
//! 1. installs KubeVirt through its operator (operator Deployment + RBAC, then the KubeVirt CR)
//!    and waits until the CR is `Available`;
//! 2. starts VM `before` with KubeVirt's own components and records its QEMU process;
//! 3. applies `bins/deploy/patches/kubevirt-dropin.patch.json` (the CR's
//!    `customizeComponents`: virt-controller's and virt-handler's images and the launcher image
//!    argument, nothing else) and waits until the operator has rolled kvrs's pods out and they
//!    are Ready;
//! 4. checks that `before` kept running (the same QEMU process, same start time), starts VM
//!    `after` under kvrs, and checks KubeVirt's virt-api still refuses a bad VM;
//! 5. opens `after`'s serial console and VNC display with KubeVirt's own virtctl through
//!    KubeVirt's virt-api (kube-apiserver's aggregator → virt-api → kvrs's handler, on the
//!    operator's certificates and `kubevirt-ca`): the guest's shell answers on the console, the
//!    display answers a viewer's RFB handshake;
//! 6. removes the patches (the way back), waits for KubeVirt's own pods, and checks both VMs
//!    are still running on the same QEMU processes.
//!
//! Each step prints its time; a failed step prints why (pod states, container logs) and the
//! steps that do not depend on it still run, so one run says everything it can. The whole logs
//! of the controller, handler and launcher pods and the VMIs are saved under
//! `$KVRS_DROPIN_LOGS` (default `/tmp/kvrs-dropin-logs`) at each failed step and once kvrs has
//! run VM `after`: the node is gone when the run ends. Exit status 0 only when every step
//! passed.
//!
//! usage: dropin --kubevirt-images DIR --kvrs-images DIR --manifests DIR --virtctl FILE
//! (FILE: `scripts/virtctl-harness.sh`'s binary, KubeVirt v1.9.0's virtctl commands)

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kvrs_test_cluster::{NodeComponent, Options, RealNode, TestCluster};
use kvrs_test_guest::virtctl::{Session, Virtctl, rfb_handshake};
use serde_json::Value;

/// A step's error: one line saying what failed and why (no panic: the run goes on and tears
/// the node down).
type Result<T, E = String> = std::result::Result<T, E>;

macro_rules! bail {
    ($($t:tt)*) => { return Err(format!($($t)*)) };
}
macro_rules! err {
    ($($t:tt)*) => { format!($($t)*) };
}

/// The directories on the host that virt-handler's DaemonSet mounts (created by the kubelet).
const HOST_DIRS: [&str; 3] = [
    "/var/run/kubevirt",
    "/var/run/kubevirt-private",
    "/var/run/kubevirt-libvirt-runtimes",
];

/// Prefix of a probe's error that ends a wait at once (see [`Run::wait`]).
const FATAL: &str = "fatal: ";

/// KubeVirt's images as the operator derives them (build-kubevirt-images.sh writes these names).
const KUBEVIRT_CONTROLLER: &str = "quay.io/kubevirt/virt-controller:v1.9.0";
const KUBEVIRT_HANDLER: &str = "quay.io/kubevirt/virt-handler:v1.9.0";
const KUBEVIRT_API: &str = "quay.io/kubevirt/virt-api:v1.9.0";
/// kvrs's images (scripts/images.sh), as the drop-in patch names them.
const KVRS_CONTROLLER: &str = "kvrs/virt-controller:v0.1.0";
const KVRS_HANDLER: &str = "kvrs/virt-handler:v0.1.0";
const KVRS_LAUNCHER: &str = "kvrs/virt-launcher:v0.1.0";

/// The VMs: a Debian kernel + busybox initramfs from kvrs's kernel-boot image, no NIC and no
/// disk image, so the run depends on nothing but the two control planes and the launcher. An
/// empty disk (`vda`) and the cloud-init disk (`vdb`, where the test guest's init reads its
/// `KVRS-RUN:` lines) give the guest a shell on its serial console, both made by the launcher.
fn vm(name: &str) -> String {
    format!(
        r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: {name}
  namespace: default
spec:
  runStrategy: Always
  template:
    metadata:
      labels:
        kubevirt.io/vm: {name}
    spec:
      domain:
        firmware:
          kernelBoot:
            kernelArgs: console=ttyS0 panic=-1
            container:
              image: kvrs.local/test-guest-kernel:v6
              kernelPath: /boot/vmlinuz
              initrdPath: /boot/initramfs.gz
        resources:
          requests:
            memory: 128Mi
        devices:
          autoattachPodInterface: false
          disks:
            - name: scratch
              disk:
                bus: virtio
            - name: cloudinit
              disk:
                bus: virtio
      volumes:
        - name: scratch
          emptyDisk:
            capacity: 16Mi
        - name: cloudinit
          cloudInitNoCloud:
            userData: |
              #cloud-config
              KVRS-RUN: sh -i </dev/ttyS0 >/dev/ttyS0 2>&1
"#
    )
}

/// A VM KubeVirt's VM webhook refuses: its disk names a volume that does not exist.
const BAD_VM: &str = r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: refused
  namespace: default
spec:
  runStrategy: Always
  template:
    spec:
      domain:
        resources:
          requests:
            memory: 128Mi
        devices:
          disks:
            - name: nowhere
              disk:
                bus: virtio
"#;

struct Args {
    kubevirt_images: PathBuf,
    kvrs_images: PathBuf,
    manifests: PathBuf,
    virtctl: PathBuf,
}

fn args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut kubevirt_images, mut kvrs_images, mut manifests, mut virtctl) =
        (None, None, None, None);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .map(PathBuf::from)
            .ok_or_else(|| err!("{flag}: a path is expected after it"))?;
        match flag.as_str() {
            "--kubevirt-images" => kubevirt_images = Some(value),
            "--kvrs-images" => kvrs_images = Some(value),
            "--manifests" => manifests = Some(value),
            "--virtctl" => virtctl = Some(value),
            _ => bail!(
                "unknown flag {flag} (usage: dropin --kubevirt-images DIR --kvrs-images DIR --manifests DIR --virtctl FILE)"
            ),
        }
    }
    let need = |v: Option<PathBuf>, name: &str| {
        v.filter(|p| p.is_dir())
            .ok_or_else(|| err!("--{name}: an existing directory is required"))
    };
    Ok(Args {
        kubevirt_images: need(kubevirt_images, "kubevirt-images")?,
        kvrs_images: need(kvrs_images, "kvrs-images")?,
        manifests: need(manifests, "manifests")?,
        virtctl: virtctl.filter(|p| p.is_file()).ok_or_else(|| {
            err!("--virtctl: an existing file is required (scripts/virtctl-harness.sh prints it)")
        })?,
    })
}

/// The control plane and the node. The node is torn down before the control plane stops.
struct Run {
    cluster: TestCluster,
    node: Option<RealNode>,
    started: Instant,
    results: Vec<(String, f64, Result<String, String>)>,
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(Err(e)) = self.node.take().map(RealNode::stop) {
            eprintln!("the node's teardown: {e}");
        }
    }
}

/// A QEMU process: PID and its start time in clock ticks after boot (`/proc/PID/stat` field 22),
/// so a restarted QEMU that got the same PID still counts as a different process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Qemu {
    pid: u32,
    start_ticks: u64,
}

/// The QEMU process running domain `<namespace>_<name>` (KubeVirt's domain name), if one runs.
fn qemu_of(namespace: &str, name: &str) -> Option<Qemu> {
    let want = format!("guest={namespace}_{name},");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !cmdline.contains("qemu-system") || !cmdline.contains(&want) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')')? + 2..];
        let start_ticks = rest.split_whitespace().nth(19)?.parse().ok()?;
        return Some(Qemu { pid, start_ticks });
    }
    None
}

impl Run {
    fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = self.cluster.kubectl(args);
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn json(&self, args: &[&str]) -> Option<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.cluster.kubectl(&all);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    fn apply_stdin(&self, yaml: &str) -> Result<String> {
        let out = self.cluster.kubectl_with_stdin(["apply", "-f", "-"], yaml);
        if !out.status.success() {
            bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Polls `probe` every second until it gives `Some`, or fails after `timeout` with the last
    /// reason it gave.
    fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut(&Run) -> Result<Option<T>, String>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("not checked yet");
        loop {
            match probe(self) {
                Ok(Some(v)) => return Ok(v),
                Ok(None) => {}
                // A state that will not heal by waiting (a crash loop) ends the wait at once.
                Err(why) if why.starts_with(FATAL) => bail!("{what}: {}", &why[FATAL.len()..]),
                Err(why) => last = why,
            }
            if Instant::now() >= deadline {
                bail!("timed out after {timeout:?} waiting for {what}: {last}");
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Runs one step, prints its outcome with the time since the start and its own duration.
    fn step(&mut self, what: &str, f: impl FnOnce(&Run) -> Result<String>) -> bool {
        let t = Instant::now();
        eprintln!("[{:7.1}s] {what} ...", self.started.elapsed().as_secs_f64());
        let result = f(self);
        let took = t.elapsed().as_secs_f64();
        match &result {
            Ok(detail) => println!(
                "[{:7.1}s] ok     {what} ({took:.1}s){}",
                self.started.elapsed().as_secs_f64(),
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(": {detail}")
                }
            ),
            Err(e) => {
                println!(
                    "[{:7.1}s] FAILED {what} ({took:.1}s): {e}",
                    self.started.elapsed().as_secs_f64()
                );
                eprintln!("{}", self.diagnostics());
            }
        }
        let ok = result.is_ok();
        self.results.push((what.to_string(), took, result));
        ok
    }

    /// What a failed step's reader needs: the workloads and pods of `kubevirt` and `default`,
    /// each kubevirt pod's container states, the recent logs of the controller and handler pods
    /// (the previous container's too, for a crash loop), and the kubelet's last lines.
    fn diagnostics(&self) -> String {
        let mut text = String::from("--- diagnostics\n");
        for args in [
            vec!["get", "kv,deploy,ds,pods", "-n", "kubevirt", "-o", "wide"],
            vec!["get", "vm,vmi,pods", "-n", "default", "-o", "wide"],
        ] {
            let out = self.cluster.kubectl(&args);
            text.push_str(&String::from_utf8_lossy(&out.stdout));
            text.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        if let Some(pods) = self.json(&["get", "pods", "-n", "kubevirt"]) {
            for pod in pods["items"].as_array().into_iter().flatten() {
                let name = pod["metadata"]["name"].as_str().unwrap_or("?");
                for cs in pod["status"]["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let waiting = &cs["state"]["waiting"];
                    let terminated = &cs["lastState"]["terminated"];
                    if waiting.is_object() || terminated.is_object() {
                        text.push_str(&format!(
                            "{name}/{}: image {} waiting {} last exit {} {}\n",
                            cs["name"].as_str().unwrap_or("?"),
                            cs["image"],
                            waiting["reason"],
                            terminated["exitCode"],
                            terminated["reason"],
                        ));
                        for previous in ["--previous", "--timestamps"] {
                            let out = self.cluster.kubectl([
                                "logs",
                                "-n",
                                "kubevirt",
                                name,
                                "-c",
                                cs["name"].as_str().unwrap_or(""),
                                "--tail",
                                "15",
                                previous,
                            ]);
                            let log = String::from_utf8_lossy(&out.stdout);
                            if !log.trim().is_empty() {
                                text.push_str(&format!("  logs ({previous}):\n{log}"));
                            }
                        }
                    }
                }
            }
        }
        text.push_str(&self.save_logs());
        let events = self
            .cluster
            .kubectl(["get", "events", "-A", "--sort-by", ".lastTimestamp"]);
        let events = String::from_utf8_lossy(&events.stdout);
        let tail: Vec<&str> = events.lines().rev().take(25).collect();
        text.push_str("--- last events\n");
        for line in tail.into_iter().rev() {
            text.push_str(line);
            text.push('\n');
        }
        if let Some(node) = &self.node {
            text.push_str(&format!(
                "--- kubelet\n{}",
                node.log_tail(NodeComponent::Kubelet, 15)
            ));
        }
        text
    }

    /// Saves the whole logs of every container of the virt-controller, virt-handler and launcher
    /// pods, and the VMIs as the API server has them, under `$KVRS_DROPIN_LOGS` (default
    /// `/tmp/kvrs-dropin-logs`, one directory per failed step): the node is torn down at the
    /// end, and why a VMI stays in a phase is in those logs (a refused write is a `sync failed`
    /// line of the handler's). Answers where they went and the warnings of the handler and
    /// controller logs, the lines a reader looks at first.
    fn save_logs(&self) -> String {
        let base = std::env::var_os("KVRS_DROPIN_LOGS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp/kvrs-dropin-logs"));
        let dir = base.join(format!("{:05.0}s", self.started.elapsed().as_secs_f64()));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return format!("--- logs: cannot create {}: {e}\n", dir.display());
        }
        let mut text = format!("--- logs saved in {}\n", dir.display());
        let vmis = self
            .cluster
            .kubectl(["get", "vmi", "-n", "default", "-o", "yaml"]);
        let _ = std::fs::write(dir.join("vmis.yaml"), &vmis.stdout);
        for (namespace, selector) in [
            ("kubevirt", "kubevirt.io in (virt-controller,virt-handler)"),
            ("default", "kubevirt.io=virt-launcher"),
        ] {
            let Some(pods) = self.json(&["get", "pods", "-n", namespace, "-l", selector]) else {
                continue;
            };
            for pod in pods["items"].as_array().into_iter().flatten() {
                let name = pod["metadata"]["name"].as_str().unwrap_or("?");
                let containers = ["initContainers", "containers"]
                    .into_iter()
                    .flat_map(|k| pod["spec"][k].as_array().cloned().unwrap_or_default());
                for c in containers {
                    let container = c["name"].as_str().unwrap_or("");
                    let out = self.cluster.kubectl([
                        "logs",
                        "-n",
                        namespace,
                        name,
                        "-c",
                        container,
                        "--timestamps",
                    ]);
                    let log = String::from_utf8_lossy(&out.stdout).into_owned();
                    let _ = std::fs::write(dir.join(format!("{name}_{container}.log")), &log);
                    if namespace == "kubevirt" {
                        let warnings: Vec<&str> = log
                            .lines()
                            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                            .collect();
                        let shown = warnings.len().saturating_sub(10);
                        for line in &warnings[shown..] {
                            text.push_str(&format!("  {name}/{container}: {line}\n"));
                        }
                    }
                }
            }
        }
        text
    }

    /// The first container (init or regular) of a `kubevirt` pod that has restarted three times
    /// or more: a component that will not come up by waiting, with its last exit.
    fn crash_looping(&self) -> Option<String> {
        let pods = self.json(&["get", "pods", "-n", "kubevirt"])?;
        for pod in pods["items"].as_array().into_iter().flatten() {
            let statuses = ["initContainerStatuses", "containerStatuses"]
                .into_iter()
                .flat_map(|k| pod["status"][k].as_array().cloned().unwrap_or_default());
            for cs in statuses {
                if cs["restartCount"].as_u64().unwrap_or(0) >= 3 {
                    let last = &cs["lastState"]["terminated"];
                    return Some(format!(
                        "pod {} container {} restarted {} times, last exit {}: {}",
                        pod["metadata"]["name"].as_str().unwrap_or("?"),
                        cs["name"].as_str().unwrap_or("?"),
                        cs["restartCount"],
                        last["exitCode"],
                        last["message"].as_str().unwrap_or("").trim()
                    ));
                }
            }
        }
        None
    }

    /// Whether every pod of `selector` in `kubevirt` runs `image` in container `container` and is
    /// Ready, and there is at least one (the rollout of a swap is done).
    fn pods_ready_with(
        &self,
        selector: &str,
        container: &str,
        image: &str,
    ) -> Result<Option<usize>, String> {
        let pods = self
            .json(&["get", "pods", "-n", "kubevirt", "-l", selector])
            .ok_or("cannot list pods")?;
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let live: Vec<&Value> = items
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        if live.is_empty() {
            return Err(format!("no pod with {selector}"));
        }
        // The first reason to keep waiting; a crash loop of an incoming pod ends the wait at
        // once even while outgoing pods still run (a Deployment keeps them until it is Ready).
        let mut waiting_for = None;
        for pod in &live {
            let name = pod["metadata"]["name"].as_str().unwrap_or("?");
            let spec_image = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == container)
                .and_then(|c| c["image"].as_str())
                .unwrap_or("");
            if spec_image != image {
                waiting_for.get_or_insert(format!("pod {name} runs {spec_image}, not {image}"));
                continue;
            }
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if !ready {
                for cs in pod["status"]["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let waiting = cs["state"]["waiting"]["reason"].as_str().unwrap_or("");
                    let restarts = cs["restartCount"].as_u64().unwrap_or(0);
                    if restarts >= 3 || waiting.contains("Err") {
                        return Err(format!(
                            "{FATAL}pod {name} ({image}): container {} {waiting}, {restarts} restarts, \
                             last exit {}: {}",
                            cs["name"],
                            cs["lastState"]["terminated"]["exitCode"],
                            cs["lastState"]["terminated"]["message"]
                                .as_str()
                                .unwrap_or("")
                                .trim()
                        ));
                    }
                }
                waiting_for.get_or_insert(format!("pod {name} ({image}) is not Ready"));
            }
        }
        match waiting_for {
            Some(why) => Err(why),
            None => Ok(Some(live.len())),
        }
    }

    /// Waits until the operator has rolled virt-controller and virt-handler out with the given
    /// images and every pod of both is Ready.
    fn wait_components(&self, controller: &str, handler: &str) -> Result<String> {
        let c = self.wait(
            &format!("virt-controller pods on {controller}, Ready"),
            Duration::from_secs(420),
            |r| r.pods_ready_with("kubevirt.io=virt-controller", "virt-controller", controller),
        )?;
        let h = self.wait(
            &format!("virt-handler pods on {handler}, Ready"),
            Duration::from_secs(420),
            |r| r.pods_ready_with("kubevirt.io=virt-handler", "virt-handler", handler),
        )?;
        Ok(format!(
            "{c} virt-controller and {h} virt-handler pod(s) Ready"
        ))
    }

    /// Waits until VM `name`'s VMI is Running and its QEMU process exists; returns the process
    /// and the launcher pod's image.
    fn wait_vm_running(&self, name: &str) -> Result<(Qemu, String)> {
        self.wait(
            &format!("VMI default/{name} Running with a QEMU process"),
            Duration::from_secs(180),
            |r| {
                let vmi = r
                    .json(&["get", "vmi", "-n", "default", name])
                    .ok_or("no VMI yet")?;
                let phase = vmi["status"]["phase"].as_str().unwrap_or("");
                if phase != "Running" {
                    // Why a launcher pod waits: the node's `kubevirt.io/schedulable` label (the
                    // handler's heartbeat sets it false until its device plugins run).
                    let node = r
                        .json(&["get", "node", kvrs_test_cluster::NODE_NAME])
                        .map(|n| n["metadata"]["labels"]["kubevirt.io/schedulable"].clone())
                        .unwrap_or(Value::Null);
                    return Err(format!(
                        "VMI phase {phase:?}; node label kubevirt.io/schedulable={node}"
                    ));
                }
                let qemu = qemu_of("default", name).ok_or("no QEMU process for its domain")?;
                let pods = r
                    .json(&[
                        "get",
                        "pods",
                        "-n",
                        "default",
                        "-l",
                        &format!("kubevirt.io=virt-launcher,vm.kubevirt.io/name={name}"),
                    ])
                    .ok_or("cannot list its launcher pod")?;
                let image = pods["items"][0]["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["name"] == "compute")
                    .and_then(|c| c["image"].as_str())
                    .ok_or("no launcher pod with a compute container")?
                    .to_string();
                Ok(Some((qemu, image)))
            },
        )
    }

    /// When VM `name`'s VMI entered each phase, in seconds after the VMI was created (its
    /// `status.phaseTransitionTimestamps`, whole seconds): where the time to Running went.
    fn phase_timeline(&self, name: &str) -> String {
        let Some(vmi) = self.json(&["get", "vmi", "-n", "default", name]) else {
            return String::from("no VMI");
        };
        let seconds = |t: &Value| t.as_str().and_then(unix_seconds);
        let Some(created) = seconds(&vmi["metadata"]["creationTimestamp"]) else {
            return String::from("no creationTimestamp");
        };
        let stamps: Vec<String> = vmi["status"]["phaseTransitionTimestamps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let at = seconds(&s["phaseTransitionTimestamp"])
                    .map_or_else(|| "?".to_string(), |t| format!("+{}s", t - created));
                format!("{} {at}", s["phase"].as_str().unwrap_or("?"))
            })
            .collect();
        format!("phases after the VMI's creation: {}", stamps.join(", "))
    }

    /// VM `name`'s VMI phase and its launcher pods' states (a terminated container's message).
    fn vm_state(&self, name: &str) -> String {
        let phase = self
            .json(&["get", "vmi", "-n", "default", name])
            .map_or_else(
                || "no VMI".to_string(),
                |v| format!("VMI phase {}", v["status"]["phase"]),
            );
        let pods = self
            .json(&[
                "get",
                "pods",
                "-n",
                "default",
                "-l",
                &format!("kubevirt.io=virt-launcher,vm.kubevirt.io/name={name}"),
            ])
            .map(|p| p["items"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default();
        let mut text = phase;
        for pod in &pods {
            text.push_str(&format!(
                "; pod {} {} (image {})",
                pod["metadata"]["name"].as_str().unwrap_or("?"),
                pod["status"]["phase"].as_str().unwrap_or("?"),
                pod["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or("?"),
            ));
            for cs in pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let t = &cs["state"]["terminated"];
                if t.is_object() {
                    text.push_str(&format!(
                        ", {} exited {}: {}",
                        cs["name"].as_str().unwrap_or("?"),
                        t["exitCode"],
                        t["message"].as_str().unwrap_or("").trim()
                    ));
                }
            }
        }
        text
    }

    /// Checks VM `name` is still Running on the very QEMU process recorded before.
    fn still_running(&self, name: &str, before: Qemu) -> Result<String> {
        let vmi = self
            .json(&["get", "vmi", "-n", "default", name])
            .ok_or_else(|| err!("VMI default/{name} is gone"))?;
        let phase = vmi["status"]["phase"].as_str().unwrap_or("");
        if phase != "Running" {
            bail!("VMI default/{name} is {phase:?}, not Running");
        }
        match qemu_of("default", name) {
            Some(now) if now == before => Ok(format!(
                "VMI Running, same QEMU process (pid {}, started at tick {})",
                now.pid, now.start_ticks
            )),
            Some(now) => bail!("its QEMU changed: {before:?} before, {now:?} now"),
            None => bail!("its QEMU process {before:?} is gone"),
        }
    }
}

/// Seconds since the epoch of a Kubernetes timestamp (`2026-12-06T17:04:05Z`, UTC, whole
/// seconds, as the API server writes them).
fn unix_seconds(t: &str) -> Option<i64> {
    let t = t.strip_suffix('Z')?;
    let (date, time) = t.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut h = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

fn archives(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".oci.tar"))
        .collect();
    out.sort();
    if out.is_empty() {
        bail!("no *.oci.tar in {}", dir.display());
    }
    Ok(out)
}

fn main() {
    if let Err(e) = drive() {
        eprintln!("dropin: {e}");
        std::process::exit(1);
    }
}

fn drive() -> Result<()> {
    let args = args()?;
    let root = kvrs_test_cluster::workspace_root().ok_or("no workspace root")?;
    let patch = root.join("bins/deploy/patches/kubevirt-dropin.patch.json");
    let operator = args.manifests.join("kubevirt-operator.yaml");
    let cr = std::fs::read_to_string(args.manifests.join("kubevirt-cr.yaml"))
        .map_err(|e| format!("the KubeVirt CR manifest: {e}"))?;
    let mut images = archives(&args.kubevirt_images)?;
    // kvrs's images and the guest's kernel-boot image.
    images.extend(archives(&args.kvrs_images)?.into_iter().filter(|p| {
        let n = p.file_name().unwrap_or_default().to_string_lossy();
        n.starts_with("kvrs_") || n.starts_with("kvrs.local_test-guest-kernel")
    }));

    let started = Instant::now();
    let cluster = TestCluster::start_for_node(Options::full())
        .map_err(|e| format!("the control plane: {e}"))?;
    let node = RealNode::start(&cluster).map_err(|e| format!("the real node: {e}"))?;
    for dir in HOST_DIRS {
        node.remove_on_teardown(Path::new(dir))
            .map_err(|e| e.to_string())?;
    }
    // virt-handler mounts it Bidirectional.
    node.share_on_host(Path::new(HOST_DIRS[0]))
        .map_err(|e| e.to_string())?;
    let mut run = Run {
        cluster,
        node: Some(node),
        started,
        results: Vec::new(),
    };
    println!(
        "[{:7.1}s] ok     control plane + real node",
        started.elapsed().as_secs_f64()
    );

    let base = run.step("images imported into the node's containerd", |r| {
        let node = r.node.as_ref().expect("the node");
        for archive in &images {
            node.import_image(archive)
                .map_err(|e| format!("importing {}: {e}", archive.display()))?;
        }
        Ok(format!("{} images", images.len()))
    }) && run.step(
        "KubeVirt's virt-operator installed (its own manifests)",
        |r| {
            // The operator's Deployment requires a control-plane node; the one node is that, as
            // in any single-node cluster (kubeadm, kind) this would run on.
            r.kubectl(&[
                "label",
                "node",
                kvrs_test_cluster::NODE_NAME,
                "node-role.kubernetes.io/control-plane=",
                "--overwrite",
            ])?;
            r.kubectl(&["apply", "-f", operator.to_str().unwrap_or_default()])?;
            r.wait(
                "deployment kubevirt/virt-operator Ready",
                Duration::from_secs(300),
                |r| {
                    let d = r
                        .json(&["get", "deployment", "-n", "kubevirt", "virt-operator"])
                        .ok_or("no deployment yet")?;
                    let want = d["spec"]["replicas"].as_u64();
                    let ready = d["status"]["readyReplicas"].as_u64();
                    if want.is_some() && ready == want {
                        Ok(Some(format!("{} replicas Ready", want.unwrap_or(0))))
                    } else {
                        Err(format!("{ready:?} of {want:?} replicas Ready"))
                    }
                },
            )
        },
    ) && run.step("KubeVirt CR Available (KubeVirt's own components)", |r| {
        r.apply_stdin(&cr)?;
        r.wait(
            "KubeVirt CR kubevirt/kubevirt Available",
            Duration::from_secs(900),
            |r| {
                let kv = r
                    .json(&["get", "kv", "-n", "kubevirt", "kubevirt"])
                    .ok_or("no CR")?;
                let available = kv["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Available" && c["status"] == "True");
                if available {
                    Ok(Some(format!(
                        "phase {}, observed version {}",
                        kv["status"]["phase"], kv["status"]["observedKubeVirtVersion"]
                    )))
                } else if let Some(stuck) = r.crash_looping() {
                    Err(format!("{FATAL}phase {}; {stuck}", kv["status"]["phase"]))
                } else {
                    Err(format!("phase {}", kv["status"]["phase"]))
                }
            },
        )?;
        r.wait_components(KUBEVIRT_CONTROLLER, KUBEVIRT_HANDLER)
    });
    if !base {
        return summary(&run);
    }
    run.step(
        "kvrs's own manifests vs the objects KubeVirt's operator made",
        |r| overlaps(r, &root.join("bins/deploy")),
    );

    // Without a VM under KubeVirt's components the swap is still tried: what kvrs's daemons do
    // under the operator's Deployment and DaemonSet is this run's other half.
    let mut before = None;
    run.step("VM `before` Running under KubeVirt's components", |r| {
        r.apply_stdin(&vm("before"))?;
        let (qemu, image) = r.wait_vm_running("before")?;
        before = Some(qemu);
        Ok(format!("QEMU pid {}, launcher image {image}", qemu.pid))
    });

    let swapped = run.step(
        "swap: the CR's customizeComponents → kvrs's images",
        |r| {
            r.kubectl(&[
                "patch",
                "kv",
                "kubevirt",
                "-n",
                "kubevirt",
                "--type",
                "merge",
                "--patch-file",
                patch.to_str().unwrap_or_default(),
            ])?;
            r.wait_components(KVRS_CONTROLLER, KVRS_HANDLER)
        },
    );
    if let Some(before) = before {
        run.step("VM `before` still running across the swap", |r| {
            r.still_running("before", before)
        });
    }
    let mut after = None;
    if swapped {
        run.step("VM `after` starts under kvrs", |r| {
            r.apply_stdin(&vm("after"))?;
            let (qemu, image) = r.wait_vm_running("after")?;
            if image != KVRS_LAUNCHER {
                bail!("its launcher pod runs {image}, not kvrs's {KVRS_LAUNCHER}");
            }
            after = Some(qemu);
            Ok(format!(
                "QEMU pid {}, launcher image {image}; {}",
                qemu.pid,
                r.phase_timeline("after")
            ))
        });
        if after.is_some() {
            run.step(
                "VM `after`'s console and VNC through KubeVirt's virt-api (virtctl)",
                |r| console_and_vnc(r, &args.virtctl, "after"),
            );
        }
        // What kvrs's daemons logged while they ran the VM (the node goes at the end).
        eprintln!("{}", run.save_logs().lines().next().unwrap_or(""));
        if before.is_none() {
            // Not a step: KubeVirt's handler never started it here, but its fate under kvrs's
            // handler is worth a line.
            println!(
                "[{:7.1}s] note   VM `before` under kvrs: {}",
                run.started.elapsed().as_secs_f64(),
                run.vm_state("before")
            );
        }
    }
    run.step(
        "KubeVirt's virt-api still validates: a bad VM refused",
        |r| {
            r.pods_ready_with("kubevirt.io=virt-api", "virt-api", KUBEVIRT_API)
                .map_err(|e| format!("virt-api: {e}"))?;
            match r.apply_stdin(BAD_VM) {
                Ok(out) => bail!("the bad VM was admitted: {out}"),
                // KubeVirt's VM admitter's own message for a disk without a volume (kubectl shows
                // the webhook's 422 as "The request is invalid").
                Err(e) if e.contains("'nowhere' not found") => Ok(e),
                Err(e) => bail!("refused, but not by a webhook: {e}"),
            }
        },
    );

    run.step(
        "swap back: customizeComponents removed → KubeVirt's images",
        |r| {
            r.kubectl(&[
                "patch",
                "kv",
                "kubevirt",
                "-n",
                "kubevirt",
                "--type",
                "json",
                "--patch",
                r#"[{"op":"remove","path":"/spec/customizeComponents/patches"}]"#,
            ])?;
            r.wait_components(KUBEVIRT_CONTROLLER, KUBEVIRT_HANDLER)
        },
    );
    if let Some(before) = before {
        run.step("VM `before` still running after the swap back", |r| {
            r.still_running("before", before)
        });
    }
    if let Some(after) = after {
        run.step("VM `after` still running after the swap back", |r| {
            r.still_running("after", after)
        });
    }
    summary(&run)
}

/// `virtctl console NAME` and `virtctl vnc NAME --proxy-only` (KubeVirt's own commands) as a
/// user runs them: through kube-apiserver's aggregator to KubeVirt's virt-api, which dials the
/// VM's node's handler — here kvrs's, on the certificates KubeVirt's operator issued. The
/// guest's shell must answer a command on the console, Ctrl+] must end virtctl cleanly, and the
/// display must complete a viewer's RFB handshake.
fn console_and_vnc(r: &Run, virtctl: &Path, name: &str) -> Result<String> {
    let virtctl = Virtctl {
        bin: virtctl.to_path_buf(),
        kubeconfig: r.cluster.admin_kubeconfig_path().to_path_buf(),
        namespace: "default".into(),
    };
    let scratch = tempfile::tempdir().map_err(|e| format!("a scratch directory: {e}"))?;
    let mut console = Session::start(
        &virtctl,
        &["console", name, "--timeout=1"],
        &scratch.path().join("console.err"),
    );
    console.ask("echo KVRS-DROPIN-$((6*7))", "KVRS-DROPIN-42")?;
    if !console
        .stderr()
        .contains(&format!("Successfully connected to {name} console"))
    {
        bail!(
            "virtctl console did not say it connected: {}",
            console.stderr()
        );
    }
    console.type_in(&[29]); // Ctrl+]
    match console.wait(Duration::from_secs(20)) {
        Some(s) if s.success() => {}
        other => bail!(
            "virtctl console after Ctrl+]: {other:?}\n{}",
            console.stderr()
        ),
    }
    drop(console);

    let mut vnc = Session::start(
        &virtctl,
        &["vnc", name, "--proxy-only"],
        &scratch.path().join("vnc.err"),
    );
    let port = r.wait("virtctl vnc's port", Duration::from_secs(60), |_| {
        let out = vnc.stdout();
        let port = out
            .lines()
            .next()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .and_then(|v| v["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok());
        match port {
            Some(p) => Ok(Some(p)),
            None => Err(format!(
                "stdout {:?}, stderr {:?}",
                vnc.stdout(),
                vnc.stderr()
            )),
        }
    })?;
    // The handshake helper asserts each step; its panic message is this step's reason.
    let server = std::panic::catch_unwind(|| rfb_handshake(port)).map_err(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        err!(
            "the RFB handshake through virtctl's proxy: {why}\n{}",
            vnc.stderr()
        )
    })?;
    if server.width == 0 || server.height == 0 {
        bail!("a {}x{} display", server.width, server.height);
    }
    match vnc.wait(Duration::from_secs(20)) {
        Some(s) if s.success() => {}
        other => bail!(
            "virtctl vnc after the viewer left: {other:?}\n{}",
            vnc.stderr()
        ),
    }
    Ok(format!(
        "the guest's shell answered on the console; VNC {} {}x{} \"{}\"",
        server.version, server.width, server.height, server.name
    ))
}

/// Which objects of kvrs's own manifests (`bins/deploy`) already exist once KubeVirt's operator
/// has installed KubeVirt, and whether the operator owns them: applying those manifests there
/// would overwrite them. Only the objects whose names Kubernetes or KubeVirt's API fix — the
/// CRDs, the APIServices of `subresources.kubevirt.io` and the namespace `kubevirt` — may
/// overlap (that is why bins/deploy/README.md says to apply none of them on such a cluster);
/// any other overlap fails the step.
fn overlaps(r: &Run, deploy: &Path) -> Result<String> {
    let mut fixed = Vec::new();
    let mut wrong = Vec::new();
    for dir in ["crds", "virt-controller", "virt-handler", "virt-api"] {
        let path = deploy.join(dir);
        let out = r.cluster.kubectl([
            "get",
            "-f",
            path.to_str().unwrap_or_default(),
            "--ignore-not-found",
            "-o",
            "json",
        ]);
        if out.stdout.is_empty() {
            continue;
        }
        let found: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("kubectl get -f {}: {e}", path.display()))?;
        let items = match found["kind"].as_str() {
            Some("List") => found["items"].as_array().cloned().unwrap_or_default(),
            _ => vec![found],
        };
        for o in items {
            let kind = o["kind"].as_str().unwrap_or("?").to_string();
            let name = o["metadata"]["name"].as_str().unwrap_or("?").to_string();
            let managed = o["metadata"]["labels"]["app.kubernetes.io/managed-by"]
                .as_str()
                .unwrap_or("-")
                .to_string();
            let entry = format!("{kind}/{name} (managed-by {managed})");
            let name_fixed = matches!(kind.as_str(), "CustomResourceDefinition" | "APIService")
                || (kind == "Namespace" && name == "kubevirt");
            if name_fixed {
                fixed.push(entry);
            } else {
                wrong.push(entry);
            }
        }
    }
    if !wrong.is_empty() {
        bail!("kvrs's manifests would overwrite: {}", wrong.join(", "));
    }
    Ok(format!(
        "no kvrs-named object exists; only fixed names overlap: {}",
        fixed.join(", ")
    ))
}

/// Prints every step's outcome once more and fails when one failed.
fn summary(run: &Run) -> Result<()> {
    println!("--- summary ({:.1}s)", run.started.elapsed().as_secs_f64());
    let mut failed = 0;
    for (what, took, result) in &run.results {
        match result {
            Ok(_) => println!("ok     {took:6.1}s  {what}"),
            Err(e) => {
                failed += 1;
                let first = e.lines().next().unwrap_or("");
                println!("FAILED {took:6.1}s  {what}: {first}");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} step(s) failed");
    }
    Ok(())
}
