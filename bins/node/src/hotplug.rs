//! Hotplugged volumes made visible in a running launcher pod (KubeVirt's `hotplug-disk` mounter).
//!
//! KubeVirt's virt-controller starts an attachment pod (`hp-volume-*`) on the VMI's node that
//! mounts the claim: a filesystem claim at `/<volume>`, a block claim as the device
//! `/path/<volume>/<claim UID>`, `/path` being the attachment pod's own `hotplug-disks` emptyDir
//! where its `container-disk --copy-path /path/hp` listens on `hp.sock`. The handler then puts
//! the volume into the launcher pod's `hotplug-disks` emptyDir, which the compute container sees
//! at `/var/run/kubevirt/hotplug-disks` with `HostToContainer` propagation:
//!
//! * filesystem: the claim's `disk.img` (created sparse, owned by 107, when the claim has none —
//!   never recreated) bind-mounted onto `<volume>.img`;
//! * block: a device node `<volume>` with the claim device's numbers, owned by 107 and allowed in
//!   the pod's device cgroup ([`DeviceCgroup`]).
//!
//! **Finding the claim on the node.** The real kubelet mounts a local PV for the attachment pod
//! at `<pods dir>/<uid>/volumes/kubernetes.io~local-volume/<pv>`, a CSI one under
//! `kubernetes.io~csi/<pv>/mount`, and kvrs's kubelet bind-mounts the PV's path itself; the PV's
//! name is not in the VMI. What every kubelet has in common is the attachment container's own
//! mount at `/<volume>`, so, as KubeVirt does with `findmnt -N <pid>`, the handler finds a
//! process of the attachment pod (the peer of `hp.sock`), reads its mountinfo for `/<volume>`,
//! and maps that mount's filesystem and root onto a mount of the same device in the node's
//! mountinfo ([`mountinfo::node_paths_of`]). The directory found is then checked to be the very
//! inode the attachment pod sees (device and inode through `/proc/<pid>/root`), so a wrong
//! mapping is an error, never a mount of something else. Block devices need no mapping: their
//! numbers are read through `/proc/<pid>/root/path/<volume>`.
//!
//! **Where the mounts are made.** A bind mount only reaches the launcher through the node's
//! mount namespace (the launcher's emptyDir is a directory of the node's, propagated into the
//! container); virt-handler runs in a pod of its own, so the work runs on a thread that entered
//! the node's namespace ([`in_mount_namespace`]), as KubeVirt's `virt-chroot --mount
//! /proc/1/ns/mnt` does. Paths inside the pods' directories are opened without following
//! symlinks, and mounts are made through the opened descriptors (`/proc/thread-self/fd/N`), so
//! neither pod can redirect the node's mount.

mod cgroup;
mod mountinfo;

pub use cgroup::{CGROUP_ROOT, DeviceCgroup};

use crate::devices::QEMU_UID;
use crate::error::NodeError;
use crate::pod::launcher_pid_of_socket;
use crate::safepath::{Resolve, open_at, open_beneath};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, major, minor, mknodat};
use nix::sys::statvfs::fstatvfs;
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchownat, unlinkat};
use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The emptyDir both the launcher and the attachment pod name `hotplug-disks`.
pub const HOTPLUG_DISKS_VOLUME: &str = "hotplug-disks";
/// The attachment pod's socket in its `hotplug-disks` emptyDir (`--copy-path /path/hp`).
pub const ATTACHMENT_SOCKET: &str = "hp.sock";
/// The image file of a filesystem claim.
pub const DISK_IMG: &str = "disk.img";
/// Where the attachment pod mounts its `hotplug-disks` emptyDir; block claims are below it.
pub const ATTACHMENT_PATH: &str = "path";
/// The space KubeVirt keeps free when it sizes a new `disk.img` (`minimumReservePVCBytes`).
pub const MINIMUM_RESERVE_BYTES: u64 = 131_072;
/// How much smaller than asked a new `disk.img` may be (`lessPVCSpaceToleration`, percent).
pub const LESS_SPACE_TOLERATION_PERCENT: u64 = 10;

/// How a hotplugged claim is presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimMode {
    /// A filesystem claim: `disk.img` in it, created with this size (bytes) when absent.
    Filesystem {
        /// The size of a new `disk.img` (the claim's request or capacity, 1 MiB aligned).
        disk_size: u64,
    },
    /// A block claim: the device itself.
    Block,
}

/// One hotplugged volume to mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotplugVolume {
    /// `spec.volumes[].name`.
    pub name: String,
    /// Filesystem or block.
    pub mode: ClaimMode,
}

/// What [`mount_volume`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mounted {
    /// The volume is now in the launcher pod.
    New,
    /// It already was; nothing changed.
    Already,
}

/// `<pods dir>/<pod UID>/volumes/kubernetes.io~empty-dir/hotplug-disks`: a pod's
/// `hotplug-disks` emptyDir as the kubelet keeps it. The UID is checked (letters, digits, `-`).
pub fn hotplug_disks_dir(pods_dir: &Path, pod_uid: &str) -> Result<PathBuf, String> {
    let ok = !pod_uid.is_empty()
        && pod_uid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !ok {
        return Err(format!("{pod_uid:?} is not a pod UID"));
    }
    Ok(pods_dir
        .join(pod_uid)
        .join("volumes/kubernetes.io~empty-dir")
        .join(HOTPLUG_DISKS_VOLUME))
}

/// A process of the attachment pod `attach_uid`: the server of its `hp.sock`. Until the pod
/// runs this fails with KubeVirt's `waiting for hotplug mount`, which the decision retries.
pub fn attachment_pid(pods_dir: &Path, attach_uid: &str, volume: &str) -> Result<u32, NodeError> {
    let fail = |reason: String| NodeError::Hotplug {
        action: "failed to mount".into(),
        volume: volume.into(),
        reason: format!("attachment pod {attach_uid}: {reason}: waiting for hotplug mount"),
    };
    let dir = hotplug_disks_dir(pods_dir, attach_uid).map_err(fail)?;
    launcher_pid_of_socket(&dir.join(ATTACHMENT_SOCKET)).map_err(|e| fail(e.to_string()))
}

/// Runs `f` on a thread in the mount namespace `ns` (a `/proc/<pid>/ns/mnt` file), or in this
/// process's own when `None`. The thread stops sharing its filesystem context first, which
/// `setns` requires of a thread in a multi-threaded process.
pub fn in_mount_namespace<T: Send>(
    ns: Option<&Path>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, NodeError> {
    let Some(ns) = ns else {
        return Ok(f());
    };
    let fail = |reason: String| NodeError::MountnsEnter {
        path: ns.to_path_buf(),
        reason,
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = File::open(ns).map_err(|e| fail(format!("open: {e}")))?;
            unshare(CloneFlags::CLONE_FS).map_err(|e| fail(format!("unshare(CLONE_FS): {e}")))?;
            setns(&file, CloneFlags::CLONE_NEWNS).map_err(|e| fail(format!("setns: {e}")))?;
            Ok(f())
        })
        .join()
        .map_err(|_| fail("the mount thread panicked".into()))?
    })
}

/// Whether the node's mount namespace differs from this process's (virt-handler in a pod).
pub fn node_namespace_differs(node_ns: &Path) -> bool {
    let ino = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    match (ino("/proc/self/ns/mnt"), node_ns.to_str().map(ino)) {
        (Ok(own), Some(Ok(node))) => own != node,
        _ => false,
    }
}

/// Puts `volume` into the launcher pod's `hotplug-disks` directory `launcher_dir` (as the
/// current mount namespace sees it), from the attachment pod process `attachment_pid`.
/// Mounting a volume that is already there changes nothing. On failure nothing new is left in
/// `launcher_dir`.
pub fn mount_volume(
    launcher_dir: &Path,
    attachment_pid: u32,
    volume: &HotplugVolume,
    cgroup: Option<&DeviceCgroup>,
) -> Result<Mounted, NodeError> {
    let (action, result) = match volume.mode {
        ClaimMode::Filesystem { disk_size } => (
            "failed to mount filesystem",
            mount_filesystem(launcher_dir, attachment_pid, &volume.name, disk_size),
        ),
        ClaimMode::Block => (
            "failed to mount block",
            mount_block(launcher_dir, attachment_pid, &volume.name, cgroup),
        ),
    };
    let mounted = result.map_err(|reason| NodeError::Hotplug {
        action: action.into(),
        volume: volume.name.clone(),
        reason,
    })?;
    if mounted == Mounted::New {
        tracing::info!(volume = %volume.name, dir = %launcher_dir.display(), "hotplug volume mounted into the launcher pod");
    }
    Ok(mounted)
}

/// Whether `volume` is in the launcher pod: a mount at `<volume>.img`, or a block device node
/// `<volume>` (KubeVirt's `IsMounted`). A missing directory is "not mounted".
pub fn is_mounted(launcher_dir: &Path, volume: &str, mode: ClaimMode) -> Result<bool, NodeError> {
    let fail = |reason: String| NodeError::Hotplug {
        action: "failed to check".into(),
        volume: volume.into(),
        reason,
    };
    if !launcher_dir.exists() {
        return Ok(false);
    }
    match mode {
        ClaimMode::Block => {
            let dir = open_dir(launcher_dir).map_err(fail)?;
            match fstatat(&dir, volume, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => Ok(kind(&st) == SFlag::S_IFBLK),
                Err(Errno::ENOENT) => Ok(false),
                Err(e) => Err(fail(format!("stat {volume}: {}", e.desc()))),
            }
        }
        ClaimMode::Filesystem { .. } => {
            let mounts = own_mounts().map_err(fail)?;
            let target = launcher_dir.join(format!("{volume}.img"));
            Ok(mountinfo::mounted_at(&mounts, &target).is_some())
        }
    }
}

/// Removes from the launcher pod every hotplugged volume not in `wanted`: unmounts (and
/// deletes) each mounted `<volume>.img`, deletes each block node `<volume>` and denies its
/// device again. Returns the volumes removed. Every entry is tried; the first failure is
/// returned after the others were done. A missing directory has nothing to remove.
pub fn unmount_unwanted(
    launcher_dir: &Path,
    wanted: &BTreeSet<String>,
    cgroup: Option<&DeviceCgroup>,
) -> Result<Vec<String>, NodeError> {
    if !launcher_dir.exists() {
        return Ok(Vec::new());
    }
    let fail = |volume: &str, reason: String| NodeError::Hotplug {
        action: "failed to unmount".into(),
        volume: volume.into(),
        reason,
    };
    let dir = open_dir(launcher_dir).map_err(|r| fail("", r))?;
    let mounts = own_mounts().map_err(|r| fail("", r))?;
    let entries = std::fs::read_dir(launcher_dir).map_err(|e| fail("", format!("listing: {e}")))?;
    let mut removed = Vec::new();
    let mut first_error = None;
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Ok(st) = fstatat(&dir, file.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        let result = match (kind(&st), file.strip_suffix(".img")) {
            (SFlag::S_IFREG, Some(volume)) if !wanted.contains(volume) => {
                let target = launcher_dir.join(&file);
                if mountinfo::mounted_at(&mounts, &target).is_none() {
                    // Not a mount the handler made: left alone, as KubeVirt does.
                    continue;
                }
                (volume.to_string(), unmount_file(&dir, &target, &file))
            }
            (SFlag::S_IFBLK, _) if !wanted.contains(&file) => {
                (file.clone(), remove_block(&dir, &file, &st, cgroup))
            }
            _ => continue,
        };
        match result {
            (volume, Ok(())) => {
                tracing::info!(volume, dir = %launcher_dir.display(), "hotplug volume removed from the launcher pod");
                removed.push(volume);
            }
            (volume, Err(reason)) => {
                tracing::warn!(volume, "removing hotplug volume: {reason}");
                first_error.get_or_insert_with(|| fail(&volume, reason));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

fn unmount_file(dir: &File, target: &Path, file: &str) -> Result<(), String> {
    umount2(target, MntFlags::UMOUNT_NOFOLLOW)
        .map_err(|e| format!("unmounting {}: {}", target.display(), e.desc()))?;
    unlinkat(dir, file, UnlinkatFlags::NoRemoveDir)
        .map_err(|e| format!("removing {}: {}", target.display(), e.desc()))
}

fn remove_block(
    dir: &File,
    file: &str,
    st: &FileStat,
    cgroup: Option<&DeviceCgroup>,
) -> Result<(), String> {
    unlinkat(dir, file, UnlinkatFlags::NoRemoveDir)
        .map_err(|e| format!("removing device {file}: {}", e.desc()))?;
    let rdev = st.st_rdev;
    match cgroup {
        Some(c) => c.set_block(major(rdev), minor(rdev), false),
        None => Ok(()),
    }
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// Opens a directory the node trusts (a kubelet path): its entries are what pods control.
fn open_dir(path: &Path) -> Result<File, String> {
    File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))
}

fn own_mounts() -> Result<Vec<mountinfo::MountEntry>, String> {
    read_mounts("/proc/thread-self/mountinfo")
}

fn read_mounts(path: &str) -> Result<Vec<mountinfo::MountEntry>, String> {
    std::fs::read_to_string(path)
        .map(|t| mountinfo::parse(&t))
        .map_err(|e| format!("reading {path}: {e}"))
}

fn fd_path(fd: &impl AsRawFd) -> String {
    format!("/proc/thread-self/fd/{}", fd.as_raw_fd())
}

fn chown_qemu(fd: &impl AsFd, what: &str) -> Result<(), String> {
    fchownat(
        fd,
        "",
        Some(Uid::from_raw(QEMU_UID)),
        Some(Gid::from_raw(QEMU_UID)),
        AtFlags::AT_EMPTY_PATH,
    )
    .map_err(|e| format!("chown {what} to {QEMU_UID}:{QEMU_UID}: {}", e.desc()))
}

fn mount_filesystem(
    launcher_dir: &Path,
    pid: u32,
    volume: &str,
    disk_size: u64,
) -> Result<Mounted, String> {
    let dir = open_dir(launcher_dir)?;
    let file = format!("{volume}.img");
    let target_path = launcher_dir.join(&file);
    let mounts = own_mounts()?;
    if mountinfo::mounted_at(&mounts, &target_path).is_some() {
        return Ok(Mounted::Already);
    }
    let claim = claim_dir(pid, volume, &mounts)?;
    let disk = disk_image(&claim, disk_size)?;
    let (target, created) = mount_target(&dir, &file)?;
    let bound = mount(
        Some(fd_path(&disk).as_str()),
        fd_path(&target).as_str(),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    );
    if let Err(e) = bound {
        if created {
            let _ = unlinkat(&dir, file.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        return Err(format!(
            "failed to bindmount hotplug volume source to {}: {}",
            target_path.display(),
            e.desc()
        ));
    }
    Ok(Mounted::New)
}

/// The claim's directory on the node, checked to be what the attachment pod mounts.
fn claim_dir(pid: u32, volume: &str, node: &[mountinfo::MountEntry]) -> Result<File, String> {
    let waiting = |reason: String| {
        format!(
            "failed to get source path for volume {volume} from the attachment pod (pid {pid}): {reason}: waiting for hotplug mount"
        )
    };
    let pod_mounts = read_mounts(&format!("/proc/{pid}/mountinfo")).map_err(waiting)?;
    let candidates = [format!("/{volume}"), format!("/{ATTACHMENT_PATH}/{volume}")];
    let (at, entry) = candidates
        .iter()
        .find_map(|c| mountinfo::mounted_at(&pod_mounts, Path::new(c)).map(|m| (c, m)))
        .ok_or_else(|| {
            waiting(format!(
                "the attachment pod mounts no volume {volume} (at /{volume})"
            ))
        })?;
    let candidates = mountinfo::node_paths_of(node, entry);
    if candidates.is_empty() {
        return Err(waiting(format!(
            "the node has no mount of device {} reaching {}",
            entry.device,
            entry.root.display()
        )));
    }
    let in_pod = open_beneath(
        Path::new(&format!("/proc/{pid}/root")),
        at,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Resolve::NoSymlinks,
    )
    .map_err(|r| waiting(format!("{at} in the attachment pod: {r}")))?;
    let want = fstat(&in_pod).map_err(|e| e.desc().to_string())?;
    let mut tried = Vec::new();
    for node_path in candidates {
        match open_node_dir(&node_path) {
            Ok(dir) => {
                let st = fstat(&dir).map_err(|e| e.desc().to_string())?;
                if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino) {
                    tracing::debug!(volume, source = %node_path.display(), "hotplug source found");
                    return Ok(dir);
                }
                tried.push(format!("{} is another directory", node_path.display()));
            }
            Err(r) => tried.push(format!("{}: {r}", node_path.display())),
        }
    }
    Err(format!(
        "no directory on the node is the one the attachment pod mounts at {at} ({})",
        tried.join("; ")
    ))
}

/// Opens a directory of the node by its absolute path, following no symlink (the paths come
/// from mountinfo, which has none).
fn open_node_dir(path: &Path) -> Result<File, String> {
    let rel = path.to_string_lossy();
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        return File::open("/").map_err(|e| e.to_string());
    }
    open_beneath(
        Path::new("/"),
        rel,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Resolve::NoSymlinks,
    )
    .map(File::from)
}

/// The claim's `disk.img`, created sparse and owned by QEMU's user when the claim has none
/// (KubeVirt's host-disk creation), as an `O_PATH` descriptor to bind from.
fn disk_image(claim: &File, disk_size: u64) -> Result<OwnedFd, String> {
    let path_flags = OFlag::O_PATH | OFlag::O_NOFOLLOW;
    match open_at(claim, DISK_IMG, path_flags, Resolve::NoSymlinks) {
        Ok(fd) => {
            let st = fstat(&fd).map_err(|e| e.desc().to_string())?;
            match kind(&st) {
                SFlag::S_IFREG => {}
                SFlag::S_IFLNK => {
                    return Err(format!("{DISK_IMG} in the claim is a symlink (refused)"));
                }
                _ => return Err(format!("{DISK_IMG} in the claim is not a regular file")),
            }
            if st.st_uid != QEMU_UID || st.st_gid != QEMU_UID {
                chown_qemu(&fd, DISK_IMG)?;
            }
            return Ok(fd);
        }
        Err(reason) if reason == "does not exist" => {}
        Err(reason) => return Err(format!("{DISK_IMG} in the claim: {reason}")),
    }
    let size = disk_size_to_create(claim, disk_size)?;
    let created = openat(
        claim,
        DISK_IMG,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|e| format!("creating {DISK_IMG} in the claim: {}", e.desc()))?;
    let file = File::from(created);
    file.set_len(size)
        .map_err(|e| format!("sizing {DISK_IMG} to {size} B: {e}"))?;
    chown_qemu(&file, DISK_IMG)?;
    tracing::info!(size, "created {DISK_IMG} in the hotplugged claim");
    open_at(claim, DISK_IMG, path_flags, Resolve::NoSymlinks)
        .map_err(|r| format!("{DISK_IMG} in the claim: {r}"))
}

/// KubeVirt's size for a new `disk.img`: as asked, or what the claim has when that is at most
/// the toleration smaller.
fn disk_size_to_create(claim: &File, wanted: u64) -> Result<u64, String> {
    if wanted == 0 {
        return Err("the size for the volume is too low, must be at least 1MiB".into());
    }
    let vfs = fstatvfs(claim).map_err(|e| format!("statvfs of the claim: {}", e.desc()))?;
    let available = (vfs.blocks_available() as u64)
        .saturating_mul(vfs.fragment_size() as u64)
        .saturating_sub(MINIMUM_RESERVE_BYTES);
    sized(wanted, available)
}

fn sized(wanted: u64, available: u64) -> Result<u64, String> {
    if wanted <= available {
        return Ok(wanted);
    }
    let tolerated = wanted / 100 * (100 - LESS_SPACE_TOLERATION_PERCENT);
    if tolerated > available {
        return Err(format!(
            "unable to create {DISK_IMG}, not enough space, demanded size {wanted} B is bigger than available space {available} B, also after taking {LESS_SPACE_TOLERATION_PERCENT} % toleration into account"
        ));
    }
    Ok(available)
}

/// The regular file to mount onto in the launcher's directory (created when absent), and
/// whether it was created here.
fn mount_target(dir: &File, file: &str) -> Result<(OwnedFd, bool), String> {
    let (fd, created) = match open_at(
        dir,
        file,
        OFlag::O_PATH | OFlag::O_NOFOLLOW,
        Resolve::NoSymlinks,
    ) {
        Ok(fd) => (fd, false),
        Err(r) if r == "does not exist" => {
            let fd = openat(
                dir,
                file,
                OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_RDONLY
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            )
            .map_err(|e| format!("creating {file} in the launcher pod: {}", e.desc()))?;
            (fd, true)
        }
        Err(r) => return Err(format!("{file} in the launcher pod: {r}")),
    };
    let st = fstat(&fd).map_err(|e| e.desc().to_string())?;
    match kind(&st) {
        SFlag::S_IFREG => {}
        SFlag::S_IFLNK => return Err(format!("{file} in the launcher pod is a symlink (refused)")),
        _ => return Err(format!("{file} in the launcher pod is not a regular file")),
    }
    Ok((fd, created))
}

fn mount_block(
    launcher_dir: &Path,
    pid: u32,
    volume: &str,
    cgroup: Option<&DeviceCgroup>,
) -> Result<Mounted, String> {
    let cgroup = cgroup.ok_or("the launcher pod's device cgroup is not known")?;
    let dir = open_dir(launcher_dir)?;
    let (rdev, perm) = source_device(pid, volume)?;
    let created = match fstatat(&dir, volume, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => false,
        Err(Errno::ENOENT) => {
            mknodat(&dir, volume, SFlag::S_IFBLK, perm, rdev)
                .map_err(|e| format!("creating block device {volume}: {}", e.desc()))?;
            true
        }
        Err(e) => return Err(format!("stat {volume}: {}", e.desc())),
    };
    let undo = |reason: String| {
        if created {
            let _ = unlinkat(&dir, volume, UnlinkatFlags::NoRemoveDir);
        }
        reason
    };
    let node = open_at(
        &dir,
        volume,
        OFlag::O_PATH | OFlag::O_NOFOLLOW,
        Resolve::NoSymlinks,
    )
    .map_err(|r| undo(format!("{volume}: {r}")))?;
    let st = fstat(&node).map_err(|e| undo(e.desc().to_string()))?;
    if kind(&st) != SFlag::S_IFBLK {
        return Err(format!(
            "target device {volume} exists but it is not a block device"
        ));
    }
    if st.st_rdev != rdev {
        return Err(format!(
            "target device {volume} is {}:{}, the claim's is {}:{}",
            major(st.st_rdev),
            minor(st.st_rdev),
            major(rdev),
            minor(rdev)
        ));
    }
    cgroup
        .set_block(major(rdev), minor(rdev), true)
        .map_err(undo)?;
    chown_qemu(&node, volume).map_err(undo)?;
    Ok(if created {
        Mounted::New
    } else {
        Mounted::Already
    })
}

/// The device numbers and permission bits of the block claim in the attachment pod: the only
/// device in its `/path/<volume>` directory.
fn source_device(pid: u32, volume: &str) -> Result<(u64, Mode), String> {
    let rel = format!("{ATTACHMENT_PATH}/{volume}");
    let dir = open_beneath(
        Path::new(&format!("/proc/{pid}/root")),
        &rel,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Resolve::NoSymlinks,
    )
    .map_err(|r| format!("/{rel} in the attachment pod (pid {pid}): {r}"))?;
    let entries = std::fs::read_dir(fd_path(&dir)).map_err(|e| format!("listing /{rel}: {e}"))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Ok(st) = fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        if kind(&st) == SFlag::S_IFBLK {
            return Ok((st.st_rdev, Mode::from_bits_truncate(st.st_mode & 0o777)));
        }
    }
    Err(format!("no device in /{rel} of the attachment pod"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_disk_is_shrunk_only_within_the_toleration() {
        assert_eq!(sized(100 << 20, 200 << 20), Ok(100 << 20));
        assert_eq!(sized(100 << 20, 95 << 20), Ok(95 << 20));
        let err = sized(100 << 20, 80 << 20).expect_err("too small");
        assert!(err.contains("not enough space"), "{err}");
    }

    #[test]
    fn pod_uids_are_checked() {
        let d = hotplug_disks_dir(Path::new("/pods"), "ab-12").expect("uid");
        assert_eq!(
            d,
            Path::new("/pods/ab-12/volumes/kubernetes.io~empty-dir/hotplug-disks")
        );
        assert!(hotplug_disks_dir(Path::new("/pods"), "../x").is_err());
        assert!(hotplug_disks_dir(Path::new("/pods"), "").is_err());
    }
}
