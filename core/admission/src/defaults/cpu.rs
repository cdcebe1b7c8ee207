//! CPU request, topology, model and hotplug limit.

use crate::api::{CPU, VirtualMachineInstanceSpec};
use crate::config::ClusterConfig;
use crate::quantity::Quantity;

/// CPU model of a guest that names none (the host's model, migratable between like hosts).
pub(crate) const DEFAULT_CPU_MODEL: &str = "host-model";
/// CPU request KubeVirt gives when the cluster configuration names none.
const BUILTIN_CPU_REQUEST: &str = "100m";
/// Upper bound of hot-pluggable vCPUs: machine types differ, 512 fits them all.
const MAX_VCPUS: i64 = 512;

/// True for a missing or zero quantity (Go's `Quantity.IsZero` on a missing map entry).
pub(crate) fn is_zero(q: Option<&Quantity>) -> bool {
    q.is_none_or(|q| q.milli_value().map(|v| v == 0).unwrap_or(false))
}

/// A CPU limit without a request becomes the request too (the scheduler needs a request, and the
/// limit is what the user asked for). A cluster whose CPU request differs from KubeVirt's
/// built-in `100m` also writes it into every non-dedicated VMI without one.
pub(super) fn set_cpu_request_from_limit(spec: &mut VirtualMachineInstanceSpec) {
    let resources = spec.domain.resources.get_or_insert_with(Default::default);
    let limit = resources
        .limits
        .as_ref()
        .and_then(|l| l.get("cpu"))
        .cloned();
    let request_zero = is_zero(resources.requests.as_ref().and_then(|r| r.get("cpu")));
    if let Some(limit) = limit
        && !is_zero(Some(&limit))
        && request_zero
    {
        resources
            .requests
            .get_or_insert_with(Default::default)
            .insert("cpu".to_string(), limit);
    }
}

/// The cluster-configured CPU request, when it is not KubeVirt's built-in one.
pub(super) fn set_cluster_cpu_request(
    spec: &mut VirtualMachineInstanceSpec,
    config: &ClusterConfig,
) {
    let configured = Quantity::new(config.cpu_request.clone());
    let builtin = Quantity::new(BUILTIN_CPU_REQUEST);
    if configured.milli_value().ok() == builtin.milli_value().ok() {
        return;
    }
    let dedicated = spec
        .domain
        .cpu
        .as_ref()
        .is_some_and(|c| super::is_true(c.dedicated_cpu_placement));
    let resources = spec.domain.resources.get_or_insert_with(Default::default);
    let requests = resources.requests.get_or_insert_with(Default::default);
    if !requests.contains_key("cpu") && !dedicated {
        requests.insert("cpu".to_string(), configured);
    }
}

/// With no cores, sockets or threads given, the vCPUs come from the CPU limit (else the request)
/// as sockets, one core and one thread each: sockets perform best for guests that do not care.
pub(super) fn set_topology(spec: &mut VirtualMachineInstanceSpec) {
    let unset = spec.domain.cpu.as_ref().is_none_or(|c| {
        c.cores.unwrap_or(0) == 0 && c.sockets.unwrap_or(0) == 0 && c.threads.unwrap_or(0) == 0
    });
    if !unset {
        return;
    }
    let resources = spec.domain.resources.as_ref();
    let from = |m: Option<&std::collections::BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.get("cpu")).map(|q| q.value().unwrap_or(1))
    };
    let sockets = from(resources.and_then(|r| r.limits.as_ref()))
        .or_else(|| from(resources.and_then(|r| r.requests.as_ref())))
        .unwrap_or(1);
    let cpu = spec.domain.cpu.get_or_insert_with(CPU::default);
    cpu.sockets = Some(sockets);
    cpu.cores = Some(1);
    cpu.threads = Some(1);
}

/// The guest CPU model, when none is named.
pub(super) fn set_model(spec: &mut VirtualMachineInstanceSpec, _config: &ClusterConfig) {
    let cpu = spec.domain.cpu.get_or_insert_with(CPU::default);
    if cpu.model.as_deref().unwrap_or("").is_empty() {
        cpu.model = Some(DEFAULT_CPU_MODEL.to_string());
    }
}

/// CPU hotplug room under the LiveUpdate rollout strategy: `maxHotplugRatio` times the sockets,
/// capped so that the guest never exceeds 512 vCPUs.
pub(super) fn set_max_sockets(spec: &mut VirtualMachineInstanceSpec, config: &ClusterConfig) {
    let cpu = spec.domain.cpu.get_or_insert_with(CPU::default);
    if cpu.max_sockets.unwrap_or(0) != 0 {
        return;
    }
    let sockets = cpu.sockets.unwrap_or(0);
    let cores = cpu.cores.unwrap_or(0);
    let threads = cpu.threads.unwrap_or(0);
    let mut max = sockets.saturating_mul(i64::from(config.max_hotplug_ratio));
    if max.saturating_mul(cores).saturating_mul(threads) > MAX_VCPUS {
        let per_socket = cores.saturating_mul(threads).max(1);
        max = (MAX_VCPUS / per_socket).max(sockets);
    }
    if max != 0 {
        cpu.max_sockets = Some(max);
    }
}
