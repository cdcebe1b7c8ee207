//! `kvrs run` of a VM with a hook sidecar (`hooks.kubevirt.io/hookSidecars`), every component
//! real: the kubelet runs the pod's `hook-sidecar-0` container — KubeVirt v1.9.0's own
//! `sidecar-shim` with its SMBIOS example hook as `onDefineDomain`, built unchanged by
//! `scripts/hooks-harness.sh` and laid out as KubeVirt's `example-hook-sidecar` image — beside
//! the launcher, in the pod's network namespace, sharing the `hook-sidecar-sockets` emptyDir.
//!
//! 1. The VM boots; the domain libvirt runs (read with `virsh` on the launcher's own libvirt
//!    socket) carries the base board manufacturer of the VMI's annotation, which only the
//!    sidecar puts there; the guest reads it from its DMI table; the pod reports both
//!    containers running and ready. SIGTERM ends the run and nothing is left behind.
//! 2. A sidecar that exits at once: the launcher gives up collecting hooks at its
//!    `--qemu-timeout`, the VMI fails, the run says why, nothing is left behind.
//!
//! Needs root (as `kvrs run` does) and Go (or a built harness).

#[path = "common/lines.rs"]
mod lines;
#[path = "common/run_driver.rs"]
mod run_driver;

use lines::lines_of;
use run_driver::{Output, Running, serial};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kvrs_test_guest::pod::{is_root, repo_root};

/// The image KubeVirt's user guide and examples name for the SMBIOS sidecar (with the v1.9.0
/// tag): `sidecar-shim` as entrypoint, the smbios hook as `/usr/bin/onDefineDomain`.
const IMAGE: &str = "quay.io/kubevirt/example-hook-sidecar:v1.9.0";
const MANUFACTURER: &str = "Radical Edward";
const VENDOR_LINE: &str = "KVRS-E2E: board vendor=";

/// KubeVirt's `example-hook-sidecar` image as a directory (cmd/sidecars/BUILD.bazel,
/// cmd/sidecars/smbios/BUILD.bazel): `/sidecar-shim`, `/usr/bin/onDefineDomain`; and the image
/// map file naming it.
fn sidecar_image(work: &Path) -> PathBuf {
    let built = kvrs_test_guest::hooks_harness();
    let root = work.join("example-hook-sidecar");
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::copy(built.join("sidecar-shim"), root.join("sidecar-shim")).unwrap();
    std::fs::copy(
        built.join("bin/onDefineDomain"),
        root.join("usr/bin/onDefineDomain"),
    )
    .unwrap();
    let map = work.join("images.map");
    std::fs::write(&map, format!("{IMAGE}={}\n", root.display())).unwrap();
    map
}

/// The run fixture as a VirtualMachineInstance (it fails for good rather than restarting) with
/// the hook sidecar of `args`, the SMBIOS annotation, and user-data printing the DMI vendor.
fn manifest(args: &str) -> String {
    let guest = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the run fixture")
        .replace(
            "              KVRS-E2E: hello from cloud-init\n",
            "              KVRS-E2E: hello from cloud-init\n\
             \x20             KVRS-RUN: echo \"KVRS-E2E: board vendor=[$(cat /sys/class/dmi/id/board_vendor)]\"\n",
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
        &format!(
            "metadata:\n  name: guest\n  namespace: default\n  annotations:\n    \
             hooks.kubevirt.io/hookSidecars: '[{{\"args\": {args}, \"image\": \"{IMAGE}\"}}]'\n    \
             smbios.vm.kubevirt.io/baseBoardManufacturer: {MANUFACTURER}\n  labels:\n"
        ),
        1,
    );
    assert!(body.contains("hookSidecars") && body.contains("board vendor"));
    format!("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\n{body}")
}

/// A `kvrs run` of the hook manifest, and what the test saw of its pods while it ran.
struct Run {
    run: Running,
    seen: Seen,
}

/// What the test reads of a run's pods while it runs.
struct Seen {
    state: PathBuf,
    pods: PathBuf,
    /// The UIDs of the pods seen in the pods directory.
    uids: BTreeSet<String>,
    /// The launcher pod as last read while the run ran.
    pod: Option<serde_json::Value>,
    /// The pod's Ready condition as last read while the pod was Running: once every container
    /// has ended (the launcher too, after the VMI failed) it reads `PodCompleted` instead.
    ready_while_running: Option<serde_json::Value>,
    last_poll: Option<Instant>,
}

impl Run {
    fn start(manifest: &Path, map: &Path, tag: &str, extra: &[&str]) -> Self {
        let mut cmd = run_driver::command(manifest, tag);
        cmd.arg("--image-map")
            .arg(map)
            .arg("--image-entrypoint")
            .arg(format!("{IMAGE}=/sidecar-shim"))
            .args(["--feature-gates", "Sidecar"])
            .args(extra);
        Self {
            run: Running::spawn(cmd),
            seen: Seen {
                state: run_driver::state_dir(tag),
                pods: run_driver::pods_dir(tag),
                uids: BTreeSet::new(),
                pod: None,
                ready_while_running: None,
                last_poll: None,
            },
        }
    }

    /// Waits (at most `within`) for a line containing `text`; the line. Fails with the run's
    /// output when it ends first or the time is up (the run is stopped then).
    fn wait_for(&mut self, text: &str, within: Duration) -> String {
        let seen = &mut self.seen;
        self.run.expect_line(text, within, || seen.poll())
    }

    fn finish(&mut self) -> Output {
        let seen = &mut self.seen;
        self.run.finish(|| seen.poll())
    }
}

impl Seen {
    /// Notes the pods' UIDs, and (every 2 s) the launcher pod as the API server has it.
    fn poll(&mut self) {
        for e in std::fs::read_dir(&self.pods)
            .into_iter()
            .flatten()
            .flatten()
        {
            self.uids
                .insert(e.file_name().to_string_lossy().into_owned());
        }
        if self
            .last_poll
            .is_some_and(|t| t.elapsed() < Duration::from_secs(2))
        {
            return;
        }
        self.last_poll = Some(Instant::now());
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.state.join("kubeconfig"))
            .args([
                "get",
                "pods",
                "-n",
                "default",
                "-l",
                "kubevirt.io=virt-launcher",
            ])
            .args(["-o", "json", "--request-timeout", "2s"])
            .output();
        if let Ok(out) = out
            && out.status.success()
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            && v["items"][0].is_object()
        {
            let pod = v["items"][0].clone();
            if pod["status"]["phase"] == "Running"
                && let Some(ready) = pod["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            {
                self.ready_while_running = Some(ready.clone());
            }
            self.pod = Some(pod);
        }
    }

    /// What the run's pods left on the machine: their network namespaces, host veths,
    /// cgroups, processes, mounts of the run's directories, and the directories themselves.
    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let dirs = [self.state.clone(), self.pods.clone()];
        for d in &dirs {
            if d.exists() {
                left.push(format!("directory {}", d.display()));
            }
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for l in mountinfo.lines() {
            if dirs.iter().any(|d| l.contains(&*d.to_string_lossy())) {
                left.push(format!("mount {l}"));
            }
        }
        for uid in &self.uids {
            let short = kvrs_kubelet::PodKey {
                namespace: String::new(),
                name: String::new(),
                uid: uid.clone(),
            }
            .short_id();
            if Path::new("/run/netns")
                .join(format!("kvrs-{short}"))
                .exists()
            {
                left.push(format!("netns kvrs-{short}"));
            }
            if Path::new("/sys/class/net")
                .join(format!("kvh{short}"))
                .exists()
            {
                left.push(format!("link kvh{short}"));
            }
            for cg in lines_of(Command::new("find").args([
                "/sys/fs/cgroup",
                "-maxdepth",
                "3",
                "-path",
                &format!("*kvrs-kubelet-*/{short}*"),
            ])) {
                left.push(format!("cgroup {cg}"));
            }
            for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let cgroup = std::fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
                if cgroup.contains(&format!("/{short}")) && cgroup.contains("kvrs-kubelet-") {
                    left.push(format!("process {}", e.file_name().to_string_lossy()));
                }
            }
        }
        left
    }

    /// The XML of the domain the launcher's libvirt runs, through its socket in the pod's
    /// `libvirt-runtime` emptyDir.
    fn domain_xml(&self) -> String {
        let socket = std::fs::read_dir(&self.pods)
            .expect("the kubelet's pods directory")
            .flatten()
            .map(|e| {
                e.path()
                    .join("volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock")
            })
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no libvirt socket under {}", self.pods.display()));
        // The socket's path is longer than a Unix socket address holds: a short link to it.
        let link = PathBuf::from(format!("/tmp/kvrs-hooks-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&socket, &link).unwrap();
        let out = Command::new("virsh")
            .arg("-c")
            .arg(format!("qemu+unix:///session?socket={}", link.display()))
            .args(["dumpxml", "default_guest"])
            .output()
            .expect("run virsh");
        let _ = std::fs::remove_file(&link);
        assert!(
            out.status.success(),
            "virsh dumpxml: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

#[test]
fn the_smbios_hook_sidecar_sets_the_guests_base_board_manufacturer() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let map = sidecar_image(work.path());
    let file = work.path().join("vmi.yaml");
    std::fs::write(&file, manifest(r#"["--version", "v1alpha2"]"#)).unwrap();
    let mut run = Run::start(
        &file,
        &map,
        "h1",
        &["--console", "--timeout-seconds", "300"],
    );

    let vendor = run.wait_for(VENDOR_LINE, Duration::from_secs(300));
    // While the VM runs: the domain, and the pod's containers.
    let xml = run.seen.domain_xml();
    run.seen.last_poll = None;
    run.seen.poll();
    let pod = run.seen.pod.clone().expect("the launcher pod");
    run.run.signal("TERM");
    let out = run.finish();
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert!(
        out.success(),
        "kvrs run after SIGTERM failed:\n{stdout}\n{stderr}"
    );

    assert!(
        vendor.ends_with(&format!("{VENDOR_LINE}[{MANUFACTURER}]")),
        "the guest reads the sidecar's manufacturer from its DMI table: {vendor:?}"
    );
    assert!(
        xml.contains(&format!(
            "<entry name='manufacturer'>{MANUFACTURER}</entry>"
        )),
        "the base board manufacturer in the running domain:\n{xml}"
    );
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap_or_else(|| panic!("container statuses: {pod}"));
    let names: Vec<&str> = statuses.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["compute", "hook-sidecar-0"], "{pod}");
    for c in statuses {
        assert!(c["state"]["running"].is_object(), "{c}");
        assert_eq!(c["ready"], true, "{c}");
    }
    assert!(stdout.contains("stopped; nothing left behind"), "{stdout}");
    assert_eq!(
        run.seen.uids.len(),
        1,
        "one launcher pod: {:?}",
        run.seen.uids
    );
    assert_eq!(
        run.seen.leftovers(),
        Vec::<String>::new(),
        "the run left something behind:\n{stdout}\n{stderr}"
    );
}

#[test]
fn a_sidecar_that_exits_at_once_fails_the_vmi_and_leaves_nothing() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let map = sidecar_image(work.path());
    let file = work.path().join("vmi.yaml");
    // The shim refuses an unknown hook version and exits 1 before it listens.
    std::fs::write(&file, manifest(r#"["--version", "v0"]"#)).unwrap();
    let started = Instant::now();
    let mut run = Run::start(&file, &map, "h2", &["--timeout-seconds", "420"]);
    let out = run.finish();
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    let took = started.elapsed();
    assert!(!out.success(), "the run fails:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("default/guest Failed"),
        "the VMI fails:\n{stdout}\n{stderr}"
    );
    // The launcher waits for the sidecar's socket; the VMI fails once virt-handler gives up on
    // a launcher without its socket (180 s), before the launcher's own `--qemu-timeout` (240 s).
    assert!(took < Duration::from_secs(300), "took {took:?}");
    // The pod said which container failed, and why, while it ran.
    let pod = run.seen.pod.clone().expect("the launcher pod was read");
    let sidecar = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|s| s.iter().find(|c| c["name"] == "hook-sidecar-0"))
        .unwrap_or_else(|| panic!("the sidecar's status: {pod}"))
        .clone();
    let ended = &sidecar["state"]["terminated"];
    assert_eq!(ended["exitCode"], 1, "{sidecar}");
    assert!(
        ended["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Input error"),
        "the shim's own words as termination message: {sidecar}"
    );
    let ready = run
        .seen
        .ready_while_running
        .as_ref()
        .unwrap_or_else(|| panic!("the pod's Ready condition while it ran: {pod}"));
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("hook-sidecar-0"),
        "the Ready condition names the sidecar: {ready}"
    );
    assert!(stdout.contains("stopped; nothing left behind"), "{stdout}");
    assert_eq!(
        run.seen.uids.len(),
        1,
        "one launcher pod: {:?}",
        run.seen.uids
    );
    assert_eq!(
        run.seen.leftovers(),
        Vec::<String>::new(),
        "the run left something behind:\n{stdout}\n{stderr}"
    );
}
