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

/// `binary` (a path inside the package) of Debian's `package`, fetched with `apt-get download`
/// and unpacked under the target dir once (nothing is installed).
fn debian_binary(package: &str, binary: &str) -> PathBuf {
    static FETCH: Mutex<()> = Mutex::new(());
    let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let dir = target_dir().join(format!("kvrs-dhcp-{package}"));
    let bin = dir.join("root").join(binary);
    if bin.is_file() {
        return bin;
    }
    let debs = dir.join("debs");
    std::fs::create_dir_all(&debs).unwrap();
    let out = Command::new("apt-get")
        .current_dir(&debs)
        .args(["download", "-q", package])
        .output()
        .unwrap_or_else(|e| panic!("apt-get is needed to fetch {package}: {e}"));
    assert!(
        out.status.success(),
        "apt-get download {package} failed: {}",
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
    assert!(bin.is_file(), "{package} has no {binary}");
    bin
}

/// A static busybox from Debian's `busybox-static`.
fn busybox() -> PathBuf {
    debian_binary("busybox-static", "bin/busybox")
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

    /// What the handler builds for a bridge-binding interface: the pod NIC renamed `eth0-nic`
    /// in the bridge, a stand-in `eth0`, the fake server address on the bridge. Returns the
    /// guest NIC's MAC.
    fn build_bridge_pod(&self) -> String {
        let mtu = MTU.to_string();
        self.pod("link set lo up");
        self.pod("link add name k6t-eth0 type bridge");
        self.pod("addr add 169.254.75.10/32 dev k6t-eth0");
        self.pod(&format!(
            "link add name eth0-nic mtu {mtu} type veth peer name pod-peer0"
        ));
        self.pod("link set eth0-nic master k6t-eth0");
        self.pod("link set eth0-nic up");
        self.pod("link add name eth0 mtu 1500 type veth peer name pod-peer1");
        self.pod(&format!(
            "link add name tap0 mtu {mtu} type veth peer name eth0 netns {}",
            self.guest
        ));
        self.pod("link set tap0 master k6t-eth0");
        self.pod("link set tap0 up");
        self.pod("link set k6t-eth0 up");
        run(&["ip", "-n", &self.guest, "link", "set", "eth0", "up"]);
        let link = run(&["ip", "-n", &self.guest, "-o", "link", "show", "dev", "eth0"]);
        link.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .expect("guest MAC")
            .to_string()
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

fn vmi(iface: serde_json::Value) -> kvrs_api::VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "dhcp", "namespace": "default", "uid": "u-dhcp"},
        "spec": {
            "domain": {
                "devices": {"interfaces": [iface]},
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
             domain=$domain search=$search lease=$lease serverid=$serverid \
             staticroutes=$staticroutes\"\n"
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
        "-O",
        "staticroutes",
        "-s",
        script.to_str().unwrap(),
    ])
}

/// The pod's private directory and resolv.conf.
fn pod_files() -> (tempfile::TempDir, DhcpEnv) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("resolv.conf"), RESOLV).unwrap();
    let env = DhcpEnv {
        private_dir: dir.path().to_path_buf(),
        resolv_conf: dir.path().join("resolv.conf"),
        hostname: Some("dhcp".into()),
        port: super::server::SERVER_PORT,
        port_v6: super::v6::SERVER_PORT,
    };
    (dir, env)
}

fn converted(vmi: &kvrs_api::VirtualMachineInstance) -> kvrs_converter::Domain {
    let ctx = kvrs_converter::ConverterContext {
        allow_emulation: true,
        ..Default::default()
    };
    kvrs_converter::convert(vmi, &ctx).unwrap()
}

#[test]
fn a_masquerade_guest_gets_its_lease_from_the_launcher() {
    assert!(is_root(), "this test needs root (network namespaces)");
    let ns = Namespaces::new("dhcp");
    ns.build_masquerade_pod();
    let (dir, env) = pod_files();

    let vmi = vmi(serde_json::json!({"name": "default", "masquerade": {}}));
    let domain = converted(&vmi);
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

#[test]
fn a_bridge_guest_gets_the_lease_the_handler_cached() {
    assert!(is_root(), "this test needs root (network namespaces)");
    let ns = Namespaces::new("dhcpbr");
    let guest_mac = ns.build_bridge_pod();
    let (dir, env) = pod_files();
    // The handler's cache for this guest, in the shape Go writes (see vif_cache.rs).
    let mac_b64 = {
        use base64::Engine;
        let mac = crate::network::names::parse_mac(&guest_mac).unwrap();
        base64::engine::general_purpose::STANDARD.encode(mac)
    };
    let cache = serde_json::json!({
        "Name": "eth0",
        "IP": {"IP": "10.244.1.7", "Mask": "////AA==", "Label": "", "Flags": 0, "Scope": 0,
               "Peer": null, "Broadcast": "", "PreferedLft": 0, "ValidLft": 0, "LinkIndex": 0},
        "IPv6": {"Label": "", "Flags": 0, "Scope": 0, "Peer": null, "Broadcast": "",
                 "PreferedLft": 0, "ValidLft": 0, "LinkIndex": 0},
        "MAC": mac_b64,
        "AdvertisingIPAddr": "", "AdvertisingIPv6Addr": "",
        "Routes": [
            {"Dst": null, "Gw": "10.244.1.1", "Src": ""},
            {"Dst": {"IP": "10.96.0.0", "Mask": "//AAAA=="}, "Gw": "10.244.1.254", "Src": ""}
        ],
        "Mtu": 1500, "IPAMDisabled": false, "Gateway": "10.244.1.1", "Subdomain": ""
    });
    std::fs::write(
        dir.path().join("vif-cache-eth0.json"),
        serde_json::to_vec(&cache).unwrap(),
    )
    .unwrap();

    let vmi = vmi(serde_json::json!({
        "name": "default", "bridge": {}, "macAddress": guest_mac
    }));
    let domain = converted(&vmi);
    let env2 = env.clone();
    let domain = ns.in_pod(move || {
        let mut domain = domain;
        setup_phase2(&vmi, &HashMap::new(), &mut domain, &env2).expect("phase 2");
        domain
    });
    let di = &domain.devices.interfaces[0];
    assert_eq!(di.target.as_ref().map(|t| t.dev.as_str()), Some("tap0"));
    assert_eq!(
        di.mac.as_ref().map(|m| m.address.as_str()),
        Some(guest_mac.as_str())
    );

    let lease = udhcpc(&ns, dir.path());
    for want in [
        "ip=10.244.1.7 ",
        "mask=24 ",
        "router=10.244.1.1 ",
        "dns=10.96.0.10 ",
        "mtu=1400 ",
        "serverid=169.254.75.10 ",
        "staticroutes=10.96.0.0/12 10.244.1.254 0.0.0.0/0 10.244.1.1",
    ] {
        assert!(lease.contains(want), "lease lacks {want:?}: {lease}");
    }
}

/// ISC's `dhclient` from Debian's isc-dhcp-client, for a real DHCPv6 client.
fn dhclient() -> PathBuf {
    debian_binary("isc-dhcp-client", "sbin/dhclient")
}

#[test]
fn a_masquerade_guest_on_an_ipv6_pod_gets_its_address_over_dhcpv6() {
    assert!(is_root(), "this test needs root (network namespaces)");
    let ns = Namespaces::new("dhcp6");
    // The guest's link-local address must not wait for duplicate detection before dhclient
    // may use it.
    for n in [&ns.pod, &ns.guest] {
        run(&[
            "ip",
            "netns",
            "exec",
            n,
            "sysctl",
            "-q",
            "-w",
            "net.ipv6.conf.default.accept_dad=0",
        ]);
    }
    ns.build_masquerade_pod();
    // A dual-stack pod: the pod NIC has a global IPv6 address, the bridge KubeVirt's IPv6
    // gateway, and the pod's resolver an IPv6 name server.
    ns.pod("addr add fd00:244::5/64 dev eth0");
    ns.pod("addr add fd10:0:2::1/120 dev k6t-eth0");
    let (dir, env) = pod_files();
    std::fs::write(
        dir.path().join("resolv.conf"),
        format!("{RESOLV}nameserver fd00:96::a\n"),
    )
    .unwrap();

    let vmi = vmi(serde_json::json!({"name": "default", "masquerade": {}}));
    let domain = converted(&vmi);
    ns.in_pod(move || {
        let mut domain = domain;
        setup_phase2(&vmi, &HashMap::new(), &mut domain, &env).expect("phase 2");
    });

    let lease = run_dhclient(
        &ns,
        dir.path(),
        "-6",
        "BOUND6",
        "ip6=$new_ip6_address prefixlen=$new_ip6_prefixlen dns=$new_dhcp6_name_servers \
         lifetime=$new_max_life",
    );
    for want in ["ip6=fd10:0:2::2 ", "dns=fd00:96::a ", "lifetime=86313600"] {
        assert!(lease.contains(want), "lease lacks {want:?}: {lease}");
    }
}

/// Runs ISC dhclient (`family`: `-4` or `-6`) once in the guest namespace until its script is
/// called with `reason`; returns what the script printed (`report`, shell-expanded there).
fn run_dhclient(ns: &Namespaces, dir: &Path, family: &str, reason: &str, report: &str) -> String {
    let out = dir.join(format!("dhclient{family}.out"));
    let script = dir.join(format!("dhclient{family}.script"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$reason\" in {reason}) echo \"{report}\" > {out}.tmp && \
             mv {out}.tmp {out};; esac\nexit 0\n",
            out = out.display()
        ),
    )
    .unwrap();
    run(&["chmod", "0755", script.to_str().unwrap()]);
    let log = dir.join(format!("dhclient{family}.log"));
    let mut client = Command::new("ip")
        .args(["netns", "exec", &ns.guest])
        .arg(dhclient())
        .args([family, "-d", "-1", "-v", "-cf", "/dev/null"])
        .arg("-sf")
        .arg(&script)
        .arg("-lf")
        .arg(dir.join(format!("dhclient{family}.leases")))
        .arg("-pf")
        .arg(dir.join(format!("dhclient{family}.pid")))
        .arg("eth0")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run dhclient");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let lease = loop {
        if let Ok(text) = std::fs::read_to_string(&out) {
            break text;
        }
        if std::time::Instant::now() > deadline {
            let _ = client.kill();
            panic!(
                "no {reason} lease in 30 s; dhclient said:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = client.kill();
    let _ = client.wait();
    lease
}

/// A second DHCPv4 client, ISC's: it decodes the search list dhcproto compresses (RFC 3397)
/// and the rest of the masquerade lease as udhcpc does.
#[test]
fn isc_dhclient_takes_the_masquerade_lease_and_its_compressed_search_list() {
    assert!(is_root(), "this test needs root (network namespaces)");
    let ns = Namespaces::new("dhcp4i");
    ns.build_masquerade_pod();
    let (dir, env) = pod_files();
    let vmi = vmi(serde_json::json!({"name": "default", "masquerade": {}}));
    let domain = converted(&vmi);
    ns.in_pod(move || {
        let mut domain = domain;
        setup_phase2(&vmi, &HashMap::new(), &mut domain, &env).expect("phase 2");
    });
    let lease = run_dhclient(
        &ns,
        dir.path(),
        "-4",
        "BOUND",
        "ip=$new_ip_address mask=$new_subnet_mask router=$new_routers \
         dns=$new_domain_name_servers mtu=$new_interface_mtu hostname=$new_host_name \
         domain=$new_domain_name search=$new_domain_search lease=$new_dhcp_lease_time \
         serverid=$new_dhcp_server_identifier",
    );
    for want in [
        "ip=10.0.2.2 ",
        "mask=255.255.255.0 ",
        "router=10.0.2.1 ",
        "dns=10.96.0.10 ",
        "mtu=1400 ",
        "hostname=dhcp ",
        "domain=web.default.svc.cluster.local ",
        "search=web.default.svc.cluster.local. default.svc.cluster.local. svc.cluster.local. \
         cluster.local. ",
        "lease=86313600 ",
        "serverid=10.0.2.1",
    ] {
        assert!(lease.contains(want), "lease lacks {want:?}: {lease}");
    }
}
