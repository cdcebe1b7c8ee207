//! Small helpers shared by the configurators.

use crate::domain::Str;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::names::path_component;
use std::collections::{HashMap, HashSet};

/// A map keyed by names from the VMI (disks, volumes): hashed by foldhash, seeded at random per
/// process like std's default, but several times cheaper than SipHash on short keys — hashing
/// was a tenth of a 200-disk conversion.
pub(crate) type NameMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A set of names from the VMI, hashed as [`NameMap`].
pub(crate) type NameSet<K> = HashSet<K, foldhash::fast::RandomState>;

/// The position of the first item of each name: one pass, then constant-time lookups. Lists
/// matched by name (disks to volumes, interfaces to networks) go through it, so a VMI with N of
/// them converts in O(N), where a search of the list per item made it O(N^2). Lists of up to
/// [`SCAN_MAX`] items (nearly every VMI) are searched in place instead: that is faster than
/// hashing and allocates nothing.
pub(crate) fn first_by_name<'a, T, F: Fn(&'a T) -> &'a str>(
    items: &'a [T],
    name: F,
) -> NameIndex<'a, T, F> {
    let map = (items.len() > SCAN_MAX).then(|| {
        let mut index = NameMap::with_capacity_and_hasher(items.len(), Default::default());
        for (i, item) in items.iter().enumerate() {
            index.entry(name(item)).or_insert(i);
        }
        index
    });
    NameIndex { items, name, map }
}

/// Longest list [`first_by_name`] searches in place.
pub(crate) const SCAN_MAX: usize = 16;

/// [`first_by_name`]'s answer: the first position of a name.
pub(crate) struct NameIndex<'a, T, F> {
    items: &'a [T],
    name: F,
    /// Built only for lists longer than [`SCAN_MAX`].
    map: Option<NameMap<&'a str, usize>>,
}

impl<'a, T, F: Fn(&'a T) -> &'a str> NameIndex<'a, T, F> {
    /// Position of the first item called `key`.
    pub(crate) fn get(&self, key: &str) -> Option<usize> {
        match &self.map {
            Some(map) => map.get(key).copied(),
            None => self.items.iter().position(|item| (self.name)(item) == key),
        }
    }
}

/// Joins string pieces into one exactly-sized `String`: one allocation, where `format!` grows
/// its buffer (and reallocates) as the pieces arrive.
///
/// Takes the pieces by value as an array and is always inlined, so each call site's constant
/// pieces (`/vmi-disks/`, `/virt-vnc`) are copied with fixed-size moves instead of a `memcpy`
/// call each, and the loop is unrolled.
#[inline(always)]
pub(crate) fn cat<const N: usize>(parts: [&str; N]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// A string copied from the VMI or the context into the domain: borrowed when it is one of the
/// values nearly every VMI carries (`q35`, `virtio`, `qcow2`, KubeVirt's SMBIOS defaults, ...),
/// so the copy allocates nothing; any other value is owned. Same text either way.
///
/// Inlined around [`known`], which answers in registers: a `Str` returned from a call comes
/// back through memory, written as words and read back as wider moves, which the CPU cannot
/// forward from its store buffer (a stall of a dozen cycles per value; SMBIOS entries alone
/// were 4% of a conversion's time).
#[inline]
pub(crate) fn intern(s: &str) -> Str {
    match known(s) {
        Some(k) => Str::Borrowed(k),
        None => Str::Owned(s.to_owned()),
    }
}

/// The constant equal to `s`, if it is one [`intern`] borrows.
#[inline(never)]
fn known(s: &str) -> Option<&'static str> {
    macro_rules! known {
        ($($k:literal)*) => {
            match s {
                $($k => Some($k),)*
                _ => None,
            }
        };
    }
    known!(
        "" "q35" "virtio" "sata" "scsi" "usb" "qcow2" "raw" "KubeVirt" "None" "vga" "bochs"
        "none" "writethrough" "writeback" "native" "threads" "tablet" "ps2" "disable" "require"
        "force" "optional" "forbid" "mpx" "delay" "catchup" "merge" "discard" "guest" "wall"
        "e1000" "e1000e" "rtl8139"
    )
}

/// `yes`/`no` from an optional flag with a default.
pub(crate) fn yes_no(v: Option<bool>, default: bool) -> Str {
    Str::Borrowed(if v.unwrap_or(default) { "yes" } else { "no" })
}

/// `on`/`off` from an optional flag with a default.
pub(crate) fn on_off(v: Option<bool>, default: bool) -> Str {
    Str::Borrowed(if v.unwrap_or(default) { "on" } else { "off" })
}

/// An optional metadata field that goes into a host path. Unset (or empty) stays empty, the path
/// KubeVirt writes for it (`kubevirt-private//virt-vnc`: the join stays in its directory, and
/// `kvrs convert` of a manifest without a UID keeps working); any other value must be one plain
/// path component ([`kvrs_api::names::path_component`]).
fn metadata_component<'a>(
    field: &'static str,
    value: Option<&'a str>,
) -> Result<&'a str, ConvertError> {
    match value {
        None | Some("") => Ok(""),
        Some(v) => Ok(path_component(field, v)?),
    }
}

/// `metadata.uid` where it becomes a directory name (sockets under `kubevirt-private/<uid>/`).
pub(crate) fn uid_component(vmi: &VirtualMachineInstance) -> Result<&str, ConvertError> {
    metadata_component("metadata.uid", vmi.metadata.uid.as_deref())
}

/// `metadata.name` where it becomes a directory or file name (cloud-init ISO, NVRAM, ignition).
pub(crate) fn name_component(vmi: &VirtualMachineInstance) -> Result<&str, ConvertError> {
    metadata_component("metadata.name", vmi.metadata.name.as_deref())
}

/// `metadata.namespace` where it becomes a directory name (cloud-init ISO, ignition).
pub(crate) fn namespace_component(vmi: &VirtualMachineInstance) -> Result<&str, ConvertError> {
    metadata_component("metadata.namespace", vmi.metadata.namespace.as_deref())
}

/// The last component of a path from the VMI (a kernel, initrd or host disk file) that becomes
/// a file name under one of the launcher's directories: empty stays empty (as before), `.` and
/// `..` are refused.
pub(crate) fn file_name_component(
    field: impl std::fmt::Display,
    base: &str,
) -> Result<&str, ConvertError> {
    if base.is_empty() {
        return Ok(base);
    }
    Ok(path_component(field, base)?)
}

/// An annotation of the VMI.
pub(crate) fn annotation<'a>(vmi: &'a VirtualMachineInstance, key: &str) -> Option<&'a str> {
    vmi.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// `spec.domain.firmware.bootloader.efi` is set.
pub(crate) fn is_efi(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.bootloader.as_ref())
        .is_some_and(|b| b.efi.is_some())
}

/// Dedicated CPU placement requested.
pub(crate) fn is_cpu_dedicated(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.dedicated_cpu_placement)
        .unwrap_or(false)
}

/// KubeVirt's "high performance" VMI: dedicated CPUs, realtime, or hugepages.
pub(crate) fn is_high_performance(vmi: &VirtualMachineInstance) -> bool {
    let d = &vmi.spec.domain;
    if let Some(cpu) = &d.cpu
        && (cpu.dedicated_cpu_placement.unwrap_or(false) || cpu.realtime.is_some())
    {
        return true;
    }
    d.memory.as_ref().is_some_and(|m| m.hugepages.is_some())
}

/// The shared private directory of the launcher.
pub(crate) const VIRT_PRIVATE_DIR: &str = "/var/run/kubevirt-private";
