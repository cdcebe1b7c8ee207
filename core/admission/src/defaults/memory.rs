//! Guest memory, memory hotplug limit, and the quantity spelling KubeVirt writes back.

use crate::api::{Memory, VirtualMachineInstance, VirtualMachineInstanceSpec};
use crate::config::ClusterConfig;
use crate::quantity::{Quantity, QuantityFormat};

/// Hot-plugged memory comes in blocks of 2 MiB (a transparent huge page on x86_64).
const HOTPLUG_BLOCK: i64 = 2 * 1024 * 1024;
/// With 1 GiB huge pages the blocks are 1 GiB.
const HOTPLUG_BLOCK_1G_HUGEPAGES: i64 = 1024 * 1024 * 1024;
/// Below 1 GiB a guest has too little room for its kernel structures and the PCI hole to take
/// hot-plugged memory, so no hotplug is offered.
const MIN_HOTPLUG_GUEST: i64 = 1024 * 1024 * 1024;

/// `spec.domain.memory.guest` from the memory request, else the limit, else one huge page.
/// `spec.domain.memory` itself always exists afterwards, as in KubeVirt.
pub(super) fn set_guest_memory(spec: &mut VirtualMachineInstanceSpec) {
    if spec
        .domain
        .memory
        .as_ref()
        .is_some_and(|m| m.guest.is_some())
    {
        return;
    }
    let resources = spec.domain.resources.as_ref();
    let nonzero = |m: Option<&std::collections::BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.get("memory"))
            .filter(|q| !super::cpu::is_zero(Some(q)))
            .cloned()
    };
    let from_request = nonzero(resources.and_then(|r| r.requests.as_ref()));
    let from_limit = nonzero(resources.and_then(|r| r.limits.as_ref()));
    let memory = spec.domain.memory.get_or_insert_with(Memory::default);
    memory.guest = from_request.or(from_limit).or_else(|| {
        let page = memory.hugepages.as_ref()?.page_size.as_deref()?;
        page.parse::<Quantity>().ok()
    });
}

/// Memory hotplug room under LiveUpdate: `maxHotplugRatio` times the guest memory, written as a
/// binary quantity — but only when the guest could actually take hot-plugged memory.
pub(super) fn set_max_guest(spec: &mut VirtualMachineInstanceSpec, config: &ClusterConfig) {
    if spec
        .domain
        .memory
        .as_ref()
        .is_some_and(|m| m.max_guest.is_some())
    {
        return;
    }
    let Some(guest) = spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.as_ref())
        .and_then(|g| g.value().ok())
    else {
        return;
    };
    let Some(max) = guest.checked_mul(i64::from(config.max_hotplug_ratio)) else {
        return;
    };
    if hotplug_blocker(spec, guest, max).is_some() {
        return;
    }
    if let Some(memory) = spec.domain.memory.as_mut() {
        memory.max_guest = Some(Quantity::from_value(max, QuantityFormat::BinarySI));
    }
}

/// Why memory hotplug cannot work for this guest (`None`: it can), as KubeVirt decides it.
pub(crate) fn hotplug_blocker(
    spec: &VirtualMachineInstanceSpec,
    guest: i64,
    max_guest: i64,
) -> Option<&'static str> {
    let domain = &spec.domain;
    if let Some(cpu) = &domain.cpu {
        if cpu.realtime.is_some() {
            return Some("memory hotplug is not compatible with realtime VMs");
        }
        if cpu
            .numa
            .as_ref()
            .is_some_and(|n| n.guest_mapping_passthrough.is_some())
        {
            return Some("memory hotplug is not compatible with guest mapping passthrough");
        }
    }
    if domain.launch_security.is_some() {
        return Some("memory hotplug is not compatible with encrypted VMs");
    }
    let one_gig_pages = domain
        .memory
        .as_ref()
        .and_then(|m| m.hugepages.as_ref())
        .is_some_and(|h| h.page_size.as_deref() == Some("1Gi"));
    let block = if one_gig_pages {
        HOTPLUG_BLOCK_1G_HUGEPAGES
    } else {
        HOTPLUG_BLOCK
    };
    if guest > max_guest {
        return Some("guest memory is greater than maxGuest");
    }
    if guest % block != 0 {
        return Some("guest memory is not aligned to the hotplug block size");
    }
    if max_guest % block != 0 {
        return Some("maxGuest is not aligned to the hotplug block size");
    }
    if spec.architecture.as_deref() != Some("amd64") {
        return Some("memory hotplug is only available for x86_64 VMs");
    }
    if guest < MIN_HOTPLUG_GUEST {
        return Some("memory hotplug needs at least 1Gi of guest memory");
    }
    None
}

/// KubeVirt decodes every quantity and encodes it again, so what it writes back is the
/// canonical spelling (`1000M` comes back as `1G`). kvrs does the same for the quantities a VMI
/// carries, so its output compares equal to KubeVirt's.
pub(super) fn canonicalize_quantities(vmi: &mut VirtualMachineInstance) {
    let canon = |q: &mut Quantity| {
        if let Ok(c) = q.canonical() {
            *q = c;
        }
    };
    let domain = &mut vmi.spec.domain;
    if let Some(resources) = domain.resources.as_mut() {
        for map in [resources.requests.as_mut(), resources.limits.as_mut()]
            .into_iter()
            .flatten()
        {
            map.values_mut().for_each(canon);
        }
    }
    if let Some(memory) = domain.memory.as_mut() {
        memory.guest.iter_mut().for_each(canon);
        memory.max_guest.iter_mut().for_each(canon);
    }
    for volume in vmi.spec.volumes.iter_mut().flatten() {
        if let Some(empty) = volume.empty_disk.as_mut() {
            canon(&mut empty.capacity);
        }
        if let Some(host) = volume.host_disk.as_mut() {
            host.capacity.iter_mut().for_each(canon);
        }
    }
    if let Some(status) = vmi.status.as_mut().and_then(|s| s.memory.as_mut()) {
        for q in [
            &mut status.guest_at_boot,
            &mut status.guest_current,
            &mut status.guest_requested,
            &mut status.memory_overhead,
        ] {
            q.iter_mut().for_each(canon);
        }
    }
}
