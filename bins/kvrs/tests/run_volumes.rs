//! `kvrs run` of a VM whose volumes name other API objects, given in the same manifest: a
//! filesystem PVC bound to a hostPath PV (its `disk.img` made by virt-launcher at KubeVirt's
//! size, for UID 107), a ConfigMap disk, a Secret disk and an emptyDisk. Every real component
//! runs (API server, virt-controller, virt-handler, the kubelet with runc, virt-launcher,
//! libvirt, QEMU, the kvrs-test-guest busybox guest). Needs root, as `kvrs run` does.
//!
//! The guest runs its checks from cloud-init user-data (`KVRS-RUN:` lines) and prints what it
//! read; the VM then stops. A second `kvrs run` (a new API server, a new launcher pod) boots
//! the same PV: the guest finds what it wrote, and the marker the host wrote into `disk.img`
//! between the runs; the image is the same file (inode), never recreated.

#[path = "common/run_driver.rs"]
mod run_driver;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use kvrs_test_guest::pod::{is_root, repo_root};
use run_driver::serial;

const DONE: &str = "KVRS-E2E: checks done";

const MIB: u64 = 1024 * 1024;

/// The manifest: PV (hostPath `pv_dir`, `capacity`), its claim, a ConfigMap, a Secret and the
/// VM. The guest's disks are vda (container disk), vdb (cloud-init, which the guest's init
/// mounts), vdc (the PVC), vdd (ConfigMap), vde (Secret), vdf (emptyDisk), vdg (downwardAPI:
/// the launcher pod's labels).
fn manifest(pv_dir: &Path, capacity: &str) -> String {
    manifest_in_mode(pv_dir, capacity, "Filesystem")
}

/// [`manifest`] with the PV and claim in `mode` (`Block`: `pv_dir` is a block device).
fn manifest_in_mode(pv_dir: &Path, capacity: &str, mode: &str) -> String {
    let guest = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the run fixture");
    let vm = guest
        .replace(
            "            - name: cloudinitdisk\n              disk:\n                bus: virtio\n",
            "            - name: cloudinitdisk\n              disk:\n                bus: virtio\n\
             \x20           - name: data\n              disk:\n                bus: virtio\n\
             \x20           - name: cfg\n              disk:\n                bus: virtio\n\
             \x20           - name: sec\n              disk:\n                bus: virtio\n\
             \x20           - name: scratch\n              disk:\n                bus: virtio\n\
             \x20           - name: podinfo\n              disk:\n                bus: virtio\n",
        )
        .replace(
            "              KVRS-E2E: hello from cloud-init\n",
            "              KVRS-E2E: hello from cloud-init\n\
             \x20             KVRS-RUN: mkdir -p /m1 /m2\n\
             \x20             KVRS-RUN: mount -t iso9660 -o ro /dev/vdd /m1 && echo \"KVRS-E2E: configmap greeting=$(cat /m1/greeting)\"\n\
             \x20             KVRS-RUN: mount -t iso9660 -o ro /dev/vde /m2 && echo \"KVRS-E2E: secret password=$(cat /m2/password)\"\n\
             \x20             KVRS-RUN: echo \"KVRS-E2E: emptydisk sectors=$(cat /sys/block/vdf/size)\"\n\
             \x20             KVRS-RUN: mkdir -p /m3 && mount -t iso9660 -o ro /dev/vdg /m3 && echo \"KVRS-E2E: downwardapi $(grep -h kubevirt.io/vm= /m3/labels)\"\n\
             \x20             KVRS-RUN: echo \"KVRS-E2E: pvc sectors=$(cat /sys/block/vdc/size)\"\n\
             \x20             KVRS-RUN: echo \"KVRS-E2E: host marker=[$(dd if=/dev/vdc bs=1048576 skip=1 count=1 2>/dev/null | head -c 11 | tr -d '\\000')]\"\n\
             \x20             KVRS-RUN: echo \"KVRS-E2E: data before=[$(head -c 12 /dev/vdc | tr -d '\\000')]\"\n\
             \x20             KVRS-RUN: printf KVRS-DATA-OK | dd of=/dev/vdc conv=fsync 2>/dev/null && echo 'KVRS-E2E: data written'\n\
             \x20             KVRS-RUN: echo 'KVRS-E2E: checks done'\n",
        )
        + "        - name: data\n          persistentVolumeClaim:\n            claimName: guest-data\n\
           \x20       - name: cfg\n          configMap:\n            name: app-config\n\
           \x20       - name: sec\n          secret:\n            secretName: app-secret\n\
           \x20       - name: scratch\n          emptyDisk:\n            capacity: 16Mi\n\
           \x20       - name: podinfo\n          downwardAPI:\n            fields:\n\
           \x20             - path: labels\n                fieldRef:\n                  fieldPath: metadata.labels\n";
    format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: guest-data-pv\nspec:\n  \
         capacity:\n    storage: {capacity}\n  accessModes: [ReadWriteOnce]\n  volumeMode: {mode}\n  \
         hostPath:\n    path: {}\n---\n\
         apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: guest-data\n  namespace: default\n\
         spec:\n  accessModes: [ReadWriteOnce]\n  volumeMode: {mode}\n  resources:\n    requests:\n      \
         storage: {capacity}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n  namespace: default\n\
         data:\n  greeting: hello-from-configmap\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: app-secret\n  namespace: default\n\
         data:\n  password: czNjcjN0\n---\n{vm}",
        pv_dir.display()
    )
}

/// `kvrs run` of `manifest` until `stop_text` is on the console (or `timeout` seconds pass):
/// whether it succeeded, and its output (standard error after standard output).
fn kvrs_run(manifest: &Path, tag: &str, stop_text: &str, timeout: u64) -> (bool, String) {
    let mut cmd = run_driver::command(manifest, tag);
    cmd.args(["--timeout-seconds", &timeout.to_string()]).args([
        "--stop-after-console",
        stop_text,
        "--console",
    ]);
    let out = run_driver::output(cmd);
    (out.success(), out.text())
}

fn line_with<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.find(prefix).map(|i| &l[i + prefix.len()..]))
        .unwrap_or_else(|| panic!("no line with {prefix:?} in:\n{out}"))
        .trim()
}

#[test]
fn a_pvc_disk_keeps_its_data_across_runs_and_config_disks_are_readable() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let pv_dir = work.path().join("pv");
    std::fs::create_dir(&pv_dir).unwrap();
    let file = work.path().join("vm.yaml");
    std::fs::write(&file, manifest(&pv_dir, "64Mi")).unwrap();

    // First run: the launcher makes disk.img; the guest reads the config disks and writes.
    let (ok, out) = kvrs_run(&file, "v1", DONE, 300);
    assert!(ok, "first run failed:\n{out}");
    assert_eq!(
        line_with(&out, "KVRS-E2E: configmap greeting="),
        "hello-from-configmap"
    );
    assert_eq!(line_with(&out, "KVRS-E2E: secret password="), "s3cr3t");
    assert_eq!(
        line_with(&out, "KVRS-E2E: emptydisk sectors="),
        (16 * MIB / 512).to_string()
    );
    assert_eq!(
        line_with(&out, "KVRS-E2E: downwardapi "),
        "kubevirt.io/vm=\"guest\""
    );
    assert_eq!(
        line_with(&out, "KVRS-E2E: pvc sectors="),
        (64 * MIB / 512).to_string()
    );
    assert_eq!(line_with(&out, "KVRS-E2E: data before="), "[]");
    assert!(out.contains("KVRS-E2E: data written"), "{out}");

    let img = pv_dir.join("disk.img");
    let meta = std::fs::metadata(&img).expect("virt-launcher created disk.img on the PV");
    // KubeVirt's size: the claim's 64Mi (capacity = request), 1 MiB aligned; sparse.
    assert_eq!(meta.len(), 64 * MIB);
    assert!(meta.blocks() * 512 < meta.len(), "disk.img is sparse");
    assert_eq!((meta.uid(), meta.gid()), (107, 107), "disk.img is QEMU's");
    let head = std::fs::read(&img).unwrap();
    assert_eq!(
        &head[..12],
        b"KVRS-DATA-OK",
        "the guest's write is in disk.img"
    );
    let inode = meta.ino();

    // Between the runs, the host writes a marker at 1 MiB.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.seek(SeekFrom::Start(MIB)).unwrap();
        f.write_all(b"HOST-MARKER").unwrap();
    }

    // Second run: a new API server, a new pod; the same image.
    let (ok, out) = kvrs_run(&file, "v2", DONE, 300);
    assert!(ok, "second run failed:\n{out}");
    assert_eq!(line_with(&out, "KVRS-E2E: data before="), "[KVRS-DATA-OK]");
    assert_eq!(line_with(&out, "KVRS-E2E: host marker="), "[HOST-MARKER]");
    let meta = std::fs::metadata(&img).unwrap();
    assert_eq!(meta.ino(), inode, "disk.img was not recreated");
    assert_eq!(meta.len(), 64 * MIB);

    // Third run: the claim as an ephemeral volume, a qcow2 overlay over the read-only image.
    // The guest sees the data and writes over it; the image keeps what it had.
    let ephemeral = manifest(&pv_dir, "64Mi")
        .replace("printf KVRS-DATA-OK", "printf KVRS-OVERLAY")
        .replace(
            "          persistentVolumeClaim:\n            claimName: guest-data\n",
            "          ephemeral:\n            persistentVolumeClaim:\n              claimName: guest-data\n",
        );
    assert!(
        ephemeral.contains("ephemeral:"),
        "the manifest's data volume is ephemeral"
    );
    std::fs::write(&file, ephemeral).unwrap();
    let (ok, out) = kvrs_run(&file, "v7", DONE, 300);
    assert!(ok, "ephemeral run failed:\n{out}");
    assert_eq!(line_with(&out, "KVRS-E2E: data before="), "[KVRS-DATA-OK]");
    assert!(out.contains("KVRS-E2E: data written"), "{out}");
    let head = std::fs::read(&img).unwrap();
    assert_eq!(
        &head[..12],
        b"KVRS-DATA-OK",
        "the overlay took the guest's write"
    );
    assert_eq!(std::fs::metadata(&img).unwrap().ino(), inode);
}

/// A claim larger than the volume it lands on (a 4 MiB tmpfs for 64Mi, beyond the 10 %
/// toleration): the launcher refuses with KubeVirt's text naming the image, nothing is made.
#[test]
fn a_pvc_too_small_for_its_disk_is_refused_with_kubevirts_message() {
    assert!(is_root(), "kvrs run needs root: run the tests as root");
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let pv_dir = work.path().join("small");
    std::fs::create_dir(&pv_dir).unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&pv_dir)
        .status()
        .expect("mount");
    assert!(mount.success(), "mounting a 4 MiB tmpfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(pv_dir.clone());
    let file = work.path().join("vm.yaml");
    std::fs::write(&file, manifest(&pv_dir, "64Mi")).unwrap();
    let (ok, out) = kvrs_run(&file, "v3", DONE, 20);
    eprintln!("{out}");
    assert!(!ok, "the VM must not run:\n{out}");
    assert!(
        out.contains(
            "preparing host-disks failed: unable to create \
             /var/run/kubevirt-private/vmi-disks/data/disk.img, not enough space, \
             demanded size 67108864 B is bigger than available space"
        ),
        "KubeVirt's message:\n{out}"
    );
    assert!(!pv_dir.join("disk.img").exists(), "no half-made image");
}

/// A VM whose claim does not exist: no pod, and the run shows KubeVirt's Synchronized reason and
/// message until it gives up.
#[test]
fn a_missing_claim_is_waited_for_with_kubevirts_condition() {
    assert!(is_root(), "kvrs run needs root: run the tests as root");
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let pv_dir = work.path().join("pv");
    std::fs::create_dir(&pv_dir).unwrap();
    let text =
        manifest(&pv_dir, "64Mi").replace("claimName: guest-data", "claimName: no-such-claim");
    let file = work.path().join("vm.yaml");
    std::fs::write(&file, text).unwrap();
    let (ok, out) = kvrs_run(&file, "v4", DONE, 15);
    assert!(!ok, "the VM must not run:\n{out}");
    assert!(
        out.contains(
            "default/guest not synchronized: FailedPvcNotFound: \
             PVC default/no-such-claim does not exist, waiting for it to appear"
        ),
        "KubeVirt's condition:\n{out}"
    );
    assert!(
        !out.contains("Scheduled on node"),
        "no pod was made:\n{out}"
    );
}

/// A block-mode claim on a loop device: the launcher pod gets it as a device node (no
/// `disk.img`), the guest writes it, and the second run finds the data and the host's marker.
#[test]
fn a_block_pvc_keeps_its_data_across_runs() {
    assert!(is_root(), "kvrs run needs root: run the tests as root");
    let _one = serial();
    let work = tempfile::tempdir().expect("a temporary directory");
    let backing = work.path().join("block.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(64 * MIB))
        .unwrap();
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&backing)
        .output()
        .expect("losetup");
    assert!(out.status.success(), "losetup: {out:?}");
    let loop_dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    struct Detach(PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
        }
    }
    let _detach = Detach(loop_dev.clone());
    let file = work.path().join("vm.yaml");
    std::fs::write(&file, manifest_in_mode(&loop_dev, "64Mi", "Block")).unwrap();

    let (ok, out) = kvrs_run(&file, "v5", DONE, 300);
    assert!(ok, "first run failed:\n{out}");
    assert_eq!(
        line_with(&out, "KVRS-E2E: pvc sectors="),
        (64 * MIB / 512).to_string()
    );
    assert_eq!(line_with(&out, "KVRS-E2E: data before="), "[]");
    assert!(out.contains("KVRS-E2E: data written"), "{out}");
    let mut head = [0u8; 12];
    {
        use std::io::{Read, Seek, SeekFrom, Write};
        let mut dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&loop_dev)
            .unwrap();
        dev.read_exact(&mut head).unwrap();
        dev.seek(SeekFrom::Start(MIB)).unwrap();
        dev.write_all(b"HOST-MARKER").unwrap();
        dev.sync_all().unwrap();
    }
    assert_eq!(&head, b"KVRS-DATA-OK", "the guest wrote the device");

    let (ok, out) = kvrs_run(&file, "v6", DONE, 300);
    assert!(ok, "second run failed:\n{out}");
    assert_eq!(line_with(&out, "KVRS-E2E: data before="), "[KVRS-DATA-OK]");
    assert_eq!(line_with(&out, "KVRS-E2E: host marker="), "[HOST-MARKER]");
}
