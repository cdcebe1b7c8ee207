//! Resource requests and limits, dedicated CPUs, NUMA, realtime, hugepages and CPU topology.

use std::collections::BTreeMap;

use super::causes::Causes;
use crate::api::VirtualMachineInstanceSpec;
use crate::config::ClusterConfig;
use crate::quantity::Quantity;

const REQ_CPU: &str = "spec.domain.resources.requests.cpu";
const LIM_CPU: &str = "spec.domain.resources.limits.cpu";
const REQ_MEM: &str = "spec.domain.resources.requests.memory";
const LIM_MEM: &str = "spec.domain.resources.limits.memory";
const DEDICATED: &str = "spec.domain.cpu.dedicatedCpuPlacement";
const GUEST_MAPPING: &str = "spec.domain.cpu.numa.guestMappingPassthrough";
/// The most vCPUs a guest may have: KVM's `KVM_MAX_VCPUS` on x86-64 in a default kernel
/// configuration, and QEMU's q35 `max_cpus` since QEMU 8.1 (arm64's `virt` and s390x allow fewer;
/// libvirt refuses those at define time). KubeVirt sets no bound of its own; kvrs refuses above it
/// because every count here becomes per-vCPU work in the converter and the pod (one `<vcpu>`
/// entry per hot-pluggable vCPU, 8 MiB of overhead per vCPU).
pub const MAX_GUEST_VCPUS: i64 = 1024;
/// Valid CPU feature policies (empty means libvirt's default, `require`).
const CPU_FEATURE_POLICIES: &[&str] = &["", "force", "require", "optional", "disable", "forbid"];

/// One resource of requests or limits, as text and number (0 when absent, like Go).
struct Res<'a> {
    text: &'a str,
    value: i64,
    milli: i64,
}

fn res<'a>(map: Option<&'a BTreeMap<String, Quantity>>, key: &str) -> Res<'a> {
    match map.and_then(|m| m.get(key)) {
        Some(q) => Res {
            text: q.as_str(),
            value: q.value().unwrap_or(0),
            milli: q.milli_value().unwrap_or(0),
        },
        None => Res {
            text: "0",
            value: 0,
            milli: 0,
        },
    }
}

pub(super) fn check(
    spec: &VirtualMachineInstanceSpec,
    config: &ClusterConfig,
    causes: &mut Causes,
) {
    check_quantities(spec, causes);
    check_vcpu_count(spec, causes);
    let resources = spec.domain.resources.as_ref();
    let requests = resources.and_then(|r| r.requests.as_ref());
    let limits = resources.and_then(|r| r.limits.as_ref());
    let (req_cpu, lim_cpu) = (res(requests, "cpu"), res(limits, "cpu"));
    let (req_mem, lim_mem) = (res(requests, "memory"), res(limits, "memory"));

    if req_mem.value < 0 {
        causes.invalid(
            REQ_MEM,
            format!(
                "{REQ_MEM} '{}': must be greater than or equal to 0.",
                req_mem.text
            ),
        );
    } else if req_mem.value > 0 && req_mem.value < 1_000_000 {
        causes.invalid(
            REQ_MEM,
            format!(
                "{REQ_MEM} '{}': must be greater than or equal to 1M.",
                req_mem.text
            ),
        );
    }
    if lim_mem.value < 0 {
        causes.invalid(
            LIM_MEM,
            format!(
                "{LIM_MEM} '{}': must be greater than or equal to 0.",
                lim_mem.text
            ),
        );
    }
    if lim_mem.value > 0 && req_mem.value > lim_mem.value {
        causes.invalid(
            REQ_MEM,
            format!(
                "{REQ_MEM} '{}' is greater than {LIM_MEM} '{}'",
                req_mem.text, lim_mem.text
            ),
        );
    }
    check_hugepages(spec, &req_mem, &lim_mem, causes);
    if !config.live_update {
        let guest = guest_bytes(spec);
        if lim_mem.value != 0 && guest > lim_mem.value {
            causes.invalid(
                "spec.domain.memory.guest",
                format!(
                    "spec.domain.memory.guest must be equal to or less than the memory limit \
                     {LIM_MEM} '{}'",
                    lim_mem.text
                ),
            );
        }
    }
    if req_cpu.milli < 0 {
        causes.invalid(
            REQ_CPU,
            format!(
                "{REQ_CPU} '{}': must be greater than or equal to 0.",
                req_cpu.text
            ),
        );
    }
    if lim_cpu.milli < 0 {
        causes.invalid(
            LIM_CPU,
            format!(
                "{LIM_CPU} '{}': must be greater than or equal to 0.",
                lim_cpu.text
            ),
        );
    }
    if lim_cpu.milli > 0 && req_cpu.milli > lim_cpu.milli {
        causes.invalid(
            REQ_CPU,
            format!(
                "{REQ_CPU} '{}' is greater than {LIM_CPU} '{}'",
                req_cpu.text, lim_cpu.text
            ),
        );
    }
    let cpu = spec.domain.cpu.as_ref();
    let dedicated = cpu.is_some_and(|c| c.dedicated_cpu_placement == Some(true));
    if dedicated {
        check_dedicated(spec, [&req_cpu, &lim_cpu, &req_mem, &lim_mem], causes);
    }
    if let Some(cpu) = cpu {
        let passthrough = cpu
            .numa
            .as_ref()
            .is_some_and(|n| n.guest_mapping_passthrough.is_some());
        if passthrough {
            if !dedicated {
                causes.invalid(
                    GUEST_MAPPING,
                    format!(
                        "{DEDICATED} must be set to true when NUMA topology strategy is set in \
                         {GUEST_MAPPING}"
                    ),
                );
            }
            if spec
                .domain
                .memory
                .as_ref()
                .is_none_or(|m| m.hugepages.is_none())
            {
                causes.invalid(
                    GUEST_MAPPING,
                    format!(
                        "spec.domain.memory.hugepages must be requested when NUMA topology \
                         strategy is set in {GUEST_MAPPING}"
                    ),
                );
            }
        }
        if cpu.isolate_emulator_thread == Some(true) && !dedicated {
            causes.invalid(
                "spec.domain.cpu.isolateEmulatorThread",
                "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement",
            );
        }
        for (idx, feature) in cpu.features.iter().flatten().enumerate() {
            let policy = feature.policy.as_deref().unwrap_or("");
            if !CPU_FEATURE_POLICIES.contains(&policy) {
                causes.push(
                    super::CauseKind::NotSupported,
                    format!("spec.domain.cpu.features[{idx}].policy"),
                    format!(
                        "CPU feature {} uses policy {policy} that is not supported.",
                        feature.name
                    ),
                );
            }
        }
        let (sockets, max_sockets) = (cpu.sockets.unwrap_or(0), cpu.max_sockets.unwrap_or(0));
        if max_sockets != 0 && sockets > max_sockets {
            causes.invalid(
                "spec.domain.cpu.sockets",
                "Number of sockets in CPU topology is greater than the maximum sockets allowed",
            );
        }
        for (name, v) in [
            ("cores", cpu.cores),
            ("sockets", cpu.sockets),
            ("threads", cpu.threads),
        ] {
            if v.is_some_and(|v| v < 0) {
                causes.invalid(
                    format!("spec.domain.cpu.{name}"),
                    format!("spec.domain.cpu.{name} must not be negative"),
                );
            }
        }
        if cpu.realtime.is_some() {
            if !dedicated {
                causes.required(
                    DEDICATED,
                    format!(
                        "{DEDICATED} must be set to true when spec.domain.cpu.realtime is used"
                    ),
                );
            }
            if !passthrough {
                causes.required(
                    GUEST_MAPPING,
                    format!(
                        "{GUEST_MAPPING} must be defined when spec.domain.cpu.realtime is used"
                    ),
                );
            }
        }
    }
    check_memory_hotplug(spec, causes);
}

/// Every request and limit must have a value (and CPU a millicore value) in 64 bits: the checks
/// below read an unreadable quantity as 0, which would let `8Ei` CPUs through as "no limit".
fn check_quantities(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let resources = spec.domain.resources.as_ref();
    for (kind, map) in [
        ("requests", resources.and_then(|r| r.requests.as_ref())),
        ("limits", resources.and_then(|r| r.limits.as_ref())),
    ] {
        for (name, q) in map.into_iter().flatten() {
            let result = if name == "cpu" {
                q.milli_value()
            } else {
                q.value()
            };
            if let Err(e) = result {
                causes.invalid(
                    format!("spec.domain.resources.{kind}.{name}"),
                    e.to_string(),
                );
            }
        }
    }
}

/// Sockets x cores x threads (and maxSockets x cores x threads, the hotplug ceiling) must not
/// exceed [`MAX_GUEST_VCPUS`]. With no topology given, defaulting took the sockets from the CPU
/// limit (else request): the cause then names that quantity, which is what the user wrote.
fn check_vcpu_count(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let Some(cpu) = spec.domain.cpu.as_ref() else {
        return;
    };
    let count = |v: Option<i64>| i128::from(v.unwrap_or(0).max(1));
    let (sockets, cores, threads) = (count(cpu.sockets), count(cpu.cores), count(cpu.threads));
    let max = i128::from(MAX_GUEST_VCPUS);
    let total = sockets * cores * threads;
    if total > max {
        let from_quantity = cpu_quantity_field(spec)
            .filter(|(_, v)| cores == 1 && threads == 1 && i128::from(*v) == sockets);
        let (field, what) = match from_quantity {
            Some((field, _)) => (
                field.to_string(),
                format!(
                    "{total} vCPUs (the sockets of a VMI whose spec.domain.cpu gives no \
                     topology)"
                ),
            ),
            None => {
                let largest = [("sockets", sockets), ("cores", cores), ("threads", threads)]
                    .into_iter()
                    .fold(("sockets", 0), |a, b| if b.1 > a.1 { b } else { a });
                (
                    format!("spec.domain.cpu.{}", largest.0),
                    format!(
                        "{sockets} sockets x {cores} cores x {threads} threads is {total} vCPUs"
                    ),
                )
            }
        };
        causes.invalid(
            field,
            format!("{what}, more than the {MAX_GUEST_VCPUS} vCPUs a guest can have"),
        );
        return;
    }
    let max_sockets = i128::from(cpu.max_sockets.unwrap_or(0).max(0));
    let ceiling = max_sockets * cores * threads;
    if ceiling > max {
        causes.invalid(
            "spec.domain.cpu.maxSockets",
            format!(
                "{max_sockets} sockets x {cores} cores x {threads} threads is {ceiling} \
                 hot-pluggable vCPUs, more than the {MAX_GUEST_VCPUS} vCPUs a guest can have \
                 (when not set, maxSockets is sockets x the cluster's maxHotplugRatio)"
            ),
        );
    }
}

/// The CPU quantity defaulting takes the sockets from (limit, else request), with its value.
fn cpu_quantity_field(spec: &VirtualMachineInstanceSpec) -> Option<(&'static str, i64)> {
    let resources = spec.domain.resources.as_ref()?;
    let value = |m: Option<&BTreeMap<String, Quantity>>| m?.get("cpu")?.value().ok();
    if let Some(v) = value(resources.limits.as_ref()) {
        return Some((LIM_CPU, v));
    }
    value(resources.requests.as_ref()).map(|v| (REQ_CPU, v))
}

fn guest_bytes(spec: &VirtualMachineInstanceSpec) -> i64 {
    spec.domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.as_ref())
        .and_then(|g| g.value().ok())
        .unwrap_or(0)
}

fn vcpus(spec: &VirtualMachineInstanceSpec) -> i64 {
    spec.domain.cpu.as_ref().map_or(0, |c| {
        let f = |v: Option<i64>| v.unwrap_or(0).max(0);
        let (s, c2, t) = (f(c.sockets), f(c.cores), f(c.threads));
        if s == 0 && c2 == 0 && t == 0 {
            0
        } else {
            s.max(1) * c2.max(1) * t.max(1)
        }
    })
}

/// Dedicated CPUs are whole host CPUs pinned to the guest: memory must be known, CPU
/// requests and limits must be integers and agree with each other and the topology.
fn check_dedicated(spec: &VirtualMachineInstanceSpec, r: [&Res<'_>; 4], causes: &mut Causes) {
    let [req_cpu, lim_cpu, req_mem, lim_mem] = r;
    let memory = spec.domain.memory.as_ref();
    let memory_known = lim_mem.value != 0
        || req_mem.value != 0
        || memory.is_some_and(|m| {
            m.hugepages.is_some()
                || m.guest
                    .as_ref()
                    .is_some_and(|g| g.value().unwrap_or(0) != 0)
        });
    if !memory_known {
        causes.invalid(
            LIM_MEM,
            format!(
                "{REQ_MEM}, {LIM_MEM}, spec.domain.memory.hugepages or spec.domain.memory.guest \
                 should be provided"
            ),
        );
    }
    if req_cpu.value > 0 && req_cpu.value * 1000 != req_cpu.milli {
        causes.invalid(
            REQ_CPU,
            "provided resources CPU requests must be an interger",
        );
    }
    if lim_cpu.value > 0 && lim_cpu.value * 1000 != lim_cpu.milli {
        causes.invalid(LIM_CPU, "provided resources CPU limits must be an interger");
    }
    if req_mem.value > 0 && lim_mem.value > 0 && req_mem.value != lim_mem.value {
        causes.invalid(REQ_MEM, format!("{REQ_MEM} must be equal to {LIM_MEM}"));
    }
    let n = vcpus(spec);
    if req_cpu.value == 0 && lim_cpu.value == 0 && n == 0 {
        causes.invalid(
            DEDICATED,
            format!(
                "either {REQ_CPU} or {LIM_CPU} or spec.domain.cpu.cores must be provided when \
                 DedicatedCPUPlacement is true "
            ),
        );
    }
    if req_cpu.value > 0 && lim_cpu.value > 0 && req_cpu.value != lim_cpu.value {
        causes.invalid(
            DEDICATED,
            format!("{REQ_CPU} or {LIM_CPU} must be equal when DedicatedCPUPlacement is true "),
        );
    }
    if (req_cpu.value > 0 || lim_cpu.value > 0) && n > 0 && req_cpu.value != n && lim_cpu.value != n
    {
        causes.invalid(
            DEDICATED,
            format!(
                "{REQ_CPU} or {LIM_CPU} must not be provided at the same time with \
                 spec.domain.cpu.cores when DedicatedCPUPlacement is true "
            ),
        );
    }
    let threads = spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.threads)
        .unwrap_or(0);
    if threads > 1 && spec.architecture.as_deref() == Some("arm64") {
        causes.invalid(
            "spec.architecture",
            format!(
                "threads must not be greater than 1 at spec.domain.cpu.threads (got {threads}) \
                 when spec.architecture is arm64"
            ),
        );
    }
    if threads > 2 {
        causes.invalid(
            DEDICATED,
            format!(
                "Not more than two threads must be provided at spec.domain.cpu.threads (got \
                 {threads}) when DedicatedCPUPlacement is true"
            ),
        );
    }
}

fn check_hugepages(
    spec: &VirtualMachineInstanceSpec,
    req_mem: &Res<'_>,
    lim_mem: &Res<'_>,
    causes: &mut Causes,
) {
    let Some(hp) = spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.hugepages.as_ref())
    else {
        return;
    };
    let page_text = hp.page_size.as_deref().unwrap_or("");
    const PAGE: &str = "spec.domain.memory.hugepages.pageSize";
    let Some(page) = page_text
        .parse::<Quantity>()
        .ok()
        .and_then(|q| q.value().ok())
        .filter(|v| *v > 0)
    else {
        causes.invalid(
            PAGE,
            format!(
                "{PAGE} '{page_text}': quantities must match the regular expression \
                 '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            ),
        );
        return;
    };
    let mut vm_memory = req_mem.value;
    if vm_memory == 0 {
        vm_memory = guest_bytes(spec);
    }
    if vm_memory == 0 {
        vm_memory = lim_mem.value;
    }
    if vm_memory != 0 && vm_memory < page {
        causes.invalid(
            REQ_MEM,
            format!(
                "{REQ_MEM} '{}' must be equal to or larger than page size {PAGE} '{page_text}'",
                req_mem.text
            ),
        );
    } else if vm_memory % page != 0 {
        causes.invalid(
            REQ_MEM,
            format!(
                "{REQ_MEM} '{}' is not a multiple of the page size {PAGE} '{page_text}'",
                req_mem.text
            ),
        );
    }
}

/// A user-given `maxGuest` must leave room for the guest memory. (KubeVirt checks this on a
/// VM's template; kvrs checks every VMI, which would fail to start otherwise.)
fn check_memory_hotplug(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let Some(max) = spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.max_guest.as_ref())
        .and_then(|q| q.value().ok())
    else {
        return;
    };
    let guest = guest_bytes(spec);
    if guest > max {
        causes.invalid(
            "spec.domain.memory.guest",
            "Guest memory is greater than the configured maxGuest memory",
        );
    }
}
