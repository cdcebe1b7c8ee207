//! Handing the pod's device nodes to the VM's user.
//!
//! The launcher pod gets `/dev/kvm`, `/dev/net/tun` and `/dev/vhost-net` from the device
//! plugins owned by root; QEMU runs as the unprivileged `qemu` user (107), so the handler chowns
//! them inside the pod's root before the domain starts, as KubeVirt's `claimDeviceOwnership`
//! does, and a non-root VMI's block-mode claims (`/dev/<volume>`) as its
//! `changeOwnershipOfBlockDevices` does. The node opens each path without following symlinks and chowns the opened file, so a
//! pod cannot point the privileged chown at a node file.

use crate::error::NodeError;
use crate::pod::PodRef;
use crate::safepath::{Resolve, open_beneath};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{SFlag, fstat};
use nix::unistd::{Gid, Uid, fchownat};

/// The user and group QEMU runs as in the launcher (KubeVirt's `qemu`, 107).
pub const QEMU_UID: u32 = 107;

/// Makes each device (a path relative to the pod root, e.g. `dev/kvm`) owned by 107:107.
///
/// Already-owned devices are left alone. A missing device, a path with `..`, a symlink on the
/// way or a path leaving the root is an error naming the device.
pub fn claim_devices(pod: &PodRef, paths: &[String]) -> Result<(), NodeError> {
    for path in paths {
        claim_one(pod, path)?;
    }
    Ok(())
}

fn claim_one(pod: &PodRef, path: &str) -> Result<(), NodeError> {
    let fail = |reason: String| NodeError::Device {
        path: path.to_string(),
        reason,
    };
    let fd = open_beneath(
        &pod.root,
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW,
        Resolve::NoSymlinks,
    )
    .map_err(fail)?;
    let st = fstat(&fd).map_err(|e| fail(format!("stat: {}", e.desc())))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFLNK {
        return Err(fail("is a symlink (refused)".into()));
    }
    if kind != SFlag::S_IFCHR && kind != SFlag::S_IFBLK {
        // A runtime masks a device the pod did not get (an empty file bound over /dev/kvm
        // under emulation): handing the mask to qemu would make it look usable. Block devices
        // are a block-mode claim's node (`/dev/<volume>`).
        tracing::debug!(device = path, "not a character device (masked): left alone");
        return Ok(());
    }
    if st.st_uid == QEMU_UID && st.st_gid == QEMU_UID {
        tracing::debug!(device = path, "already owned by qemu");
        return Ok(());
    }
    fchownat(
        &fd,
        "",
        Some(Uid::from_raw(QEMU_UID)),
        Some(Gid::from_raw(QEMU_UID)),
        AtFlags::AT_EMPTY_PATH,
    )
    .map_err(|e| fail(format!("chown to {QEMU_UID}:{QEMU_UID}: {}", e.desc())))?;
    tracing::info!(device = path, "claimed for qemu ({QEMU_UID}:{QEMU_UID})");
    Ok(())
}
