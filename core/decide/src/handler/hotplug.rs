//! `status.volumeStatus` as virt-handler keeps it (KubeVirt's `updateVolumeStatusesFromDomain`):
//! every volume's guest device from the domain, and the node's phases of hotplugged volumes.
//!
//! virt-controller takes a hotplugged volume to `AttachedToNode` once its attachment pod runs;
//! the handler mounts it into the launcher pod and records `MountedToPod` (the launcher may now
//! attach it), `Ready` once the domain shows the disk, and after the volume left the spec and
//! was unmounted, `UnMountedFromPod` (virt-controller then deletes the attachment pod). Whether
//! a volume is mounted is a node fact ([`NodeFacts::hotplug_mounted`](super::NodeFacts)).

use std::collections::{BTreeMap, BTreeSet};

use super::HandlerWorld;
use super::ctx::Ctx;
use super::domain::Domain;
use crate::api::{VirtualMachineInstance, VolumeStatus};

/// KubeVirt's phase names.
pub mod phases {
    /// The claim is not bound yet.
    pub const PENDING: &str = "Pending";
    /// The claim is bound.
    pub const BOUND: &str = "Bound";
    /// The attachment pod runs on the node.
    pub const ATTACHED_TO_NODE: &str = "AttachedToNode";
    /// The handler mounted it into the launcher pod.
    pub const MOUNTED_TO_POD: &str = "MountedToPod";
    /// The domain has the disk.
    pub const READY: &str = "Ready";
    /// The handler unmounted it from the launcher pod.
    pub const UNMOUNTED_FROM_POD: &str = "UnMountedFromPod";
}

/// KubeVirt's reasons (`pkg/virt-handler/controller.go`).
pub mod reasons {
    /// Mounted into the launcher pod.
    pub const MOUNTED_TO_POD: &str = "VolumeMountedToPod";
    /// Unmounted from the launcher pod.
    pub const UNMOUNTED_FROM_POD: &str = "VolumeUnMountedFromPod";
    /// Attached to the domain.
    pub const READY: &str = "VolumeReady";
    /// A volume status went away.
    pub const UNPLUGGED: &str = "VolumeUnplugged";
}

fn can_update_to_mounted(phase: &str) -> bool {
    matches!(
        phase,
        phases::BOUND | phases::PENDING | phases::ATTACHED_TO_NODE
    )
}

fn can_update_to_unmounted(phase: &str) -> bool {
    matches!(
        phase,
        phases::READY | phases::MOUNTED_TO_POD | phases::ATTACHED_TO_NODE
    )
}

/// Refreshes `vmi`'s volume statuses from the domain and the node's mounts, sorted by name;
/// an event per phase change, and a look again in a second while a hotplugged volume has no
/// guest device yet.
pub(super) fn update_volume_statuses(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
) {
    let mut spec_volumes: BTreeSet<&str> = BTreeSet::new();
    spec_volumes.extend(vmi.spec.volumes.iter().flatten().map(|v| v.name.as_str()));
    spec_volumes.extend(
        vmi.spec
            .utility_volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str()),
    );
    let spec_volumes: BTreeSet<String> = spec_volumes.into_iter().map(String::from).collect();
    let Some(status) = vmi.status.as_mut() else {
        return;
    };
    let Some(volumes) = status.volume_status.as_mut().filter(|v| !v.is_empty()) else {
        return;
    };
    let devices = disk_devices(domain);
    let old: Vec<VolumeStatus> = volumes.clone();
    let mut needs_refresh = false;
    for vs in volumes.iter_mut() {
        vs.target = devices.get(vs.name.as_str()).cloned().unwrap_or_default();
        if vs.hotplug_volume.is_some() {
            needs_refresh |= update_hotplug(vs, &spec_volumes, &w.facts.hotplug_mounted);
        }
    }
    volumes.sort_by(|a, b| a.name.cmp(&b.name));
    if needs_refresh {
        cx.add_after(1);
    }
    events_for_changes(cx, &old, volumes);
}

/// Disk alias -> target device, for disks with a source (an empty CD-ROM has no device worth
/// reporting).
fn disk_devices(domain: Option<&Domain>) -> BTreeMap<&str, String> {
    domain
        .into_iter()
        .flat_map(|d| d.spec.devices.disks.iter())
        .filter(|disk| !disk.source.file.is_empty() || !disk.source.dev.is_empty())
        .filter_map(|disk| {
            Some((
                disk.alias.as_ref()?.name.as_str(),
                disk.target.device.clone(),
            ))
        })
        .collect()
}

/// KubeVirt's `updateHotplugVolumeStatus`; `true` while the volume has no guest device.
fn update_hotplug(
    vs: &mut VolumeStatus,
    spec_volumes: &BTreeSet<String>,
    mounted: &BTreeSet<String>,
) -> bool {
    let name = vs.name.clone();
    let phase = vs.phase.clone().unwrap_or_default();
    let in_spec = spec_volumes.contains(&name);
    if !vs.target.is_empty() {
        set(
            vs,
            phases::READY,
            reasons::READY,
            format!("Successfully attach hotplugged volume {name} to VM"),
        );
        return false;
    }
    if mounted.contains(&name) {
        if in_spec && can_update_to_mounted(&phase) {
            set(
                vs,
                phases::MOUNTED_TO_POD,
                reasons::MOUNTED_TO_POD,
                format!("Volume {name} has been mounted in virt-launcher pod"),
            );
        }
    } else if !in_spec && can_update_to_unmounted(&phase) {
        set(
            vs,
            phases::UNMOUNTED_FROM_POD,
            reasons::UNMOUNTED_FROM_POD,
            format!("Volume {name} has been unmounted from virt-launcher pod"),
        );
    }
    true
}

fn set(vs: &mut VolumeStatus, phase: &str, reason: &str, message: String) {
    vs.phase = Some(phase.into());
    vs.reason = Some(reason.into());
    vs.message = Some(message);
}

/// KubeVirt's `generateEventsForVolumeStatusChange`: a Normal event with the new reason and
/// message for each phase change and each new status, `VolumeUnplugged` for a removed one.
fn events_for_changes(cx: &mut Ctx, old: &[VolumeStatus], new: &[VolumeStatus]) {
    let by_name: BTreeMap<&str, &VolumeStatus> = new.iter().map(|v| (v.name.as_str(), v)).collect();
    let mut unseen = by_name.clone();
    for o in old {
        let Some(n) = by_name.get(o.name.as_str()) else {
            cx.event(
                "Normal",
                reasons::UNPLUGGED,
                format!("Volume {} has been unplugged", o.name),
            );
            continue;
        };
        if n.phase != o.phase {
            cx.event(
                "Normal",
                n.reason.as_deref().unwrap_or_default(),
                n.message.clone().unwrap_or_default(),
            );
        }
        unseen.remove(o.name.as_str());
    }
    for n in unseen.values() {
        cx.event(
            "Normal",
            n.reason.as_deref().unwrap_or_default(),
            n.message.clone().unwrap_or_default(),
        );
    }
}

/// The hotplugged volumes the handler mounts into the launcher pod: entries with an
/// attachment pod whose phase says it runs on the node (`AttachedToNode` or later), with the
/// claim's mode and the size of a `disk.img` to create. Volumes KubeVirt mounts as a whole
/// directory (memory dumps, utility volumes) are not hotplugged as disks and are left out.
pub fn volumes_to_mount(vmi: &VirtualMachineInstance) -> Vec<MountRequest> {
    let directory_mounted = |name: &str| {
        vmi.spec
            .utility_volumes
            .iter()
            .flatten()
            .any(|u| u.name == name)
            || vmi
                .spec
                .volumes
                .iter()
                .flatten()
                .any(|v| v.name == name && v.memory_dump.is_some())
    };
    let statuses = vmi
        .status
        .as_ref()
        .and_then(|s| s.volume_status.as_deref())
        .unwrap_or_default();
    statuses
        .iter()
        .filter_map(|vs| {
            let hp = vs.hotplug_volume.as_ref()?;
            if directory_mounted(&vs.name) {
                return None;
            }
            let attach_pod_uid = hp.attach_pod_uid.clone().filter(|u| !u.is_empty())?;
            let phase = vs.phase.as_deref().unwrap_or_default();
            if !matches!(
                phase,
                phases::ATTACHED_TO_NODE | phases::MOUNTED_TO_POD | phases::READY
            ) {
                return None;
            }
            let info = vs.persistent_volume_claim_info.as_ref();
            let block = info.and_then(|i| i.volume_mode.as_deref()) == Some("Block");
            Some(MountRequest {
                volume: vs.name.clone(),
                attach_pod_uid,
                block,
                disk_size: info.map_or(0, disk_size),
            })
        })
        .collect()
}

/// The names of the VMI's hotplugged volumes still in its spec (what stays mounted).
pub fn wanted_volumes(vmi: &VirtualMachineInstance) -> BTreeSet<String> {
    let hotplug = |name: &str| {
        vmi.spec.volumes.iter().flatten().any(|v| {
            v.name == name
                && (v
                    .persistent_volume_claim
                    .as_ref()
                    .is_some_and(|p| p.hotpluggable == Some(true))
                    || v.data_volume
                        .as_ref()
                        .is_some_and(|d| d.hotpluggable == Some(true)))
        })
    };
    vmi.spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.clone())
        .filter(|n| hotplug(n))
        .collect()
}

/// One volume to mount, as [`volumes_to_mount`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountRequest {
    /// The volume's name.
    pub volume: String,
    /// `hotplugVolume.attachPodUID`.
    pub attach_pod_uid: String,
    /// A block-mode claim.
    pub block: bool,
    /// The size of a new `disk.img` (bytes; 0 when the claim states none).
    pub disk_size: u64,
}

/// KubeVirt's host-disk size of a claim: the request when it is below the capacity (or there
/// is no capacity), else the capacity, aligned down to 1 MiB.
fn disk_size(info: &crate::api::PersistentVolumeClaimInfo) -> u64 {
    let storage = |q: Option<&crate::quantity::Quantity>| {
        q.and_then(|q| q.value().ok())
            .and_then(|v| u64::try_from(v).ok())
    };
    let capacity = storage(info.capacity.as_ref().and_then(|m| m.get("storage")));
    let requested = storage(info.requests.as_ref().and_then(|m| m.get("storage")));
    let size = match (requested, capacity) {
        (Some(r), Some(c)) if c > r => r,
        (Some(r), None) => r,
        (_, Some(c)) => c,
        (None, None) => 0,
    };
    size / (1 << 20) * (1 << 20)
}

#[cfg(test)]
#[path = "hotplug_tests.rs"]
mod tests;
