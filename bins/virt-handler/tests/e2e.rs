//! virt-handler end to end, on real components (see `support`): a VMI Scheduled to this node
//! boots, gets its address over DHCP, pings its gateway and becomes Running with the pod IP in
//! `status.interfaces`; its QEMU guest agent connects and the VMI shows AgentConnected, the
//! guest's OS (`status.guestOSInfo`) and the guest's interface name; a steady state writes nothing; deleting the VMI shuts the guest down
//! through ACPI; a killed launcher fails its VMI; a handler killed mid-start converges after a
//! restart without defining the domain twice.

mod support;

use std::time::Duration;

use kvrs_test_guest::{
    AGENT_MARKER, BOOT_MARKER, LEASE_MARKER, OS_ID, OS_PRETTY_NAME, PING_MARKER, POWER_MARKER,
};
use support::*;

/// What a failed wait prints, most telling first (CI keeps only the head and tail of a long
/// failure): each VMI's phase, interfaces and conditions, the free disk space, then the logs.
fn context(
    cluster: &Cluster,
    handler: &Handler,
    pods: &[&LauncherPod],
    vmi_uids: &[&str],
) -> String {
    let mut s = String::new();
    for p in pods {
        let status = cluster
            .vmi(&p.name)
            .map(|v| {
                format!(
                    "phase={} interfaces={} conditions={}",
                    v["status"]["phase"], v["status"]["interfaces"], v["status"]["conditions"]
                )
            })
            .unwrap_or_else(|| "absent".into());
        s += &format!("--- VMI {}: {status}\n", p.name);
    }
    s += &format!("--- free disk space ---\n{}\n", free_disk_space());
    s += &format!("--- handler log ---\n{}", tail(&handler.log(), 40));
    for (p, uid) in pods.iter().zip(vmi_uids) {
        s += &format!(
            "\n--- launcher {} ---\n{}\n--- serial ---\n{}\n--- netns ---\n{}",
            p.name,
            tail(&p.launcher_log(), 40),
            tail(&p.serial_log(uid), 30),
            p.netns_state()
        );
    }
    s
}

/// `df` of the filesystems the tests write to: a full disk shows up as a guest that stalls.
fn free_disk_space() -> String {
    std::process::Command::new("df")
        .args(["-h", "/tmp", "/var"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("df: {e}"))
}

/// Creates VMI `name`, its pod `n`, starts the launcher and schedules the VMI there.
fn launch(cluster: &Cluster, dirs: &NodeDirs, n: u8, name: &str) -> (LauncherPod, String) {
    let uid = cluster.create_vmi(guest_vmi(name));
    let mut pod = LauncherPod::new(dirs, n, name);
    pod.start(&uid);
    cluster.schedule(name, &pod.uid);
    (pod, uid)
}

#[test]
fn two_vmis_boot_with_dhcp_run_quietly_and_shut_down_gracefully() {
    let _one = serial();
    let cluster = Cluster::start();
    let dirs = NodeDirs::new("boot");
    let handler = dirs.start_handler(&cluster, 0, &["--resync-period-seconds", "3"]);
    let (mut a, a_uid) = launch(&cluster, &dirs, 1, "guest-a");
    let (mut b, b_uid) = launch(&cluster, &dirs, 2, "guest-b");
    let ctx = || context(&cluster, &handler, &[&a, &b], &[&a_uid, &b_uid]);

    for (name, pod) in [("guest-a", &a), ("guest-b", &b)] {
        let vmi = wait_for(
            &format!("{name} Running with its pod IP in status.interfaces"),
            Duration::from_secs(180),
            || {
                let v = cluster.vmi(name)?;
                let ip = v["status"]["interfaces"][0]["ipAddress"]
                    .as_str()
                    .unwrap_or("");
                (phase(&v) == "Running" && ip == pod.pod_ip).then_some(v)
            },
            ctx,
        );
        assert_eq!(vmi["status"]["interfaces"][0]["name"], "default");
        assert_eq!(vmi["status"]["nodeName"], NODE);
    }
    for (pod, uid) in [(&a, &a_uid), (&b, &b_uid)] {
        let serial = wait_for(
            "the guest's DHCP lease and a ping of its gateway",
            Duration::from_secs(120),
            || {
                let log = pod.serial_log(uid);
                (log.contains(PING_MARKER) || log.contains("no lease")).then_some(log)
            },
            ctx,
        );
        assert!(serial.contains(BOOT_MARKER), "{serial}");
        let lease = serial
            .lines()
            .find(|l| l.contains(LEASE_MARKER))
            .unwrap_or_else(|| panic!("no lease line in the serial log:\n{serial}"));
        assert!(lease.contains("ip=10.0.2.2 "), "{lease}");
        assert!(lease.contains("router=10.0.2.1 "), "{lease}");
        assert!(serial.contains(PING_MARKER), "{serial}");
        assert!(serial.contains(AGENT_MARKER), "{serial}");
        // The pod network as KubeVirt builds it for masquerade.
        let state = pod.netns_state();
        for needle in ["k6t-eth0", "tap0", "masquerade", "KUBEVIRT_PREINBOUND"] {
            assert!(
                state.contains(needle),
                "{needle} missing in the pod netns:\n{state}"
            );
        }
    }

    // The guest agent (real qemu-ga in the guest) connects: the launcher polls it through
    // libvirt and the handler writes what it says, with the pod IP kept under masquerade.
    for (name, pod) in [("guest-a", &a), ("guest-b", &b)] {
        let vmi = wait_for(
            &format!("{name}'s guest agent in its status"),
            Duration::from_secs(120),
            || {
                let v = cluster.vmi(name)?;
                let connected = v["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "AgentConnected" && c["status"] == "True");
                let iface = &v["status"]["interfaces"][0];
                (connected
                    && v["status"]["guestOSInfo"]["id"] == OS_ID
                    && iface["interfaceName"] == "eth0"
                    && iface["ipAddress"] == pod.pod_ip.as_str())
                .then_some(v)
            },
            ctx,
        );
        let os = &vmi["status"]["guestOSInfo"];
        assert_eq!(os["prettyName"], OS_PRETTY_NAME, "{os}");
        assert_eq!(os["machine"], "x86_64", "{os}");
        assert!(
            os["kernelRelease"].as_str().is_some_and(|k| !k.is_empty()),
            "{os}"
        );
        assert_eq!(
            vmi["status"]["interfaces"][0]["infoSource"], "domain, guest-agent",
            "{}",
            vmi["status"]["interfaces"]
        );
        // What KubeVirt's virt-api serves as the VMI's guestosinfo: the launcher's GetGuestInfo.
        let info = pod.guest_info();
        assert!(
            info["guestAgentVersion"]
                .as_str()
                .is_some_and(|v| !v.is_empty()),
            "{info}"
        );
        assert_eq!(info["hostname"], "kvrs-e2e", "{info}");
        assert_eq!(info["os"]["id"], OS_ID, "{info}");
        assert!(
            info["supportedCommands"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["name"] == "guest-ping")),
            "{info}"
        );
    }

    // Steady state: several resync periods (3 s here) write nothing to the VMIs.
    std::thread::sleep(Duration::from_secs(4));
    let rv = |name: &str| cluster.vmi(name).unwrap()["metadata"]["resourceVersion"].clone();
    let (rv_a, rv_b) = (rv("guest-a"), rv("guest-b"));
    let writes = |c: &Cluster| {
        ["PATCH", "UPDATE", "APPLY"]
            .iter()
            .map(|v| c.requests(v, "virtualmachineinstances"))
            .sum::<u64>()
    };
    let before = writes(&cluster);
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        writes(&cluster),
        before,
        "VMI writes in steady state\n{}",
        ctx()
    );
    assert_eq!((rv("guest-a"), rv("guest-b")), (rv_a, rv_b));

    // Deleting a VMI shuts its guest down through ACPI; the VMI ends Succeeded.
    let out = cluster.cluster.kubectl([
        "delete",
        "virtualmachineinstances",
        "guest-a",
        "-n",
        NS,
        "--wait=false",
    ]);
    assert!(out.status.success());
    wait_for(
        "guest-a to see the power button and its VMI to be final",
        Duration::from_secs(90),
        || {
            let v = cluster.vmi("guest-a")?;
            (a.serial_log(&a_uid).contains(POWER_MARKER) && phase(&v) == "Succeeded").then_some(())
        },
        ctx,
    );
    // The launcher exits once its domain is gone; the "kubelet" then removes the pod.
    wait_for(
        "guest-a's launcher to exit",
        Duration::from_secs(60),
        || a.exited().then_some(()),
        ctx,
    );
    cluster.release("guest-a");
    a.delete();
    let gone = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&gone.stdout).contains(&a.netns));
    // guest-b is untouched.
    assert_eq!(phase(&cluster.vmi("guest-b").unwrap()), "Running");
    // A VMI removed from the cluster outright (no finalizer holding it) still gets its guest
    // shut down: the handler finds the launcher through the socket it reached it on.
    cluster.release("guest-b");
    let out = cluster.cluster.kubectl([
        "delete",
        "virtualmachineinstances",
        "guest-b",
        "-n",
        NS,
        "--wait=true",
    ]);
    assert!(out.status.success());
    wait_for(
        "guest-b to see the power button and its launcher to exit after its VMI was removed",
        Duration::from_secs(90),
        || (b.serial_log(&b_uid).contains(POWER_MARKER) && b.exited()).then_some(()),
        || context(&cluster, &handler, &[&b], &[&b_uid]),
    );
    b.delete();
}

#[test]
fn a_killed_launcher_fails_its_vmi() {
    let _one = serial();
    let cluster = Cluster::start();
    let dirs = NodeDirs::new("kill");
    let handler = dirs.start_handler(&cluster, 0, &["--resync-period-seconds", "3"]);
    let (mut pod, uid) = launch(&cluster, &dirs, 3, "guest-k");
    let ctx = || context(&cluster, &handler, &[&pod], &[&uid]);
    wait_for(
        "Running",
        Duration::from_secs(180),
        || (phase(&cluster.vmi("guest-k")?) == "Running").then_some(()),
        ctx,
    );
    // The node carries KubeVirt's schedulable label and heartbeat; health and metrics answer.
    let node = cluster.get("node", None, NODE).expect("the node");
    assert_eq!(
        node["metadata"]["labels"]["kubevirt.io/schedulable"],
        "true"
    );
    assert!(node["metadata"]["annotations"]["kubevirt.io/heartbeat"].is_string());
    let get = |path: &str| {
        let out = std::process::Command::new("curl")
            .args([
                "-sf",
                &format!("http://127.0.0.1:{}{path}", handler.metrics_port),
            ])
            .output()
            .expect("curl");
        assert!(out.status.success(), "GET {path}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    get("/healthz");
    get("/readyz");
    assert!(get("/metrics").contains("kubevirt_workqueue_adds_total"));
    let launcher = pod.launcher_pid().expect("the launcher runs");
    support::run(std::process::Command::new("kill").args(["-KILL", &launcher.to_string()]));
    wait_for(
        "the VMI to fail after its launcher was killed",
        Duration::from_secs(60),
        || (phase(&cluster.vmi("guest-k")?) == "Failed").then_some(()),
        ctx,
    );
    pod.delete();
    // A handler stopping gracefully marks its node unschedulable.
    support::run(
        std::process::Command::new("kill").args(["-TERM", &handler.child.id().to_string()]),
    );
    wait_for(
        "the node to be unschedulable after the handler's SIGTERM",
        Duration::from_secs(20),
        || {
            let node = cluster.get("node", None, NODE)?;
            (node["metadata"]["labels"]["kubevirt.io/schedulable"] == "false").then_some(())
        },
        || handler.log(),
    );
}

#[test]
fn a_handler_killed_mid_start_converges_without_a_second_define() {
    let _one = serial();
    let cluster = Cluster::start();
    let dirs = NodeDirs::new("restart");
    let mut first = dirs.start_handler(&cluster, 0, &[]);
    let (mut pod, uid) = launch(&cluster, &dirs, 4, "guest-r");
    // Kill the handler as soon as it has sent the first SyncVirtualMachine.
    wait_for(
        "the first handler to reach the launcher",
        Duration::from_secs(120),
        || pod.launcher_log().contains("Domain defined").then_some(()),
        || context(&cluster, &first, &[&pod], &[&uid]),
    );
    first.kill();
    let second = dirs.start_handler(&cluster, 1, &[]);
    wait_for(
        "Running after the restart",
        Duration::from_secs(180),
        || (phase(&cluster.vmi("guest-r")?) == "Running").then_some(()),
        || context(&cluster, &second, &[&pod], &[&uid]),
    );
    let defines = pod.launcher_log().matches("Domain defined").count();
    assert_eq!(defines, 1, "{}", pod.launcher_log());
    pod.delete();
}
