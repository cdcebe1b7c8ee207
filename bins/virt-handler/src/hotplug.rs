//! The node steps of volume hotplug: which launcher pod and which attachment pods a VMI's
//! hotplugged volumes concern, and [`kvrs_node::hotplug`] run for them in the node's mount
//! namespace (see there why), on a blocking thread.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::handler::hotplug::{volumes_to_mount, wanted_volumes};
use kvrs_node::hotplug::{
    CGROUP_ROOT, ClaimMode, DeviceCgroup, HotplugVolume, attachment_pid, hotplug_disks_dir,
    in_mount_namespace, is_mounted, mount_volume, node_namespace_differs, unmount_unwanted,
};
use tracing::{debug, warn};

use crate::launchers::pods_on;

/// Where the kubelet keeps pods on a node whose mount namespace the handler does not share.
pub const NODE_PODS_DIR: &str = "/var/lib/kubelet/pods";

/// How this handler reaches the pods' `hotplug-disks` directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotplugNode {
    /// The node's mount namespace to enter, `None` when this process is in it already.
    pub mount_ns: Option<PathBuf>,
    /// The kubelet's pods directory as seen in that namespace.
    pub pods_dir: PathBuf,
    /// Where the launcher directory each VMI got mounts in is remembered (one file per VMI
    /// UID, KubeVirt's mount checkpoints), so that cleanup finds it after the VMI is gone.
    pub records: PathBuf,
}

impl HotplugNode {
    /// From the flags. The node's namespace is entered when it is not ours and the handler
    /// sees the pods through its pod's `/pods` mount (which does not carry mounts back to the
    /// node) or was told the node's pods directory; a handler given another `--pods-dir` runs
    /// on the node itself (`kvrs run`) and mounts where it is.
    pub fn new(
        node_ns: &Path,
        kubelet_pods_dir: Option<&Path>,
        own_pods_dir: &Path,
        private_dir: &Path,
    ) -> Self {
        let in_pod = own_pods_dir == Path::new(kvrs_ipc::layout::DEFAULT_PODS_DIR);
        let enter = (in_pod || kubelet_pods_dir.is_some()) && node_namespace_differs(node_ns);
        let pods_dir = match kubelet_pods_dir {
            Some(d) => d.to_path_buf(),
            None if enter => PathBuf::from(NODE_PODS_DIR),
            None => own_pods_dir.to_path_buf(),
        };
        HotplugNode {
            mount_ns: enter.then(|| node_ns.to_path_buf()),
            pods_dir,
            records: private_dir.join("hotplug-mounts"),
        }
    }

    /// Runs `f` with the launcher pod's `hotplug-disks` directory, in the node's namespace.
    /// `Ok(None)` when no single launcher pod of the VMI is on this node (KubeVirt's
    /// `findVirtlauncherUID`: nothing to do here).
    async fn with_launcher_dir<T: Send + 'static>(
        &self,
        vmi: &VirtualMachineInstance,
        node: &str,
        f: impl FnOnce(&Path, &Path) -> Result<T, String> + Send + 'static,
    ) -> Result<Option<T>, String> {
        let uids: Vec<String> = pods_on(vmi, node).map(str::to_string).collect();
        let (ns, pods_dir) = (self.mount_ns.clone(), self.pods_dir.clone());
        tokio::task::spawn_blocking(move || {
            in_mount_namespace(ns.as_deref(), || {
                let dirs: Vec<PathBuf> = uids
                    .iter()
                    .filter_map(|u| hotplug_disks_dir(&pods_dir, u).ok())
                    .filter(|d| d.is_dir())
                    .collect();
                match dirs.as_slice() {
                    [one] => f(one, &pods_dir).map(Some),
                    _ => Ok(None),
                }
            })
            .map_err(|e| e.to_string())?
        })
        .await
        .map_err(|e| format!("hotplug task: {e}"))?
    }

    /// The hotplugged volumes of `vmi` that are in its launcher pod (the decision's
    /// `hotplugMounted` fact). Errors are logged and count as "not mounted", as in KubeVirt.
    pub async fn mounted(&self, vmi: &VirtualMachineInstance, node: &str) -> BTreeSet<String> {
        let volumes: Vec<(String, ClaimMode)> = vmi
            .status
            .as_ref()
            .and_then(|s| s.volume_status.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|vs| vs.hotplug_volume.is_some())
            .map(|vs| (vs.name.clone(), mode_of(vs)))
            .collect();
        if volumes.is_empty() {
            return BTreeSet::new();
        }
        let found = self
            .with_launcher_dir(vmi, node, move |dir, _| {
                Ok(volumes
                    .into_iter()
                    .filter(|(name, mode)| match is_mounted(dir, name, *mode) {
                        Ok(m) => m,
                        Err(e) => {
                            warn!("checking whether hotplug volume is mounted: {e}");
                            false
                        }
                    })
                    .map(|(name, _)| name)
                    .collect())
            })
            .await;
        match found {
            Ok(set) => set.unwrap_or_default(),
            Err(e) => {
                warn!("checking hotplug mounts: {e}");
                BTreeSet::new()
            }
        }
    }

    /// Mounts every hotplugged volume whose attachment pod runs into the launcher pod
    /// (`launcher_pid` is its launcher process, for the device cgroup of block claims).
    pub async fn mount(
        &self,
        vmi: &VirtualMachineInstance,
        node: &str,
        launcher_pid: Option<u32>,
    ) -> Result<(), String> {
        let requests = volumes_to_mount(vmi);
        if requests.is_empty() {
            return Ok(());
        }
        let any_block = requests.iter().any(|r| r.block);
        // Remembered before mounting: a mount made and then a failure still gets cleaned up.
        let record = |dir: &Path| {
            self.record_path(vmi)
                .map(|file| {
                    std::fs::create_dir_all(&self.records)
                        .and_then(|()| std::fs::write(file, dir.as_os_str().as_encoded_bytes()))
                })
                .transpose()
                .map_err(|e| format!("recording hotplug mounts: {e}"))
        };
        let dir = self
            .with_launcher_dir(vmi, node, |dir, _| Ok(dir.to_path_buf()))
            .await?;
        let Some(dir) = dir else {
            return Ok(());
        };
        record(&dir)?;
        self.with_launcher_dir(vmi, node, move |dir, pods_dir| {
            let cgroup = device_cgroup(any_block, launcher_pid);
            for r in requests {
                let volume = HotplugVolume {
                    name: r.volume.clone(),
                    mode: if r.block {
                        ClaimMode::Block
                    } else {
                        ClaimMode::Filesystem {
                            disk_size: r.disk_size,
                        }
                    },
                };
                let pid = attachment_pid(pods_dir, &r.attach_pod_uid, &r.volume)
                    .map_err(|e| e.to_string())?;
                let out =
                    mount_volume(dir, pid, &volume, cgroup.as_ref()).map_err(|e| e.to_string())?;
                debug!(volume = r.volume, ?out, "hotplug mount");
            }
            Ok(())
        })
        .await
        .map(drop)
    }

    /// The record file of `vmi` (none without a well-formed UID).
    fn record_path(&self, vmi: &VirtualMachineInstance) -> Option<PathBuf> {
        self.record_of(vmi.metadata.uid.as_deref()?)
    }

    fn record_of(&self, uid: &str) -> Option<PathBuf> {
        let ok = !uid.is_empty() && uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        ok.then(|| self.records.join(uid))
    }

    /// KubeVirt's `UnmountAll` at the VMI's cleanup: every hotplugged volume leaves the
    /// launcher directory recorded for VMI `uid` (and the one `vmi` names, if any); failures
    /// are logged, as in KubeVirt, and the record is dropped.
    pub async fn cleanup(&self, uid: &str, vmi: Option<&VirtualMachineInstance>, node: &str) {
        let record = self.record_of(uid);
        let mut dirs: Vec<PathBuf> = record
            .as_ref()
            .and_then(|f| std::fs::read(f).ok())
            .map(|b| PathBuf::from(String::from_utf8_lossy(&b).into_owned()))
            .into_iter()
            .collect();
        if let Some(v) = vmi
            && let Ok(Some(d)) = self
                .with_launcher_dir(v, node, |dir, _| Ok(dir.to_path_buf()))
                .await
            && !dirs.contains(&d)
        {
            dirs.push(d);
        }
        if dirs.is_empty() {
            return;
        }
        let ns = self.mount_ns.clone();
        let vmi_uid = uid.to_string();
        let done = tokio::task::spawn_blocking(move || {
            in_mount_namespace(ns.as_deref(), || {
                for dir in dirs {
                    if let Err(e) = unmount_unwanted(&dir, &BTreeSet::new(), None) {
                        warn!(uid = vmi_uid, "cleaning up hotplug volumes: {e}");
                    }
                }
            })
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(uid, "cleaning up hotplug volumes: {e}"),
            Err(e) => warn!(uid, "cleaning up hotplug volumes: {e}"),
        }
        if let Some(f) = record {
            let _ = std::fs::remove_file(f);
        }
    }

    /// Removes from the launcher pod the hotplugged volumes no longer in `vmi`'s spec.
    pub async fn unmount(
        &self,
        vmi: &VirtualMachineInstance,
        node: &str,
        launcher_pid: Option<u32>,
    ) -> Result<(), String> {
        // Nothing was ever hotplugged (no status names an attachment pod): nothing to do,
        // without a trip to the node's namespace on every sync of every VMI.
        if !has_hotplug_status(vmi) {
            return Ok(());
        }
        let wanted = wanted_volumes(vmi);
        self.with_launcher_dir(vmi, node, move |dir, _| {
            let cgroup = device_cgroup(true, launcher_pid);
            unmount_unwanted(dir, &wanted, cgroup.as_ref())
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await
        .map(drop)
    }
}

/// The launcher's device cgroup when block claims need it; why not, logged.
fn device_cgroup(needed: bool, launcher_pid: Option<u32>) -> Option<DeviceCgroup> {
    if !needed {
        return None;
    }
    let pid = launcher_pid?;
    match DeviceCgroup::of_pid(pid, Path::new(CGROUP_ROOT)) {
        Ok(c) => Some(c),
        Err(e) => {
            warn!("device cgroup of launcher {pid}: {e}");
            None
        }
    }
}

fn has_hotplug_status(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.volume_status.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|vs| vs.hotplug_volume.is_some())
}

fn mode_of(vs: &kvrs_api::api::VolumeStatus) -> ClaimMode {
    let block = vs
        .persistent_volume_claim_info
        .as_ref()
        .and_then(|i| i.volume_mode.as_deref())
        == Some("Block");
    if block {
        ClaimMode::Block
    } else {
        ClaimMode::Filesystem { disk_size: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_namespace_is_entered_only_from_a_pod_that_does_not_share_it() {
        // This process's own namespace: never entered, the pods where we see them.
        let own = Path::new("/proc/self/ns/mnt");
        let private = Path::new("/var/run/kubevirt-private");
        let n = HotplugNode::new(own, None, Path::new("/pods"), private);
        assert_eq!(
            n,
            HotplugNode {
                mount_ns: None,
                pods_dir: "/pods".into(),
                records: "/var/run/kubevirt-private/hotplug-mounts".into(),
            }
        );
        // `kvrs run`'s handler is given the host's pods directory: used as it is.
        let n = HotplugNode::new(own, None, Path::new("/run/kvrs/pods"), private);
        assert_eq!(n.pods_dir, Path::new("/run/kvrs/pods"));
        assert_eq!(n.mount_ns, None);
        // An explicit node pods directory wins.
        let n = HotplugNode::new(
            own,
            Some(Path::new("/data/kubelet/pods")),
            Path::new("/pods"),
            private,
        );
        assert_eq!(n.pods_dir, Path::new("/data/kubelet/pods"));
    }
}
