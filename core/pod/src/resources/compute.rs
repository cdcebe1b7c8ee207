//! Requests and limits of the compute container, built in KubeVirt's order.
//!
//! KubeVirt starts from the VMI's own requests/limits, then applies a fixed sequence of rules
//! (ephemeral storage, device plugins, memory request, CPU, hugepages or overhead, device-plugin
//! resources, launch-security devices). Later rules see what earlier ones wrote, so the order is
//! part of the behaviour and is kept here.

use std::collections::BTreeMap;

use super::qty::GoQty;
use super::{MemoryOverhead, ResourceError, is_cpu_dedicated, resource_list, vcpus};
use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;
use crate::quantity::{Quantity, QuantityFormat};

/// Extra ephemeral storage KubeVirt requests for its own files.
const EPHEMERAL_STORAGE_OVERHEAD: &str = "50M";
/// Device-plugin resource prefix.
pub(crate) const DEVICE_PREFIX: &str = "devices.kubevirt.io";

/// The compute container's resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComputeResources {
    /// `resources.requests`, canonical quantities by resource name.
    pub requests: BTreeMap<String, Quantity>,
    /// `resources.limits`.
    pub limits: BTreeMap<String, Quantity>,
    /// `resources.claims` (DRA): (claim name, request name).
    pub claims: Vec<(String, Option<String>)>,
}

/// Limits KubeVirt adds on its own when the namespace demands limits (a ResourceQuota with
/// `limits.cpu` / `limits.memory`, or the cluster's auto-CPU-limit namespace selector) and the VMI
/// sets none. Facts about the namespace, so the caller supplies them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutoLimits {
    /// Set a CPU limit equal to the vCPU count.
    pub cpu: bool,
    /// Set a memory limit of `ratio x request` (KubeVirt's default ratio is 2.0, overridable by
    /// the namespace label `alpha.kubevirt.io/auto-memory-limits-ratio`).
    pub memory_ratio: Option<f64>,
}

type List = BTreeMap<String, GoQty>;

struct Renderer {
    vm_requests: List,
    vm_limits: List,
    calc_requests: List,
    calc_limits: List,
    claims: Vec<(String, Option<String>)>,
}

impl Renderer {
    fn merged(calc: &List, vm: &List) -> List {
        let mut out = calc.clone();
        out.extend(vm.iter().map(|(k, v)| (k.clone(), *v)));
        out
    }

    /// Device-plugin resources: limits and requests both bumped by one.
    fn request_device(&mut self, name: &str) {
        for (calc, vm) in [
            (&mut self.calc_limits, &self.vm_limits),
            (&mut self.calc_requests, &self.vm_requests),
        ] {
            let mut q = Self::merged(calc, vm)
                .get(name)
                .copied()
                .unwrap_or_else(|| GoQty::zero(QuantityFormat::DecimalSI));
            q.add(GoQty::units(1, QuantityFormat::DecimalSI));
            calc.insert(name.to_string(), q);
        }
    }
}

fn parse_list(vmi: &VirtualMachineInstance, limits: bool) -> Result<List, ResourceError> {
    let mut out = List::new();
    for (name, q) in resource_list(vmi, limits).into_iter().flatten() {
        out.insert(
            name.clone(),
            GoQty::parse(q, &super::resource_field(limits, name))?,
        );
    }
    Ok(out)
}

/// The compute container's requests and limits for `vmi` with the given memory overhead.
pub fn compute_resources(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
    overhead: &MemoryOverhead,
    auto: &AutoLimits,
) -> Result<ComputeResources, ResourceError> {
    if config.cpu_allocation_ratio == 0 {
        return Err(ResourceError::ZeroCpuAllocationRatio);
    }
    let domain = &vmi.spec.domain;
    let devices = &domain.devices;
    let memory = domain.memory.as_ref();
    let overhead_q = GoQty::units(
        overhead.bytes,
        overhead
            .quantity
            .format()
            .unwrap_or(QuantityFormat::DecimalSI),
    );
    let mut r = Renderer {
        vm_requests: parse_list(vmi, false)?,
        vm_limits: parse_list(vmi, true)?,
        calc_requests: List::new(),
        calc_limits: List::new(),
        claims: Vec::new(),
    };

    let guest = match memory.and_then(|m| m.guest.as_ref()) {
        Some(q) => Some(GoQty::parse(q, "spec.domain.memory.guest")?),
        None => None,
    };
    let hugepages = memory.and_then(|m| m.hugepages.as_ref());
    let has_memory = guest.is_some_and(|g| !g.is_zero())
        || r.vm_requests.get("memory").is_some_and(|q| !q.is_zero())
        || r.vm_limits.get("memory").is_some_and(|q| !q.is_zero())
        || hugepages.is_some();
    if !has_memory {
        return Err(ResourceError::MemoryMissing);
    }

    // Ephemeral storage for KubeVirt's own files, on top of what the user asked for.
    let eph = GoQty::literal(EPHEMERAL_STORAGE_OVERHEAD);
    let mut req = r
        .vm_requests
        .get("ephemeral-storage")
        .copied()
        .unwrap_or_else(|| GoQty::zero(QuantityFormat::DecimalSI));
    req.add(eph);
    r.vm_requests.insert("ephemeral-storage".into(), req);
    if let Some(lim) = r.vm_limits.get_mut("ephemeral-storage") {
        lim.add(eph);
    }

    // Devices the launcher needs from device plugins.
    let one = GoQty::units(1, QuantityFormat::DecimalSI);
    let interfaces = devices.interfaces.as_deref().unwrap_or_default();
    let tun = !interfaces.is_empty() || devices.autoattach_pod_interface.unwrap_or(true);
    let virtio_iface = interfaces
        .iter()
        .any(|i| matches!(i.model.as_deref(), None | Some("") | Some("virtio")));
    if tun {
        r.vm_limits.insert(format!("{DEVICE_PREFIX}/tun"), one);
    }
    if virtio_iface && !config.use_emulation {
        r.vm_limits
            .insert(format!("{DEVICE_PREFIX}/vhost-net"), one);
    }
    if !config.use_emulation {
        r.vm_limits.insert(format!("{DEVICE_PREFIX}/kvm"), one);
    }
    if devices.autoattach_vsock.unwrap_or(false) {
        r.vm_limits
            .insert(format!("{DEVICE_PREFIX}/vhost-vsock"), one);
    }

    // Memory request from the guest memory, unless the user gave one.
    if r.vm_requests.get("memory").is_none_or(|q| q.is_zero()) {
        memory_request(
            &mut r,
            guest,
            hugepages.and_then(|h| h.page_size.as_deref()),
            config,
        );
    }

    let io_threads = domain
        .io_threads
        .as_ref()
        .and_then(|t| t.supplemental_pool_thread_count)
        .unwrap_or(0);
    if is_cpu_dedicated(vmi) {
        cpu_pinning(&mut r, vmi, io_threads);
    } else {
        let total = domain.cpu.as_ref().map(vcpus).unwrap_or(1) + io_threads;
        let text = kvrs_overhead::cpu_request_text(total, config.cpu_allocation_ratio)
            .map_err(|_| ResourceError::ZeroCpuAllocationRatio)?;
        if let Some(text) = text {
            if auto.cpu && !r.vm_limits.contains_key("cpu") {
                r.calc_limits
                    .insert("cpu".into(), GoQty::units(total, QuantityFormat::DecimalSI));
            }
            let q = Quantity::new(text);
            let milli = q.milli_value().unwrap_or(0);
            r.calc_requests.insert(
                "cpu".into(),
                GoQty {
                    milli: i128::from(milli),
                    format: QuantityFormat::DecimalSI,
                },
            );
        }
    }

    match hugepages {
        Some(h) => with_hugepages(
            &mut r,
            h.page_size.as_deref().unwrap_or(""),
            guest,
            overhead_q,
        ),
        None => {
            let overcommit_overhead = domain
                .resources
                .as_ref()
                .and_then(|r| r.overcommit_guest_overhead)
                .unwrap_or(false);
            let mut req = r
                .vm_requests
                .get("memory")
                .copied()
                .unwrap_or_else(|| GoQty::zero(QuantityFormat::DecimalSI));
            if !overcommit_overhead {
                req.add(overhead_q);
            }
            r.vm_requests.insert("memory".into(), req);
            if let Some(lim) = r.vm_limits.get_mut("memory") {
                lim.add(overhead_q);
            }
        }
    }

    if let Some(ratio) = auto.memory_ratio
        && !r.vm_limits.contains_key("memory")
    {
        // A ratio below 1 would limit below the request; KubeVirt falls back to 2 then.
        let ratio = if ratio >= 1.0 { ratio } else { 2.0 };
        let request = r
            .vm_requests
            .get("memory")
            .copied()
            .unwrap_or_else(|| GoQty::zero(QuantityFormat::DecimalSI));
        // Go's float64-to-int64 conversion; Rust's `as` saturates where Go's result is undefined.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "KubeVirt's float arithmetic"
        )]
        let limit = (request.value() as f64 * ratio) as i64;
        r.calc_limits
            .insert("memory".into(), GoQty::units(limit, request.format));
    }

    device_plugins(&mut r, vmi, config);

    let finish = |calc: &List, vm: &List| {
        Renderer::merged(calc, vm)
            .into_iter()
            .map(|(k, v)| (k, v.to_quantity()))
            .collect::<BTreeMap<_, _>>()
    };
    Ok(ComputeResources {
        requests: finish(&r.calc_requests, &r.vm_requests),
        limits: finish(&r.calc_limits, &r.vm_limits),
        claims: r.claims,
    })
}

/// The memory request when the VMI gives none: a memory limit, else the guest memory (scaled by
/// the overcommit percentage), else one hugepage.
fn memory_request(
    r: &mut Renderer,
    guest: Option<GoQty>,
    page_size: Option<&str>,
    config: &ClusterConfig,
) {
    let has_request = r.vm_requests.contains_key("memory");
    if let Some(limit) = r.vm_limits.get("memory").copied()
        && !limit.is_zero()
        && (!has_request || r.vm_requests.get("memory").is_some_and(|q| q.is_zero()))
    {
        r.vm_requests.insert("memory".into(), limit);
    }
    if r.vm_requests.contains_key("memory") {
        return;
    }
    let memory = guest.or_else(|| {
        page_size.and_then(|p| {
            let q = Quantity::new(p);
            q.milli_value().ok().map(|m| GoQty {
                milli: i128::from(m),
                format: q.format().unwrap_or(QuantityFormat::BinarySI),
            })
        })
    });
    if let Some(m) = memory
        && m.value() > 0
    {
        let overcommit = config.memory_overcommit_percent.max(1);
        let request = if overcommit == 100 {
            m
        } else {
            GoQty::units(
                m.value().saturating_mul(100) / i64::from(overcommit),
                m.format,
            )
        };
        r.vm_requests.insert("memory".into(), request);
    }
}

/// Dedicated CPUs: requests = limits = vCPUs (+ IO threads, + emulator thread), and the memory
/// limit follows the request so the pod is Guaranteed.
fn cpu_pinning(r: &mut Renderer, vmi: &VirtualMachineInstance, io_threads: i64) {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let n = cpu.map(vcpus).unwrap_or(0);
    let io = GoQty::units(io_threads, QuantityFormat::BinarySI);
    if n != 0 {
        let total = GoQty::units(n + io_threads, QuantityFormat::BinarySI);
        r.vm_limits.insert("cpu".into(), total);
        r.vm_requests.insert("cpu".into(), total);
    } else {
        if let Some(l) = r.vm_limits.get_mut("cpu") {
            l.add(io);
        }
        if let Some(q) = r.vm_requests.get_mut("cpu") {
            q.add(io);
        }
    }
    if cpu.and_then(|c| c.isolate_emulator_thread).unwrap_or(false) {
        let mut limit = r
            .vm_limits
            .get("cpu")
            .copied()
            .unwrap_or_else(|| GoQty::zero(QuantityFormat::DecimalSI));
        let even_parity = vmi.metadata.annotations.as_ref().is_some_and(|a| {
            a.contains_key("alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity")
        });
        let additional = if vmi.spec.domain.io_threads_policy.as_deref() == Some("supplementalPool")
        {
            io_threads
        } else {
            0
        };
        let extra = if even_parity && (limit.value() + additional) % 2 == 0 {
            2
        } else {
            1
        };
        let extra = GoQty::units(extra, QuantityFormat::BinarySI);
        limit.add(extra);
        r.vm_limits.insert("cpu".into(), limit);
        if let Some(q) = r.vm_requests.get_mut("cpu") {
            q.add(extra);
        }
    }
    if let Some(mem) = r.vm_requests.get("memory").copied() {
        r.vm_limits.insert("memory".into(), mem);
    }
}

/// Hugepages back the guest memory; the container's memory request and limit keep only what is
/// not guest RAM (the overhead, plus any request above the guest size).
fn with_hugepages(r: &mut Renderer, page_size: &str, guest: Option<GoQty>, overhead: GoQty) {
    let name = format!("hugepages-{page_size}");
    let zero = GoQty::zero(QuantityFormat::DecimalSI);
    let requests = r.vm_requests.get("memory").copied().unwrap_or(zero);
    let limits = r.vm_limits.get("memory").copied().unwrap_or(zero);
    let mut hp = requests;
    if let Some(g) = guest
        && requests.value() > g.value()
    {
        hp = g;
    }
    r.calc_requests.insert(name.clone(), hp);
    r.calc_limits.insert(name, hp);

    let mut req_diff = zero;
    let mut lim_diff = zero;
    if let Some(g) = guest {
        if requests.value() > g.value() {
            req_diff.add(requests);
            req_diff.sub(g);
        }
        if limits.value() > g.value() {
            lim_diff.add(limits);
            lim_diff.sub(g);
        }
    }
    req_diff.add(overhead);
    r.vm_requests.insert("memory".into(), req_diff);
    if r.vm_limits.contains_key("memory") {
        lim_diff.add(overhead);
        r.vm_limits.insert("memory".into(), lim_diff);
    }
}

/// GPUs and host devices from device plugins, DRA claims, launch-security and reservation
/// devices.
fn device_plugins(r: &mut Renderer, vmi: &VirtualMachineInstance, config: &ClusterConfig) {
    let devices = &vmi.spec.domain.devices;
    let plugin = |name: &Option<String>, claim: &Option<String>, req: &Option<String>| {
        name.as_deref().is_some_and(|n| !n.is_empty()) && claim.is_none() && req.is_none()
    };
    let dra = |name: &Option<String>, claim: &Option<String>, req: &Option<String>| {
        name.as_deref().is_none_or(str::is_empty) && (claim.is_some() || req.is_some())
    };
    let gpus = devices.gpus.as_deref().unwrap_or_default();
    let host_devices = devices.host_devices.as_deref().unwrap_or_default();

    for g in gpus {
        if plugin(&g.device_name, &g.claim_name, &g.request_name)
            && let Some(n) = &g.device_name
        {
            r.request_device(n);
        }
    }
    // GPUsWithDRA and HostDevicesWithDRA are Beta gates, on by default.
    {
        for g in gpus {
            if dra(&g.device_name, &g.claim_name, &g.request_name) {
                r.claims.push((
                    g.claim_name.clone().unwrap_or_default(),
                    g.request_name.clone(),
                ));
            }
        }
    }
    for h in host_devices {
        if plugin(&h.device_name, &h.claim_name, &h.request_name)
            && let Some(n) = &h.device_name
        {
            r.request_device(n);
        }
    }
    {
        for h in host_devices {
            if dra(&h.device_name, &h.claim_name, &h.request_name) {
                r.claims.push((
                    h.claim_name.clone().unwrap_or_default(),
                    h.request_name.clone(),
                ));
            }
        }
    }
    if config.gate("NetworkDevicesWithDRA") {
        for n in vmi.spec.networks.iter().flatten() {
            if let Some(c) = &n.resource_claim {
                r.claims.push((
                    c.claim_name.clone().unwrap_or_default(),
                    c.request_name.clone(),
                ));
            }
        }
    }
    let ls = vmi.spec.domain.launch_security.as_ref();
    if ls.is_some_and(|l| l.sev.is_some() || l.snp.is_some()) {
        r.request_device(&format!("{DEVICE_PREFIX}/sev"));
    }
    if ls.is_some_and(|l| l.tdx.is_some()) {
        r.request_device(&format!("{DEVICE_PREFIX}/tdx"));
    }
    let reservation = devices.disks.iter().flatten().any(|d| {
        d.lun
            .as_ref()
            .is_some_and(|l| l.reservation.unwrap_or(false))
    });
    if reservation {
        r.request_device(&format!("{DEVICE_PREFIX}/pr-helper"));
    }
    if config.gate("IOMMUFD") {
        r.request_device(&format!("{DEVICE_PREFIX}/iommufd"));
    }
}
