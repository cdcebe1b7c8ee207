//! `kvrs run` end to end, with every real component: the embedded API server, kvrs's
//! virt-controller and virt-handler, the local kubelet, kvrs's virt-launcher in a container run
//! by runc (its own root filesystem and namespaces, UID 107), real libvirt and QEMU booting the
//! Debian kernel + busybox guest of
//! kvrs-test-guest — under KVM where it works on this machine (the guest's kernel says so on its
//! console), else TCG. Needs root, as `kvrs run` does.
//!
//! The cleanup is checked against the machine itself: network namespaces, links, the host's
//! nftables ruleset, processes (runc's too), the kubelet's cgroups, mounts and the state directory
//! are what they were before the run.

#[path = "common/lines.rs"]
mod lines;

use lines::lines_of;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kvrs_test_guest::pod::{is_root, launcher_binaries, repo_root, target_dir};
use kvrs_test_guest::{BOOT_MARKER, PING_MARKER, POWER_MARKER};

/// One VM at a time: the 2-core machine boots one TCG guest comfortably.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn fixture() -> PathBuf {
    repo_root().join("fixtures/run/guest-vm.yaml")
}

/// The guest images, built once per target directory.
fn images() -> PathBuf {
    let dir = target_dir().join("kvrs-run-images");
    kvrs_test_guest::write_images(&target_dir(), &dir).expect("the guest images");
    dir
}

/// The run's state directory.
fn state_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/kvrs-run-{tag}-{}", std::process::id()))
}

/// Its pods directory: short, the launcher socket path under it must fit 107 bytes.
fn pods_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/kp{tag}{}", std::process::id() % 10_000))
}

/// What a run must leave as it found: network namespaces, links (by name), the host's
/// nftables ruleset, and the processes of the launcher stack.
#[derive(Debug, PartialEq, Eq)]
struct MachineState {
    netns: BTreeSet<String>,
    links: BTreeSet<String>,
    nft: String,
    stack_processes: BTreeSet<String>,
    /// The kubelet's cgroups (`kvrs-kubelet-<node>` in any hierarchy, with the pods' in them).
    cgroups: BTreeSet<String>,
    /// Mounts of the host's table under a kvrs directory (a container's must never show here).
    kvrs_mounts: BTreeSet<String>,
}

fn machine_state() -> MachineState {
    let links = lines_of(Command::new("ip").args(["-o", "link", "show"]))
        .into_iter()
        .filter_map(|l| {
            l.split(':')
                .nth(1)
                .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        })
        .collect();
    let nft = Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut stack_processes = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        if [
            "virt-launcher",
            "virt-launcher-m",
            "virtqemud",
            "virtlogd",
            "qemu-system-x86",
            "runc",
            "runc:[2:INIT]",
        ]
        .contains(&comm)
        {
            stack_processes.insert(format!("{} {comm}", entry.file_name().to_string_lossy()));
        }
    }
    let cgroups = lines_of(Command::new("find").args([
        "/sys/fs/cgroup",
        "-maxdepth",
        "3",
        "-path",
        "*kvrs-kubelet-*",
    ]));
    let kvrs_mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("kvrs"))
        .map(str::to_string)
        .collect();
    MachineState {
        netns: lines_of(Command::new("ip").args(["netns", "list"])),
        links,
        nft,
        stack_processes,
        cgroups,
        kvrs_mounts,
    }
}

/// `kvrs run` of the fixture with the state and pods directories of `tag`.
fn kvrs_run(tag: &str, extra: &[&str]) -> Command {
    // kvrs run starts the launcher from next to itself.
    let (monitor, _) = launcher_binaries();
    assert_eq!(
        monitor.parent(),
        Path::new(env!("CARGO_BIN_EXE_kvrs")).parent(),
        "the launcher binaries are built beside kvrs"
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvrs"));
    cmd.arg("run")
        .arg(fixture())
        .arg("--images")
        .arg(images())
        .arg("--state-dir")
        .arg(state_dir(tag))
        .arg("--pods-dir")
        .arg(pods_dir(tag))
        .args(["--timeout-seconds", "240"])
        .args(extra)
        .stdin(Stdio::null());
    cmd
}

/// The accelerator line `kvrs run` prints first, for this machine.
fn expected_accelerator() -> &'static str {
    if kvrs_node::host_devices::kvm_works() {
        "the guest runs under KVM"
    } else {
        "the guest runs under QEMU's TCG emulation"
    }
}

/// Asserts `needles` appear in `haystack` in this order.
fn assert_in_order(haystack: &str, needles: &[&str]) {
    let mut rest = haystack;
    for n in needles {
        match rest.find(n) {
            Some(i) => rest = &rest[i + n.len()..],
            None => panic!("{n:?} missing (or out of order) in:\n{haystack}"),
        }
    }
}

#[test]
fn boots_the_fixture_vm_prints_its_phases_and_address_then_stops_and_leaves_nothing() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let before = machine_state();
    let state = state_dir("a");
    // Another VMI created through the run's API server (issue 43): it fails (its image is not
    // in --images) while the run's VM boots, and must neither be reported nor end the run.
    let second = std::thread::spawn({
        let kubeconfig = state.join("kubeconfig");
        move || create_a_second_vmi_that_fails(&kubeconfig)
    });
    let out = kvrs_run("a", &["--stop-after-console", PING_MARKER])
        .output()
        .expect("run kvrs");
    let created = second.join().expect("the second VMI's thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kvrs run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert_in_order(
        &stdout,
        &[
            expected_accelerator(),
            "default/guest Pending",
            "default/guest Scheduling",
            "default/guest Scheduled on node kvrs-local",
            "default/guest Running",
            PING_MARKER,
            "stopping the VM",
            "default/guest deleted",
            "stopped; nothing left behind",
        ],
    );
    assert!(
        stdout.contains("default/guest guest address 10.251."),
        "the pod IP as the guest's address:\n{stdout}"
    );
    created.unwrap_or_else(|e| panic!("creating the second VMI: {e}\n{stdout}"));
    assert!(
        !stdout.contains("default/second"),
        "only the run's own VM is reported:\n{stdout}"
    );
    assert!(
        !state.exists(),
        "the state directory {} is removed",
        state.display()
    );
    assert_eq!(
        machine_state(),
        before,
        "the run left something behind:\n{stdout}\n{stderr}"
    );
}

/// Waits for the run's kubeconfig, then creates (with the real kubectl and its default
/// validation) a VMI whose container disk is not in `--images`: its pod fails, so it ends
/// Failed while the run's own VM runs.
fn create_a_second_vmi_that_fails(kubeconfig: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !kubeconfig.exists() {
        if Instant::now() > deadline {
            return Err("no kubeconfig within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let kubectl = kvrs_test_cluster::locate_binaries()
        .map_err(|e| e.to_string())?
        .join("kubectl");
    let vmi = "apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: second
spec:
  domain:
    devices:
      disks:
      - name: root
        disk: {bus: virtio}
    resources:
      requests: {memory: 64Mi}
  volumes:
  - name: root
    containerDisk: {image: kvrs.local/not-in-images:v1}
";
    let cache = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut child = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    use std::io::Write;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(vmi.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    // It ends Failed while the run goes on (which the old run took for its own VM's end).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(cache.path())
            .args(["get", "vmi", "second", "-o", "jsonpath={.status.phase}"])
            .output()
            .map_err(|e| e.to_string())?;
        let phase = String::from_utf8_lossy(&out.stdout).into_owned();
        if phase == "Failed" {
            return Ok(());
        }
        if Instant::now() > deadline || !kubeconfig.exists() {
            return Err(format!(
                "the second VMI is {phase:?}, not Failed, while the run ran: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn sigterm_shuts_the_guest_down_through_acpi_then_cleans_up() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let before = machine_state();
    let state = state_dir("b");
    let mut child = kvrs_run("b", &["--console"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kvrs");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    while !seen.iter().any(|l: &String| l.contains(BOOT_MARKER)) {
        assert!(
            Instant::now() < deadline,
            "no boot marker within 240 s:\n{}",
            seen.join("\n")
        );
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(line);
        }
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().expect("kvrs run exits");
    seen.extend(rx.try_iter());
    // The reader thread may still hold the last lines.
    std::thread::sleep(Duration::from_millis(200));
    seen.extend(rx.try_iter());
    let stdout = seen.join("\n");
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(
        status.success(),
        "kvrs run after SIGTERM: {status}\n{stdout}\n{stderr}"
    );
    // The guest's own kernel: under KVM it finds the hypervisor (no such line under TCG).
    let kvm = kvrs_node::host_devices::kvm_works();
    assert_eq!(
        stdout.contains("Hypervisor detected: KVM"),
        kvm,
        "KVM works here: {kvm}; the guest's console:\n{stdout}"
    );
    assert_in_order(
        &stdout,
        &[
            expected_accelerator(),
            BOOT_MARKER,
            "interrupted: stopping the VM",
            POWER_MARKER,
            "default/guest deleted",
            "stopped; nothing left behind",
        ],
    );
    assert!(
        !state.exists(),
        "the state directory {} is removed",
        state.display()
    );
    assert_eq!(
        machine_state(),
        before,
        "the run left something behind:\n{stdout}\n{stderr}"
    );
}

#[test]
fn a_manifest_kubevirt_would_refuse_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(fixture())
        .unwrap()
        .replace("memory: 128Mi", "memory: lots");
    std::fs::write(&bad, text).unwrap();
    let state = dir.path().join("state");
    let out = Command::new(env!("CARGO_BIN_EXE_kvrs"))
        .arg("run")
        .arg(&bad)
        .arg("--state-dir")
        .arg(&state)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("memory"), "names the field: {stderr}");
    assert!(!state.exists(), "nothing started");
}

#[test]
fn an_oci_runtime_that_is_not_there_is_named_before_anything_starts() {
    let _guard = serial();
    let tag = "nr";
    let out = kvrs_run(tag, &["--runtime", "/nonexistent/runc"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--runtime /nonexistent/runc: not found"),
        "names the flag and the path: {stderr}"
    );
    assert!(
        !state_dir(tag).join("kubeconfig").exists(),
        "no API server was started: {stderr}"
    );
}
