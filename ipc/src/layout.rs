//! Where the handler<->launcher sockets live, inside the launcher pod and as seen from the node.
//!
//! Inside the pod, the launcher serves `Cmd` on `<share dir>/sockets/launcher-sock` (the
//! `sockets` emptyDir). It binds `launcher-init-sock` first and renames it to `launcher-sock`
//! once it answers: virt-handler treats the final name appearing as "the launcher is ready".
//! From the node, virt-handler reaches that emptyDir through the kubelet's pods directory
//! (mounted at `/pods` in virt-handler's pod):
//! `<pods dir>/<pod UID>/volumes/kubernetes.io~empty-dir/sockets/launcher-sock`.
//!
//! Notifications go the other way through `<share dir>/domain-notify-pipe.sock`, a socket the
//! handler itself creates inside the pod's filesystem and pipes to its own
//! `<share dir>/domain-notify.sock`; so the launcher only ever dials a path of its own pod.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The directory KubeVirt's components share (`virtShareDir`), in the launcher and the handler.
pub const DEFAULT_SHARE_DIR: &str = "/var/run/kubevirt";
/// Where virt-handler mounts the kubelet's pods directory.
pub const DEFAULT_PODS_DIR: &str = "/pods";
/// The emptyDir volume of the launcher pod that holds the cmd socket.
pub const SOCKETS_VOLUME: &str = "sockets";
/// The launcher's cmd socket once it is ready.
pub const LAUNCHER_SOCKET: &str = "launcher-sock";
/// The launcher's cmd socket while it is starting (renamed to [`LAUNCHER_SOCKET`] when ready).
pub const LAUNCHER_INIT_SOCKET: &str = "launcher-init-sock";
/// A marker file virt-handler creates beside the cmd socket once the launcher stopped answering.
pub const LAUNCHER_UNRESPONSIVE_MARKER: &str = "launcher-unresponsive";
/// The notify socket the handler places in the launcher pod.
pub const NOTIFY_PIPE_SOCKET: &str = "domain-notify-pipe.sock";
/// The handler's own notify server socket, in the handler's share dir.
pub const HANDLER_NOTIFY_SOCKET: &str = "domain-notify.sock";

/// A pod UID that cannot be used as a path component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod UID {uid:?}: {reason}")]
pub struct BadPodUid {
    /// The offending UID.
    pub uid: String,
    /// Why it was rejected.
    pub reason: &'static str,
}

/// Rejects UIDs that would escape the pods directory when joined to it.
fn check_uid(uid: &str) -> Result<&str, BadPodUid> {
    let reason = if uid.is_empty() {
        "empty"
    } else if uid.contains('/') || uid.contains('\0') {
        "contains '/' or NUL"
    } else if uid == "." || uid == ".." {
        "is a relative path component"
    } else {
        return Ok(uid);
    };
    Err(BadPodUid {
        uid: uid.to_string(),
        reason,
    })
}

/// `<share dir>/sockets`: the launcher's view of its `sockets` emptyDir.
pub fn launcher_sockets_dir(share_dir: &Path) -> PathBuf {
    share_dir.join(SOCKETS_VOLUME)
}

/// `<share dir>/sockets/launcher-sock`: where a ready launcher serves `Cmd`.
pub fn launcher_socket(share_dir: &Path) -> PathBuf {
    launcher_sockets_dir(share_dir).join(LAUNCHER_SOCKET)
}

/// `<share dir>/sockets/launcher-init-sock`: where a starting launcher binds first.
pub fn launcher_init_socket(share_dir: &Path) -> PathBuf {
    launcher_sockets_dir(share_dir).join(LAUNCHER_INIT_SOCKET)
}

/// The staging name a server binds before renaming to `socket`: `launcher-init-sock` for
/// `launcher-sock` (what virt-handler expects), `.<name>.init` beside any other socket.
pub fn staging_socket_for(socket: &Path) -> PathBuf {
    let dir = socket.parent().unwrap_or(Path::new("."));
    match socket.file_name().and_then(|n| n.to_str()) {
        Some(LAUNCHER_SOCKET) => dir.join(LAUNCHER_INIT_SOCKET),
        Some(name) => dir.join(format!(".{name}.init")),
        None => dir.join(".socket.init"),
    }
}

/// `<pods dir>/<pod UID>/volumes/kubernetes.io~empty-dir/sockets`: the launcher pod's socket
/// directory as the handler sees it from the node.
pub fn pod_sockets_dir_on_host(pods_dir: &Path, pod_uid: &str) -> Result<PathBuf, BadPodUid> {
    Ok(pods_dir
        .join(check_uid(pod_uid)?)
        .join("volumes")
        .join("kubernetes.io~empty-dir")
        .join(SOCKETS_VOLUME))
}

/// `<pods dir>/<pod UID>/volumes/kubernetes.io~empty-dir/sockets/launcher-sock`.
pub fn launcher_socket_on_host(pods_dir: &Path, pod_uid: &str) -> Result<PathBuf, BadPodUid> {
    Ok(pod_sockets_dir_on_host(pods_dir, pod_uid)?.join(LAUNCHER_SOCKET))
}

/// `<share dir>/domain-notify-pipe.sock`: the notify socket the launcher dials, in its own pod.
pub fn notify_pipe_socket(share_dir: &Path) -> PathBuf {
    share_dir.join(NOTIFY_PIPE_SOCKET)
}

/// `<share dir>/domain-notify.sock`: the handler's own notify server.
pub fn handler_notify_socket(share_dir: &Path) -> PathBuf {
    share_dir.join(HANDLER_NOTIFY_SOCKET)
}

/// Where the handler creates the pipe socket so that it appears at
/// [`notify_pipe_socket`]`(share_dir)` inside the pod: the share dir resolved under the pod's
/// root filesystem as the node sees it (e.g. `/proc/<launcher pid>/root`).
pub fn notify_pipe_socket_on_host(pod_root: &Path, share_dir: &Path) -> PathBuf {
    let relative = share_dir.strip_prefix("/").unwrap_or(share_dir);
    pod_root.join(relative).join(NOTIFY_PIPE_SOCKET)
}

/// Why no single launcher socket was found for a VMI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindSocketError {
    /// None of the VMI's active pods on this node has a cmd socket yet.
    #[error("no command socket found for VMI {vmi} in [{}]", searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NotFound {
        /// `namespace/name` of the VMI.
        vmi: String,
        /// The paths looked at.
        searched: Vec<PathBuf>,
    },
    /// More than one active pod on this node has a socket (a same-node migration in progress);
    /// the caller waits until only one remains.
    #[error("found multiple command sockets for VMI {vmi}: waiting for only one to exist")]
    Multiple {
        /// `namespace/name` of the VMI.
        vmi: String,
    },
}

/// Finds the one launcher cmd socket of a VMI on this node, like virt-handler does.
///
/// `active_pods` maps pod UID to node name (`vmi.status.activePods`); pods on other nodes are
/// skipped when `node` is given. Exactly one existing socket is an answer; none or several are
/// errors. Invalid UIDs are skipped: they cannot name a directory under `pods_dir`.
pub fn find_launcher_socket(
    pods_dir: &Path,
    vmi: &str,
    active_pods: &BTreeMap<String, String>,
    node: Option<&str>,
) -> Result<PathBuf, FindSocketError> {
    let mut found = Vec::new();
    let mut searched = Vec::new();
    for (uid, pod_node) in active_pods {
        if node.is_some_and(|n| n != pod_node) {
            continue;
        }
        let Ok(socket) = launcher_socket_on_host(pods_dir, uid) else {
            continue;
        };
        if std::fs::symlink_metadata(&socket).is_ok() {
            found.push(socket.clone());
        }
        searched.push(socket);
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(FindSocketError::NotFound {
            vmi: vmi.to_string(),
            searched,
        }),
        _ => Err(FindSocketError::Multiple {
            vmi: vmi.to_string(),
        }),
    }
}

/// [`find_launcher_socket`] for a VMI object, using its `status.activePods`.
pub fn find_launcher_socket_for(
    pods_dir: &Path,
    vmi: &kvrs_api::VirtualMachineInstance,
    node: Option<&str>,
) -> Result<PathBuf, FindSocketError> {
    let key = format!(
        "{}/{}",
        vmi.metadata.namespace.as_deref().unwrap_or_default(),
        vmi.metadata.name.as_deref().unwrap_or_default()
    );
    let empty = BTreeMap::new();
    let pods = vmi
        .status
        .as_ref()
        .and_then(|s| s.active_pods.as_ref())
        .unwrap_or(&empty);
    find_launcher_socket(pods_dir, &key, pods, node)
}

/// Whether virt-handler should treat the launcher behind `socket` as gone: the socket (or its
/// directory) no longer exists, or the unresponsive marker sits beside it.
pub fn is_socket_unresponsive(socket: &Path) -> bool {
    let Some(dir) = socket.parent() else {
        return true;
    };
    if std::fs::symlink_metadata(dir).is_err() {
        return true;
    }
    if std::fs::symlink_metadata(dir.join(LAUNCHER_UNRESPONSIVE_MARKER)).is_ok() {
        return true;
    }
    std::fs::symlink_metadata(socket).is_err()
}

/// Creates the unresponsive marker beside `socket` (idempotent).
pub fn mark_socket_unresponsive(socket: &Path) -> std::io::Result<()> {
    let dir = socket.parent().unwrap_or(Path::new("."));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(LAUNCHER_UNRESPONSIVE_MARKER))
        .map(drop)
}

/// `path` (absolute, as the pod sees it) under `root` — a pod's `/proc/<pid>/root` from the node,
/// or an image volume's mount point from the launcher — every symlink on the way resolved with
/// `root` as `/`, and `..` never leaving it. Following an absolute symlink through
/// `/proc/<pid>/root` with the kernel would land in the *caller's* root instead (`/var/run` is
/// usually a symlink to `/run`).
pub fn resolve_in_root(root: &Path, path: &str) -> Result<PathBuf, String> {
    const MAX_LINKS: usize = 40;
    let parts = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .rev()
            .collect()
    };
    let mut pending = parts(path);
    let mut current = root.to_path_buf();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            if current != root {
                current.pop();
            }
            continue;
        }
        let next = current.join(&part);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!("{path}: too many symlinks"));
                }
                let target =
                    std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
                let target = target.to_string_lossy().into_owned();
                if target.starts_with('/') {
                    current = root.to_path_buf();
                }
                pending.extend(parts(&target));
            }
            Ok(_) => current = next,
            Err(e) => return Err(format!("{}: {e}", next.display())),
        }
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_paths_inside_the_pod() {
        let share = Path::new(DEFAULT_SHARE_DIR);
        assert_eq!(
            launcher_socket(share),
            Path::new("/var/run/kubevirt/sockets/launcher-sock")
        );
        assert_eq!(
            launcher_init_socket(share),
            Path::new("/var/run/kubevirt/sockets/launcher-init-sock")
        );
        assert_eq!(
            staging_socket_for(&launcher_socket(share)),
            launcher_init_socket(share)
        );
        assert_eq!(
            staging_socket_for(Path::new("/x/domain-notify.sock")),
            Path::new("/x/.domain-notify.sock.init")
        );
        assert_eq!(
            notify_pipe_socket(share),
            Path::new("/var/run/kubevirt/domain-notify-pipe.sock")
        );
        assert_eq!(
            handler_notify_socket(share),
            Path::new("/var/run/kubevirt/domain-notify.sock")
        );
    }

    #[test]
    fn handler_view_from_the_node() {
        let path = launcher_socket_on_host(Path::new(DEFAULT_PODS_DIR), "1234-abcd").unwrap();
        assert_eq!(
            path,
            Path::new("/pods/1234-abcd/volumes/kubernetes.io~empty-dir/sockets/launcher-sock")
        );
        let pipe =
            notify_pipe_socket_on_host(Path::new("/proc/42/root"), Path::new(DEFAULT_SHARE_DIR));
        assert_eq!(
            pipe,
            Path::new("/proc/42/root/var/run/kubevirt/domain-notify-pipe.sock")
        );
    }

    #[test]
    fn pod_uids_cannot_escape_the_pods_dir() {
        for uid in ["", "..", ".", "a/b", "a\0b"] {
            let err = launcher_socket_on_host(Path::new("/pods"), uid).unwrap_err();
            assert_eq!(err.uid, uid);
        }
    }

    #[test]
    fn finds_exactly_one_socket_on_this_node() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path();
        let mut active = BTreeMap::new();
        active.insert("uid-a".to_string(), "node1".to_string());
        active.insert("uid-b".to_string(), "node2".to_string());

        let err = find_launcher_socket(pods, "ns/vm", &active, Some("node1")).unwrap_err();
        assert!(matches!(&err, FindSocketError::NotFound { searched, .. } if searched.len() == 1));
        assert!(err.to_string().contains("uid-a"), "{err}");

        for uid in ["uid-a", "uid-b"] {
            let dir = pod_sockets_dir_on_host(pods, uid).unwrap();
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(LAUNCHER_SOCKET), b"").unwrap();
        }
        let found = find_launcher_socket(pods, "ns/vm", &active, Some("node1")).unwrap();
        assert_eq!(found, launcher_socket_on_host(pods, "uid-a").unwrap());
        // Without a node filter both pods qualify: a same-node migration, wait.
        let err = find_launcher_socket(pods, "ns/vm", &active, None).unwrap_err();
        assert_eq!(
            err,
            FindSocketError::Multiple {
                vmi: "ns/vm".into()
            }
        );
    }

    #[test]
    fn unresponsive_marker_and_missing_socket() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join(LAUNCHER_SOCKET);
        assert!(
            is_socket_unresponsive(&socket),
            "missing socket counts as unresponsive"
        );
        std::fs::write(&socket, b"").unwrap();
        assert!(!is_socket_unresponsive(&socket));
        mark_socket_unresponsive(&socket).unwrap();
        mark_socket_unresponsive(&socket).unwrap();
        assert!(is_socket_unresponsive(&socket));
        assert!(is_socket_unresponsive(
            &tmp.path().join("gone/launcher-sock")
        ));
    }

    #[test]
    fn absolute_symlinks_resolve_inside_the_pod_root() {
        let root = std::env::temp_dir().join(format!("kvrs-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("run/kubevirt")).unwrap();
        std::fs::create_dir_all(root.join("var")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var/run")).unwrap();
        assert_eq!(
            resolve_in_root(&root, "/var/run/kubevirt").unwrap(),
            root.join("run/kubevirt")
        );
        assert_eq!(
            resolve_in_root(&root, "/../../run").unwrap(),
            root.join("run")
        );
        assert!(resolve_in_root(&root, "/nope/x").is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
