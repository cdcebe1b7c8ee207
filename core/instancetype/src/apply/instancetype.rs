//! The instancetype half of the application (KubeVirt's `pkg/instancetype/apply`): each part
//! checks the VM fields it owns, reports them as conflicts, and otherwise writes its values.
//!
//! Go compares value fields with their zero value: a VM's `sockets: 0` or `schedulerName: ""`
//! counts as unset, as there. A Go value field set from a zero instancetype value leaves kvrs's
//! field as it was (`false`, `0` and absent are the same VMI to KubeVirt).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::VirtualMachineInstanceSpec;
use kvrs_api::quantity::{Quantity, QuantityFormat};

use crate::conflict::Conflict;
use crate::topology::{Across, Topology, preferred_topology, spread_options};
use crate::types::{InstancetypeSpec, PreferenceSpec};

fn is_set(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

fn is_nonzero(n: Option<i64>) -> bool {
    n.is_some_and(|n| n != 0)
}

pub(crate) fn node_selector(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let Some(selector) = &it.node_selector else {
        return vec![];
    };
    if spec.node_selector.is_some() {
        return vec![Conflict::child(base, &["nodeSelector"])];
    }
    spec.node_selector = Some(selector.clone());
    vec![]
}

pub(crate) fn scheduler_name(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    if !is_set(&it.scheduler_name) {
        return vec![];
    }
    if is_set(&spec.scheduler_name) {
        return vec![Conflict::child(base, &["schedulerName"])];
    }
    spec.scheduler_name = it.scheduler_name.clone();
    vec![]
}

pub(crate) fn cpu(
    base: &str,
    it: &InstancetypeSpec,
    preference: Option<&PreferenceSpec>,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let conflicts = cpu_conflicts(base, it, spec);
    let domain = &mut spec.domain;
    let cpu = domain.cpu.get_or_insert_with(Default::default);
    if !conflicts.is_empty() {
        return conflicts;
    }
    let want = &it.cpu;
    if let Some(model) = want.model.as_ref().filter(|m| !m.is_empty()) {
        cpu.model = Some(model.clone());
    }
    if want.dedicated_cpu_placement == Some(true) {
        cpu.dedicated_cpu_placement = Some(true);
    }
    if want.isolate_emulator_thread == Some(true) {
        cpu.isolate_emulator_thread = Some(true);
    }
    if let Some(numa) = &want.numa {
        cpu.numa = Some(numa.clone());
    }
    if let Some(realtime) = &want.realtime {
        cpu.realtime = Some(realtime.clone());
    }
    if let Some(max) = want.max_sockets {
        // Go's value field is overwritten, with 0 too (which reads as unset).
        cpu.max_sockets = (max != 0).then_some(i64::from(max));
    }
    let (sockets, cores, threads) = guest_topology(want.guest, preference);
    cpu.sockets = Some(i64::from(sockets));
    cpu.cores = Some(i64::from(cores));
    cpu.threads = Some(i64::from(threads));
    vec![]
}

/// `(sockets, cores, threads)` for `vcpus` under the preference's topology. A spread ratio of 0
/// divides by zero in KubeVirt (a panic); here the divided count is 0 (the spread check refuses
/// such a preference first).
pub fn guest_topology(vcpus: u32, preference: Option<&PreferenceSpec>) -> (u32, u32, u32) {
    let (mut sockets, mut cores, mut threads) = (1, 1, 1);
    if vcpus == 1 {
        return (1, 1, 1);
    }
    let div = |a: u32, b: u32| a.checked_div(b).unwrap_or(0);
    match preferred_topology(preference) {
        Topology::Cores => cores = vcpus,
        Topology::Sockets | Topology::Any => sockets = vcpus,
        Topology::Threads => threads = vcpus,
        Topology::Spread => {
            let (ratio, across) = preference
                .map(spread_options)
                .unwrap_or((2, Across::SocketsCores));
            match across {
                Across::SocketsCores => {
                    cores = ratio;
                    sockets = div(vcpus, ratio);
                }
                Across::CoresThreads => {
                    threads = ratio;
                    cores = div(vcpus, ratio);
                }
                Across::SocketsCoresThreads => {
                    threads = 2;
                    cores = ratio;
                    sockets = div(vcpus / 2, ratio);
                }
                Across::Unknown(_) => {}
            }
        }
        Topology::Unknown => {}
    }
    (sockets, cores, threads)
}

fn has_resource(map: Option<&BTreeMap<String, Quantity>>, name: &str) -> bool {
    map.is_some_and(|m| m.contains_key(name))
}

fn cpu_conflicts(
    base: &str,
    it: &InstancetypeSpec,
    spec: &VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let mut out = Vec::new();
    let domain = &spec.domain;
    let resources = domain.resources.as_ref();
    if has_resource(resources.and_then(|r| r.requests.as_ref()), "cpu") {
        out.push(Conflict::child(
            base,
            &["domain", "resources", "requests", "cpu"],
        ));
    }
    if has_resource(resources.and_then(|r| r.limits.as_ref()), "cpu") {
        out.push(Conflict::child(
            base,
            &["domain", "resources", "limits", "cpu"],
        ));
    }
    let Some(cpu) = &domain.cpu else {
        return out;
    };
    let want = &it.cpu;
    let checks = [
        ("sockets", is_nonzero(cpu.sockets)),
        ("cores", is_nonzero(cpu.cores)),
        ("threads", is_nonzero(cpu.threads)),
        ("model", is_set(&cpu.model) && want.model.is_some()),
        (
            "dedicatedCPUPlacement",
            cpu.dedicated_cpu_placement == Some(true) && want.dedicated_cpu_placement.is_some(),
        ),
        (
            "isolateEmulatorThread",
            cpu.isolate_emulator_thread == Some(true) && want.isolate_emulator_thread.is_some(),
        ),
        ("numa", cpu.numa.is_some() && want.numa.is_some()),
        (
            "realtime",
            cpu.realtime.is_some() && want.realtime.is_some(),
        ),
    ];
    for (field, conflicting) in checks {
        if conflicting {
            out.push(Conflict::child(base, &["domain", "cpu", field]));
        }
    }
    out
}

pub(crate) fn memory(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let domain = &mut spec.domain;
    let memory = domain.memory.get_or_insert_with(Default::default);
    let want = &it.memory;
    // KubeVirt reports only the first memory conflict.
    let resources = domain.resources.as_ref();
    let first = if memory.guest.is_some() {
        Some(&["domain", "memory", "guest"][..])
    } else if memory.hugepages.is_some() && want.hugepages.is_some() {
        Some(&["domain", "memory", "hugepages"][..])
    } else if memory.max_guest.is_some() && want.max_guest.is_some() {
        Some(&["domain", "memory", "maxGuest"][..])
    } else if has_resource(resources.and_then(|r| r.requests.as_ref()), "memory") {
        Some(&["domain", "resources", "requests", "memory"][..])
    } else if has_resource(resources.and_then(|r| r.limits.as_ref()), "memory") {
        Some(&["domain", "resources", "limits", "memory"][..])
    } else {
        None
    };
    if let Some(path) = first {
        return vec![Conflict::child(base, path)];
    }
    let guest = want.guest.clone().unwrap_or_else(|| Quantity::new("0"));
    if want.overcommit_percent > 0 {
        let requested = overcommitted_request(&guest, want.overcommit_percent);
        let requests = domain
            .resources
            .get_or_insert_with(Default::default)
            .requests
            .get_or_insert_with(Default::default);
        requests.insert("memory".to_string(), requested);
    }
    memory.guest = Some(guest);
    if let Some(h) = &want.hugepages {
        memory.hugepages = Some(h.clone());
    }
    if let Some(m) = &want.max_guest {
        memory.max_guest = Some(m.clone());
    }
    vec![]
}

/// The pod's memory request under `percent` overcommit, computed as KubeVirt computes it: in
/// 32-bit floating point, truncated to whole bytes, printed in the guest quantity's format.
pub fn overcommitted_request(guest: &Quantity, percent: i64) -> Quantity {
    let value = guest.value().unwrap_or(0);
    let format = guest.format().unwrap_or(QuantityFormat::DecimalSI);
    // Go: int64(float32(value) * (1 - float32(percent)/100)); the casts are KubeVirt's own
    // precision, reproduced on purpose.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        reason = "KubeVirt's float32 arithmetic, reproduced exactly"
    )]
    let requested = (value as f32 * (1.0 - percent as f32 / 100.0)) as i64;
    Quantity::from_value(requested, format)
}

pub(crate) fn io_threads(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let Some(count) = it
        .io_threads
        .as_ref()
        .and_then(|t| t.supplemental_pool_thread_count)
    else {
        return vec![];
    };
    let threads = spec.domain.io_threads.get_or_insert_with(Default::default);
    if threads.supplemental_pool_thread_count.is_some() {
        return vec![Conflict::child(
            base,
            &["domain", "ioThreads", "supplementalPoolThreadCount"],
        )];
    }
    threads.supplemental_pool_thread_count = Some(count);
    vec![]
}

pub(crate) fn io_threads_policy(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let Some(policy) = &it.io_threads_policy else {
        return vec![];
    };
    if spec.domain.io_threads_policy.is_some() {
        return vec![Conflict::child(base, &["domain", "ioThreadsPolicy"])];
    }
    spec.domain.io_threads_policy = Some(policy.clone());
    vec![]
}

pub(crate) fn launch_security(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let Some(ls) = &it.launch_security else {
        return vec![];
    };
    if spec.domain.launch_security.is_some() {
        return vec![Conflict::child(base, &["domain", "launchSecurity"])];
    }
    spec.domain.launch_security = Some(Box::new(ls.clone()));
    vec![]
}

pub(crate) fn gpus(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let Some(gpus) = it.gpus.as_ref().filter(|g| !g.is_empty()) else {
        return vec![];
    };
    let devices = &mut spec.domain.devices;
    if devices.gpus.as_ref().is_some_and(|g| !g.is_empty()) {
        return vec![Conflict::child(base, &["domain", "devices", "gpus"])];
    }
    devices.gpus = Some(gpus.clone());
    vec![]
}

pub(crate) fn host_devices(
    base: &str,
    it: &InstancetypeSpec,
    spec: &mut VirtualMachineInstanceSpec,
) -> Vec<Conflict> {
    let Some(hds) = it.host_devices.as_ref().filter(|g| !g.is_empty()) else {
        return vec![];
    };
    let devices = &mut spec.domain.devices;
    if devices.host_devices.as_ref().is_some_and(|g| !g.is_empty()) {
        return vec![Conflict::child(base, &["domain", "devices", "hostDevices"])];
    }
    devices.host_devices = Some(hds.clone());
    vec![]
}

/// The instancetype's annotations onto the VMI's metadata; a key the VM sets to another value
/// conflicts at `annotations.<key>` (no `spec` prefix, as in KubeVirt). KubeVirt walks a Go
/// map, so several such conflicts come in a random order there; here in key order.
pub(crate) fn annotations(it: &InstancetypeSpec, metadata: &mut ObjectMeta) -> Vec<Conflict> {
    let Some(want) = &it.annotations else {
        return vec![];
    };
    let mut out = Vec::new();
    for (key, value) in want {
        let target = metadata.annotations.get_or_insert_with(Default::default);
        match target.get(key) {
            Some(existing) if existing != value => {
                out.push(Conflict::child("", &["annotations", key]));
            }
            Some(_) => {}
            None => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
    out
}
