//! virt-handler's hotplug node steps on a VMI as the cluster writes it (needs root): the
//! launcher and attachment pods laid out under a pods directory as a kubelet does, the
//! attachment pod a chrooted process serving `hp.sock` with the claim mounted at `/<volume>`,
//! and the handler entering a "node" mount namespace of its own, where the mounts stay.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use kvrs_api::VirtualMachineInstance;
use kvrs_virt_handler::hotplug::HotplugNode;
use serde_json::json;

const NODE: &str = "n1";
const LAUNCHER: &str = "11111111-0000-4000-8000-00000000aaaa";
const ATTACH: &str = "22222222-0000-4000-8000-00000000bbbb";

fn hotplug_dir(pods: &Path, uid: &str) -> PathBuf {
    pods.join(uid)
        .join("volumes/kubernetes.io~empty-dir/hotplug-disks")
}

fn wait_comm(pid: u32, comm: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        != comm
    {
        assert!(
            Instant::now() < deadline,
            "process {pid} did not become {comm}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The attachment pod: `/path` is its hotplug-disks emptyDir, the claim is at `/data`, and
/// `python3` serves `/path/hp.sock` (as `container-disk --copy-path /path/hp` does).
fn attachment_pod(root: &Path, claim: &Path, emptydir: &Path) -> Proc {
    for d in ["usr", "path", "data"] {
        std::fs::create_dir_all(root.join(d)).expect("dir");
    }
    for l in ["bin", "lib", "lib64"] {
        std::os::unix::fs::symlink(format!("usr/{l}"), root.join(l)).expect("link");
    }
    let serve = "import socket\ns=socket.socket(socket.AF_UNIX)\ns.bind('/path/hp.sock')\ns.listen()\nwhile True: s.accept()[0].close()";
    let r = root.display();
    let script = format!(
        "mount --bind /usr {r}/usr && mount --bind {} {r}/data && mount --bind {} {r}/path && exec chroot {r} /usr/bin/python3 -c \"{serve}\"",
        claim.display(),
        emptydir.display()
    );
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .spawn()
        .expect("unshare(1) is required");
    let p = Proc(child);
    let sock = emptydir.join("hp.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sock.exists() {
        assert!(
            Instant::now() < deadline,
            "hp.sock did not appear (python3 needed)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    p
}

fn vmi(in_spec: bool, attach_uid: &str) -> VirtualMachineInstance {
    let mut volumes = vec![json!({"name": "root", "containerDisk": {"image": "x"}})];
    if in_spec {
        volumes.push(json!({"name": "data", "persistentVolumeClaim": {"claimName": "c1", "hotpluggable": true}}));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "v", "namespace": "ns", "uid": "vmi-uid"},
        "spec": {"domain": {"devices": {}}, "volumes": volumes},
        "status": {"phase": "Running", "nodeName": NODE,
                   "activePods": {LAUNCHER: NODE},
                   "volumeStatus": [{"name": "data", "target": "", "phase": "AttachedToNode",
                        "hotplugVolume": {"attachPodName": "hp-volume-x", "attachPodUID": attach_uid},
                        "persistentVolumeClaimInfo": {"claimName": "c1", "volumeMode": "Filesystem",
                            "capacity": {"storage": "1Gi"}}}]}
    }))
    .expect("vmi")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_handler_mounts_a_hotplugged_claim_in_the_node_namespace_and_removes_it() {
    let pods = tempfile::tempdir().expect("pods");
    let launcher_dir = hotplug_dir(pods.path(), LAUNCHER);
    let attach_dir = hotplug_dir(pods.path(), ATTACH);
    std::fs::create_dir_all(&launcher_dir).expect("launcher emptyDir");
    std::fs::create_dir_all(&attach_dir).expect("attachment emptyDir");
    let claim = tempfile::tempdir().expect("claim");
    std::fs::write(claim.path().join("disk.img"), b"hello from the claim").expect("img");
    let root = tempfile::tempdir().expect("attachment root");
    let _attach = attachment_pod(root.path(), claim.path(), &attach_dir);
    let node = Proc(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "600"])
            .spawn()
            .expect("unshare"),
    );
    wait_comm(node.0.id(), "sleep");
    let ns = PathBuf::from(format!("/proc/{}/ns/mnt", node.0.id()));
    let private = tempfile::tempdir().expect("private");
    let h = HotplugNode::new(&ns, Some(pods.path()), Path::new("/pods"), private.path());
    assert_eq!(
        h.mount_ns.as_deref(),
        Some(ns.as_path()),
        "a namespace not ours is entered"
    );

    let v = vmi(true, ATTACH);
    assert!(h.mounted(&v, NODE).await.is_empty());
    h.mount(&v, NODE, None).await.expect("mount");
    assert_eq!(
        h.mounted(&v, NODE).await,
        BTreeSet::from(["data".to_string()])
    );
    // In the node's namespace the launcher's emptyDir has the claim's image ...
    let seen = PathBuf::from(format!("/proc/{}/root", node.0.id()))
        .join(launcher_dir.strip_prefix("/").expect("absolute"))
        .join("data.img");
    assert_eq!(
        std::fs::read(&seen).expect("through the node"),
        b"hello from the claim"
    );
    // ... and in ours nothing is mounted.
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(launcher_dir.to_str().expect("utf-8"))
    );
    // Mounting again is a no-op; still wanted, nothing is unmounted.
    h.mount(&v, NODE, None).await.expect("again");
    h.unmount(&v, NODE, None).await.expect("keep");
    assert_eq!(h.mounted(&v, NODE).await.len(), 1);

    // Removed from the spec: unmounted, the claim intact.
    let gone = vmi(false, ATTACH);
    h.unmount(&gone, NODE, None).await.expect("unmount");
    assert!(h.mounted(&gone, NODE).await.is_empty());
    assert!(!seen.exists());
    assert_eq!(
        std::fs::read(claim.path().join("disk.img")).expect("claim"),
        b"hello from the claim"
    );

    // Mounted again, then the VMI is gone: cleanup finds the mount through its record.
    h.mount(&v, NODE, None).await.expect("mount again");
    assert!(seen.exists());
    let record = private.path().join("hotplug-mounts/vmi-uid");
    assert!(record.exists(), "the launcher directory is recorded");
    h.cleanup("vmi-uid", None, NODE).await;
    assert!(!seen.exists(), "unmounted at cleanup without the VMI");
    assert!(!record.exists());
    assert_eq!(
        std::fs::read(claim.path().join("disk.img")).expect("claim"),
        b"hello from the claim"
    );

    // An attachment pod that is not there: KubeVirt's retryable error, naming the volume.
    let err = h
        .mount(
            &vmi(true, "33333333-0000-4000-8000-00000000cccc"),
            NODE,
            None,
        )
        .await
        .expect_err("no attachment pod");
    assert!(
        err.contains("hotplug volume data") && err.ends_with("waiting for hotplug mount"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&launcher_dir).expect("ls").count(), 0);
}
