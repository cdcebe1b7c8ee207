//! `disk.img` on filesystem-mode PVCs and DataVolumes, as KubeVirt v1.9.0's host-disk package
//! makes it: the image a PVC-backed disk points at
//! (`/var/run/kubevirt-private/vmi-disks/<volume>/disk.img`) is a sparse raw file created the
//! first time the PVC is used, and never touched again (a restarted VM finds its data).
//!
//! KubeVirt splits this over two places: virt-handler turns each filesystem PVC into a
//! `hostDisk` of type `DiskOrCreate` whose capacity comes from the VMI's
//! `status.volumeStatus[].persistentVolumeClaimInfo` (filled by virt-controller), then creates
//! the file through the launcher's root mount and hands it to UID 107. kvrs's converter points at
//! the same path directly, so the launcher does both halves before the domain is defined.
//!
//! [`wanted_size`] and [`fit`] are the pure decisions (tested against KubeVirt's numbers); [`ensure`]
//! is the small shell that statfs-es the directory, creates the file without truncating one that
//! exists, and sets its owner.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::{PersistentVolumeClaimInfo, Volume};

use crate::log;

/// KubeVirt's default `developerConfiguration.lessPVCSpaceToleration`: a PV up to 10 % smaller
/// than requested is used anyway (thin provisioners round sizes down).
pub const DEFAULT_TOLERATION_PERCENT: i64 = 10;
/// KubeVirt's default `developerConfiguration.minimumReservePVCBytes`: left free on the volume
/// when the image has to shrink to fit.
pub const DEFAULT_RESERVE_BYTES: u64 = 131_072;
/// The qemu user KubeVirt's images run QEMU as.
const QEMU_UID: u32 = 107;
const MIB: i64 = 1024 * 1024;

/// Why a disk image was not made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostDiskError {
    /// The PVC info has neither `capacity` nor `requests` of storage (KubeVirt's text).
    #[error(
        "unable to determine capacity of HostDisk from PVC that provides no storage capacity or requests"
    )]
    NoCapacity { volume: String },
    /// The size rounds down to zero MiB (KubeVirt's text).
    #[error("the size for volume {volume} is too low, must be at least 1MiB")]
    TooLow { volume: String },
    /// A capacity or request that is not a quantity.
    #[error("volume {volume}: persistentVolumeClaimInfo.{field}: {reason}")]
    BadQuantity {
        volume: String,
        field: &'static str,
        reason: String,
    },
    /// The volume is smaller than the disk even with the toleration: KubeVirt's text, with
    /// virt-handler's prefix; the path names the volume.
    #[error(
        "preparing host-disks failed: unable to create {path}, not enough space, demanded size {demanded} B is bigger than available space {available} B, also after taking {toleration} % toleration into account"
    )]
    NotEnoughSpace {
        volume: String,
        path: String,
        demanded: i64,
        available: i64,
        toleration: i64,
    },
    /// The file system call failed.
    #[error("preparing host-disks failed: volume {volume}: {what} {path}: {reason}")]
    Io {
        volume: String,
        what: &'static str,
        path: String,
        reason: String,
    },
}

impl HostDiskError {
    /// A stable label for logs and tests.
    pub fn label(&self) -> &'static str {
        match self {
            HostDiskError::NoCapacity { .. } => "no-capacity",
            HostDiskError::TooLow { .. } => "too-low",
            HostDiskError::BadQuantity { .. } => "bad-quantity",
            HostDiskError::NotEnoughSpace { .. } => "not-enough-space",
            HostDiskError::Io { .. } => "io",
        }
    }
}

/// The size KubeVirt gives the image of a PVC: the request when there is no capacity or the
/// capacity is larger (the PV may be bigger than asked for; the guest gets what was asked),
/// else the capacity; rounded down to a whole MiB.
pub fn wanted_size(volume: &str, info: &PersistentVolumeClaimInfo) -> Result<i64, HostDiskError> {
    let storage = |field: &'static str, list: &Option<std::collections::BTreeMap<_, _>>| {
        list.as_ref()
            .and_then(|l: &std::collections::BTreeMap<String, kvrs_api::Quantity>| l.get("storage"))
            .map(|q| {
                q.value().map_err(|e| HostDiskError::BadQuantity {
                    volume: volume.into(),
                    field,
                    reason: e.to_string(),
                })
            })
            .transpose()
    };
    let capacity = storage("capacity", &info.capacity)?;
    let requested = storage("requests", &info.requests)?;
    let size = match (capacity, requested) {
        (None, None) => {
            return Err(HostDiskError::NoCapacity {
                volume: volume.into(),
            });
        }
        (Some(c), Some(r)) if c > r => r,
        (None, Some(r)) => r,
        (Some(c), _) => c,
    };
    let aligned = size - size % MIB;
    if aligned <= 0 {
        return Err(HostDiskError::TooLow {
            volume: volume.into(),
        });
    }
    Ok(aligned)
}

/// What to create given `available` bytes on the volume (free space less the reserve): the
/// wanted size when it fits; all that is available when that is within `toleration` percent of
/// it (KubeVirt then records a `ToleratedSmallPV` event); else the error.
pub fn fit(
    volume: &str,
    path: &Path,
    wanted: i64,
    available: i64,
    toleration: i64,
) -> Result<Fit, HostDiskError> {
    if wanted <= available {
        return Ok(Fit::Full(wanted));
    }
    let tolerated = wanted * (100 - toleration) / 100;
    if tolerated > available {
        return Err(HostDiskError::NotEnoughSpace {
            volume: volume.into(),
            path: path.display().to_string(),
            demanded: wanted,
            available,
            toleration,
        });
    }
    Ok(Fit::Tolerated {
        size: available,
        message: format!(
            "PV size too small: expected {wanted} B, found {available} B. Using it anyway, it is within {toleration} % toleration"
        ),
    })
}

/// The outcome of [`fit`].
#[derive(Debug, PartialEq, Eq)]
pub enum Fit {
    /// The whole wanted size.
    Full(i64),
    /// Less, within the toleration; the message is KubeVirt's event text.
    Tolerated { size: i64, message: String },
}

impl Fit {
    fn size(&self) -> i64 {
        match self {
            Fit::Full(s) | Fit::Tolerated { size: s, .. } => *s,
        }
    }
}

/// The PVC info of a volume whose disk is a `disk.img` on a filesystem PVC (or DataVolume):
/// KubeVirt leaves block volumes, hotplugged ones, filesystem passthrough and volumes without
/// PVC info alone.
pub fn pvc_info<'a>(
    vmi: &'a VirtualMachineInstance,
    volume: &Volume,
) -> Option<&'a PersistentVolumeClaimInfo> {
    let backed = volume.persistent_volume_claim.is_some()
        || volume
            .data_volume
            .as_ref()
            .is_some_and(|d| !d.name.is_empty());
    if !backed {
        return None;
    }
    let passthrough = vmi
        .spec
        .domain
        .devices
        .filesystems
        .iter()
        .flatten()
        .any(|f| f.name == volume.name);
    let status = vmi
        .status
        .as_ref()
        .and_then(|s| s.volume_status.as_ref())
        .and_then(|l| l.iter().find(|s| s.name == volume.name))?;
    if passthrough || status.hotplug_volume.is_some() {
        return None;
    }
    let info = status.persistent_volume_claim_info.as_ref()?;
    (info.volume_mode.as_deref() != Some("Block")).then_some(info)
}

/// Free bytes of the file system holding `dir`, less `reserve`.
fn available(dir: &Path, reserve: u64) -> std::io::Result<i64> {
    let s = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let free = s.blocks_available().saturating_mul(s.fragment_size());
    Ok(i64::try_from(free.saturating_sub(reserve)).unwrap_or(i64::MAX))
}

/// Creates `path` (a `disk.img` in the PVC's mounted directory) at the size KubeVirt computes,
/// unless it exists; owned by the qemu user. Returns whether it was created.
pub fn ensure(
    vmi: &VirtualMachineInstance,
    volume: &str,
    info: &PersistentVolumeClaimInfo,
    path: &Path,
) -> Result<bool, HostDiskError> {
    let io = |what: &'static str, e: std::io::Error| HostDiskError::Io {
        volume: volume.into(),
        what,
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    // Never recreated: an existing image (or anything at its name) holds the VM's data.
    if std::fs::symlink_metadata(path).is_ok() {
        return Ok(false);
    }
    let wanted = wanted_size(volume, info)?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let free = available(dir, DEFAULT_RESERVE_BYTES).map_err(|e| io("statfs", e))?;
    let fit = fit(volume, path, wanted, free, DEFAULT_TOLERATION_PERCENT)?;
    if let Fit::Tolerated { message, .. } = &fit {
        log::info(format_args!(
            "{}/{}: ToleratedSmallPV: {message}",
            vmi.metadata.namespace.as_deref().unwrap_or_default(),
            vmi.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    // O_EXCL and O_NOFOLLOW: a file appearing meanwhile is not truncated, a link not followed.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o660)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io("create", e))?;
    let size = u64::try_from(fit.size()).unwrap_or(0);
    // Sparse: one zero byte at the last offset, as KubeVirt writes it.
    let last = size.saturating_sub(1);
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(last)).map_err(|e| io("seek", e))?;
    f.write_all(&[0]).map_err(|e| io("write", e))?;
    drop(f);
    let meta = std::fs::metadata(path).map_err(|e| io("stat", e))?;
    if meta.uid() != QEMU_UID || meta.gid() != QEMU_UID {
        std::os::unix::fs::chown(path, Some(QEMU_UID), Some(QEMU_UID))
            .map_err(|e| io("chown", e))?;
    }
    log::info(format_args!(
        "{}/{}: created {} ({size} B) for volume {volume}",
        vmi.metadata.namespace.as_deref().unwrap_or_default(),
        vmi.metadata.name.as_deref().unwrap_or_default(),
        path.display()
    ));
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(capacity: Option<&str>, requests: Option<&str>) -> PersistentVolumeClaimInfo {
        let list = |q: Option<&str>| {
            q.map(|q| [("storage".to_string(), kvrs_api::Quantity::new(q))].into())
        };
        PersistentVolumeClaimInfo {
            capacity: list(capacity),
            requests: list(requests),
            ..Default::default()
        }
    }

    /// KubeVirt's ReplacePVCByHostDisk table: equal sizes, a smaller request, only a request,
    /// only a capacity.
    #[test]
    fn the_size_is_the_request_unless_the_capacity_is_smaller() {
        let gi = 1024 * MIB;
        assert_eq!(
            wanted_size("v", &info(Some("2Gi"), Some("2Gi"))),
            Ok(2 * gi)
        );
        assert_eq!(wanted_size("v", &info(Some("2Gi"), Some("1Gi"))), Ok(gi));
        assert_eq!(wanted_size("v", &info(None, Some("1Gi"))), Ok(gi));
        assert_eq!(wanted_size("v", &info(Some("2Gi"), None)), Ok(2 * gi));
        // A PV smaller than its claim (a provisioner's rounding): the capacity.
        assert_eq!(wanted_size("v", &info(Some("1Gi"), Some("2Gi"))), Ok(gi));
        // Aligned down to a MiB.
        assert_eq!(
            wanted_size("v", &info(Some("1G"), None)),
            Ok(1_000_000_000 - 1_000_000_000 % MIB)
        );
    }

    #[test]
    fn no_size_and_sub_mib_sizes_are_refused_with_kubevirts_text() {
        let e = wanted_size("data", &info(None, None)).unwrap_err();
        assert_eq!(e.label(), "no-capacity");
        assert!(e.to_string().starts_with("unable to determine capacity"));
        let e = wanted_size("data", &info(Some("1000Ki"), None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the size for volume data is too low, must be at least 1MiB"
        );
    }

    /// KubeVirt's DiskImgCreator cases: enough space; 64Mi on a volume of 64Mi less a 1 MiB
    /// reserve (within 10 %); the same refused with a 1 % toleration; the 5 % boundary.
    #[test]
    fn the_toleration_decides_between_shrinking_and_refusing() {
        let p = Path::new("/v/disk.img");
        let mi64 = 64 * MIB;
        assert_eq!(fit("v", p, mi64, 10 * mi64, 10), Ok(Fit::Full(mi64)));
        let free = mi64 - MIB;
        assert!(matches!(
            fit("v", p, mi64, free, 10),
            Ok(Fit::Tolerated { size, .. }) if size == free
        ));
        let e = fit("v", p, mi64, free, 1).unwrap_err();
        assert_eq!(e.label(), "not-enough-space");
        assert!(e.to_string().contains("unable to create /v/disk.img"));
        // Exactly 5 % short is tolerated, 6 % is not.
        let at = |pct: i64| mi64 * (100 - pct) / 100;
        assert!(fit("v", p, mi64, at(5), 5).is_ok());
        assert!(fit("v", p, mi64, at(6), 5).is_err());
        assert!(matches!(
            fit("v", p, mi64, at(4), 5),
            Ok(Fit::Tolerated { .. })
        ));
    }

    fn vmi(mode: Option<&str>) -> VirtualMachineInstance {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}, "volumes": [
                {"name": "root", "persistentVolumeClaim": {"claimName": "c"}}]},
            "status": {"volumeStatus": [{"name": "root", "target": "",
                "persistentVolumeClaimInfo": {"volumeMode": mode,
                    "capacity": {"storage": "8Mi"}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn only_filesystem_pvcs_with_info_get_an_image() {
        let v = vmi(Some("Filesystem"));
        let vol = &v.spec.volumes.as_ref().unwrap()[0];
        assert!(pvc_info(&v, vol).is_some());
        let v = vmi(Some("Block"));
        assert!(pvc_info(&v, &v.spec.volumes.as_ref().unwrap()[0]).is_none());
    }

    /// The shell: a sparse file of the size, owned by 107 when the test may chown; an existing
    /// file is left as it is (same inode, same contents).
    #[test]
    fn the_image_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let v = vmi(None);
        let i = info(Some("8Mi"), None);
        match ensure(&v, "root", &i, &path) {
            Ok(created) => assert!(created),
            // Not root: the file exists at its size, but cannot be given to 107.
            Err(HostDiskError::Io { what: "chown", .. }) => {
                assert!(!nix::unistd::geteuid().is_root());
            }
            Err(e) => panic!("{e}"),
        }
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.len(), 8 * 1024 * 1024);
        assert!(m.blocks() * 512 < m.len(), "sparse");
        if nix::unistd::geteuid().is_root() {
            assert_eq!((m.uid(), m.gid()), (QEMU_UID, QEMU_UID));
        }
        std::fs::write(&path, b"marker").unwrap();
        let ino = m.ino();
        assert_eq!(
            ensure(&v, "root", &info(Some("16Mi"), None), &path),
            Ok(false)
        );
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.ino(), ino);
        assert_eq!(std::fs::read(&path).unwrap(), b"marker");
    }
}
