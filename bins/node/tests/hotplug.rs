//! Hotplug mounts for real (needs root): an "attachment pod" is a process in its own mount
//! namespace, chrooted into a directory where the claim is bind-mounted at `/<volume>` (or a
//! block device node sits at `/path/<volume>/<claim uid>`), as a kubelet sets one up; the
//! handler's side runs on a thread in a private mount namespace, so nothing it mounts is seen
//! outside the test.

use kvrs_node::hotplug::{
    ClaimMode, DeviceCgroup, HotplugVolume, Mounted, attachment_pid, in_mount_namespace,
    is_mounted, mount_volume, unmount_unwanted,
};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::stat::{Mode, SFlag, major, minor, mknod};
use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Runs `f` on a thread in a new private mount namespace (a copy of this one).
fn in_private_ns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            unshare(CloneFlags::CLONE_FS | CloneFlags::CLONE_NEWNS)
                .expect("unshare a mount namespace: run the tests as root");
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .expect("make / private");
            f()
        })
        .join()
        .expect("test thread")
    })
}

/// Mount points at or below `dir` in the calling thread's namespace.
fn mounts_below(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/thread-self/mountinfo").expect("mountinfo");
    text.lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|mp| Path::new(mp).starts_with(dir))
        .collect()
}

/// A process standing for the attachment pod.
struct AttachmentPod {
    child: Child,
    _root: tempfile::TempDir,
}

impl AttachmentPod {
    /// Mounts each `(claim dir, mount point)` in a private namespace, then chroots and sleeps.
    fn start(root: tempfile::TempDir, binds: &[(&Path, &str)]) -> Self {
        let r = root.path();
        std::fs::create_dir_all(r.join("usr")).expect("usr");
        for l in ["bin", "lib", "lib64"] {
            std::os::unix::fs::symlink(format!("usr/{l}"), r.join(l)).expect("link");
        }
        let mut script = format!("mount --bind /usr {}/usr", r.display());
        for (src, at) in binds {
            std::fs::create_dir_all(r.join(at)).expect("mount point");
            script += &format!(" && mount --bind {} {}/{at}", src.display(), r.display());
        }
        script += &format!(" && exec chroot {} /usr/bin/sleep 600", r.display());
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .spawn()
            .expect("unshare(1) from util-linux is required");
        let pod = AttachmentPod { child, _root: root };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let comm =
                std::fs::read_to_string(format!("/proc/{}/comm", pod.pid())).unwrap_or_default();
            if comm.trim() == "sleep" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "attachment process did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        pod
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for AttachmentPod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fs_volume(name: &str, size: u64) -> HotplugVolume {
    HotplugVolume {
        name: name.into(),
        mode: ClaimMode::Filesystem { disk_size: size },
    }
}

fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(path).expect("open");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    let mut buf = vec![0; len];
    f.read_exact(&mut buf).expect("read");
    buf
}

#[test]
fn a_filesystem_claim_is_bound_into_the_launcher_pod_and_removed_again() {
    let claim = tempfile::tempdir().expect("claim");
    std::fs::write(
        claim.path().join("disk.img"),
        b"claim data: the guest's disk",
    )
    .expect("img");
    let pod = AttachmentPod::start(
        tempfile::tempdir().expect("root"),
        &[(claim.path(), "data")],
    );
    let launcher = tempfile::tempdir().expect("launcher hotplug-disks");
    let dir = launcher.path();
    let target = dir.join("data.img");
    let volume = fs_volume("data", 1 << 20);

    in_private_ns(|| {
        assert!(!is_mounted(dir, "data", volume.mode).expect("check"));
        let out = mount_volume(dir, pod.pid(), &volume, None).expect("mount");
        assert_eq!(out, Mounted::New);
        assert!(is_mounted(dir, "data", volume.mode).expect("check"));
        assert_eq!(
            std::fs::read(&target).expect("read through the launcher"),
            b"claim data: the guest's disk"
        );
        let m = std::fs::metadata(claim.path().join("disk.img")).expect("stat");
        assert_eq!((m.uid(), m.gid()), (107, 107), "handed to qemu");

        // Again: nothing changes, nothing is stacked.
        assert_eq!(
            mount_volume(dir, pod.pid(), &volume, None).expect("again"),
            Mounted::Already
        );
        assert_eq!(mounts_below(dir).len(), 1, "{:?}", mounts_below(dir));

        // What the guest writes lands in the claim.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .expect("open rw");
        f.seek(SeekFrom::Start(12)).expect("seek");
        f.write_all(b"WRITTEN").expect("write");
        drop(f);
        assert_eq!(
            read_at(&claim.path().join("disk.img"), 0, 19),
            b"claim data: WRITTEN"
        );

        // Still wanted: kept.
        let wanted: BTreeSet<String> = ["data".to_string()].into();
        assert!(
            unmount_unwanted(dir, &wanted, None)
                .expect("keep")
                .is_empty()
        );
        assert!(is_mounted(dir, "data", volume.mode).expect("check"));

        // Gone from the spec: unmounted and removed, the claim's data intact.
        let removed = unmount_unwanted(dir, &BTreeSet::new(), None).expect("unmount");
        assert_eq!(removed, vec!["data".to_string()]);
        assert!(mounts_below(dir).is_empty(), "{:?}", mounts_below(dir));
        assert!(!target.exists());
        assert!(!is_mounted(dir, "data", volume.mode).expect("check"));
    });
    assert_eq!(
        std::fs::read(claim.path().join("disk.img")).expect("claim"),
        b"claim data: WRITTENst's disk"
    );
}

#[test]
fn a_claim_without_disk_img_gets_one_once() {
    let claim = tempfile::tempdir().expect("claim");
    let pod = AttachmentPod::start(
        tempfile::tempdir().expect("root"),
        &[(claim.path(), "blank")],
    );
    let launcher = tempfile::tempdir().expect("launcher");
    let dir = launcher.path();
    let volume = fs_volume("blank", 4 << 20);
    let img = claim.path().join("disk.img");

    in_private_ns(|| {
        mount_volume(dir, pod.pid(), &volume, None).expect("mount");
        let m = std::fs::metadata(&img).expect("created");
        assert_eq!(m.len(), 4 << 20);
        assert_eq!((m.uid(), m.gid()), (107, 107));
        assert!(m.blocks() * 512 < 4 << 20, "sparse: {} blocks", m.blocks());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("blank.img"))
            .expect("open");
        f.write_all(b"formatted").expect("write");
        drop(f);
        unmount_unwanted(dir, &BTreeSet::new(), None).expect("unmount");
        // Hotplugged again: the same image, not a new one.
        mount_volume(dir, pod.pid(), &volume, None).expect("remount");
        assert_eq!(read_at(&dir.join("blank.img"), 0, 9), b"formatted");
        unmount_unwanted(dir, &BTreeSet::new(), None).expect("unmount");
    });
}

#[test]
fn a_volume_the_attachment_pod_does_not_have_is_a_clear_error_and_leaves_nothing() {
    let claim = tempfile::tempdir().expect("claim");
    std::fs::write(claim.path().join("disk.img"), b"x").expect("img");
    let pod = AttachmentPod::start(
        tempfile::tempdir().expect("root"),
        &[(claim.path(), "data")],
    );
    let launcher = tempfile::tempdir().expect("launcher");
    let dir = launcher.path();

    in_private_ns(|| {
        let err = mount_volume(dir, pod.pid(), &fs_volume("other", 1 << 20), None)
            .expect_err("no such volume");
        assert_eq!(err.label(), "hotplug");
        let msg = err.to_string();
        assert!(
            msg.starts_with("failed to mount filesystem hotplug volume other: ")
                && msg.contains("mounts no volume other")
                && msg.ends_with("waiting for hotplug mount"),
            "{msg}"
        );
        assert!(mounts_below(dir).is_empty());
        assert_eq!(
            std::fs::read_dir(dir).expect("ls").count(),
            0,
            "nothing left"
        );
    });

    // An attachment pod UID whose pod is not (yet) on this node.
    let pods = tempfile::tempdir().expect("pods");
    let err = attachment_pid(pods.path(), "0a1b2c3d-0000-4000-8000-000000000000", "data")
        .expect_err("no pod");
    let msg = err.to_string();
    assert!(
        msg.contains("hotplug volume data")
            && msg.contains("0a1b2c3d-0000-4000-8000-000000000000")
            && msg.ends_with("waiting for hotplug mount"),
        "{msg}"
    );
}

#[test]
fn a_symlink_planted_by_the_launcher_pod_is_refused() {
    let claim = tempfile::tempdir().expect("claim");
    std::fs::write(claim.path().join("disk.img"), b"claim").expect("img");
    let pod = AttachmentPod::start(
        tempfile::tempdir().expect("root"),
        &[(claim.path(), "data")],
    );
    let launcher = tempfile::tempdir().expect("launcher");
    let dir = launcher.path();
    let node_file = tempfile::NamedTempFile::new().expect("node file");
    std::fs::write(node_file.path(), b"node secret").expect("write");
    std::os::unix::fs::symlink(node_file.path(), dir.join("data.img")).expect("plant");

    in_private_ns(|| {
        let err =
            mount_volume(dir, pod.pid(), &fs_volume("data", 1 << 20), None).expect_err("symlink");
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(mounts_below(dir).is_empty());
        assert!(mounts_below(node_file.path()).is_empty());
    });
    assert_eq!(
        std::fs::read(node_file.path()).expect("node file"),
        b"node secret"
    );
}

/// A loop device over a small file, detached again on drop.
struct Loop {
    dev: PathBuf,
    _backing: tempfile::NamedTempFile,
}

impl Loop {
    fn new() -> Self {
        let backing = tempfile::NamedTempFile::new().expect("backing");
        backing.as_file().set_len(4 << 20).expect("size");
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing.path())
            .output()
            .expect("losetup(8) is required");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Loop {
            dev,
            _backing: backing,
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// A cgroup v1 device cgroup denying everything, with a process in it (the "launcher").
struct Cgroup {
    dir: PathBuf,
    proc: Child,
}

impl Cgroup {
    fn new(tag: &str) -> Self {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/devices/kvrs-hotplug-test-{}-{tag}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a cgroup v1 devices hierarchy is required");
        std::fs::write(dir.join("devices.deny"), "a").expect("deny all");
        let proc = Command::new("sleep").arg("600").spawn().expect("sleep");
        std::fs::write(dir.join("cgroup.procs"), proc.id().to_string()).expect("join");
        Cgroup { dir, proc }
    }

    fn list(&self) -> String {
        std::fs::read_to_string(self.dir.join("devices.list")).expect("devices.list")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn a_block_claim_becomes_a_device_node_allowed_in_the_pod() {
    let lo = Loop::new();
    let rdev = std::fs::metadata(&lo.dev).expect("stat loop").rdev();
    let root = tempfile::tempdir().expect("root");
    let claim_dir = root.path().join("path/disk1");
    std::fs::create_dir_all(&claim_dir).expect("dir");
    mknod(
        &claim_dir.join("6d1f0c2e-pvc-uid"),
        SFlag::S_IFBLK,
        Mode::from_bits_truncate(0o660),
        rdev,
    )
    .expect("mknod");
    let pod = AttachmentPod::start(root, &[]);
    let cgroup = Cgroup::new("present");
    let dc = DeviceCgroup::of_pid(cgroup.proc.id(), Path::new("/sys/fs/cgroup")).expect("cgroup");
    assert_eq!(dc.dir, cgroup.dir);
    let launcher = tempfile::tempdir().expect("launcher");
    let dir = launcher.path();
    let volume = HotplugVolume {
        name: "disk1".into(),
        mode: ClaimMode::Block,
    };
    let rule = format!("b {}:{} rwm", major(rdev), minor(rdev));

    in_private_ns(|| {
        assert_eq!(
            mount_volume(dir, pod.pid(), &volume, Some(&dc)).expect("mount"),
            Mounted::New
        );
        let m = std::fs::symlink_metadata(dir.join("disk1")).expect("node");
        assert!(m.file_type().is_block_device());
        assert_eq!(m.rdev(), rdev, "the claim's device numbers");
        assert_eq!((m.uid(), m.gid()), (107, 107));
        assert!(is_mounted(dir, "disk1", ClaimMode::Block).expect("check"));
        assert!(
            cgroup.list().lines().any(|l| l == rule),
            "{}",
            cgroup.list()
        );
        assert_eq!(
            mount_volume(dir, pod.pid(), &volume, Some(&dc)).expect("again"),
            Mounted::Already
        );

        let removed = unmount_unwanted(dir, &BTreeSet::new(), Some(&dc)).expect("remove");
        assert_eq!(removed, vec!["disk1".to_string()]);
        assert!(!dir.join("disk1").exists());
        assert!(
            !cgroup.list().lines().any(|l| l == rule),
            "{}",
            cgroup.list()
        );
    });
}

#[test]
fn a_block_claim_without_its_device_is_an_error_naming_it() {
    let root = tempfile::tempdir().expect("root");
    std::fs::create_dir_all(root.path().join("path/disk2")).expect("dir");
    let pod = AttachmentPod::start(root, &[]);
    let cgroup = Cgroup::new("missing");
    let dc = DeviceCgroup::of_pid(cgroup.proc.id(), Path::new("/sys/fs/cgroup")).expect("cgroup");
    let launcher = tempfile::tempdir().expect("launcher");
    let volume = HotplugVolume {
        name: "disk2".into(),
        mode: ClaimMode::Block,
    };
    let err = mount_volume(launcher.path(), pod.pid(), &volume, Some(&dc)).expect_err("no device");
    assert_eq!(
        err.to_string(),
        "failed to mount block hotplug volume disk2: no device in /path/disk2 of the attachment pod"
    );
    assert_eq!(std::fs::read_dir(launcher.path()).expect("ls").count(), 0);
}

/// A process in a mount namespace of its own (a copy of ours), not chrooted.
struct NodeProcess(Child);

impl NodeProcess {
    fn start() -> Self {
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "600"])
            .spawn()
            .expect("unshare(1) from util-linux is required");
        let node = NodeProcess(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{}/comm", node.pid()))
            .unwrap_or_default()
            .trim()
            != "sleep"
        {
            assert!(Instant::now() < deadline, "node process did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The handler's production path: the mount is made in another process's mount namespace
/// (the node's, entered from virt-handler's pod) and only there.
#[test]
fn mounts_are_made_in_the_namespace_entered() {
    let claim = tempfile::tempdir().expect("claim");
    std::fs::write(claim.path().join("disk.img"), b"node ns").expect("img");
    let pod = AttachmentPod::start(
        tempfile::tempdir().expect("root"),
        &[(claim.path(), "data")],
    );
    let launcher = tempfile::tempdir().expect("launcher");
    let dir = launcher.path().to_path_buf();
    // The "node": a process with a mount namespace of its own.
    let node = NodeProcess::start();
    let ns = PathBuf::from(format!("/proc/{}/ns/mnt", node.pid()));
    let node_mounts =
        || std::fs::read_to_string(format!("/proc/{}/mountinfo", node.pid())).expect("mountinfo");
    let target = dir.join("data.img").to_string_lossy().into_owned();

    let out = in_mount_namespace(Some(&ns), || {
        mount_volume(&dir, pod.pid(), &fs_volume("data", 1 << 20), None)
    })
    .expect("enter")
    .expect("mount");
    assert_eq!(out, Mounted::New);
    assert!(
        node_mounts().contains(&target),
        "mounted in the node namespace"
    );
    in_private_ns(|| assert!(mounts_below(&dir).is_empty(), "not in ours"));

    let removed = in_mount_namespace(Some(&ns), || unmount_unwanted(&dir, &BTreeSet::new(), None))
        .expect("enter")
        .expect("unmount");
    assert_eq!(removed, vec!["data".to_string()]);
    assert!(!node_mounts().contains(&target));
}
