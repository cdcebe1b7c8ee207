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
#[path = "common/run_driver.rs"]
mod run_driver;

use lines::lines_of;
use run_driver::{Running, fixture, output, serial, state_dir};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kvrs_test_guest::pod::is_root;
use kvrs_test_guest::{BOOT_MARKER, PING_MARKER, POWER_MARKER};

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
    let mut cmd = run_driver::command(&fixture(), tag);
    cmd.args(["--timeout-seconds", "240"]).args(extra);
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
    let out = output(kvrs_run("a", &["--stop-after-console", PING_MARKER]));
    let created = second.join().expect("the second VMI's thread");
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert!(
        out.success(),
        "kvrs run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert_in_order(
        stdout,
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
    let mut run = Running::spawn(kvrs_run("b", &["--console"]));
    run.expect_line(BOOT_MARKER, Duration::from_secs(240), || {});
    run.signal("TERM");
    let out = run.finish(|| {});
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert!(
        out.success(),
        "kvrs run after SIGTERM: {}\n{stdout}\n{stderr}",
        out.status
    );
    // The guest's own kernel: under KVM it finds the hypervisor (no such line under TCG).
    let kvm = kvrs_node::host_devices::kvm_works();
    assert_eq!(
        stdout.contains("Hypervisor detected: KVM"),
        kvm,
        "KVM works here: {kvm}; the guest's console:\n{stdout}"
    );
    assert_in_order(
        stdout,
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
    let out = output(kvrs_run(tag, &["--runtime", "/nonexistent/runc"]));
    let stderr = &out.stderr;
    assert!(!out.success(), "{stderr}");
    assert!(
        stderr.contains("--runtime /nonexistent/runc: not found"),
        "names the flag and the path: {stderr}"
    );
    assert!(
        !state_dir(tag).join("kubeconfig").exists(),
        "no API server was started: {stderr}"
    );
}
