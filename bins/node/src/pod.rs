//! Which pod to work on: its network namespace and its root filesystem, as the node sees them.

use crate::error::NodeError;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// A virt-launcher pod seen from the node.
///
/// The handler learns the launcher's PID (see [`launcher_pid_of_socket`]) and reaches the pod
/// through `/proc/<pid>`: the namespace file is what the network setup enters, the root is what
/// device and container-disk paths are resolved beneath. Tests point both at things they made
/// (`/run/netns/<name>`, a temporary directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// The pod's network namespace file.
    pub netns: PathBuf,
    /// The pod's root filesystem.
    pub root: PathBuf,
}

impl PodRef {
    /// The pod of the process `pid`: `/proc/<pid>/ns/net` and `/proc/<pid>/root`.
    pub fn of_pid(pid: u32) -> Self {
        PodRef {
            netns: PathBuf::from(format!("/proc/{pid}/ns/net")),
            root: PathBuf::from(format!("/proc/{pid}/root")),
        }
    }
}

/// The PID of the process serving the Unix socket at `path` (the launcher's cmd socket).
///
/// The kernel records the server's credentials when the connection is made (`SO_PEERCRED`), so
/// this cannot be spoofed by the pod; it is how KubeVirt's handler finds the launcher too.
pub fn launcher_pid_of_socket(path: &Path) -> Result<u32, NodeError> {
    let fail = |reason: String| NodeError::PeerCredentials {
        path: path.to_path_buf(),
        reason,
    };
    let stream = UnixStream::connect(path).map_err(|e| fail(format!("connect: {e}")))?;
    let creds =
        getsockopt(&stream, PeerCredentials).map_err(|e| fail(format!("SO_PEERCRED: {e}")))?;
    u32::try_from(creds.pid()).map_err(|_| fail(format!("kernel reported pid {}", creds.pid())))
}
