//! Real network namespaces for the integration tests, removed again by a Drop guard.
//!
//! The tests need root and the `ip` and `nft` binaries; a missing binary fails the test with a
//! message saying so (never a skip).

#![allow(dead_code)]

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Fails the test unless `tool` can be run.
pub fn require_tool(tool: &str) {
    let found = Command::new(tool).arg("-V").output().is_ok()
        || Command::new(tool).arg("--version").output().is_ok();
    assert!(
        found,
        "`{tool}` is required by this test (install iproute2 / nftables) and was not found on PATH"
    );
}

/// Runs a command, failing the test with its output when it fails; returns stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the kernel can make dummy links (bridge binding needs one).
pub fn kernel_has_dummy_links() -> bool {
    let name = format!("kvrsdp{}", std::process::id() % 100_000);
    let ok = Command::new("ip")
        .args(["link", "add", &name, "type", "dummy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        let _ = Command::new("ip").args(["link", "del", &name]).status();
    }
    ok
}

/// [`kernel_has_dummy_links`], saying so when not: a kernel without dummy links (e.g. a minimal
/// VM kernel without CONFIG_DUMMY) gets a veth pair left down in the dummy's place; everything
/// else is the same.
pub fn dummy_links_or_note() -> bool {
    let has = kernel_has_dummy_links();
    if !has {
        eprintln!("NOTE: kernel has no dummy links: the pod's addresses are held on a veth");
    }
    has
}

/// A network namespace shaped like a launcher pod's: `lo` up and `eth0` (one end of a veth
/// pair) with a pod address, MTU 1450 and a default route.
pub struct PodNetns {
    pub name: String,
    pub octet: u32,
    /// The node's end of the pod's veth pair (in the test's own namespace).
    pub host_end: String,
}

impl PodNetns {
    pub fn new() -> Self {
        require_tool("ip");
        require_tool("nft");
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let name = format!("kvrs-node-test-{pid}-{n}");
        let octet = (pid % 200) + n + 1;
        let host_end = format!("kvn{}x{n}", pid % 100_000);
        run("ip", &["netns", "add", &name]);
        let ns = PodNetns {
            name,
            octet,
            host_end: host_end.clone(),
        };
        run(
            "ip",
            &[
                "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &ns.name,
            ],
        );
        run("ip", &["link", "set", &host_end, "up"]);
        let addr = format!("10.244.{}.7/24", ns.octet % 250);
        let gw = format!("10.244.{}.1", ns.octet % 250);
        ns.ip(&["link", "set", "lo", "up"]);
        ns.ip(&["link", "set", "eth0", "mtu", "1450"]);
        ns.ip(&["addr", "add", &addr, "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&[
            "route", "add", "default", "via", &gw, "dev", "eth0", "onlink",
        ]);
        ns
    }

    /// The pod as the node library addresses it: this namespace, with `root` as the pod's
    /// filesystem (its `var/run` made, where the DHCP cache goes).
    pub fn pod(&self, root: &tempfile::TempDir) -> kvrs_node::PodRef {
        std::fs::create_dir_all(root.path().join("var/run")).expect("var/run");
        kvrs_node::PodRef {
            netns: self.path(),
            root: root.path().to_path_buf(),
        }
    }

    /// `eth0`'s MAC and interface index as the CNI left them (the bindings rename and re-MAC it).
    pub fn eth0_identity(&self) -> (String, Value) {
        let eth0 = self.link("eth0");
        let mac = eth0["address"].as_str().expect("eth0's mac").to_string();
        (mac, eth0["ifindex"].clone())
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    pub fn pod_ip(&self) -> String {
        format!("10.244.{}.7", self.octet % 250)
    }

    pub fn pod_gw(&self) -> String {
        format!("10.244.{}.1", self.octet % 250)
    }

    /// `ip -n <ns> args...`.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// `ip -n <ns> -j -d link show <dev>`, the one object.
    pub fn link(&self, dev: &str) -> Value {
        let text = self.ip(&["-j", "-d", "link", "show", dev]);
        let v: Value = serde_json::from_str(&text).expect("ip -j prints JSON");
        v[0].clone()
    }

    /// The `ip -j addr` addresses of `dev` as `ip/prefix` strings.
    pub fn addrs(&self, dev: &str) -> Vec<String> {
        let text = self.ip(&["-j", "addr", "show", "dev", dev]);
        let v: Value = serde_json::from_str(&text).expect("ip -j prints JSON");
        v[0]["addr_info"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
            .collect()
    }

    /// A `/proc/sys` value read inside the namespace.
    pub fn sysctl(&self, key: &str) -> String {
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.name,
                "cat",
                &format!("/proc/sys/{key}"),
            ],
        )
        .trim()
        .to_string()
    }

    /// `nft -j list ruleset` inside the namespace.
    pub fn nft_ruleset(&self) -> Value {
        let text = run(
            "ip",
            &["netns", "exec", &self.name, "nft", "-j", "list", "ruleset"],
        );
        serde_json::from_str(&text).expect("nft -j prints JSON")
    }

    /// `nft list table <family> nat` inside the namespace, counters zeroed for comparison.
    pub fn nat_table_text(&self, family: &str) -> String {
        let text = run(
            "ip",
            &[
                "netns", "exec", &self.name, "nft", "list", "table", family, "nat",
            ],
        );
        text.lines()
            .map(|l| match l.find("counter packets") {
                Some(i) => {
                    let rest = &l[i..];
                    let end = rest.find(" bytes ").map(|b| {
                        let after = &rest[b + 7..];
                        b + 7 + after.find(' ').unwrap_or(after.len())
                    });
                    format!("{}counter{}", &l[..i], end.map_or("", |e| &rest[e..]))
                }
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for PodNetns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its eth0 and with it the host end of the pair.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
