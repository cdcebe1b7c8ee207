//! Disk full for the ephemeral overlay (issue 17, faults): the kubelet's pod directories live on
//! a small ext4 filesystem of their own (a loop device); once the VM runs, the test fills that
//! filesystem while the guest keeps writing to its container disk, so the qcow2 overlay in the
//! pod's ephemeral-disk emptyDir cannot grow. Checks, on the real processes (kube-apiserver,
//! virt-controller, virt-handler, kvrs kubelet, virt-launcher, libvirt, QEMU):
//! - the guest is paused by the disk's error policy, not crashed: the VMI carries the `Paused`
//!   condition with reason `PausedIOError`, and a Warning `IOerror` event names the volume
//!   (`VM Paused due to not enough space on volume: rootdisk`);
//! - once space is freed, virt-handler's retry resumes the same guest (the condition goes away,
//!   the guest answers ping again);
//! - runStrategy Halted then leaves no VMI, pod, network namespace or VM process.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{NS, Stack, kubectl_json};
use kvrs_test_cluster::wait_for;
use kvrs_test_guest::pod::is_root;

/// A loop-mounted ext4 filesystem, unmounted (and its image removed) when dropped.
struct SmallFs {
    image: PathBuf,
    mount: PathBuf,
}

impl SmallFs {
    fn create(mount: PathBuf, mib: u64) -> SmallFs {
        let image = mount.with_extension("img");
        let _ = Command::new("umount").arg(&mount).status();
        let _ = std::fs::remove_file(&image);
        run(Command::new("truncate")
            .arg("-s")
            .arg(format!("{mib}M"))
            .arg(&image));
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        std::fs::create_dir_all(&mount).unwrap();
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount));
        // An empty pods directory, as the kubelet expects (and the stack's last check).
        let _ = std::fs::remove_dir(mount.join("lost+found"));
        SmallFs { image, mount }
    }

    fn available(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&self.mount)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .expect("df's available bytes")
    }

    /// Takes all but `leave` bytes of the free space with one preallocated file.
    fn fill(&self, leave: u64) -> PathBuf {
        let ballast = self.mount.join("ballast");
        let size = self.available().saturating_sub(leave);
        run(Command::new("fallocate")
            .arg("-l")
            .arg(size.to_string())
            .arg(&ballast));
        ballast
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = std::fs::remove_dir(&self.mount);
        let _ = std::fs::remove_file(&self.image);
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn paused_condition(vmi: &serde_json::Value) -> Option<serde_json::Value> {
    vmi["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Paused" && c["status"] == "True")
        .cloned()
}

/// The guest writes its 64 MiB disk 1 MiB per second (each write flushed), then says so.
const WRITER: &str = "KVRS-RUN: i=0; while [ $i -lt 64 ]; do dd if=/dev/urandom of=/dev/vda \
                      bs=1M count=1 seek=$i conv=notrunc,fsync 2>/dev/null; i=$((i+1)); \
                      sleep 1; done; echo \"KVRS-E2E: disk written ($i MiB)\" >/dev/console";

#[test]
fn a_full_overlay_pauses_the_guest_with_a_clear_condition_and_it_resumes_once_space_is_back() {
    assert!(is_root(), "the cluster end-to-end tests run as root");
    let fs = SmallFs::create(
        PathBuf::from(format!("/tmp/kd{}", std::process::id() % 10_000)),
        256,
    );
    let stack = Stack::start_on(fs.mount.clone());
    stack.apply_vm_with("Always", &[WRITER]);
    let vmi = stack.wait_booted("disk full", Duration::from_secs(240));
    let uid = vmi["metadata"]["uid"].as_str().unwrap().to_string();

    // The overlay may grow by at most 2 MiB more: the guest's next writes hit ENOSPC.
    let ballast = fs.fill(2 << 20);
    let paused = wait_for(
        "the VMI paused on the IO error",
        Duration::from_secs(120),
        || {
            let vmi = kubectl_json(&stack.cluster, &["get", "vmi", "-n", NS, "guest"])?;
            paused_condition(&vmi).filter(|c| c["reason"] == "PausedIOError")
        },
        || stack.logs(),
    );
    println!("condition: {paused}");
    let event = wait_for(
        "the IOerror event naming the volume",
        Duration::from_secs(90),
        || {
            let events = kubectl_json(&stack.cluster, &["get", "events", "-n", NS])?;
            events["items"]
                .as_array()?
                .iter()
                .find(|e| {
                    e["reason"] == "IOerror"
                        && e["type"] == "Warning"
                        && e["involvedObject"]["uid"] == uid.as_str()
                })
                .cloned()
        },
        || stack.logs(),
    );
    let message = event["message"]
        .as_str()
        .or_else(|| event["note"].as_str())
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        message, "VM Paused due to not enough space on volume: rootdisk",
        "{event}"
    );
    println!("event: {message}");
    let phase = kubectl_json(&stack.cluster, &["get", "vmi", "-n", NS, "guest"]).unwrap();
    assert_eq!(
        phase["status"]["phase"], "Running",
        "an IO-error pause keeps the VMI Running (paused), not Failed"
    );

    // Space back: virt-handler's next retry (10 s backoff, doubling) resumes the guest.
    std::fs::remove_file(&ballast).unwrap();
    wait_for(
        "the guest resumed after space was freed",
        Duration::from_secs(240),
        || {
            let vmi = kubectl_json(&stack.cluster, &["get", "vmi", "-n", NS, "guest"])?;
            (vmi["status"]["phase"] == "Running" && paused_condition(&vmi).is_none()).then_some(())
        },
        || stack.logs(),
    );
    assert_eq!(
        kubectl_json(&stack.cluster, &["get", "vmi", "-n", NS, "guest"]).unwrap()["metadata"]["uid"],
        uid.as_str(),
        "the same VMI resumed (no restart)"
    );
    let pod_ip = vmi["status"]["interfaces"][0]["ipAddress"]
        .as_str()
        .expect("the guest's address")
        .to_string();
    wait_for(
        "the resumed guest to answer ping on its pod IP",
        Duration::from_secs(60),
        || common::pings(&[&pod_ip]).then_some(()),
        || stack.logs(),
    );
    println!("resumed after space was freed");

    stack.set_run_strategy("Halted");
    stack.wait_gone("no VMI, pod, netns or VM process after Halted");
    assert!(
        !Path::new(&fs.mount).join("ballast").exists(),
        "ballast removed"
    );
    stack.stop();
    drop(fs);
}
