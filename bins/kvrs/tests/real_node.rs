//! kvrs deployed as an operator deploys it, on a real node: a real kube-apiserver, etcd,
//! kube-controller-manager and kube-scheduler, and a real kubelet + containerd + runc + CNI
//! bridge + kube-proxy (`kvrs_test_cluster::RealNode`, all built from Go modules); kvrs's own
//! images (`scripts/images.sh`, imported with `ctr -n k8s.io images import`); the shipped
//! manifests of `bins/deploy` applied unchanged, so virt-controller and virt-api run as
//! Deployments and virt-handler as a DaemonSet, all Ready through their probes (the controller
//! told `--virt-api-webhooks` by the shipped patch); virt-api's webhooks refuse a VM KubeVirt
//! refuses, with KubeVirt's message, and its aggregated API is discovered through the
//! apiserver; virt-handler's device plugins
//! advertise `/dev/kvm` and `/dev/net/tun` to the kubelet; a KubeVirt CR enables image volumes,
//! so container disks go through the kubelet's ImageVolume support.
//!
//! A VM in the style of KubeVirt's user guide (container disk, cloud-init NoCloud, masquerade)
//! boots: Running, a DHCP lease, the guest answers ping and a TCP connection on the pod IP from
//! the host; pause / unpause through the subresource API (virt-api forwards them to the
//! virt-handler pod of the node over mutual TLS; the VMI gets and loses its `Paused` condition);
//! stop / start through the subresource API (`PUT .../virtualmachines/guest/stop`, as
//! virtctl sends it, through kube-apiserver's aggregator to virt-api) and `kubectl delete` leave
//! nothing behind.
//!
//! Between the two, a seeded fault campaign on the node ([`fault_rounds`]): virt-handler's,
//! virt-controller's, the launcher's, its monitor's and its libvirt daemon's processes killed
//! (the kubelet restarts the daemons' containers; the VM controller replaces a failed VMI), the
//! kubelet killed and restarted, kube-apiserver restarted — while the VM runs, or while it
//! stops. After each: one VMI Running with one QEMU and the guest answering, or (stopping)
//! nothing left; at the end the node's teardown finds nothing behind.
//!
//! Under KVM where `/dev/kvm` really runs guests (`kvrs_node::host_devices::kvm_check`): the
//! device plugin advertises `devices.kubevirt.io/kvm`, the pod requests it and QEMU runs with
//! `accel=kvm`. Where it does not (these machines: `/dev/kvm` is backed by `kvm_pvm`, which
//! creates VMs but runs only PVM-enabled guest kernels, and Debian ships none), the plugin keeps
//! `kvm` unallocatable, so the KubeVirt CR must allow emulation (KubeVirt's `useEmulation`) and
//! the guest runs under TCG: the test asserts whichever the host's fact says.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::real_node::{Deployed, allocatable, kubevirt_cr};
use common::{http_get, kubectl_json};
use kvrs_test_cluster::{NODE_NAME, wait_for};
use kvrs_test_guest::pod::{is_root, repo_root};
use serde_json::Value;

const NS: &str = "kvrs-real-node";
/// The port the guest's busybox httpd listens on (started from its cloud-init user-data).
const GUEST_PORT: u16 = 8080;
impl Deployed {
    fn apply_vm(&self) {
        let hello = "              KVRS-E2E: hello from cloud-init";
        let vm = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
            .expect("the fixture VM")
            .replace("namespace: default", &format!("namespace: {NS}"));
        assert!(vm.contains(hello), "the fixture's cloud-init line");
        let vm = vm.replace(
            hello,
            &format!("{hello}\n              KVRS-RUN: httpd -p {GUEST_PORT} -h /etc"),
        );
        let out = self.cluster.kubectl_with_stdin(["apply", "-f", "-"], &vm);
        assert!(
            out.status.success(),
            "kubectl apply of the VM: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Without KVM and without emulation the launcher pod cannot get `devices.kubevirt.io/kvm`:
    /// the VMI shows the scheduler's reason as KubeVirt shows it (`PodScheduled=False`,
    /// `Unschedulable`, the VM `ErrorUnschedulable`). Then the CR allows emulation, live: the
    /// daemons take it without a restart, and the next VM's pod asks for no KVM.
    fn unschedulable_without_kvm_then_emulation(&self) {
        self.apply_vm();
        let vmi = wait_for(
            "the VMI unschedulable for want of devices.kubevirt.io/kvm",
            Duration::from_secs(120),
            || {
                let vm = kubectl_json(&self.cluster, &["get", "vm", "-n", NS, "guest"])?;
                let vmi = kubectl_json(&self.cluster, &["get", "vmi", "-n", NS, "guest"])?;
                let scheduled = vmi["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "PodScheduled")?
                    .clone();
                (vm["status"]["printableStatus"] == "ErrorUnschedulable"
                    && scheduled["status"] == "False"
                    && scheduled["reason"] == "Unschedulable")
                    .then_some(scheduled)
            },
            || self.logs(),
        );
        assert!(
            vmi["message"]
                .as_str()
                .is_some_and(|m| m.contains("devices.kubevirt.io/kvm")),
            "the scheduler's reason names the missing device: {vmi}"
        );
        self.kubectl_ok(&["delete", "vm", "-n", NS, "guest", "--wait=false"]);
        self.wait_gone("the unschedulable VM deleted");
        let out = self
            .cluster
            .kubectl_with_stdin(["apply", "-f", "-"], &kubevirt_cr(true));
        assert!(
            out.status.success(),
            "the KubeVirt CR with useEmulation: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_emulation_taken();
    }

    /// virt-api, deployed from bins/deploy/virt-api, answers as KubeVirt's: a VM KubeVirt
    /// refuses is refused by `kubectl apply` with KubeVirt's message, and the aggregated
    /// subresource API is discovered through kube-apiserver.
    fn virt_api_refuses_what_kubevirt_refuses(&self) {
        let both = r#"{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "both", "namespace": "kubevirt"},
            "spec": {"running": true, "runStrategy": "Always",
                "template": {"spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}}}}"#;
        let last = std::cell::RefCell::new(String::new());
        let refused = wait_for(
            "virt-api's validating webhook answering",
            Duration::from_secs(120),
            || {
                let out = self.cluster.kubectl_with_stdin(["apply", "-f", "-"], both);
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                last.replace(format!("{}{err}", String::from_utf8_lossy(&out.stdout)));
                // kubectl prints a webhook's 422 as its causes ("The request is invalid:
                // FIELD: MESSAGE"), as it prints KubeVirt's.
                (!out.status.success() && err.contains("The request is invalid")).then_some(err)
            },
            || format!("the last answer: {}\n{}", last.borrow(), self.logs()),
        );
        assert!(
            refused.contains("spec.running: Running and RunStrategy are mutually exclusive"),
            "{refused}"
        );
        let group = self.kubectl_ok(&["get", "--raw", "/apis/subresources.kubevirt.io/v1"]);
        assert!(group.contains("virtualmachines/start"), "{group}");
    }

    /// `PUT` of a VM subresource (`start`, `stop`) through kube-apiserver, as virtctl sends it.
    fn subresource(&self, verb: &str) {
        self.subresource_of("virtualmachines", verb);
    }

    /// `PUT` of a subresource of the VM or VMI `guest` (`resource`: `virtualmachines` or
    /// `virtualmachineinstances`) through kube-apiserver, as virtctl sends it.
    fn subresource_of(&self, resource: &str, verb: &str) {
        let path =
            format!("/apis/subresources.kubevirt.io/v1/namespaces/{NS}/{resource}/guest/{verb}");
        let out = self
            .cluster
            .kubectl_with_stdin(["replace", "--raw", &path, "-f", "-"], "{}");
        assert!(
            out.status.success(),
            "{verb} through the subresource API: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
    }

    /// Waits until the VMI runs under KVM on the node and its guest answers ping and HTTP on
    /// the pod IP from the host; returns the VMI and how long it took from `since`.
    fn wait_booted(&self, round: &str, since: Instant) -> (Value, Duration, Duration) {
        let running = wait_for(
            &format!("the VMI Running ({round})"),
            Duration::from_secs(300),
            || {
                kubectl_json(&self.cluster, &["get", "vmi", "-n", NS, "guest"]).filter(|v| {
                    v["status"]["phase"] == "Running"
                        && v["metadata"]["deletionTimestamp"].is_null()
                })
            },
            || self.logs(),
        );
        let to_running = since.elapsed();
        assert_eq!(running["status"]["nodeName"], NODE_NAME, "{running}");
        let pod = self.launcher_pod();
        let pod_ip = pod["status"]["podIP"]
            .as_str()
            .expect("the launcher pod's IP")
            .to_string();
        let body = wait_for(
            &format!("the guest answering ping and HTTP on the pod IP {pod_ip} ({round})"),
            Duration::from_secs(180),
            || {
                let ping = Command::new("ping")
                    .args(["-c", "1", "-W", "2", &pod_ip])
                    .output()
                    .ok()?;
                if !ping.status.success() {
                    return None;
                }
                http_get(&pod_ip, GUEST_PORT, "/os-release")
            },
            || self.logs(),
        );
        let to_answering = since.elapsed();
        assert!(
            body.contains(kvrs_test_guest::OS_PRETTY_NAME),
            "the guest's httpd served its /etc/os-release over TCP: {body}"
        );
        let vmi = wait_for(
            &format!("the guest's DHCP lease in the VMI status ({round})"),
            Duration::from_secs(120),
            || {
                kubectl_json(&self.cluster, &["get", "vmi", "-n", NS, "guest"])
                    .filter(|v| v["status"]["interfaces"][0]["ipAddress"].is_string())
            },
            || self.logs(),
        );
        (vmi, to_running, to_answering)
    }

    fn launcher_pod(&self) -> Value {
        let pods = kubectl_json(
            &self.cluster,
            &["get", "pods", "-n", NS, "-l", "kubevirt.io=virt-launcher"],
        )
        .expect("listing launcher pods");
        pods["items"]
            .as_array()
            .and_then(|items| {
                items
                    .iter()
                    .find(|p| p["metadata"]["deletionTimestamp"].is_null())
            })
            .cloned()
            .unwrap_or_else(|| panic!("no launcher pod\n{}", self.logs()))
    }

    fn wait_gone(&self, what: &str) {
        wait_for(
            what,
            Duration::from_secs(240),
            || {
                let vmis = kubectl_json(&self.cluster, &["get", "vmi", "-n", NS])?;
                let pods = kubectl_json(&self.cluster, &["get", "pods", "-n", NS])?;
                // The node's QEMU only: another test on this machine may run its own.
                let domains = pod_processes("qemu-system-x86");
                (vmis["items"].as_array()?.is_empty()
                    && pods["items"].as_array()?.is_empty()
                    && domains.is_empty())
                .then_some(())
            },
            || {
                format!(
                    "{}\nqemu: {:?}",
                    self.logs(),
                    pod_processes("qemu-system-x86")
                )
            },
        );
    }
}

#[test]
fn the_shipped_manifests_run_on_a_real_node_and_a_vm_boots_there() {
    assert!(
        is_root(),
        "the real node runs containerd, runc and the kubelet: run as root"
    );
    let kvm = kvrs_node::host_devices::kvm_check();
    eprintln!(
        "real node: {}",
        match &kvm {
            Ok(()) => "KVM runs guests here: the VM must boot under KVM".to_string(),
            Err(e) => format!("no KVM for ordinary guests ({e}): the VM must boot under TCG"),
        }
    );
    let kvm = kvm.is_ok();
    let deployed = Deployed::start(NS, false);
    deployed.virt_api_refuses_what_kubevirt_refuses();

    // virt-handler's device plugins: tun is allocatable, KVM where it runs guests; vhost-net,
    // absent on this kernel, is not.
    let node_obj = deployed.wait_node_schedulable();
    assert_eq!(
        allocatable(&node_obj, "kvm"),
        kvm,
        "devices.kubevirt.io/kvm is allocatable exactly where KVM runs guests: {}",
        node_obj["status"]
    );
    if !Path::new("/dev/vhost-net").exists() {
        assert!(
            node_obj["status"]["allocatable"]["devices.kubevirt.io/vhost-net"]
                .as_str()
                .is_none_or(|q| q == "0"),
            "vhost-net is not allocatable where the device does not exist: {}",
            node_obj["status"]["allocatable"]
        );
    }

    deployed.kubectl_ok(&["create", "namespace", NS]);
    if !kvm {
        deployed.unschedulable_without_kvm_then_emulation();
    }
    let created = Instant::now();
    deployed.apply_vm();
    let (vmi, to_running, to_answering) = deployed.wait_booted("first start", created);
    let pod = deployed.launcher_pod();
    let compute = pod["spec"]["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "compute"))
        .cloned()
        .expect("the compute container");
    assert!(
        compute["image"]
            .as_str()
            .is_some_and(|i| i.contains("kvrs/virt-launcher")),
        "the launcher pod runs kvrs's own launcher image: {}",
        compute["image"]
    );
    assert_eq!(
        compute["resources"]["limits"]["devices.kubevirt.io/kvm"].is_string(),
        kvm,
        "the launcher pod asks for KVM exactly when the cluster does not emulate: {}",
        compute["resources"]
    );
    assert!(
        pod["spec"]["volumes"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v["image"].is_object())),
        "the container disks are image volumes: {}",
        pod["spec"]["volumes"]
    );
    let qemu = pod_processes("qemu-system-x86");
    assert_eq!(qemu.len(), 1, "one QEMU runs the guest: {qemu:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", qemu[0])).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let accel = if cmdline.contains("accel=kvm") || cmdline.contains("-accel kvm") {
        "kvm"
    } else {
        "tcg"
    };
    assert_eq!(
        accel == "kvm",
        kvm,
        "the guest runs under KVM exactly where KVM runs guests: {cmdline}"
    );
    eprintln!(
        "real node ({accel}): VM created -> VMI Running {:.2} s, -> guest answering ping + \
         HTTP {:.2} s (address {})",
        to_running.as_secs_f64(),
        to_answering.as_secs_f64(),
        vmi["status"]["interfaces"][0]["ipAddress"]
    );
    report_rss(&deployed);

    // Pause and unpause as `virtctl pause|unpause vmi` do: kube-apiserver -> virt-api ->
    // the virt-handler pod of the VMI's node (mutual TLS, port 8186) -> the launcher; the
    // handler's status update writes and clears the `Paused` condition.
    let paused = |want: bool| {
        move |v: &Value| {
            let is_paused = v["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Paused" && c["status"] == "True")
            });
            is_paused == want
        }
    };
    deployed.subresource_of("virtualmachineinstances", "pause");
    let vmi_paused = wait_for(
        "the VMI Paused (virt-api -> virt-handler -> launcher)",
        Duration::from_secs(120),
        || kubectl_json(&deployed.cluster, &["get", "vmi", "-n", NS, "guest"]).filter(paused(true)),
        || deployed.logs(),
    );
    assert_eq!(
        vmi_paused["status"]["phase"], "Running",
        "a paused VMI stays Running"
    );
    deployed.subresource_of("virtualmachineinstances", "unpause");
    wait_for(
        "the Paused condition gone after unpause",
        Duration::from_secs(120),
        || {
            kubectl_json(&deployed.cluster, &["get", "vmi", "-n", NS, "guest"])
                .filter(paused(false))
        },
        || deployed.logs(),
    );

    let mut deployed = deployed;
    fault_rounds(&mut deployed);

    // Stop and start as `virtctl stop|start` do: through the aggregated subresource API,
    // kube-apiserver -> the kvrs-virt-api Service -> virt-api.
    deployed.subresource("stop");
    deployed.wait_gone("the VM stopped: no VMI, no launcher pod, no QEMU");
    let vm = kubectl_json(&deployed.cluster, &["get", "vm", "-n", NS, "guest"]).expect("the VM");
    assert_eq!(vm["spec"]["runStrategy"], "Halted", "stop halts the VM");
    let restarted = Instant::now();
    deployed.subresource("start");
    deployed.wait_booted("after a stop", restarted);
    deployed.kubectl_ok(&["delete", "vm", "-n", NS, "guest", "--wait=false"]);
    deployed.wait_gone("the VM deleted: no VMI, no launcher pod, no QEMU");
    assert!(
        kubectl_json(&deployed.cluster, &["get", "vm", "-n", NS, "guest"]).is_none(),
        "the VM is gone"
    );

    let node = deployed.node.take().expect("the node");
    node.stop()
        .unwrap_or_else(|e| panic!("the node left something behind: {e}"));
}

/// Prints the resident memory of the daemons' pods' processes (virt-controller, virt-handler)
/// and of the launcher pod's processes outside QEMU, from /proc (the pods share this kernel).
fn report_rss(deployed: &Deployed) {
    let mut by_name: std::collections::BTreeMap<String, u64> = Default::default();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let (Some(name), Some(rss)) = (field("Name:"), field("VmRSS:")) else {
            continue;
        };
        if [
            "virt-controller",
            "virt-handler",
            "virt-launcher",
            "virt-launcher-m",
            "libvirtd",
            "virtlogd",
        ]
        .contains(&name.as_str())
        {
            let kib: u64 = rss
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .unwrap_or_default();
            *by_name.entry(name).or_default() += kib;
        }
    }
    eprintln!("real node: RSS by process name (KiB, summed over replicas): {by_name:?}");
    let _ = deployed;
}

/// A fault of the real-node campaign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// virt-handler's process in its DaemonSet pod.
    Handler,
    /// virt-controller's process in its Deployment's pod.
    Controller,
    /// The VM's virt-launcher.
    Launcher,
    /// Its virt-launcher-monitor.
    Monitor,
    /// Its libvirt daemon.
    Libvirtd,
    /// The node's kubelet (killed and restarted).
    Kubelet,
    /// kube-apiserver (stopped and started: every watch cut).
    Apiserver,
}

const FAULTS: [Fault; 7] = [
    Fault::Handler,
    Fault::Controller,
    Fault::Launcher,
    Fault::Monitor,
    Fault::Libvirtd,
    Fault::Kubelet,
    Fault::Apiserver,
];

/// Processes of the node's pods (the real kubelet's `kubepods` cgroups) whose `comm` is
/// `comm`: never a process of another test on this machine.
fn pod_processes(comm: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let cgroup = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
            (name.trim() == comm && cgroup.contains("kubepods")).then_some(pid)
        })
        .collect()
}

fn kill_pod_processes(comm: &str) -> usize {
    let pids = pod_processes(comm);
    for pid in &pids {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    pids.len()
}

fn inject(deployed: &mut Deployed, fault: Fault) -> usize {
    match fault {
        Fault::Handler => kill_pod_processes("virt-handler"),
        Fault::Controller => kill_pod_processes("virt-controller"),
        Fault::Launcher => kill_pod_processes("virt-launcher"),
        Fault::Monitor => kill_pod_processes("virt-launcher-m"),
        Fault::Libvirtd => kill_pod_processes("libvirtd") + kill_pod_processes("virtqemud"),
        Fault::Kubelet => {
            deployed
                .node
                .as_mut()
                .expect("the node")
                .restart_kubelet()
                .expect("the kubelet restarted and the Node Ready");
            1
        }
        Fault::Apiserver => {
            deployed
                .cluster
                .restart_apiserver()
                .expect("kube-apiserver restarted");
            1
        }
    }
}

/// Launcher pods of the test's namespace not finished and not being deleted.
fn live_launcher_pods(deployed: &Deployed) -> Vec<String> {
    kubectl_json(
        &deployed.cluster,
        &["get", "pods", "-n", NS, "-l", "kubevirt.io=virt-launcher"],
    )
    .and_then(|p| p["items"].as_array().cloned())
    .unwrap_or_default()
    .iter()
    .filter(|p| {
        p["metadata"]["deletionTimestamp"].is_null()
            && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
    })
    .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
    .collect()
}

/// `KVRS_REAL_NODE_FAULT_ROUNDS` rounds (default: each fault once) from
/// `KVRS_REAL_NODE_FAULT_SEED` (default 1): each fault strikes the running VM, or the VM while
/// it stops (then it is started again). The VM's runStrategy is Always throughout, but for the
/// stopping rounds.
fn fault_rounds(deployed: &mut Deployed) {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rounds = env("KVRS_REAL_NODE_FAULT_ROUNDS", FAULTS.len() as u64);
    let mut rng = env("KVRS_REAL_NODE_FAULT_SEED", 1).max(1);
    let mut next = move || {
        // xorshift64*: the campaign's only randomness.
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut order = FAULTS;
    let mut problems = Vec::new();
    for round in 0..rounds {
        let cycle = FAULTS.len() as u64;
        if round % cycle == 0 {
            for i in (1..order.len()).rev() {
                let j = usize::try_from(next() % (i as u64 + 1)).unwrap_or(0);
                order.swap(i, j);
            }
        }
        let fault = order[usize::try_from(round % cycle).unwrap_or(0)];
        let stopping = next() % 3 == 0;
        if stopping {
            let after = Duration::from_millis(next() % 2000);
            deployed.subresource("stop");
            std::thread::sleep(after);
            let killed = inject(deployed, fault);
            eprintln!(
                "real-node fault round {round}: {fault:?} {after:?} into a stop ({killed} killed)"
            );
            deployed.wait_gone(&format!("round {round}: the VM stopped despite {fault:?}"));
            let left: Vec<u32> = ["virt-launcher", "virt-launcher-m", "qemu-system-x86"]
                .iter()
                .flat_map(|c| pod_processes(c))
                .collect();
            if !left.is_empty() {
                problems.push(format!(
                    "round {round} ({fault:?}, stopping): left {left:?}"
                ));
            }
            deployed.subresource("start");
            deployed.wait_booted(&format!("round {round}: started again"), Instant::now());
            continue;
        }
        let killed = inject(deployed, fault);
        eprintln!("real-node fault round {round}: {fault:?} while running ({killed} killed)");
        if killed == 0 {
            problems.push(format!("round {round}: no {fault:?} process found to kill"));
        }
        // A killed launcher ends the VMI (Failed): let the handler see it before waiting for a
        // Running one, which could still be the dead VMI.
        if matches!(fault, Fault::Launcher | Fault::Monitor | Fault::Libvirtd) {
            wait_for(
                &format!("round {round}: the VMI failed after {fault:?} was killed"),
                Duration::from_secs(120),
                || {
                    let v = kubectl_json(&deployed.cluster, &["get", "vmi", "-n", NS, "guest"]);
                    match v {
                        None => Some(()),
                        Some(v) if v["status"]["phase"] != "Running" => Some(()),
                        Some(v) if !v["metadata"]["deletionTimestamp"].is_null() => Some(()),
                        Some(_) => None,
                    }
                },
                || deployed.logs(),
            );
        }
        deployed.wait_booted(&format!("round {round} after {fault:?}"), Instant::now());
        let pods = live_launcher_pods(deployed);
        let qemu = pod_processes("qemu-system-x86");
        if pods.len() != 1 || qemu.len() != 1 {
            problems.push(format!(
                "round {round} ({fault:?}): {} live launcher pods {pods:?}, QEMU {qemu:?}",
                pods.len()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the real-node fault campaign: {}\n{}",
        problems.join("\n"),
        deployed.logs()
    );
}
