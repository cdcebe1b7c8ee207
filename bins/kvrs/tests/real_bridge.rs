//! The bridge binding on the pod network with a booted guest, on the real node (issue 46,
//! Deliver 3): kvrs deployed as in `real_node.rs`, a VM whose pod-network interface uses
//! KubeVirt's `bridge` binding (its `permitBridgeInterfaceOnPodNetwork` default). virt-handler
//! moves the pod interface's address off `eth0` into the launcher's DHCP server and enslaves
//! `eth0` with the guest's tap to the in-pod bridge; the guest leases the pod's own address.
//!
//! Asserted: the guest's `eth0` holds the launcher pod's IP (its DHCP lease and `ip addr`,
//! served by the guest over HTTP on that IP: the host reaches the guest on the pod address, no
//! NAT in between), with the MAC and address the VMI's `status.interfaces` reports and the
//! gateway of the pod's subnet as its default route; in the pod's network namespace the CNI's
//! interface, renamed `eth0-nic`, holds no address and is a port of KubeVirt's `k6t-eth0`
//! bridge beside the tap, and `eth0` is KubeVirt's dummy (a veth stand-in on this kernel).
//!
//! Run as root, one real-node test at a time:
//! `flock /tmp/kvrs-real-node.lock cargo test -p kvrs --test real_bridge -- --nocapture`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::http_get;
use common::real_node::Deployed;
use common::volumes::guest_vm;
use kvrs_test_cluster::wait_for;
use kvrs_test_guest::pod::is_root;

const NS: &str = "kvrs-real-bridge";
/// The port of the guest's busybox httpd, serving what it knows of its network.
const GUEST_PORT: u16 = 8080;

/// The guest waits for its lease, then serves its address, MAC and routes.
fn guest_checks() -> Vec<String> {
    vec![
        "mkdir -p /srv; while ! ip -4 -o addr show eth0 | grep -q inet; do sleep 1; done; \
         ip -4 -o addr show eth0 >/srv/addr; cat /sys/class/net/eth0/address >/srv/mac; \
         ip route >/srv/routes; httpd -p 8080 -h /srv"
            .to_string(),
    ]
}

/// The PID of a process in the launcher pod's network namespace: its QEMU.
fn qemu_pid_of_pod(pod_uid: &str) -> u32 {
    common::real_node::qemu_processes()
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.contains(&pod_uid.replace('-', "_")) || c.contains(pod_uid))
        })
        .unwrap_or_else(|| panic!("no QEMU in the cgroup of pod {pod_uid}"))
}

/// `ip ARGS` inside the network namespace of process `pid`.
fn ip_in(pid: u32, args: &[&str]) -> String {
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .arg("ip")
        .args(args)
        .output()
        .expect("nsenter ip");
    assert!(out.status.success(), "ip {args:?} in the pod: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_bridge_bound_guest_leases_the_pod_address_and_answers_on_it() {
    assert!(
        is_root(),
        "the real node runs containerd, runc and the kubelet: run as root"
    );
    let kvm = kvrs_node::host_devices::kvm_check().is_ok();
    let deployed = Deployed::start(NS, !kvm);
    deployed.wait_node_schedulable();
    deployed.kubectl_ok(&["create", "namespace", NS]);
    let vm = guest_vm(NS, "guest", &[], "", &guest_checks());
    assert!(vm.contains("masquerade: {}"), "the fixture's binding");
    deployed.apply(&vm.replace("masquerade: {}", "bridge: {}"));

    wait_for(
        "the VMI Running",
        Duration::from_secs(300),
        || {
            deployed
                .get("vmi", "guest")
                .filter(|v| v["status"]["phase"] == "Running")
        },
        || deployed.logs(),
    );
    let pod = deployed
        .launcher_of("guest")
        .unwrap_or_else(|| panic!("no launcher pod\n{}", deployed.logs()));
    let pod_ip = pod["status"]["podIP"]
        .as_str()
        .expect("the pod IP")
        .to_string();
    let addr = wait_for(
        &format!("the guest answering on the pod IP {pod_ip}"),
        Duration::from_secs(300),
        || {
            let r = http_get(&pod_ip, GUEST_PORT, "/addr");
            if r.is_none() {
                std::thread::sleep(Duration::from_secs(1));
            }
            r
        },
        || deployed.logs(),
    );
    eprintln!("real bridge: the guest's eth0: {addr}");
    assert!(
        addr.contains(&format!("inet {pod_ip}/")),
        "the guest leased the pod's own address {pod_ip}: {addr}"
    );
    let guest_mac = http_get(&pod_ip, GUEST_PORT, "/mac")
        .expect("the guest's MAC")
        .trim()
        .to_string();
    let routes = http_get(&pod_ip, GUEST_PORT, "/routes").expect("the guest's routes");
    assert!(
        routes.lines().any(|l| l.starts_with("default via ")),
        "the lease gave the guest a default route: {routes}"
    );

    // The VMI reports the guest's interface as the guest has it.
    let vmi = wait_for(
        "the VMI's interface status with the pod address",
        Duration::from_secs(120),
        || {
            let vmi = deployed.get("vmi", "guest")?;
            let iface = vmi["status"]["interfaces"].as_array()?.first()?.clone();
            (iface["ipAddress"] == pod_ip.as_str()).then_some(iface)
        },
        || {
            format!(
                "{}\n{}",
                deployed.get("vmi", "guest").unwrap_or_default(),
                deployed.logs()
            )
        },
    );
    assert_eq!(vmi["name"], "default", "{vmi}");
    assert_eq!(
        vmi["mac"].as_str().map(str::to_lowercase),
        Some(guest_mac.to_lowercase()),
        "the VMI's MAC is the guest's: {vmi}"
    );

    // The pod's network namespace as KubeVirt's bridge binding leaves it: the CNI's interface,
    // renamed `eth0-nic`, gave up its address and is a port of `k6t-eth0` beside the guest's
    // tap; `eth0` is KubeVirt's dummy keeping the pod's address (on this kernel, which has no
    // dummy links, a veth left down stands in for it), not on the bridge.
    let pid = qemu_pid_of_pod(pod["metadata"]["uid"].as_str().expect("the pod's UID"));
    let ports = ip_in(pid, &["-o", "link", "show", "master", "k6t-eth0"]);
    assert!(
        ports.contains(": eth0-nic"),
        "eth0-nic is a port of k6t-eth0: {ports}"
    );
    assert!(
        ports.lines().any(|l| l.contains("tap")),
        "the guest's tap is a port of k6t-eth0: {ports}"
    );
    let nic = ip_in(pid, &["-4", "-o", "addr", "show", "dev", "eth0-nic"]);
    assert!(
        !nic.contains("inet "),
        "eth0-nic gave its address to the guest: {nic}"
    );
    let eth0 = ip_in(pid, &["-d", "-o", "link", "show", "dev", "eth0"]);
    assert!(
        (eth0.contains(" dummy ") || eth0.contains(" veth ")) && !eth0.contains("master k6t-eth0"),
        "eth0 is the dummy (or its veth stand-in), off the bridge: {eth0}"
    );

    deployed.kubectl_ok(&["delete", "vm", "-n", NS, "guest", "--wait=false"]);
    deployed.wait_vm_down("guest");
    let mut deployed = deployed;
    let node = deployed.node.take().expect("the node");
    node.stop()
        .unwrap_or_else(|e| panic!("the node left something behind: {e}"));
}
