//! Opening paths beneath a pod's root without letting the pod redirect the node.
//!
//! The pod root (`/proc/<pid>/root`) is a filesystem the VM's owner controls: a symlink planted
//! at `dev/kvm` or inside a container image must not make the privileged handler chown or read
//! a node file. KubeVirt walks such paths component by component with `O_NOFOLLOW`; the kernel's
//! `openat2` does the same walk atomically, so it is used here with two policies:
//!
//! * [`Resolve::NoSymlinks`]: no symlink anywhere, nothing outside the root (device nodes);
//! * [`Resolve::InRoot`]: symlinks are followed as if the root were `/` (container images, as
//!   KubeVirt resolves them "with a relative root"), `..` cannot climb above it.

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

/// How symlinks beneath the root are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolve {
    /// Refuse every symlink, and any path leaving the root.
    NoSymlinks,
    /// Follow symlinks, with the root standing for `/`.
    InRoot,
}

/// Checks that `rel` is a plain relative path: no `..`, no `.`, not empty (a leading `/` is
/// taken as relative to the root, as KubeVirt's `dev` + `/net/tun` join does).
pub(crate) fn check_relative(rel: &str) -> Result<&Path, String> {
    let trimmed = rel.trim_start_matches('/');
    if trimmed.is_empty() {
        return Err("empty path".into());
    }
    let path = Path::new(trimmed);
    for c in path.components() {
        match c {
            Component::Normal(_) => {}
            Component::ParentDir => return Err("contains '..'".into()),
            Component::CurDir => return Err("contains '.'".into()),
            Component::RootDir | Component::Prefix(_) => return Err("not relative".into()),
        }
    }
    if trimmed.contains("//") || trimmed.ends_with('/') {
        return Err("not a clean path".into());
    }
    Ok(path)
}

/// Opens `rel` beneath the directory `root` with `flags` (`O_CLOEXEC` is added).
///
/// The error is a sentence fit for a message: the symlink and escape cases are named as such.
pub(crate) fn open_beneath(
    root: &Path,
    rel: &str,
    flags: OFlag,
    resolve: Resolve,
) -> Result<OwnedFd, String> {
    let root_dir = File::open(root).map_err(|e| format!("opening root {}: {e}", root.display()))?;
    open_at(&root_dir, rel, flags, resolve)
}

/// As [`open_beneath`], with the root given as an open directory.
pub(crate) fn open_at<Fd: AsFd>(
    root_dir: Fd,
    rel: &str,
    flags: OFlag,
    resolve: Resolve,
) -> Result<OwnedFd, String> {
    let rel = check_relative(rel)?;
    let resolve_flags = match resolve {
        Resolve::NoSymlinks => ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS,
        Resolve::InRoot => ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(Mode::empty())
        .resolve(resolve_flags);
    openat2(root_dir, rel, how).map_err(|e| match e {
        Errno::ELOOP if resolve == Resolve::NoSymlinks => {
            "is or passes through a symlink (refused)".to_string()
        }
        Errno::ELOOP => "too many levels of symlinks".to_string(),
        Errno::EXDEV => "resolves outside the pod root (refused)".to_string(),
        Errno::ENOENT => "does not exist".to_string(),
        Errno::ENOTDIR => "a parent is not a directory".to_string(),
        other => other.desc().to_string(),
    })
}
