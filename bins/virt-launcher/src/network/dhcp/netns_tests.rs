//! Network phase 2 against real namespaces and a real DHCP client (root only; fails, never
//! skips, when something it needs is missing).
//!
//! The "pod" namespace gets what the handler would build: a bridge `k6t-eth0` 10.0.2.1/24, a
//! veth `tap0` enslaved to it whose peer `eth0` is the guest NIC in a second namespace, and a
//! pod NIC `eth0` (a veth, as this kernel may lack dummy links) with a pod address and MTU 1400.
//! Phase 2 runs on a thread that entered the pod namespace; busybox's `udhcpc` (Debian's
//! `busybox-static`, unpacked under the target dir, nothing installed) runs in the guest
//! namespace and applies what it got.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use nix::sched::{CloneFlags, setns};

use super::DhcpEnv;
use crate::network::setup_phase2;

const MTU: u32 = 1400;
const RESOLV: &str = "search default.svc.cluster.local svc.cluster.local cluster.local\n\
                      nameserver 10.96.0.10\noptions ndots:5\n";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?} (is {} installed?): {e}", args[0]));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `target/<profile>`, from this test binary's path (`target/<profile>/deps/virt_launcher-..`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// A static busybox from Debian's `busybox-static`, fetched once per target dir.
fn busybox() -> PathBuf {
    static FETCH: Mutex<()> = Mutex::new(());
    let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let dir = target_dir().join("kvrs-dhcp-busybox");
    let bin = dir.join("root/bin/busybox");
    if bin.is_file() {
        return bin;
    }
    let debs = dir.join("debs");
    std::fs::create_dir_all(&debs).unwrap();
    let out = Command::new("apt-get")
        .current_dir(&debs)
        .args(["download", "-q", "busybox-static"])
        .output()
        .expect("apt-get is needed to fetch busybox-static");
    assert!(
        out.status.success(),
        "apt-get download busybox-static failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = dir.join("root");
    for deb in std::fs::read_dir(&debs).unwrap().map(|e| e.unwrap().path()) {
        run(&[
            "dpkg-deb",
            "-x",
            deb.to_str().unwrap(),
            root.to_str().unwrap(),
        ]);
    }
    assert!(bin.is_file(), "busybox-static has no bin/busybox");
    bin
}

/// Two namespaces, deleted on drop.
struct Namespaces {
    pod: String,
    guest: String,
}

impl Namespaces {
    fn new(tag: &str) -> Namespaces {
        let pid = std::process::id();
        let ns = Namespaces {
            pod: format!("kvrs-{tag}-pod-{pid}"),
            guest: format!("kvrs-{tag}-vm-{pid}"),
        };
        run(&["ip", "netns", "add", &ns.pod]);
        run(&["ip", "netns", "add", &ns.guest]);
        ns
    }

    fn pod(&self, args: &str) {
        let mut all = vec!["ip", "-n", &self.pod];
        all.extend(args.split_whitespace());
        run(&all);
    }

    /// What the handler builds for a masquerade interface, minus NAT.
    fn build_masquerade_pod(&self) {
        let mtu = MTU.to_string();
        self.pod("link set lo up");
        self.pod(&format!(
            "link add name eth0 mtu {mtu} type veth peer name pod-peer0"
        ));
        self.pod("addr add 10.244.0.5/24 dev eth0");
        self.pod("link set eth0 up");
        self.pod("link add name k6t-eth0 type bridge");
        self.pod("link set k6t-eth0 address 02:00:00:00:00:00");
        self.pod("addr add 10.0.2.1/24 dev k6t-eth0");
        self.pod(&format!(
            "link add name tap0 mtu {mtu} type veth peer name eth0 netns {}",
            self.guest
        ));
        self.pod("link set tap0 master k6t-eth0");
        self.pod("link set tap0 up");
        self.pod("link set k6t-eth0 up");
        run(&["ip", "-n", &self.guest, "link", "set", "lo", "up"]);
        run(&["ip", "-n", &self.guest, "link", "set", "eth0", "up"]);
    }

    /// Runs `f` on a thread inside the pod namespace.
    fn in_pod<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.pod);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).unwrap();
            setns(&fd, CloneFlags::CLONE_NEWNET).expect("setns into the pod namespace");
            f()
        })
        .join()
        .expect("pod thread")
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in [&self.pod, &self.guest] {
            let _ = Command::new("ip").args(["netns", "delete", ns]).status();
        }
    }
}

fn masquerade_vmi() -> kvrs_api::VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "dhcp", "namespace": "default", "uid": "u-dhcp"},
        "spec": {
            "domain": {
                "devices": {"interfaces": [{"name": "default", "masquerade": {}}]},
                "resources": {"requests": {"memory": "128Mi"}}
            },
            "networks": [{"name": "default", "pod": {}}],
            "subdomain": "web"
        }
    }))
    .unwrap()
}

/// Runs udhcpc once in the guest namespace; its script prints what the lease said and applies
/// the address.
fn udhcpc(ns: &Namespaces, dir: &Path) -> String {
    let busybox = busybox();
    let script = dir.join("udhcpc.script");
    let bb = busybox.display();
    std::fs::write(
        &script,
        format!(
            "#!{bb} sh\n\
             [ \"$1\" = bound ] || exit 0\n\
             {bb} ip addr add \"$ip/$mask\" dev \"$interface\"\n\
             echo \"ip=$ip mask=$mask router=$router dns=$dns mtu=$mtu hostname=$hostname \
             domain=$domain search=$search lease=$lease serverid=$serverid\"\n"
        ),
    )
    .unwrap();
    run(&["chmod", "0755", script.to_str().unwrap()]);
    run(&[
        "ip",
        "netns",
        "exec",
        &ns.guest,
        busybox.to_str().unwrap(),
        "udhcpc",
        "-i",
        "eth0",
        "-f",
        "-q",
        "-n",
        "-t",
        "5",
        "-T",
        "1",
        "-O",
        "search",
        "-O",
        "mtu",
        "-s",
        script.to_str().unwrap(),
    ])
}

#[test]
fn a_masquerade_guest_gets_its_lease_from_the_launcher() {
    assert!(is_root(), "this test needs root (network namespaces)");
    let ns = Namespaces::new("dhcp");
    ns.build_masquerade_pod();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("resolv.conf"), RESOLV).unwrap();
    let env = DhcpEnv {
        private_dir: dir.path().to_path_buf(),
        resolv_conf: dir.path().join("resolv.conf"),
        hostname: Some("dhcp".into()),
        port: super::server::SERVER_PORT,
    };

    let vmi = masquerade_vmi();
    let ctx = kvrs_converter::ConverterContext {
        allow_emulation: true,
        ..Default::default()
    };
    let domain = kvrs_converter::convert(&vmi, &ctx).unwrap();
    let (env2, vmi2) = (env.clone(), vmi.clone());
    let (domain, pod_mac, again) = ns.in_pod(move || {
        let mut domain = domain;
        setup_phase2(&vmi2, &HashMap::new(), &mut domain, &env2).expect("phase 2");
        let mac =
            crate::network::link::format_mac(&crate::network::link::by_name("eth0").unwrap().mac);
        // A second sync finds the marker and starts nothing.
        let again = setup_phase2(&vmi2, &HashMap::new(), &mut domain.clone(), &env2);
        (domain, mac, again)
    });
    assert_eq!(again, Ok(()));
    assert!(dir.path().join("dhcp_started-eth0").is_file());

    let di = &domain.devices.interfaces[0];
    let target = di.target.as_ref().expect("target");
    assert_eq!(
        (target.dev.as_str(), target.managed.as_deref()),
        ("tap0", Some("no"))
    );
    assert_eq!(di.mtu.as_ref().map(|m| m.size.as_str()), Some("1400"));
    assert_eq!(
        di.mac.as_ref().map(|m| m.address.as_str()),
        Some(pod_mac.as_str())
    );

    let lease = udhcpc(&ns, dir.path());
    for want in [
        "ip=10.0.2.2 ",
        "mask=24 ",
        "router=10.0.2.1 ",
        "dns=10.96.0.10 ",
        "mtu=1400 ",
        "hostname=dhcp ",
        "domain=web.default.svc.cluster.local ",
        "search=web.default.svc.cluster.local default.svc.cluster.local svc.cluster.local cluster.local ",
        "lease=86313600 ",
        "serverid=10.0.2.1",
    ] {
        assert!(lease.contains(want), "lease lacks {want:?}: {lease}");
    }
    let addrs = run(&["ip", "-n", &ns.guest, "-4", "addr", "show", "dev", "eth0"]);
    assert!(addrs.contains("inet 10.0.2.2/24"), "guest eth0: {addrs}");
}
