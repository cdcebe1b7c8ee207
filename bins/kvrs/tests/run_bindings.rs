//! `kvrs run` of VMs whose pod-network interface uses a network binding plugin, registered in
//! the KubeVirt CR given with `--kubevirt-cr` (`fixtures/binding-plugins/kubevirt-cr-plugins.yaml`,
//! the user guide's registrations), every component real: virt-controller adds the plugin's
//! sidecar (`hook-sidecar-0`) to the launcher pod, the kubelet runs it from its image's
//! entrypoint — KubeVirt v1.9.0's own `network-passt-binding` / `network-slirp-binding`, built
//! unchanged by `scripts/hooks-harness.sh` — and the launcher defines the domain the sidecar
//! returns from `OnDefineDomain`.
//!
//! 1. passt: the sidecar's `<interface type='vhostuser'>` with `<backend type='passt'/>` and
//!    shared memfd memory; libvirt runs passt (`scripts/passt.sh --install`: Debian 12's passt
//!    has no vhost-user mode) in the pod's network namespace. The guest gets the pod's own
//!    address from passt's DHCP, fetches a page from a server on this host (its traffic leaves
//!    through passt's sockets in the pod), and its HTTP server answers on the pod IP. Ignored
//!    until `kvrs kubelet` lets passt make its user namespace (see the test's comment).
//! 2. slirp: the sidecar's QEMU command line (`-netdev user,...,hostfwd=tcp::PORT-:PORT` and an
//!    e1000 device). The guest boots Debian's generic kernel here (its e1000 driver: the cloud
//!    kernel of the other tests has neither e1000 nor rtl8139, the plugin's only models), gets
//!    slirp's first address from its DHCP, fetches a page from a server on this host (through
//!    QEMU's sockets in the pod), and its HTTP server answers on the pod IP through QEMU's
//!    `hostfwd`.
//! 3. A VM naming a plugin the CR does not register is refused before anything starts, with
//!    `kvrs pod`'s refusal.
//!
//! SIGTERM ends each run and nothing is left behind. Needs root (as `kvrs run` does), Go (or a
//! built harness) and passt with vhost-user as /usr/bin/passt (`scripts/passt.sh --install`).

#[path = "common/lines.rs"]
mod lines;
#[path = "common/run_driver.rs"]
mod run_driver;
#[path = "common/sidecar_run.rs"]
mod sidecar_run;

use lines::lines_of;
use run_driver::serial;
use sidecar_run::Run;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kvrs_test_guest::pod::{is_root, repo_root, target_dir};
use kvrs_test_guest::{KERNEL_IMAGE, Kernel, LEASE_MARKER, OS_PRETTY_NAME};

/// The sidecar images the CR fixture registers, each with its binary as KubeVirt's image holds
/// it (cmd/sidecars/network-{passt,slirp}-binding/BUILD.bazel: entrypoint `/<name>`).
const PASST_IMAGE: &str = "quay.io/kubevirt/network-passt-binding:v1.9.0";
const SLIRP_IMAGE: &str = "quay.io/kubevirt/network-slirp-binding:v1.9.0";
/// The port the guest's busybox httpd listens on and the interface declares.
const GUEST_PORT: u16 = 8080;
/// Printed by the guest with the body it fetched from the test's server on this host.
const FETCHED: &str = "KVRS-E2E: fetched";

fn cr() -> PathBuf {
    repo_root().join("fixtures/binding-plugins/kubevirt-cr-plugins.yaml")
}

/// The two sidecar images as directories (each its binary at the root), and the image map
/// naming them.
fn sidecar_images(work: &Path) -> PathBuf {
    let built = kvrs_test_guest::hooks_harness();
    let mut map = String::new();
    for (image, binary) in [
        (PASST_IMAGE, "network-passt-binding"),
        (SLIRP_IMAGE, "network-slirp-binding"),
    ] {
        let root = work.join(binary);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::copy(built.join(binary), root.join(binary)).unwrap();
        map.push_str(&format!("{image}={}\n", root.display()));
    }
    let file = work.join("images.map");
    std::fs::write(&file, map).unwrap();
    file
}

/// The DNS search domains of the node's `/etc/resolv.conf` — the one `kvrs kubelet` gives a pod
/// without cluster DNS, as a kubelet does — or the single `cluster.local` the slirp sidecar
/// falls back to when there is none.
fn node_search_domains() -> Vec<String> {
    let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let found: Vec<String> = conf
        .lines()
        .filter_map(|l| l.strip_prefix("search "))
        .flat_map(|l| l.split_whitespace().map(str::to_lowercase))
        .collect();
    if found.is_empty() {
        vec!["cluster.local".into()]
    } else {
        found
    }
}

/// The host's address the pod reaches it on: the source of its default route (the pod's
/// traffic leaves through the kubelet's veth and the host's routing).
fn host_address() -> String {
    let out: Vec<String> = lines_of(Command::new("ip").args(["-4", "route", "get", "1.1.1.1"]))
        .into_iter()
        .collect();
    let out = out.join(" ");
    out.split_whitespace()
        .skip_while(|w| *w != "src")
        .nth(1)
        .unwrap_or_else(|| panic!("this host needs an IPv4 default route: {out}"))
        .to_string()
}

/// A one-page HTTP server on the host, answering `body` to every request.
fn serve(body: String) -> u16 {
    let listener = TcpListener::bind("0.0.0.0:0").expect("a server port");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// The run fixture as a VirtualMachineInstance whose pod interface uses `plugin` (with the
/// HTTP port declared), and user-data that serves HTTP and fetches the page of `host:port`
/// once it has a lease (with `nc`: the guest's busybox `wget` crashes).
fn manifest(plugin: &str, host: &str, port: u16) -> String {
    let guest = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the run fixture")
        .replace(
            "              KVRS-E2E: hello from cloud-init\n",
            &format!(
                "              KVRS-E2E: hello from cloud-init\n\
                 \x20             KVRS-RUN: httpd -p {GUEST_PORT} -h /etc\n\
                 \x20             KVRS-RUN: for i in $(seq 90); do b=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {host} {port} | tail -n 1) && [ -n \"$b\" ] && echo \"{FETCHED} [$b]\" && break; sleep 2; done\n"
            ),
        )
        .replace(
            "            - name: default\n              masquerade: {}\n",
            &format!(
                "            - name: default\n              binding:\n                name: {plugin}\n\
                 \x20             ports:\n                - name: http\n                  port: {GUEST_PORT}\n"
            ),
        );
    let (_, template) = guest
        .split_once("  template:\n")
        .expect("the fixture's template");
    // The template, one level less indented, is the VMI's metadata and spec.
    let body: String = template
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let body = body.replacen(
        "metadata:\n  labels:\n",
        "metadata:\n  name: guest\n  namespace: default\n  labels:\n",
        1,
    );
    assert!(body.contains(&format!("name: {plugin}")) && body.contains(FETCHED));
    format!("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\n{body}")
}

/// The reference the slirp test's VM boots its kernel from: the guest with Debian's generic
/// kernel (see the module's header).
const GENERIC_KERNEL_IMAGE: &str = "kvrs.local/test-guest-kernel-generic:v1";
/// The address libslirp's DHCP gives the first guest of `net=10.0.2.0/24`.
const SLIRP_GUEST_IP: &str = "10.0.2.15";

/// Adds the generic-kernel guest (`boot/vmlinuz`, `boot/initramfs.gz`) to the image map `map`
/// as [`GENERIC_KERNEL_IMAGE`].
fn add_generic_kernel_image(work: &Path, map: &Path) {
    let guest = kvrs_test_guest::guest_with(&target_dir(), Kernel::Generic);
    let root = work.join("generic-kernel");
    let boot = root.join("boot");
    std::fs::create_dir_all(&boot).unwrap();
    std::fs::copy(&guest.kernel, boot.join("vmlinuz")).unwrap();
    std::fs::copy(&guest.initrd, boot.join("initramfs.gz")).unwrap();
    let mut text = std::fs::read_to_string(map).unwrap();
    text.push_str(&format!("{GENERIC_KERNEL_IMAGE}={}\n", root.display()));
    std::fs::write(map, text).unwrap();
}

/// A `kvrs run` of a binding manifest with the plugins' sidecar images.
fn start_run(manifest: &Path, map: &Path, tag: &str, extra: &[&str]) -> Run {
    let mut cmd = run_driver::command(manifest, tag);
    cmd.args(extra);
    cmd.arg("--kubevirt-cr")
        .arg(cr())
        .arg("--image-map")
        .arg(map)
        .arg("--image-entrypoint")
        .arg(format!("{PASST_IMAGE}=/network-passt-binding"))
        .arg("--image-entrypoint")
        .arg(format!("{SLIRP_IMAGE}=/network-slirp-binding"))
        .args(["--console", "--timeout-seconds", "300"]);
    Run::spawn(cmd, tag)
}

/// The body of `GET /path` on `addr`, retried for up to `within` (a forwarded port may take a
/// moment to accept after the guest's server started).
fn http_get(addr: &str, path: &str, within: Duration) -> Result<String, String> {
    let deadline = Instant::now() + within;
    let mut last = String::new();
    while Instant::now() < deadline {
        let attempt = (|| -> std::io::Result<String> {
            let mut s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(3))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            write!(s, "GET {path} HTTP/1.0\r\nHost: guest\r\n\r\n")?;
            let mut text = String::new();
            s.read_to_string(&mut text)?;
            Ok(text)
        })();
        match attempt {
            Ok(text) if text.starts_with("HTTP/1") => return Ok(text),
            Ok(text) => last = format!("not HTTP: {text:?}"),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(last)
}

/// The pod's IP and its containers' names, each running and ready.
fn pod_ip_and_containers(pod: &serde_json::Value) -> (String, Vec<String>) {
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap_or_else(|| panic!("container statuses: {pod}"));
    for c in statuses {
        assert!(c["state"]["running"].is_object(), "{c}");
        assert_eq!(c["ready"], true, "{c}");
    }
    let ip = pod["status"]["podIP"]
        .as_str()
        .unwrap_or_else(|| panic!("the pod's IP: {pod}"))
        .to_string();
    let names = statuses
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    (ip, names)
}

/// `key=value` of the guest's lease line.
fn lease_field<'l>(lease: &'l str, key: &str) -> &'l str {
    lease
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {lease:?}"))
}

/// passt, started by libvirt as the launcher's user, always creates a user namespace to sandbox
/// itself (`unshare(CLONE_NEWUSER)`); the container runtime's default seccomp profile refuses
/// that without `CAP_SYS_ADMIN` (libvirt then reports passt's "Couldn't create user namespace:
/// Operation not permitted"). KubeVirt's launcher pod names no profile, so on a default
/// Kubernetes node (no `--seccomp-default`) it runs unconfined: the run here does the same with
/// `--seccomp-default=false`.
#[test]
fn a_passt_guest_gets_the_pod_address_reaches_out_and_answers_on_the_pod_ip() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let map = sidecar_images(work.path());
    let token = format!("from-the-host-{}", std::process::id());
    let port = serve(token.clone());
    let file = work.path().join("vmi.yaml");
    std::fs::write(&file, manifest("passt", &host_address(), port)).unwrap();
    let mut run = start_run(&file, &map, "p1", &["--seccomp-default=false"]);

    let lease = run.wait_for(LEASE_MARKER, Duration::from_secs(300));
    let fetched = run.wait_for(FETCHED, Duration::from_secs(120));
    let xml = run.seen.domain_xml();
    let pod = run.seen.pod_now();
    let (pod_ip, containers) = pod_ip_and_containers(&pod);
    let answer = http_get(
        &format!("{pod_ip}:{GUEST_PORT}"),
        "/os-release",
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| run.fail(&format!("the guest's HTTP on the pod IP {pod_ip}: {e}")));

    assert_eq!(containers, ["compute", "hook-sidecar-0"], "{pod}");
    // passt hands the guest the pod's own address.
    assert_eq!(lease_field(&lease, "ip"), pod_ip, "{lease}");
    assert!(
        fetched.ends_with(&format!("{FETCHED} [{token}]")),
        "the guest fetched the host's page through passt: {fetched:?}"
    );
    assert!(
        answer.contains(OS_PRETTY_NAME),
        "the guest's httpd served its /etc/os-release on the pod IP: {answer}"
    );
    // The sidecar's interface, as libvirt runs it.
    assert!(xml.contains("<interface type='vhostuser'>"), "{xml}");
    assert!(xml.contains("<backend type='passt'"), "{xml}");
    assert!(xml.contains("<source dev='eth0'/>"), "{xml}");
    assert!(xml.contains("<access mode='shared'/>"), "{xml}");
    assert!(
        xml.contains(&format!("<range start='{GUEST_PORT}'/>")),
        "the interface's port is forwarded: {xml}"
    );
    run.stop_and_check_cleanup();
}

#[test]
fn a_slirp_guest_gets_qemus_user_network_with_the_interface_port_forwarded() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let map = sidecar_images(work.path());
    add_generic_kernel_image(work.path(), &map);
    let token = format!("through-slirp-{}", std::process::id());
    let port = serve(token.clone());
    let file = work.path().join("vmi.yaml");
    let vmi = manifest("slirp", &host_address(), port);
    assert!(
        vmi.contains(KERNEL_IMAGE),
        "the fixture boots {KERNEL_IMAGE}"
    );
    std::fs::write(&file, vmi.replace(KERNEL_IMAGE, GENERIC_KERNEL_IMAGE)).unwrap();
    let mut run = start_run(&file, &map, "s1", &[]);

    let lease = run.wait_for(LEASE_MARKER, Duration::from_secs(300));
    let fetched = run.wait_for(FETCHED, Duration::from_secs(120));
    let xml = run.seen.domain_xml();
    let pod = run.seen.pod_now();
    let (pod_ip, containers) = pod_ip_and_containers(&pod);
    assert_eq!(containers, ["compute", "hook-sidecar-0"], "{pod}");
    // slirp's DHCP, not the pod's address: the guest sits behind QEMU's NAT.
    assert_eq!(lease_field(&lease, "ip"), SLIRP_GUEST_IP, "{lease}");
    assert!(
        fetched.ends_with(&format!("{FETCHED} [{token}]")),
        "the guest fetched the host's page through slirp: {fetched:?}"
    );
    // The sidecar's QEMU arguments, with the pod's search domains (its resolv.conf) and the
    // interface's port.
    let netdev = xml
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("<qemu:arg value='user,id=default,")
                .and_then(|v| v.strip_suffix("'/>"))
        })
        .unwrap_or_else(|| panic!("the slirp netdev in the domain:\n{xml}"));
    assert!(
        netdev.starts_with("net=10.0.2.0/24,"),
        "KubeVirt's default VM CIDR: {netdev}"
    );
    for domain in node_search_domains() {
        assert!(netdev.contains(&format!(",dnssearch={domain}")), "{netdev}");
    }
    assert!(
        netdev.ends_with(&format!(",hostfwd=tcp::{GUEST_PORT}-:{GUEST_PORT}")),
        "{netdev}"
    );
    assert!(
        xml.lines().any(|l| l.contains("<qemu:arg value=")
            && l.contains("driver")
            && l.contains("e1000")
            && l.contains("netdev")),
        "KubeVirt's slirp device: {xml}"
    );
    // libslirp listens on the forwarded port in the pod and hands the connection to the guest's
    // httpd.
    let answer = http_get(
        &format!("{pod_ip}:{GUEST_PORT}"),
        "/os-release",
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| {
        run.fail(&format!(
            "the guest's HTTP through hostfwd on {pod_ip}: {e}"
        ))
    });
    assert!(
        answer.contains(OS_PRETTY_NAME),
        "the guest's httpd served its /etc/os-release through QEMU's hostfwd: {answer}"
    );
    run.stop_and_check_cleanup();
}

/// A VM naming a plugin the CR does not register: `kvrs run` refuses it before anything starts,
/// with the refusal `kvrs pod` gives it (virt-controller's: it could not render the pod).
#[test]
fn an_unregistered_plugin_is_refused_as_kvrs_pod_refuses_it() {
    let vm = repo_root().join("fixtures/binding-plugins/vm-passt.yaml");
    let other = repo_root().join("fixtures/binding-plugins/kubevirt-cr-other-plugin.yaml");
    let state = run_driver::state_dir("u1");
    let refusal = |sub: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvrs"));
        cmd.arg(sub).arg(&vm).arg("--kubevirt-cr").arg(&other);
        if sub == "run" {
            cmd.arg("--state-dir").arg(&state);
        }
        let out = cmd.output().expect("run kvrs");
        assert_eq!(out.status.code(), Some(2), "kvrs {sub}: {out:?}");
        assert!(out.stdout.is_empty(), "kvrs {sub}: {out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let pod = refusal("pod");
    assert!(pod.contains("binding.passt"), "{pod}");
    assert_eq!(refusal("run"), pod);
    assert!(!state.exists(), "nothing started: {}", state.display());
}
