//! Secondary networks through Multus on the real node: kvrs deployed as in `real_node.rs`, the
//! node running Multus's thin plugin (built from its Go module by `scripts/multus.sh`) as its
//! CNI with the node's bridge as the cluster default network
//! (`RealNode::start_with_multus`), a NetworkAttachmentDefinition `secondary` with the `bridge`
//! CNI plugin on a host bridge of the test's own ([`SEC_BRIDGE`], no IPAM: an L2 network), and a
//! VM with the pod network (masquerade) and the Multus network `secondary` (bridge binding).
//!
//! Asserted: the launcher pod asks Multus for `secondary` on KubeVirt's hashed pod interface
//! (`pod` + the first 11 hex digits of the network name's SHA-256, computed here with
//! `sha256sum`), and Multus's `network-status` reports both attachments; the VMI's
//! `status.interfaces` lists both in spec order with KubeVirt's names and the guest's view
//! (interface names, MACs, the secondary's address from the guest agent); in the guest two NICs,
//! `eth0` then `eth1`, with the MACs the VMI reports (the guest serves `ip -o link` over HTTP on
//! the pod IP); the host reaches the guest's static secondary address through [`SEC_BRIDGE`]
//! and the primary on the pod IP; deleting the VM leaves no pod, QEMU, port on the bridge or
//! CNI cache entry of the secondary network, and the node's teardown finds nothing behind.
//!
//! What it took in kvrs (as KubeVirt v1.9.0 does it): the launcher finds the secondary's pod
//! interface by its hashed (else ordinal) name and attaches the domain to its tap; the handler's
//! DHCP cache file is owned by the launcher's user; the VMI controller copies
//! `podInterfaceName` and the `multus-status` source from Multus's network-status.
//!
//! Run as root, one real-node test at a time:
//! `flock /tmp/kvrs-real-node.lock cargo test -p kvrs --test real_multus -- --nocapture`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::real_node::Deployed;
use common::{http_get, kubectl_json};
use kvrs_test_cluster::{NODE_NAME, wait_for};
use kvrs_test_guest::pod::{is_root, repo_root};
use serde_json::Value;

const NS: &str = "kvrs-real-multus";
/// The secondary network's bridge on the host.
const SEC_BRIDGE: &str = "kvrs-sec0";
/// The host's address on [`SEC_BRIDGE`].
const SEC_HOST: &str = "10.253.0.1";
/// The guest's static address on its secondary NIC (the NAD has no IPAM, so KubeVirt's DHCP
/// in the launcher has nothing to offer on it).
const SEC_GUEST: &str = "10.253.0.10";
/// The port of the guest's busybox httpd serving its `ip -o link`.
const GUEST_PORT: u16 = 8080;

/// The host bridge of the secondary network, removed when dropped.
struct HostBridge;

impl HostBridge {
    fn create() -> HostBridge {
        let _ = Command::new("ip")
            .args(["link", "del", SEC_BRIDGE])
            .output();
        for args in [
            vec!["link", "add", SEC_BRIDGE, "type", "bridge"],
            vec!["addr", "add", &format!("{SEC_HOST}/24"), "dev", SEC_BRIDGE],
            vec!["link", "set", SEC_BRIDGE, "up"],
        ] {
            let out = Command::new("ip").args(&args).output().expect("running ip");
            assert!(
                out.status.success(),
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        HostBridge
    }

    /// The links enslaved to the bridge (the pods' veths).
    fn ports() -> Vec<String> {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "master", SEC_BRIDGE])
            .output()
            .expect("running ip");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(": ").nth(1).map(str::to_owned))
            .collect()
    }
}

impl Drop for HostBridge {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", SEC_BRIDGE])
            .output();
    }
}

/// KubeVirt's hashed pod interface name of a secondary network, computed with `sha256sum`.
fn hashed_pod_iface(network: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", "printf %s \"$1\" | sha256sum", "sh", network])
        .output()
        .expect("running sha256sum");
    let hex = String::from_utf8_lossy(&out.stdout);
    format!("pod{}", &hex[..11])
}

fn vm_manifest() -> String {
    let vm = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the fixture VM")
        .replace("namespace: default", &format!("namespace: {NS}"));
    let hello = "              KVRS-E2E: hello from cloud-init";
    let ifaces =
        "          interfaces:\n            - name: default\n              masquerade: {}\n";
    let nets = "      networks:\n        - name: default\n          pod: {}\n";
    for part in [hello, ifaces, nets] {
        assert!(vm.contains(part), "the fixture VM has {part:?}");
    }
    // The guest's /init runs the KVRS-RUN lines in order, in the background.
    let run = format!(
        "{hello}\n\
         \x20             KVRS-RUN: while [ ! -e /sys/class/net/eth1 ]; do sleep 1; done\n\
         \x20             KVRS-RUN: ip link set eth1 up; ip addr add {SEC_GUEST}/24 dev eth1\n\
         \x20             KVRS-RUN: mkdir -p /tmp/www; ip -o link > /tmp/www/links\n\
         \x20             KVRS-RUN: httpd -p {GUEST_PORT} -h /tmp/www"
    );
    vm.replace(hello, &run)
        .replace(
            ifaces,
            &format!("{ifaces}            - name: secondary\n              bridge: {{}}\n"),
        )
        .replace(
            nets,
            &format!(
                "{nets}        - name: secondary\n          multus:\n            networkName: secondary\n"
            ),
        )
}

fn nad_manifest() -> String {
    let config = serde_json::json!({
        "cniVersion": "0.3.1",
        "name": "secondary",
        "type": "bridge",
        "bridge": SEC_BRIDGE,
        "ipam": {},
    });
    serde_json::json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "secondary", "namespace": NS},
        "spec": {"config": config.to_string()},
    })
    .to_string()
}

fn ping(args: &[&str]) -> bool {
    Command::new("ping")
        .args(["-c", "1", "-W", "2"])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// (name, MAC) of the guest's NICs in `ip -o link` order, loopback left out.
fn guest_links(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let name = l.split(": ").nth(1)?.split('@').next()?.to_owned();
            let mac = l
                .split_once("link/ether ")?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some((name, mac))
        })
        .collect()
}

/// QEMU processes of the node's pods.
fn pod_qemus() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let cgroup = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
            (name.trim().starts_with("qemu-system") && cgroup.contains("kubepods")).then_some(pid)
        })
        .collect()
}

/// libcni's cached results of the secondary network (named after the NAD's CNI network).
fn secondary_cni_cache() -> Vec<String> {
    std::fs::read_dir("/var/lib/cni/results")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("secondary-"))
        .collect()
}

fn launcher_pod(deployed: &Deployed) -> Option<Value> {
    let pods = kubectl_json(
        &deployed.cluster,
        &["get", "pods", "-n", NS, "-l", "kubevirt.io=virt-launcher"],
    )?;
    pods["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
}

#[test]
fn a_vm_gets_a_secondary_bridge_network_through_multus() {
    assert!(
        is_root(),
        "the real node runs containerd, runc and the kubelet: run as root"
    );
    let multus = kvrs_test_cluster::locate_multus().expect("Multus from scripts/multus.sh");
    let kvm = kvrs_node::host_devices::kvm_check().is_ok();
    let bridge = HostBridge::create();
    let deployed = Deployed::start_with_multus(NS, !kvm, &multus);
    deployed.kubectl_ok(&["create", "namespace", NS]);
    let out = deployed
        .cluster
        .kubectl_with_stdin(["apply", "-f", "-"], &nad_manifest());
    assert!(
        out.status.success(),
        "the NetworkAttachmentDefinition: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = deployed
        .cluster
        .kubectl_with_stdin(["apply", "-f", "-"], &vm_manifest());
    assert!(
        out.status.success(),
        "the VM: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let vmi = wait_for(
        "the VMI Running",
        Duration::from_secs(300),
        || {
            kubectl_json(&deployed.cluster, &["get", "vmi", "-n", NS, "guest"])
                .filter(|v| v["status"]["phase"] == "Running")
        },
        || deployed.logs(),
    );
    assert_eq!(vmi["status"]["nodeName"], NODE_NAME);

    // The launcher pod: what it asks Multus for, and what Multus says it attached.
    let pod_iface = hashed_pod_iface("secondary");
    let pod = launcher_pod(&deployed).expect("the launcher pod");
    let annotations = &pod["metadata"]["annotations"];
    let networks: Value = serde_json::from_str(
        annotations["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .unwrap_or_else(|| panic!("the networks annotation: {annotations}")),
    )
    .expect("the networks annotation is JSON");
    assert_eq!(
        networks,
        serde_json::json!([{"name": "secondary", "namespace": NS, "interface": pod_iface}]),
        "the launcher pod asks Multus for `secondary` on KubeVirt's hashed interface"
    );
    let pod_ip = pod["status"]["podIP"]
        .as_str()
        .expect("the pod IP")
        .to_owned();
    let status: Value = serde_json::from_str(
        annotations["k8s.v1.cni.cncf.io/network-status"]
            .as_str()
            .unwrap_or_else(|| panic!("Multus's network-status annotation: {annotations}")),
    )
    .expect("network-status is JSON");
    let status = status.as_array().expect("network-status is a list");
    assert_eq!(status.len(), 2, "two attachments: {status:?}");
    assert_eq!(status[0]["interface"], "eth0", "{status:?}");
    assert_eq!(status[0]["default"], true, "{status:?}");
    assert_eq!(status[0]["ips"][0], pod_ip.as_str(), "{status:?}");
    assert_eq!(status[1]["name"], format!("{NS}/secondary"), "{status:?}");
    assert_eq!(status[1]["interface"], pod_iface.as_str(), "{status:?}");

    // The guest: two NICs in spec order, serving their list on the pod IP.
    let links = wait_for(
        &format!("the guest serving its links over HTTP on the pod IP {pod_ip}"),
        Duration::from_secs(240),
        || http_get(&pod_ip, GUEST_PORT, "/links"),
        || deployed.logs(),
    );
    let links = guest_links(&links);
    let names: Vec<&str> = links.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["eth0", "eth1"], "the guest's NICs: {links:?}");

    // The VMI's status: both interfaces in spec order, KubeVirt's names, the guest's view.
    let vmi = wait_for(
        "the VMI status with both interfaces and the secondary's guest address",
        Duration::from_secs(180),
        || {
            kubectl_json(&deployed.cluster, &["get", "vmi", "-n", NS, "guest"]).filter(|v| {
                v["status"]["interfaces"][1]["ipAddress"] == SEC_GUEST
                    && v["status"]["interfaces"][0]["ipAddress"].is_string()
            })
        },
        || deployed.logs(),
    );
    let ifaces = vmi["status"]["interfaces"].as_array().expect("interfaces");
    assert_eq!(ifaces.len(), 2, "{ifaces:?}");
    // KubeVirt's VMI controller copies each pod interface name from Multus's network-status
    // (pkg/network/controllers UpdateVMIStatus); checked after the teardown checks below.
    let mut pod_iface_names = Vec::new();
    for (i, (name, guest_name, pod_name)) in [
        ("default", "eth0", "eth0"),
        ("secondary", "eth1", pod_iface.as_str()),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(ifaces[i]["name"], name, "{ifaces:?}");
        assert_eq!(ifaces[i]["interfaceName"], guest_name, "{ifaces:?}");
        pod_iface_names.push((
            name,
            pod_name.to_owned(),
            ifaces[i]["podInterfaceName"].clone(),
        ));
        assert_eq!(
            ifaces[i]["mac"].as_str(),
            Some(links[i].1.as_str()),
            "the guest's {guest_name} has the MAC the VMI reports: {ifaces:?}"
        );
    }

    // Reachability: the secondary on its own network, the primary still on the pod IP.
    wait_for(
        &format!("the guest answering ping on {SEC_GUEST} through {SEC_BRIDGE}"),
        Duration::from_secs(60),
        || ping(&["-I", SEC_BRIDGE, SEC_GUEST]).then_some(()),
        || deployed.logs(),
    );
    assert!(ping(&[&pod_ip]), "the guest still answers on the pod IP");
    assert!(
        !HostBridge::ports().is_empty(),
        "the pod's veth is a port of {SEC_BRIDGE}"
    );
    eprintln!(
        "real multus: guest NICs {links:?}, pod interface {pod_iface}, secondary {SEC_GUEST} and pod IP {pod_ip} answer"
    );

    deployed.kubectl_ok(&["delete", "vm", "-n", NS, "guest", "--wait=false"]);
    wait_for(
        "the VM deleted: no VMI, no launcher pod, no QEMU, no port on the bridge",
        Duration::from_secs(240),
        || {
            let vmis = kubectl_json(&deployed.cluster, &["get", "vmi", "-n", NS])?;
            let pods = kubectl_json(&deployed.cluster, &["get", "pods", "-n", NS])?;
            (vmis["items"].as_array()?.is_empty()
                && pods["items"].as_array()?.is_empty()
                && pod_qemus().is_empty()
                && HostBridge::ports().is_empty())
            .then_some(())
        },
        || {
            format!(
                "{}\nqemu {:?}, ports {:?}",
                deployed.logs(),
                pod_qemus(),
                HostBridge::ports()
            )
        },
    );
    assert_eq!(
        secondary_cni_cache(),
        Vec::<String>::new(),
        "no cached CNI result of the secondary network is left"
    );
    let mut deployed = deployed;
    let node = deployed.node.take().expect("the node");
    node.stop()
        .unwrap_or_else(|e| panic!("the node left something behind: {e}"));
    drop(bridge);
    let out = Command::new("ip")
        .args(["link", "show", SEC_BRIDGE])
        .output()
        .expect("ip");
    assert!(!out.status.success(), "the test's bridge is gone");
    for (name, want, got) in pod_iface_names {
        assert_eq!(
            got, want,
            "status.interfaces[{name}].podInterfaceName as KubeVirt's VMI controller writes it \
             from the pod's network-status"
        );
    }
}
