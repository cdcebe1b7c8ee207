//! Checking that each container disk is where the launcher will look for it.
//!
//! With KubeVirt v1.9.0's default (the `ImageVolume` feature), the pod mounts each
//! `containerDisk` image read-only at `/var/run/kubevirt-image-volume/disk_<i>` (`i` being the
//! volume's index in `spec.volumes`), and the launcher links the disk file from there: the
//! volume's `path` inside the image when set, else the single file in the image's `/disk`
//! directory. Symlinks inside the image are resolved with the image volume directory standing
//! for `/`, as the launcher resolves them. Checking this from the node before the first sync
//! turns "the domain failed to start" into an error naming the volume and the path.
//!
//! The other mode, init containers (`ImageVolume` off), instead has the handler bind-mount each
//! image's disk from the container-disk container's root onto
//! `/var/run/kubevirt/container-disks/disk_<i>.img` in the launcher pod, finding that container
//! through its `disk_<i>.sock` socket under the kubelet's pod directory. That needs the mount
//! namespace of the pod and the kubelet's pod directory: not done here; such a pod is reported
//! as [`NodeError::Unsupported`] when it can be recognized (no image volume mounted but the
//! init-container target directory present).

use crate::error::NodeError;
use crate::pod::PodRef;
use crate::safepath::{Resolve, open_at, open_beneath};
use kvrs_api::VirtualMachineInstance;
use nix::fcntl::OFlag;
use nix::sys::stat::{SFlag, fstat};
use std::os::fd::{AsRawFd, OwnedFd};

/// Where the pod mounts container-disk image volumes (KubeVirt's `VirtImageVolumeDir`).
pub const IMAGE_VOLUME_DIR: &str = "var/run/kubevirt-image-volume";
/// The directory inside an image holding the disk when the volume names no `path`.
pub const DISK_FALLBACK_DIR: &str = "disk";
/// Where the init-container mode puts the disks (KubeVirt's container-disk mount dir).
pub const INIT_CONTAINER_DISK_DIR: &str = "var/run/kubevirt/container-disks";

/// Checks every `containerDisk` volume of the VMI: its disk file exists under the pod root, is
/// a regular file and is readable (by the node, and by the launcher's user 107 per its mode).
pub fn check_container_disks(pod: &PodRef, vmi: &VirtualMachineInstance) -> Result<(), NodeError> {
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    for (i, volume) in volumes.iter().enumerate() {
        let Some(cd) = &volume.container_disk else {
            continue;
        };
        let field = format!("spec.volumes[{i}]");
        check_one(pod, &field, i, cd.path.as_deref())?;
    }
    Ok(())
}

fn check_one(pod: &PodRef, field: &str, index: usize, path: Option<&str>) -> Result<(), NodeError> {
    let volume_dir = format!("disk_{index}");
    let fail = |path: &str, reason: String| NodeError::ContainerDisk {
        field: field.to_string(),
        path: format!("/{IMAGE_VOLUME_DIR}/{path}"),
        reason,
    };
    // The image volume itself must be there; if it is not but the init-container target is,
    // the pod was rendered for the other mode. Symlinks up to it (`/var/run` -> `/run`)
    // resolve inside the pod root; below it, inside the image volume directory.
    let volume = open_beneath(
        &pod.root,
        &format!("{IMAGE_VOLUME_DIR}/{volume_dir}"),
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Resolve::InRoot,
    );
    if let Err(reason) = volume {
        if open_beneath(
            &pod.root,
            INIT_CONTAINER_DISK_DIR,
            OFlag::O_PATH | OFlag::O_DIRECTORY,
            Resolve::InRoot,
        )
        .is_ok()
        {
            return Err(NodeError::Unsupported {
                field: field.to_string(),
                reason: format!(
                    "container disk without an image volume (init-container mode, \
                     /{INIT_CONTAINER_DISK_DIR}) is not supported yet"
                ),
            });
        }
        return Err(fail(&volume_dir, format!("image volume {reason}")));
    }
    let image_root = open_beneath(
        &pod.root,
        IMAGE_VOLUME_DIR,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Resolve::InRoot,
    )
    .map_err(|r| fail("", r))?;
    let rel = match path
        .map(|p| p.trim_start_matches('/'))
        .filter(|p| !p.is_empty())
    {
        Some(p) => format!("{volume_dir}/{p}"),
        None => fallback_disk(&image_root, &volume_dir)
            .map_err(|r| fail(&format!("{volume_dir}/{DISK_FALLBACK_DIR}"), r))?,
    };
    let fd =
        open_at(&image_root, &rel, OFlag::O_RDONLY, Resolve::InRoot).map_err(|r| fail(&rel, r))?;
    let st = fstat(&fd).map_err(|e| fail(&rel, format!("stat: {}", e.desc())))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFREG {
        return Err(fail(&rel, "is not a regular file".into()));
    }
    if !readable_by_qemu(st.st_mode, st.st_uid, st.st_gid) {
        return Err(fail(
            &rel,
            format!(
                "is not readable by the launcher's user 107 (mode {:o}, owner {}:{})",
                st.st_mode & 0o7777,
                st.st_uid,
                st.st_gid
            ),
        ));
    }
    tracing::debug!(volume = field, path = rel, "container disk present");
    Ok(())
}

/// The single entry of the image's `/disk` directory, relative to the image volume dir.
fn fallback_disk(image_root: &OwnedFd, volume_dir: &str) -> Result<String, String> {
    let dir_rel = format!("{volume_dir}/{DISK_FALLBACK_DIR}");
    let fd = open_at(
        image_root,
        &dir_rel,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Resolve::InRoot,
    )?;
    // Listing through the opened descriptor keeps the check on the directory just resolved.
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("listing: {e}"))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("listing: {e}"))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    match names.as_slice() {
        [one] => Ok(format!("{dir_rel}/{one}")),
        [] => Err("no file found, no disk present".into()),
        _ => Err(format!(
            "{} files found, only one disk is allowed",
            names.len()
        )),
    }
}

/// Whether the permission bits let uid/gid 107 read the file (QEMU opens it as that user).
fn readable_by_qemu(mode: u32, uid: u32, gid: u32) -> bool {
    use crate::devices::QEMU_UID;
    (mode & 0o004 != 0)
        || (uid == QEMU_UID && mode & 0o400 != 0)
        || (gid == QEMU_UID && mode & 0o040 != 0)
}

#[cfg(test)]
mod tests {
    use super::readable_by_qemu;

    #[test]
    fn readability_follows_the_permission_bits_for_107() {
        assert!(readable_by_qemu(0o100644, 0, 0));
        assert!(readable_by_qemu(0o100440, 107, 107));
        assert!(readable_by_qemu(0o100040, 0, 107));
        assert!(!readable_by_qemu(0o100600, 0, 0));
        assert!(!readable_by_qemu(0o100440, 0, 0));
    }
}
