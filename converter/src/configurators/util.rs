//! Small helpers shared by the configurators.

use kvrs_api::VirtualMachineInstance;
use std::collections::HashMap;

/// The position of the first item of each name: one pass, then constant-time lookups. Lists
/// matched by name (disks to volumes, interfaces to networks) go through it, so a VMI with N of
/// them converts in O(N), where a search of the list per item made it O(N^2).
pub fn first_by_name<'a, T>(
    items: &'a [T],
    name: impl Fn(&'a T) -> &'a str,
) -> HashMap<&'a str, usize> {
    let mut index = HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        index.entry(name(item)).or_insert(i);
    }
    index
}

/// `yes`/`no` from an optional flag with a default.
pub fn yes_no(v: Option<bool>, default: bool) -> String {
    if v.unwrap_or(default) { "yes" } else { "no" }.to_string()
}

/// `on`/`off` from an optional flag with a default.
pub fn on_off(v: Option<bool>, default: bool) -> String {
    if v.unwrap_or(default) { "on" } else { "off" }.to_string()
}

/// The VMI's UID (empty when unset).
pub fn uid(vmi: &VirtualMachineInstance) -> &str {
    vmi.metadata.uid.as_deref().unwrap_or("")
}

/// An annotation of the VMI.
pub fn annotation<'a>(vmi: &'a VirtualMachineInstance, key: &str) -> Option<&'a str> {
    vmi.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// `spec.domain.firmware.bootloader.efi` is set.
pub fn is_efi(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.bootloader.as_ref())
        .is_some_and(|b| b.efi.is_some())
}

/// Dedicated CPU placement requested.
pub fn is_cpu_dedicated(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.dedicated_cpu_placement)
        .unwrap_or(false)
}

/// KubeVirt's "high performance" VMI: dedicated CPUs, realtime, or hugepages.
pub fn is_high_performance(vmi: &VirtualMachineInstance) -> bool {
    let d = &vmi.spec.domain;
    if let Some(cpu) = &d.cpu
        && (cpu.dedicated_cpu_placement.unwrap_or(false) || cpu.realtime.is_some())
    {
        return true;
    }
    d.memory.as_ref().is_some_and(|m| m.hugepages.is_some())
}

/// The shared private directory of the launcher.
pub const VIRT_PRIVATE_DIR: &str = "/var/run/kubevirt-private";
