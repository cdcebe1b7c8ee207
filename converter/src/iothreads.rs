//! IO thread counting and assignment (shared, auto and supplemental-pool policies).

use crate::domain::{DiskIoThread, DiskIoThreads};
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::Disk;

/// Disk asks for its own IO thread.
pub(crate) fn has_dedicated(disk: &Disk) -> bool {
    disk.dedicated_io_thread == Some(true)
}

/// The VMI uses IO threads at all.
pub(crate) fn has_io_threads(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec.domain.io_threads_policy.is_some()
        || vmi
            .spec
            .domain
            .devices
            .disks
            .iter()
            .flatten()
            .any(has_dedicated)
}

fn supplemental_count(vmi: &VirtualMachineInstance) -> Option<u32> {
    let d = &vmi.spec.domain;
    if d.io_threads_policy.as_deref() != Some("supplementalPool") {
        return None;
    }
    d.io_threads
        .as_ref()?
        .supplemental_pool_thread_count
        .and_then(|c| u32::try_from(c).ok())
}

fn thread_pool_limit(vmi: &VirtualMachineInstance) -> u32 {
    let d = &vmi.spec.domain;
    match d.io_threads_policy.as_deref() {
        None | Some("shared") => 1,
        Some("auto") => {
            let cpu = d.cpu.as_ref();
            if cpu.and_then(|c| c.dedicated_cpu_placement).unwrap_or(false)
                && cpu.and_then(|c| c.isolate_emulator_thread).unwrap_or(false)
            {
                return 1;
            }
            let res = d.resources.as_ref();
            let n = res
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("cpu"))
                .or_else(|| {
                    res.and_then(|r| r.limits.as_ref())
                        .and_then(|l| l.get("cpu"))
                })
                .and_then(|q| q.value().ok())
                .unwrap_or(1);
            u32::try_from(n * 2).unwrap_or(0)
        }
        _ => 0,
    }
}

/// (total IO threads, auto-assigned threads).
pub(crate) fn io_thread_counts(vmi: &VirtualMachineInstance) -> (u32, u32) {
    if let Some(n) = supplemental_count(vmi) {
        return (n, 0);
    }
    let mut dedicated = 0u32;
    let mut auto = 0u32;
    for d in vmi.spec.domain.devices.disks.iter().flatten() {
        if has_dedicated(d) {
            dedicated += 1;
        } else {
            auto += 1;
        }
    }
    let limit = thread_pool_limit(vmi);
    if auto + dedicated > limit {
        auto = limit.saturating_sub(dedicated).max(1);
    }
    (auto + dedicated, auto)
}

/// The supplemental pool every virtio disk shares.
pub(crate) fn supplemental_pool(vmi: &VirtualMachineInstance) -> Option<DiskIoThreads> {
    let n = supplemental_count(vmi)?;
    Some(DiskIoThreads {
        iothread: (1..=n).map(|id| DiskIoThread { id }).collect(),
    })
}
