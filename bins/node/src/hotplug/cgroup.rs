//! Letting a running launcher pod open a hotplugged block device: its device cgroup.
//!
//! The container runtime wrote the pod's device rules when the container started (kvrs's
//! kubelet through the OCI spec's `linux.resources.devices`, `bins/kubelet/src/oci.rs`), and
//! they only cover the devices known then; a device hotplugged later is denied until a rule is
//! added to the running container's cgroup, as KubeVirt's handler does through its cgroup
//! manager. With the cgroup v1 `devices` controller that is a line written to `devices.allow`
//! (and `devices.deny` on unplug). The cgroup v2 form (an eBPF program replacing the runtime's)
//! is not done here: such a node gets an error naming the volume rather than a device QEMU
//! cannot open.

use std::path::{Path, PathBuf};

/// The `devices` cgroup of a launcher pod's container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCgroup {
    /// The cgroup's directory, e.g. `/sys/fs/cgroup/devices/kubepods/.../<container>`.
    pub dir: PathBuf,
}

/// Where the cgroup v1 hierarchies are mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

impl DeviceCgroup {
    /// The device cgroup of process `pid` (`/proc/<pid>/cgroup`, its `devices` line), under
    /// `cgroup_root`. `Err` says why there is none (cgroup v2 only, process gone).
    pub fn of_pid(pid: u32, cgroup_root: &Path) -> Result<Self, String> {
        let path = format!("/proc/{pid}/cgroup");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
        let rel = devices_path(&text).ok_or_else(|| {
            format!(
                "process {pid} has no cgroup v1 devices controller (cgroup v2 device rules for \
                 a running pod are not supported)"
            )
        })?;
        let dir = cgroup_root
            .join("devices")
            .join(rel.trim_start_matches('/'));
        if !dir.join("devices.allow").exists() {
            return Err(format!("{} has no devices.allow", dir.display()));
        }
        Ok(DeviceCgroup { dir })
    }

    /// Allows (`allow`) or denies read, write and mknod of block device `major:minor`.
    pub fn set_block(&self, major: u64, minor: u64, allow: bool) -> Result<(), String> {
        let file = self.dir.join(if allow {
            "devices.allow"
        } else {
            "devices.deny"
        });
        let rule = block_rule(major, minor);
        std::fs::write(&file, &rule)
            .map_err(|e| format!("writing {rule:?} to {}: {e}", file.display()))
    }
}

/// The rule line for a block device with every access (KubeVirt's `rwm`).
pub(crate) fn block_rule(major: u64, minor: u64) -> String {
    format!("b {major}:{minor} rwm")
}

/// The `devices` controller's path in a `/proc/<pid>/cgroup` text.
fn devices_path(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "devices")
            .then_some(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_devices_line_is_found() {
        let text = "12:pids:/kvrs/abc\n5:devices:/kvrs-kubelet-n/abc\n0::/kvrs/abc\n";
        assert_eq!(devices_path(text), Some("/kvrs-kubelet-n/abc"));
        assert_eq!(devices_path("0::/only-v2\n"), None);
        assert_eq!(block_rule(7, 3), "b 7:3 rwm");
    }
}
