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
#[path = "common/sidecar_run.rs"]
mod sidecar_run;

use run_driver::serial;
use sidecar_run::Run;
use std::path::{Path, PathBuf};
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

/// A `kvrs run` of the hook manifest with the sidecar image.
fn start_run(manifest: &Path, map: &Path, tag: &str, extra: &[&str]) -> Run {
    let mut cmd = run_driver::command(manifest, tag);
    cmd.arg("--image-map")
        .arg(map)
        .arg("--image-entrypoint")
        .arg(format!("{IMAGE}=/sidecar-shim"))
        .args(["--feature-gates", "Sidecar"])
        .args(extra);
    Run::spawn(cmd, tag)
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
    let mut run = start_run(
        &file,
        &map,
        "h1",
        &["--console", "--timeout-seconds", "300"],
    );

    let vendor = run.wait_for(VENDOR_LINE, Duration::from_secs(300));
    // While the VM runs: the domain, and the pod's containers.
    let xml = run.seen.domain_xml();
    let pod = run.seen.pod_now();
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
    let mut run = start_run(&file, &map, "h2", &["--timeout-seconds", "420"]);
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
