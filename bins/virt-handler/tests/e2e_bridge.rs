//! Bridge binding end to end, on the real components of `support`: a VMI whose pod interface is
//! bound with `bridge: {}` boots, the handler rewires the pod as KubeVirt does (the pod's
//! address leaves `eth0` for the guest, bridge `k6t-eth0`, `eth0-nic`, `tap0`), the launcher's
//! DHCP server hands the guest the pod's own address, prefix, gateway and MTU, and the guest
//! answers on it: it pings its gateway (the host end of the pod's veth), and the host end
//! pings it back at the pod IP and learns the pod's original MAC for it. A restarted handler
//! leaves the rewired pod and the running guest as they are.
//!
//! On a kernel without dummy links (this machine's) the handler holds the pod's addresses on a
//! veth pair left down instead (kvrs-node's fallback), which is then part of what runs here.

mod support;

use std::process::Command;
use std::time::Duration;

use kvrs_test_guest::{AGENT_MARKER, BOOT_MARKER, LEASE_MARKER, NO_LEASE_MARKER, PING_MARKER};
use serde_json::{Value, json};
use support::*;

/// The launcher pod's number (its netns, veth and 10.250.<n>.0/24 subnet): one `e2e.rs`
/// does not use, so a leftover of one cannot disturb the other.
const POD: u8 = 5;
/// The pod interface's MTU: not the veth default, so the guest's lease shows where it came from.
const POD_MTU: &str = "1400";

/// The test guest with its pod network bound by `bridge` instead of masquerade.
fn bridge_vmi(name: &str) -> Value {
    let mut vmi = guest_vmi(name);
    vmi["spec"]["domain"]["devices"]["interfaces"] = json!([{"name": "default", "bridge": {}}]);
    vmi
}

/// `ip` in the pod's namespace; its stdout.
fn in_pod(pod: &LauncherPod, args: &[&str]) -> String {
    run(Command::new("ip")
        .args(["netns", "exec", &pod.netns, "ip"])
        .args(args))
}

/// The MAC of `dev` in the pod's namespace.
fn pod_mac(pod: &LauncherPod, dev: &str) -> String {
    let v: Value = serde_json::from_str(&in_pod(pod, &["-j", "link", "show", dev]))
        .expect("ip -j prints JSON");
    v[0]["address"].as_str().expect("a MAC").to_string()
}

/// What a failed wait prints: the VMI's status, the logs, the serial console, the pod netns.
fn context(cluster: &Cluster, handler: &Handler, pod: &LauncherPod, uid: &str) -> String {
    format!(
        "{}\n--- serial ---\n{}\n--- netns ---\n{}\n--- addresses ---\n{}",
        guest_context(cluster, handler, pod, &pod.name),
        tail(&pod.serial_log(uid), 30),
        pod.netns_state(),
        Command::new("ip")
            .args(["netns", "exec", &pod.netns, "ip", "-br", "addr"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    )
}

#[test]
fn a_bridge_bound_guest_takes_the_pod_ip_over_dhcp_and_answers_on_it() {
    let _one = serial();
    let cluster = Cluster::start();
    let dirs = NodeDirs::new("Bridge");
    let handler = dirs.start_handler(&cluster, 0, &["--resync-period-seconds", "3"]);
    let name = "guest-br";
    let uid = cluster.create_vmi(bridge_vmi(name));
    let mut pod = LauncherPod::new(&dirs, POD, name);
    for (netns, dev) in [(None, pod.host_veth.as_str()), (Some(&pod.netns), "eth0")] {
        let mut ip = Command::new("ip");
        if let Some(ns) = netns {
            ip.args(["netns", "exec", ns, "ip"]);
        }
        run(ip.args(["link", "set", dev, "mtu", POD_MTU]));
    }
    // The MAC the CNI gave the pod: with bridge binding it becomes the guest's.
    let original_mac = pod_mac(&pod, "eth0");
    let gateway = format!("10.250.{POD}.1");
    pod.start(&uid);
    cluster.schedule(name, &pod.uid);
    let ctx = || context(&cluster, &handler, &pod, &uid);

    let vmi = wait_for(
        "the bridge-bound guest Running with the pod IP in status.interfaces",
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
    let iface = &vmi["status"]["interfaces"][0];
    assert_eq!(iface["name"], "default", "{iface}");
    assert_eq!(iface["mac"], original_mac.as_str(), "{iface}");

    // The pod as KubeVirt rewires it for bridge binding: the pod's own link renamed and
    // enslaved, without addresses; the bridge with its link-local placeholder; the tap; the
    // pod's MAC and address held on the link named like the pod interface; no NAT at all.
    let links = in_pod(&pod, &["-br", "link"]);
    for needle in ["k6t-eth0", "eth0-nic", "tap0"] {
        assert!(links.contains(needle), "{needle} missing:\n{links}");
    }
    let holder: Value = serde_json::from_str(&in_pod(&pod, &["-j", "-d", "link", "show", "eth0"]))
        .expect("ip -j prints JSON");
    match holder[0]["linkinfo"]["info_kind"].as_str() {
        Some("dummy") => {}
        // kvrs-node's stand-in where the kernel has no dummy links.
        Some("veth") => assert!(links.contains("eth0-ph"), "no placeholder peer:\n{links}"),
        other => panic!("eth0 is a {other:?} link, not the pod's address holder:\n{links}"),
    }
    let nic = in_pod(&pod, &["-d", "link", "show", "eth0-nic"]);
    assert!(nic.contains("master k6t-eth0"), "{nic}");
    let addrs = in_pod(&pod, &["-br", "-4", "addr"]);
    let holder = addrs
        .lines()
        .find(|l| l.starts_with("eth0 ") || l.starts_with("eth0@"))
        .unwrap_or_else(|| panic!("no eth0 in the pod:\n{addrs}"));
    assert!(
        holder.contains(&format!("{}/24", pod.pod_ip)),
        "{holder}\n{addrs}"
    );
    assert!(
        addrs
            .lines()
            .any(|l| l.starts_with("k6t-eth0") && l.contains("169.254.75.10/32")),
        "{addrs}"
    );
    assert!(
        !addrs
            .lines()
            .any(|l| l.starts_with("eth0-nic") && l.contains("10.250.")),
        "{addrs}"
    );
    assert_eq!(pod_mac(&pod, "eth0"), original_mac);
    let state = pod.netns_state();
    assert!(!state.contains("KUBEVIRT_PREINBOUND"), "{state}");

    // The guest's DHCP client got the pod's address, prefix, gateway and MTU, and its gateway
    // (the host end of the pod's veth, across the in-pod bridge) answered its ping.
    let serial = wait_for(
        "the guest's DHCP lease and a ping of its gateway",
        Duration::from_secs(120),
        || {
            let log = pod.serial_log(&uid);
            (log.contains(PING_MARKER) || log.contains(NO_LEASE_MARKER)).then_some(log)
        },
        ctx,
    );
    assert!(serial.contains(BOOT_MARKER), "{serial}");
    let lease = serial
        .lines()
        .find(|l| l.contains(LEASE_MARKER))
        .unwrap_or_else(|| panic!("no lease line in the serial log:\n{serial}"));
    for field in [
        format!("ip={} ", pod.pod_ip),
        "mask=24 ".to_string(),
        format!("router={gateway} "),
        format!("mtu={POD_MTU} "),
    ] {
        assert!(lease.contains(&field), "{field:?} not in {lease:?}");
    }
    assert!(serial.contains(PING_MARKER), "{serial}");

    // From outside the pod: the guest answers at the pod IP, with the pod's original MAC.
    let _ = Command::new("ip")
        .args(["neigh", "flush", "dev", &pod.host_veth])
        .output();
    wait_for(
        "the guest to answer a ping at the pod IP from the host end of the pod's veth",
        Duration::from_secs(30),
        || {
            Command::new("ping")
                .args(["-c", "1", "-W", "2", "-I", &pod.host_veth, &pod.pod_ip])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|_| ())
        },
        ctx,
    );
    let neigh =
        run(Command::new("ip").args(["-j", "neigh", "show", &pod.pod_ip, "dev", &pod.host_veth]));
    let neigh: Value = serde_json::from_str(&neigh).expect("ip -j prints JSON");
    assert_eq!(
        neigh[0]["lladdr"],
        original_mac.as_str(),
        "the pod IP must resolve to the guest's NIC: {neigh}"
    );

    // The guest agent sees the same address on the guest's own eth0.
    assert!(serial.contains(AGENT_MARKER), "{serial}");
    let vmi = wait_for(
        "the guest agent's view of the bridge-bound interface",
        Duration::from_secs(120),
        || {
            let v = cluster.vmi(name)?;
            let iface = &v["status"]["interfaces"][0];
            (iface["interfaceName"] == "eth0" && iface["ipAddress"] == pod.pod_ip.as_str())
                .then_some(v)
        },
        ctx,
    );
    let ips = &vmi["status"]["interfaces"][0]["ipAddresses"];
    assert!(
        ips.as_array()
            .is_some_and(|a| a.iter().any(|ip| ip == pod.pod_ip.as_str())),
        "{ips}"
    );

    // A restarted handler takes the running guest over as it is (its pod already rewired;
    // KubeVirt's rules set up a running VMI's network again only for hotplugged interfaces):
    // still Running, no sync failure, still answering at the pod IP.
    let mut handler = handler;
    handler.kill();
    let second = dirs.start_handler(&cluster, 1, &["--resync-period-seconds", "3"]);
    let ctx = || context(&cluster, &second, &pod, &uid);
    wait_for(
        "the restarted handler to resync the bridge-bound VMI",
        Duration::from_secs(60),
        || second.log().contains(name).then_some(()),
        ctx,
    );
    std::thread::sleep(Duration::from_secs(8));
    let v = cluster.vmi(name).expect("the VMI");
    assert_eq!(phase(&v), "Running", "{}", ctx());
    assert_eq!(
        v["status"]["interfaces"][0]["ipAddress"],
        pod.pod_ip.as_str(),
        "{}",
        ctx()
    );
    assert!(
        condition(&v, "Synchronized").is_none_or(|c| c["status"] != "False"),
        "{}",
        ctx()
    );
    let ping = Command::new("ping")
        .args(["-c", "3", "-W", "2", "-I", &pod.host_veth, &pod.pod_ip])
        .output()
        .expect("ping");
    assert!(ping.status.success(), "{ping:?}\n{}", ctx());

    pod.delete();
}
