//! KubeVirt v1.9.0's storage checks of a VMI spec update by its own service accounts
//! (`pkg/storage/admitters/storagehotplug.go`, `AdmitHotplugStorage`): the volumes and disks the
//! VMI started with (those whose `status.volumeStatus` entry has no `hotplugVolume`) stay as
//! they are; a hotplug volume may come or go, but one that stays does not change, and a new one
//! is a PVC or DataVolume with a disk on the `scsi` or `virtio` bus.
//!
//! Each refusal is one message (KubeVirt's `FieldValueInvalid` cause, without a field). KubeVirt
//! walks Go maps, so with several faults it names any one of them; this walks volumes by name.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{Disk, VirtualMachineInstance, Volume};
use crate::config::ClusterConfig;

use super::gates::gate_enabled;

/// The refusal of a spec change from `old` to `new`, if KubeVirt refuses it.
pub fn admit_hotplug_storage(
    old: &VirtualMachineInstance,
    new: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> Option<String> {
    let empty = Vec::new();
    let volumes = |v: &'_ VirtualMachineInstance| v.spec.volumes.clone().unwrap_or_default();
    let disks =
        |v: &'_ VirtualMachineInstance| v.spec.domain.devices.disks.clone().unwrap_or_default();
    let (new_volumes, old_volumes) = (volumes(new), volumes(old));
    let (new_disks, old_disks) = (disks(new), disks(old));
    let filesystems = new
        .spec
        .domain
        .devices
        .filesystems
        .as_ref()
        .map_or(0, Vec::len);
    if let Err(e) = expected_disks(&new_volumes, &new_disks, filesystems, config) {
        return Some(e);
    }
    let statuses = old
        .status
        .as_ref()
        .and_then(|s| s.volume_status.as_ref())
        .unwrap_or(&empty);
    let permanent: BTreeSet<&str> = statuses
        .iter()
        .filter(|s| s.hotplug_volume.is_none())
        .map(|s| s.name.as_str())
        .collect();
    let split = |vs: &[Volume]| {
        let (mut perm, mut hot) = (BTreeMap::new(), BTreeMap::new());
        for v in vs {
            let map = if permanent.contains(v.name.as_str()) {
                &mut perm
            } else {
                &mut hot
            };
            map.insert(v.name.clone(), v.clone());
        }
        (perm, hot)
    };
    let (new_perm, new_hot) = split(&new_volumes);
    let (old_perm, old_hot) = split(&old_volumes);
    let migrated: BTreeSet<String> = new
        .status
        .as_ref()
        .and_then(|s| s.migrated_volumes.as_ref())
        .into_iter()
        .flatten()
        .map(|m| m.volume_name.clone())
        .collect();
    let disk_map = |ds: &[Disk]| -> BTreeMap<String, Disk> {
        ds.iter()
            .filter(|d| !d.name.is_empty())
            .map(|d| (d.name.clone(), d.clone()))
            .collect()
    };
    let (new_disk_map, old_disk_map) = (disk_map(&new_disks), disk_map(&old_disks));
    let disk_of = |m: &BTreeMap<String, Disk>, k: &str| m.get(k).cloned().unwrap_or_default();

    if new_perm.len() != old_perm.len() {
        return Some("Number of permanent volumes has changed".into());
    }
    for (k, v) in &new_perm {
        let Some(old_v) = old_perm.get(k) else {
            return Some(format!("permanent volume {k}, not found"));
        };
        if migrated.contains(k) {
            continue;
        }
        if v != old_v {
            return Some(format!("permanent volume {k}, changed"));
        }
        if disk_of(&new_disk_map, k) != disk_of(&old_disk_map, k) {
            return Some(format!("permanent disk {k}, changed"));
        }
    }

    for (k, v) in &new_hot {
        if let Some(old_v) = old_hot.get(k) {
            if v != old_v && !migrated.contains(k) {
                return Some(format!("hotplug volume {k}, changed"));
            }
            if v.memory_dump.is_none() {
                if !new_disk_map.contains_key(k) {
                    return Some(format!("volume {k} doesn't have a matching disk"));
                }
                if disk_of(&new_disk_map, k) != disk_of(&old_disk_map, k) {
                    return Some(format!("hotplug disk {k}, changed"));
                }
            }
            continue;
        }
        if v.data_volume.is_none() && v.persistent_volume_claim.is_none() && v.memory_dump.is_none()
        {
            return Some(format!("volume {k} is not a PVC or DataVolume"));
        }
        if v.memory_dump.is_none() {
            let Some(disk) = new_disk_map.get(k) else {
                return Some(format!("disk {k} does not exist"));
            };
            if !old_disk_map.contains_key(k)
                && let Some(e) = hotplug_disk_configuration(disk, k, "Hotplug configuration")
            {
                return Some(e);
            }
        }
    }
    None
}

/// KubeVirt's `validateExpectedDisksAndFilesystems`: every volume (but a memory dump) is used
/// by exactly one disk or filesystem; a CD-ROM without a volume is fine declaratively.
fn expected_disks(
    volumes: &[Volume],
    disks: &[Disk],
    filesystems: usize,
    config: &ClusterConfig,
) -> Result<(), String> {
    let names: BTreeSet<&str> = volumes
        .iter()
        .filter(|v| v.memory_dump.is_none())
        .map(|v| v.name.as_str())
        .collect();
    let declarative = gate_enabled(config, "DeclarativeHotplugVolumes");
    let mut required = filesystems;
    for d in disks {
        if !names.contains(d.name.as_str()) && d.cdrom.is_some() && declarative {
            continue;
        }
        required += 1;
    }
    if required != names.len() {
        return Err(format!(
            "mismatch between volumes declared ({}) and required ({required})",
            names.len()
        ));
    }
    Ok(())
}

/// KubeVirt's `ValidateHotplugDiskConfiguration`: a hotplugged disk is a `disk` on `scsi` or
/// `virtio`, or a `lun` on `scsi`; IO threads need `virtio`; a boot order is at least 1.
pub fn hotplug_disk_configuration(disk: &Disk, name: &str, prefix: &str) -> Option<String> {
    let bus = match (&disk.disk, &disk.lun, &disk.cdrom) {
        (Some(d), _, _) => d.bus.clone(),
        (None, Some(l), _) => l.bus.clone(),
        (None, None, Some(c)) => c.bus.clone(),
        _ => None,
    }
    .unwrap_or_default();
    if disk.disk.is_some() {
        if bus != "scsi" && bus != "virtio" {
            return Some(format!(
                "{prefix} for disk [{name}] requires bus to be 'scsi' or 'virtio'. [{bus}] is not permitted."
            ));
        }
    } else if disk.lun.is_some() {
        if bus != "scsi" {
            return Some(format!(
                "{prefix} for LUN [{name}] requires bus to be 'scsi'. [{bus}] is not permitted."
            ));
        }
    } else {
        return Some(format!(
            "{prefix} for [{name}] requires diskDevice of type 'disk' or 'lun' to be used."
        ));
    }
    if disk.dedicated_io_thread == Some(true) && bus != "virtio" {
        return Some(format!(
            "{prefix} for [{name}] requires virtio bus for IOThreads."
        ));
    }
    if disk.boot_order.is_some_and(|o| o < 1) {
        return Some("spec.domain.devices.disks[1] must have a boot order > 0, if supplied".into());
    }
    None
}

#[cfg(test)]
#[path = "hotplug_tests.rs"]
mod tests;
