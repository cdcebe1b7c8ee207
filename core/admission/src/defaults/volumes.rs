//! Volume defaults: container disk pull policy and a disk for every volume without a device.

use std::collections::BTreeSet;

use crate::api::{Disk, VirtualMachineInstanceSpec};

/// An image tagged `:latest` or not tagged/pinned at all may change under the same name, so it
/// is pulled every time; a tagged or digest-pinned image only when absent.
pub(crate) fn pull_policy_for(image: &str) -> &'static str {
    if image.ends_with(":latest") || !image.contains([':', '@']) {
        "Always"
    } else {
        "IfNotPresent"
    }
}

pub(super) fn set_container_disk_pull_policies(spec: &mut VirtualMachineInstanceSpec) {
    for volume in spec.volumes.iter_mut().flatten() {
        if let Some(cd) = volume.container_disk.as_mut()
            && cd.image_pull_policy.as_deref().unwrap_or("").is_empty()
        {
            cd.image_pull_policy = Some(pull_policy_for(&cd.image).to_string());
        }
    }
}

/// A volume that no disk and no filesystem names gets a plain disk of its own name, so users
/// may list volumes only.
pub(crate) fn add_disks_for_bare_volumes(spec: &mut VirtualMachineInstanceSpec) {
    let devices = &spec.domain.devices;
    let mut named: BTreeSet<String> = devices
        .disks
        .iter()
        .flatten()
        .map(|d| d.name.clone())
        .collect();
    named.extend(devices.filesystems.iter().flatten().map(|f| f.name.clone()));
    let missing: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| !named.contains(&v.name))
        .map(|v| v.name.clone())
        .collect();
    if missing.is_empty() {
        return;
    }
    let disks = spec.domain.devices.disks.get_or_insert_with(Vec::new);
    disks.extend(missing.into_iter().map(|name| Disk {
        name,
        ..Default::default()
    }));
}
