//! The device half of a `<disk>`: disk / lun / cdrom, bus, target, model, cache, IO, serial,
//! shareable, read-only, boot order, block size, error policy.

use super::naming::Namer;
use super::{DiskFacts, DiskPath};
use crate::configurators::Env;
use crate::configurators::network_pci_address;
use crate::configurators::util::intern;
use crate::context::Arch;
use crate::domain::{
    Address, Alias, BlockIo, BootOrder, Disk, DiskDriver, Empty, Reservations, SourceReservations,
    Str,
};
use crate::error::ConvertError;
use kvrs_api::api::Disk as VmiDisk;

const PR_HELPER_SOCKET: &str = "/var/run/kubevirt/daemons/pr/pr-helper.sock";
const MAX_CUSTOM_BLOCK_SIZE_S390X: i32 = 4096;

fn scsi_address(unit: usize) -> Address {
    Address {
        kind: Some("drive".into()),
        controller: Some("0".into()),
        bus: Some("0".into()),
        unit: Some(itoa::Buffer::new().format(unit).to_owned()),
        ..Address::default()
    }
}

/// A VMI value copied into the domain, unless empty.
fn nonempty_str(s: &str) -> Option<Str> {
    (!s.is_empty()).then(|| intern(s))
}

/// An optional VMI value copied into the domain, unless unset or empty.
fn nonempty(s: &Option<String>) -> Option<Str> {
    nonempty_str(s.as_deref()?)
}

/// Converts the VMI disk's device settings into `d` (a default `Disk` already in its final place,
/// so the large struct is never moved).
pub(super) fn convert_disk<'a>(
    env: &Env<'_>,
    src: &'a VmiDisk,
    namer: &mut Namer<'a>,
    queues: Option<u32>,
    facts: DiskFacts,
    path: &DiskPath,
    d: &mut Disk,
) -> Result<(), ConvertError> {
    if let Some(t) = &src.disk {
        let bus = t.bus.as_deref().unwrap_or("");
        d.device = "disk".into();
        d.target.bus = nonempty_str(bus);
        let (name, unit) = namer.name(&src.name, bus);
        d.target.dev = Some(name).filter(|n| !n.is_empty());
        if bus == "scsi" {
            d.address = Some(Box::new(scsi_address(unit)));
        }
        if let Some(pci) = t.pci_address.as_deref().filter(|s| !s.is_empty()) {
            if bus != "virtio" {
                return Err(ConvertError::new(
                    format!("{path}.disk.pciAddress"),
                    format!(
                        "setting a pci address is not allowed for non-virtio bus types, for disk {}",
                        src.name
                    ),
                ));
            }
            d.address = Some(network_pci_address(pci).map(Box::new).ok_or_else(|| {
                ConvertError::new(
                    format!("{path}.disk.pciAddress"),
                    format!(
                        "failed to configure disk {}: invalid PCI address {pci}",
                        src.name
                    ),
                )
            })?);
        }
        if bus == "virtio" {
            d.model = Some(env.virtio_model.into());
        }
        if t.readonly == Some(true) {
            d.readonly = Some(Empty {});
        }
        d.serial = nonempty(&src.serial);
        if src.shareable == Some(true) {
            let cache = src.cache.as_deref().unwrap_or("");
            if !cache.is_empty() && cache != "none" {
                return Err(ConvertError::new(
                    format!("{path}.cache"),
                    format!("a sharable disk requires cache = none got: {cache}"),
                ));
            }
            d.shareable = Some(Empty {});
        }
    } else if let Some(t) = &src.lun {
        let bus = t.bus.as_deref().unwrap_or("");
        d.device = "lun".into();
        d.target.bus = nonempty_str(bus);
        let (name, unit) = namer.name(&src.name, bus);
        d.target.dev = Some(name).filter(|n| !n.is_empty());
        if bus == "scsi" {
            d.address = Some(Box::new(scsi_address(unit)));
        }
        if t.readonly == Some(true) {
            d.readonly = Some(Empty {});
        }
        if t.reservation == Some(true) {
            d.source.reservations = Some(Box::new(Reservations {
                managed: Some("no".into()),
                migration: Some("yes".into()),
                source: Some(SourceReservations {
                    kind: "unix".into(),
                    path: Some(PR_HELPER_SOCKET.into()),
                    mode: Some("client".into()),
                }),
            }));
        }
    } else if let Some(t) = &src.cdrom {
        let bus = t.bus.as_deref().unwrap_or("");
        d.device = "cdrom".into();
        d.target.tray = nonempty(&t.tray);
        d.target.bus = nonempty_str(bus);
        let (name, _) = namer.name(&src.name, bus);
        d.target.dev = Some(name).filter(|n| !n.is_empty());
        if t.readonly.unwrap_or(true) {
            d.readonly = Some(Empty {});
        }
    }
    // KubeVirt defaults a shareable disk's cache to `none` before writing the driver.
    let shareable_default =
        (src.disk.is_some() && src.shareable == Some(true)).then_some(Str::Borrowed("none"));
    let mut driver = DiskDriver {
        name: "qemu".into(),
        cache: nonempty(&src.cache).or(shareable_default),
        io: nonempty(&src.io),
        ..DiskDriver::default()
    };
    if (src.disk.is_some() || src.lun.is_some()) && !facts.discard_ignored {
        driver.discard = Some("unmap".into());
    }
    if d.target.bus.as_deref() == Some("virtio") {
        driver.queues = queues;
        if env.sev || env.pv {
            driver.iommu = Some("on".into());
        }
    }
    d.driver = Some(driver);
    d.alias = Some(Alias::user(&src.name));
    if let Some(order) = src.boot_order {
        let order = u32::try_from(order).map_err(|_| {
            ConvertError::new(format!("{path}.bootOrder"), "must be a positive number")
        })?;
        d.boot = Some(BootOrder { order });
    }
    Ok(())
}

/// `<blockio>` from a custom block size.
pub(super) fn block_size(
    env: &Env<'_>,
    src: &VmiDisk,
    d: &mut Disk,
    path: &DiskPath,
) -> Result<(), ConvertError> {
    let Some(bs) = &src.block_size else {
        return Ok(());
    };
    if let Some(c) = &bs.custom {
        let (l, p) = (c.logical.unwrap_or(0), c.physical.unwrap_or(0));
        if env.arch == Arch::S390x
            && (l > MAX_CUSTOM_BLOCK_SIZE_S390X || p > MAX_CUSTOM_BLOCK_SIZE_S390X)
        {
            return Err(ConvertError::new(
                format!("{path}.blockSize.custom"),
                format!(
                    "custom block size (logical={l}, physical={p}) exceeds the maximum supported size of {MAX_CUSTOM_BLOCK_SIZE_S390X} for architecture s390x"
                ),
            ));
        }
        let nz = |v: i32| u64::try_from(v).ok().filter(|&v| v != 0);
        d.blockio = Some(Box::new(BlockIo {
            logical_block_size: nz(l),
            physical_block_size: nz(p),
            discard_granularity: c.discard_granularity.and_then(|g| u64::try_from(g).ok()),
        }));
    }
    // matchVolume needs the launcher to probe the device; it fills <blockio> later.
    Ok(())
}

/// The driver's error policy (`stop` by default).
pub(super) fn error_policy(
    src: &VmiDisk,
    d: &mut Disk,
    path: &DiskPath,
) -> Result<(), ConvertError> {
    let policy = match src.error_policy.as_deref() {
        None | Some("stop") => "stop",
        Some("ignore") => "ignore",
        Some("report") => "report",
        Some("enospace") => "enospace",
        Some(other) => {
            return Err(ConvertError::new(
                format!("{path}.errorPolicy"),
                format!("error policy {other} not recognized"),
            ));
        }
    };
    if let Some(driver) = d.driver.as_mut() {
        driver.error_policy = Some(policy.into());
    }
    Ok(())
}
