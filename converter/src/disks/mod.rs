//! Disks and volumes: one `<disk>` per VMI disk, in the VMI's order, after the configurators.
//!
//! [`naming`] picks target names (`vda`, `sdb`), [`device`] writes the bus/device part from the
//! VMI disk, [`volume`] the source part from the volume it names.

mod device;
mod naming;
mod volume;

use crate::configurators::Env;
use crate::configurators::util::{NameSet, first_by_name};
use crate::domain::{Disk, Domain};
use crate::error::ConvertError;
use crate::iothreads::{has_dedicated, has_io_threads, io_thread_counts, supplemental_pool};
use crate::topology::vcpu_count;
use kvrs_api::VirtualMachineInstance;

/// What a disk's conversion needs to know about its name from outside the disk itself.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DiskFacts {
    /// The volume is hotplugged (`ConverterContext::hotplug_volumes`).
    pub(crate) hotplug: bool,
    /// The volume is preallocated: no `discard="unmap"` (`ConverterContext::volumes_discard_ignore`).
    pub(crate) discard_ignored: bool,
}

/// `spec.domain.devices.disks[i]`, formatted only when an error needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiskPath(pub usize);

impl std::fmt::Display for DiskPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "spec.domain.devices.disks[{}]", self.0)
    }
}

/// Appends the VMI's disks to the domain.
pub(crate) fn convert_disks(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let disks = vmi.spec.domain.devices.disks.as_deref().unwrap_or(&[]);
    if disks.is_empty() {
        return Ok(());
    }
    let volumes = vmi.spec.volumes.as_deref().unwrap_or(&[]);
    let statuses = vmi
        .status
        .as_ref()
        .and_then(|s| s.volume_status.as_deref())
        .unwrap_or(&[]);
    let mut namer = naming::Namer::new(statuses, disks);
    let queues = (vmi.spec.domain.devices.block_multi_queue == Some(true)).then(|| vcpu_count(vmi));
    let threads = has_io_threads(vmi);
    let auto_threads = if threads { io_thread_counts(vmi).1 } else { 0 };
    let pool = supplemental_pool(vmi);
    let mut next_auto = 1u32;
    let mut next_dedicated = auto_threads + 1;
    let volume_index = first_by_name(volumes, |v| v.name.as_str());
    let discard_ignore: NameSet<&str> = env
        .ctx
        .volumes_discard_ignore
        .iter()
        .map(String::as_str)
        .collect();
    domain.devices.disks.reserve(disks.len());
    for (i, disk) in disks.iter().enumerate() {
        let path = DiskPath(i);
        // Built in place at the end of the list: a `Disk` is large, moving it costs a copy.
        domain.devices.disks.push(Disk::default());
        let Some(out) = domain.devices.disks.last_mut() else {
            continue;
        };
        let facts = DiskFacts {
            hotplug: env.ctx.hotplug_volumes.contains(&disk.name),
            discard_ignored: discard_ignore.contains(disk.name.as_str()),
        };
        device::convert_disk(env, disk, &mut namer, queues, facts, &path, out)?;
        match volume_index.get(disk.name.as_str()) {
            None if disk.cdrom.is_some() => volume::missing_volume(out),
            None => {
                return Err(ConvertError::new(
                    path.to_string(),
                    format!("no matching volume with name {} found", disk.name),
                ));
            }
            Some(idx) => {
                volume::convert_volume(env, vmi, &volumes[idx], idx, facts, out, &path)?;
            }
        }
        device::block_size(env, disk, out, &path)?;
        device::error_policy(disk, out, &path)?;
        if threads
            && out.target.bus.as_deref() == Some("virtio")
            && let Some(driver) = out.driver.as_mut()
        {
            if let Some(p) = &pool {
                driver.iothreads = Some(p.clone());
            } else if has_dedicated(disk) {
                driver.iothread = Some(next_dedicated);
                next_dedicated += 1;
            } else {
                driver.iothread = Some(next_auto);
                next_auto = (next_auto % auto_threads.max(1)) + 1;
            }
        }
    }
    Ok(())
}
