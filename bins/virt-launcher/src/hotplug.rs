//! Volume hotplug: which disks a sync of a running domain attaches and detaches.
//!
//! KubeVirt's launcher (`syncDisks` in virtwrap/manager.go) converts the VMI again, keeps only
//! the hotplugged disks whose volume virt-handler has mounted into the pod (volume status
//! `MountedToPod` or `Ready`), and diffs the domain's disks against that by target device: a
//! hotplug disk (its source under [`HOTPLUG_DISK_DIR`]) on the `virtio` or `scsi` bus that the
//! domain lacks is attached, one the domain has and the new spec lacks is detached. Every other
//! disk is left alone: a change of a non-hotplug disk needs a restart, which the VM controller
//! asks for. The decisions here are plain functions over the VMI and the domain models; the
//! shell in `service.rs` reads the live XML, checks the files and calls libvirt.

use std::collections::BTreeSet;
use std::path::Path;

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::Domain;
use kvrs_converter::domain::Disk;

/// `v1.HotplugDiskDir`: where virt-handler puts hotplugged volumes in the launcher pod (a
/// filesystem claim as `<volume>.img`, a block claim as the device node `<volume>`).
pub const HOTPLUG_DISK_DIR: &str = "/var/run/kubevirt/hotplug-disks/";

/// `v1.HotplugVolumeMounted`: virt-handler made the volume visible in the pod.
pub const PHASE_MOUNTED_TO_POD: &str = "MountedToPod";
/// `v1.VolumeReady`: the domain shows the disk.
pub const PHASE_READY: &str = "Ready";

/// A disk change the launcher could not make, naming the volume. The libvirt message is kept
/// as libvirt wrote it: KubeVirt's launcher returns libvirt's error as is.
#[derive(Debug, thiserror::Error)]
pub enum HotplugError {
    /// The disk's device XML could not be written.
    #[error("hotplug volume {volume}: marshalling the disk failed: {reason}")]
    Marshal {
        /// The volume.
        volume: String,
        /// Why.
        reason: String,
    },
    /// libvirt refused the attach.
    #[error("hotplug volume {volume}: attaching device: {source}")]
    Attach {
        /// The volume.
        volume: String,
        /// libvirt's error.
        source: crate::libvirt::LibvirtError,
    },
    /// libvirt refused the detach.
    #[error("hotplug volume {volume}: detaching device: {source}")]
    Detach {
        /// The volume.
        volume: String,
        /// libvirt's error.
        source: crate::libvirt::LibvirtError,
    },
    /// The volume's file or device could not be examined (other than not existing).
    #[error("hotplug volume {volume}: {path}: {reason}")]
    Source {
        /// The volume.
        volume: String,
        /// The file or device.
        path: String,
        /// Why.
        reason: String,
    },
}

/// The volumes with a hotplug status (`status.volumeStatus[].hotplugVolume` set): the
/// converter's `HotplugVolumes`, whose disks get their source under [`HOTPLUG_DISK_DIR`].
pub fn hotplug_volumes(vmi: &VirtualMachineInstance) -> BTreeSet<String> {
    statuses(vmi)
        .filter(|s| s.hotplug_volume.is_some())
        .map(|s| s.name.clone())
        .collect()
}

/// The hotplug volumes a domain may have: virt-handler mounted them into the pod
/// (`MountedToPod`) or the domain already shows them (`Ready`).
pub fn attachable_volumes(vmi: &VirtualMachineInstance) -> BTreeSet<String> {
    statuses(vmi)
        .filter(|s| s.hotplug_volume.is_some())
        .filter(|s| matches!(s.phase.as_deref(), Some(PHASE_MOUNTED_TO_POD | PHASE_READY)))
        .map(|s| s.name.clone())
        .collect()
}

fn statuses(vmi: &VirtualMachineInstance) -> impl Iterator<Item = &kvrs_api::api::VolumeStatus> {
    vmi.status
        .as_ref()
        .and_then(|s| s.volume_status.as_deref())
        .unwrap_or(&[])
        .iter()
}

/// The volume a disk belongs to: its user alias `ua-<volume>`.
pub fn volume_of(d: &Disk) -> Option<&str> {
    d.alias.as_ref()?.name.strip_prefix("ua-")
}

/// The file or device behind a disk (`disksource.Resolve(...).BackendPath()`).
pub fn backend_path(d: &Disk) -> Option<&str> {
    d.source
        .dev
        .as_deref()
        .or(d.source.file.as_deref())
        .filter(|p| !p.is_empty())
}

/// A hotplugged disk: its source lies under [`HOTPLUG_DISK_DIR`] (`IsHotplugDisk`).
pub fn is_hotplug_disk(d: &Disk) -> bool {
    backend_path(d).is_some_and(|p| p.starts_with(HOTPLUG_DISK_DIR))
}

/// Hotplug works on the `virtio` and `scsi` buses only (and a disk without a bus).
fn hotplug_bus(d: &Disk) -> bool {
    matches!(d.target.bus.as_deref(), None | Some("" | "virtio" | "scsi"))
}

fn target(d: &Disk) -> &str {
    d.target.dev.as_deref().unwrap_or("")
}

/// KubeVirt's converter leaves a hotplugged volume's disk out of the domain until virt-handler
/// has mounted it (`MountedToPod` or `Ready`): removes the others from `domain`. Which disks are
/// hotplugged is read from their source (the converter put them under [`HOTPLUG_DISK_DIR`]);
/// every other disk stays.
pub fn drop_unmounted(domain: &mut Domain, attachable: &BTreeSet<String>) {
    domain
        .devices
        .disks
        .retain(|d| !is_hotplug_disk(d) || volume_of(d).is_some_and(|v| attachable.contains(v)));
}

/// What a sync changes on a running domain.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// Hotplug disks of the domain that the new spec no longer has (`getDetachedDisks`), as
    /// the domain has them.
    pub detach: Vec<Disk>,
    /// Hotplug disks of the new spec that the domain lacks (`getAttachedDisks`), as the
    /// converter wrote them.
    pub attach: Vec<Disk>,
}

impl Changes {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.detach.is_empty() && self.attach.is_empty()
    }
}

/// The hotplug disks to detach from and attach to a domain whose disks are `live`, so that it
/// has the `wanted` ones (the new conversion, after [`drop_unmounted`]). Disks are matched by
/// target device, as KubeVirt does; non-hotplug disks and other buses are never touched.
pub fn changes(live: &[Disk], wanted: &[Disk]) -> Changes {
    let wanted_targets: BTreeSet<&str> = wanted.iter().map(target).collect();
    let live_targets: BTreeSet<&str> = live.iter().map(target).collect();
    let movable = |d: &&Disk| is_hotplug_disk(d) && hotplug_bus(d);
    Changes {
        detach: live
            .iter()
            .filter(movable)
            .filter(|d| !wanted_targets.contains(target(d)))
            .cloned()
            .collect(),
        attach: wanted
            .iter()
            .filter(movable)
            .filter(|d| !live_targets.contains(target(d)))
            .cloned()
            .collect(),
    }
}

/// The `<disk>` element libvirt's attach and detach take: the disk alone, written by the
/// converter's own XML writer (a domain holding only this disk, its `<disk>` cut out).
pub fn disk_xml(d: &Disk) -> Result<String, HotplugError> {
    let volume = volume_of(d).unwrap_or(target(d)).to_string();
    let mut holder = Domain::default();
    holder.devices.disks.push(d.clone());
    let xml = holder.to_xml_compact().map_err(|e| HotplugError::Marshal {
        volume: volume.clone(),
        reason: e.to_string(),
    })?;
    let start = xml.find("<disk ");
    let end = xml.rfind("</disk>").map(|e| e + "</disk>".len());
    match (start, end) {
        (Some(s), Some(e)) if s < e => Ok(xml[s..e].to_string()),
        _ => Err(HotplugError::Marshal {
            volume,
            reason: "the domain writer produced no <disk> element".into(),
        }),
    }
}

/// What the launcher found out about a hotplug disk's source before attaching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceFacts {
    /// The file or device opens with `O_DIRECT` (`None`: the check itself failed).
    pub direct_io: Option<bool>,
    /// A block device.
    pub block: bool,
    /// A file whose every byte is allocated (`IsPreAllocated`: its size no larger than what it
    /// occupies).
    pub preallocated: bool,
}

/// KubeVirt's `SetDriverCacheMode` and `SetOptimalIOMode` for a disk about to be attached: no
/// cache mode asked for becomes `none` where direct IO works and `writethrough` where it does not
/// (a failed check counts as "does not"); `none` asked for where direct IO does not work is
/// refused with KubeVirt's message. With cache `none`, a block device or a preallocated file
/// gets `io="native"` unless an IO mode was asked for.
pub fn set_cache_and_io(d: &mut Disk, facts: SourceFacts) -> Result<(), HotplugError> {
    let volume = volume_of(d).unwrap_or(target(d)).to_string();
    let path = backend_path(d).unwrap_or_default().to_string();
    let driver = d.driver.get_or_insert_with(Default::default);
    let asked = driver.cache.as_deref().unwrap_or("").to_string();
    let direct = facts.direct_io.unwrap_or(false);
    let mode = match asked.as_str() {
        "none" if !direct => {
            return Err(HotplugError::Source {
                volume,
                path: path.clone(),
                reason: format!(
                    "Unable to use 'none' cache mode, file system where {path} is stored does not support direct I/O"
                ),
            });
        }
        "" if direct => "none".to_string(),
        "" => "writethrough".to_string(),
        other => other.to_string(),
    };
    if driver.io.as_deref().unwrap_or("").is_empty()
        && mode == "none"
        && (facts.block || facts.preallocated)
    {
        driver.io = Some("native".into());
    }
    driver.cache = Some(mode.into());
    Ok(())
}

/// Reads the [`SourceFacts`] of a hotplug disk's source (which [`source_ready`] found there):
/// an `O_DIRECT` open as KubeVirt's direct-IO check does it (`EINVAL` means "not supported"),
/// the file type, and its allocated size against its length.
pub fn source_facts(path: &Path) -> SourceFacts {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let meta = std::fs::metadata(path).ok();
    let block = meta
        .as_ref()
        .is_some_and(|m| m.file_type().is_block_device());
    let preallocated = meta
        .as_ref()
        .is_some_and(|m| m.is_file() && m.len() <= m.blocks().saturating_mul(512));
    let direct_io = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
        .open(path)
    {
        Ok(_) => Some(true),
        Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => Some(false),
        Err(_) => None,
    };
    SourceFacts {
        direct_io,
        block,
        preallocated,
    }
}

/// Whether a hotplug disk's source is there to be attached (`checkIfDiskReadyToUse`): a
/// missing file or device is "not yet" (`Ok(false)`: virt-handler has not finished, the next
/// sync tries again), as is one this process cannot open (read-write for a file, read-only for
/// a device, as KubeVirt opens them); any other failure to examine it is an error.
pub fn source_ready(volume: &str, path: &Path) -> Result<bool, HotplugError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(HotplugError::Source {
                volume: volume.into(),
                path: path.display().to_string(),
                reason: e.to_string(),
            });
        }
    };
    let device = meta.file_type().is_block_device() || meta.file_type().is_char_device();
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(!device)
        .open(path);
    Ok(opened.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_converter::domain::Alias;

    fn disk(volume: &str, dev: &str, bus: &str, source: &str) -> Disk {
        let mut d = Disk {
            device: "disk".into(),
            kind: "file".into(),
            alias: Some(Alias::user(volume)),
            ..Disk::default()
        };
        d.target.dev = Some(dev.to_string().into());
        d.target.bus = Some(bus.to_string().into());
        d.source.file = Some(source.to_string().into());
        d
    }

    fn hp(volume: &str, dev: &str) -> Disk {
        disk(
            volume,
            dev,
            "scsi",
            &format!("{HOTPLUG_DISK_DIR}{volume}.img"),
        )
    }

    fn root() -> Disk {
        disk(
            "rootdisk",
            "vda",
            "virtio",
            "/var/run/kubevirt-ephemeral-disks/disk-data/rootdisk/disk.qcow2",
        )
    }

    fn vmi(statuses: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}},
            "status": {"volumeStatus": statuses}
        }))
        .unwrap()
    }

    #[test]
    fn only_mounted_or_ready_hotplug_volumes_are_attachable() {
        let v = vmi(serde_json::json!([
            {"name": "rootdisk", "target": "vda", "phase": "Ready"},
            {"name": "pending", "target": "", "phase": "Pending", "hotplugVolume": {}},
            {"name": "bound", "target": "", "phase": "AttachedToNode", "hotplugVolume": {"attachPodName": "hp-volume-x"}},
            {"name": "mounted", "target": "", "phase": "MountedToPod", "hotplugVolume": {}},
            {"name": "ready", "target": "sda", "phase": "Ready", "hotplugVolume": {}}
        ]));
        assert_eq!(
            hotplug_volumes(&v).into_iter().collect::<Vec<_>>(),
            ["bound", "mounted", "pending", "ready"]
        );
        assert_eq!(
            attachable_volumes(&v).into_iter().collect::<Vec<_>>(),
            ["mounted", "ready"]
        );
    }

    #[test]
    fn unmounted_hotplug_disks_leave_the_domain_and_the_rest_stays() {
        let mut d = Domain::default();
        d.devices.disks = vec![root(), hp("mounted", "sda"), hp("pending", "sdb")];
        drop_unmounted(&mut d, &BTreeSet::from(["mounted".to_string()]));
        let left: Vec<_> = d.devices.disks.iter().filter_map(volume_of).collect();
        assert_eq!(left, ["rootdisk", "mounted"]);
    }

    #[test]
    fn new_hotplug_disks_are_attached_and_removed_ones_detached() {
        let live = vec![root(), hp("old", "sda")];
        let wanted = vec![root(), hp("new", "sdb")];
        let c = changes(&live, &wanted);
        assert_eq!(c.detach, vec![hp("old", "sda")]);
        assert_eq!(c.attach, vec![hp("new", "sdb")]);
        // The same disks on both sides: nothing to do.
        assert!(changes(&wanted, &wanted).is_empty());
    }

    #[test]
    fn non_hotplug_disks_and_other_buses_are_never_touched() {
        // A permanent disk added or removed: left to a restart.
        let extra = disk(
            "data",
            "vdb",
            "virtio",
            "/var/run/kubevirt-private/vmi-disks/data/disk.img",
        );
        assert!(changes(&[root()], &[root(), extra.clone()]).is_empty());
        assert!(changes(&[root(), extra], &[root()]).is_empty());
        // A hotplug source on a bus hotplug does not support (sata).
        let sata = disk(
            "hpsata",
            "sdc",
            "sata",
            &format!("{HOTPLUG_DISK_DIR}hpsata.img"),
        );
        assert!(changes(&[root()], &[root(), sata.clone()]).is_empty());
        assert!(changes(&[root(), sata], &[root()]).is_empty());
        // A block hotplug volume (its device node) counts as hotplugged too.
        let mut block = hp("blk", "sdd");
        block.kind = "block".into();
        block.source.file = None;
        block.source.dev = Some(format!("{HOTPLUG_DISK_DIR}blk").into());
        assert_eq!(
            changes(&[root()], &[root(), block.clone()]).attach,
            vec![block]
        );
    }

    #[test]
    fn the_disk_xml_is_the_disk_alone_and_parses_back() {
        let d = hp("hp1", "sda");
        let xml = disk_xml(&d).unwrap();
        assert!(
            xml.starts_with("<disk ") && xml.ends_with("</disk>"),
            "{xml}"
        );
        assert!(xml.contains("<alias name=\"ua-hp1\""), "{xml}");
        assert!(
            xml.contains(&format!("file=\"{HOTPLUG_DISK_DIR}hp1.img\"")),
            "{xml}"
        );
        // Put back into a domain, libvirt's parser (the converter's) reads the same disk.
        let back = Domain::from_xml(&format!("<domain><devices>{xml}</devices></domain>")).unwrap();
        assert_eq!(back.devices.disks, vec![d]);
    }

    #[test]
    fn cache_and_io_modes_follow_direct_io_support() {
        let facts = |direct_io, block, preallocated| SourceFacts {
            direct_io,
            block,
            preallocated,
        };
        let modes = |d: &Disk| {
            let drv = d.driver.as_ref().unwrap();
            (
                drv.cache.as_deref().map(str::to_string),
                drv.io.as_deref().map(str::to_string),
            )
        };
        let some = |s: &str| Some(s.to_string());
        // Direct IO works: cache none; native IO only for a preallocated file or a device.
        let mut d = hp("a", "sda");
        set_cache_and_io(&mut d, facts(Some(true), false, false)).unwrap();
        assert_eq!(modes(&d), (some("none"), None));
        let mut d = hp("a", "sda");
        set_cache_and_io(&mut d, facts(Some(true), false, true)).unwrap();
        assert_eq!(modes(&d), (some("none"), some("native")));
        let mut d = hp("a", "sda");
        set_cache_and_io(&mut d, facts(Some(true), true, false)).unwrap();
        assert_eq!(modes(&d), (some("none"), some("native")));
        // No direct IO, or the check failed: writethrough, never native.
        for direct in [Some(false), None] {
            let mut d = hp("a", "sda");
            set_cache_and_io(&mut d, facts(direct, true, true)).unwrap();
            assert_eq!(modes(&d), (some("writethrough"), None));
        }
        // A cache mode the user asked for stays; `none` without direct IO is refused.
        let mut d = hp("a", "sda");
        d.driver = Some(kvrs_converter::domain::DiskDriver {
            cache: Some("writeback".into()),
            ..Default::default()
        });
        set_cache_and_io(&mut d, facts(Some(true), true, true)).unwrap();
        assert_eq!(modes(&d), (some("writeback"), None));
        let mut d = hp("a", "sda");
        d.driver = Some(kvrs_converter::domain::DiskDriver {
            cache: Some("none".into()),
            ..Default::default()
        });
        let err = set_cache_and_io(&mut d, facts(Some(false), false, false)).unwrap_err();
        assert!(
            err.to_string().contains("hotplug volume a")
                && err.to_string().contains("Unable to use 'none' cache mode"),
            "{err}"
        );
    }

    #[test]
    fn source_facts_see_allocation_and_file_type() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = dir.path().join("sparse.img");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        let full = dir.path().join("full.img");
        std::fs::write(&full, vec![1u8; 1 << 20]).unwrap();
        let f = source_facts(&sparse);
        assert!(!f.preallocated && !f.block);
        assert!(source_facts(&full).preallocated);
    }

    #[test]
    fn a_missing_source_is_not_ready_and_a_present_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hp1.img");
        assert!(!source_ready("hp1", &path).unwrap());
        std::fs::write(&path, b"data").unwrap();
        assert!(source_ready("hp1", &path).unwrap());
        // A directory where the image should be: it cannot be opened read-write.
        let not_a_file = dir.path().join("hp2.img");
        std::fs::create_dir(&not_a_file).unwrap();
        assert!(!source_ready("hp2", &not_a_file).unwrap());
    }
}
