//! Dedicated CPUs: vCPU pinning onto the pod's CPU set, the emulator thread pin, and the
//! dedicated-CPU KVM hint.

use crate::configurators::Env;
use crate::cpu_pool::{CpuPool, PoolError};
use crate::domain::{
    CpuEmulatorPin, CpuTune, CpuTuneIoThreadPin, CpuTuneVcpuPin, Domain, FeatureKvm, FeatureState,
    Features, HugePage, MemNode, MemoryAllocation, Numa, NumaCell, NumaTune, NumaTuneMemory, Str,
};
use crate::error::ConvertError;
use crate::topology::{quantity_to_bytes, virtual_memory};
use kvrs_api::VirtualMachineInstance;

/// A position in a list the converter built as a libvirt index. The lists are bounded by the
/// vCPU count, itself a `u32`, so the saturation never happens; it keeps the conversion checked.
fn index_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// The guest's cores and threads per core as KubeVirt places them: the domain topology, less
/// the sockets kept for CPU hotplug (their vCPUs are disabled and get no host CPU).
fn placed_topology(vmi: &VirtualMachineInstance, domain: &Domain) -> (usize, usize) {
    let topo = domain.cpu.topology.as_ref();
    let sockets = topo.and_then(|t| t.sockets).unwrap_or(1);
    let cores = topo.and_then(|t| t.cores).unwrap_or(1);
    let threads = topo.and_then(|t| t.threads).unwrap_or(1);
    let mut sockets = sockets;
    let max_sockets = vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.max_sockets)
        .unwrap_or(0);
    if let (true, Some(vcpus)) = (max_sockets != 0, domain.vcpus.as_ref()) {
        let disabled = vcpus
            .vcpu
            .iter()
            .filter(|c| c.enabled.as_deref() != Some("yes"))
            .count();
        let per_socket = usize::try_from(cores.saturating_mul(threads).max(1)).unwrap_or(1);
        let disabled_sockets = u32::try_from(disabled / per_socket).unwrap_or(u32::MAX);
        sockets = sockets.saturating_sub(disabled_sockets);
    }
    let guest_cores = usize::try_from(u64::from(cores) * u64::from(sockets)).unwrap_or(usize::MAX);
    (guest_cores, usize::try_from(threads).unwrap_or(1))
}

/// The supplemental-pool IO thread count, when that policy is selected.
fn supplemental_threads(vmi: &VirtualMachineInstance) -> u32 {
    if vmi.spec.domain.io_threads_policy.as_deref() != Some("supplementalPool") {
        return 0;
    }
    vmi.spec
        .domain
        .io_threads
        .as_ref()
        .and_then(|t| t.supplemental_pool_thread_count)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

fn has_even_parity_annotation(vmi: &VirtualMachineInstance) -> bool {
    vmi.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(EVEN_PARITY_ANNOTATION))
}

/// Asks for a second emulator CPU when the pinned thread count is even.
const EVEN_PARITY_ANNOTATION: &str = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity";

/// The pod's CPU set when the context names none: `0..N-1`, N the compute container's CPU
/// limit as the pod renderer computes it (vCPUs + supplemental IO threads + emulator CPUs),
/// which is what the launcher's cgroup would hold.
fn default_cpu_set(vmi: &VirtualMachineInstance, enabled: u32) -> Vec<u32> {
    let spec = u32::try_from(spec_vcpus(vmi)).unwrap_or(u32::MAX);
    let io = vmi
        .spec
        .domain
        .io_threads
        .as_ref()
        .and_then(|t| t.supplemental_pool_thread_count)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0);
    let mut limit = if spec != 0 { spec } else { enabled }.saturating_add(io);
    let isolate = vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.isolate_emulator_thread)
        .unwrap_or(false);
    if isolate {
        let additional = supplemental_threads(vmi);
        let even = limit.saturating_add(additional) % 2 == 0;
        limit = limit.saturating_add(if has_even_parity_annotation(vmi) && even {
            2
        } else {
            1
        });
    }
    (0..limit).collect()
}

fn pool_error(field: &str) -> impl Fn(PoolError) -> ConvertError + '_ {
    move |e| ConvertError::new(field, e.to_string())
}

/// Places vCPUs, supplemental-pool IO threads and the emulator thread on the pod's CPU set in
/// KubeVirt's order (see [`CpuPool`]), then pins shared/auto IO threads and adds the
/// dedicated-CPU features.
pub(crate) fn adjust(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let isolate = cpu.and_then(|c| c.isolate_emulator_thread).unwrap_or(false);
    let numa_passthrough_requested = cpu
        .and_then(|c| c.numa.as_ref())
        .is_some_and(|n| n.guest_mapping_passthrough.is_some());
    let enabled = match &domain.vcpus {
        Some(v) => index_u32(
            v.vcpu
                .iter()
                .filter(|c| c.enabled.as_deref() == Some("yes"))
                .count(),
        ),
        None => domain.vcpu.as_ref().map(|v| v.cpus).unwrap_or(1),
    };
    let set: Vec<u32> = if env.ctx.cpu_set.is_empty() {
        default_cpu_set(vmi, enabled)
    } else {
        env.ctx.cpu_set.clone()
    };
    let (guest_cores, threads_per_core) = placed_topology(vmi, domain);
    let mut pool = CpuPool::new(
        guest_cores,
        threads_per_core,
        env.ctx.topology.as_ref(),
        &set,
        !numa_passthrough_requested,
    );
    let placed = pool
        .fit_cores()
        .map_err(pool_error("spec.domain.cpu.dedicatedCpuPlacement"))?;
    let mut tune = CpuTune::default();
    for (vcpu, host) in placed.iter().enumerate() {
        tune.vcpupin.push(CpuTuneVcpuPin {
            vcpu: index_u32(vcpu),
            cpuset: host.to_string().into(),
        });
    }
    // Supplemental IO threads come before the emulator: they count towards its parity.
    let supplemental = supplemental_threads(vmi);
    if supplemental > 0 {
        if domain.iothreads.is_none() {
            return Err(ConvertError::new(
                "spec.domain.ioThreads.supplementalPoolThreadCount",
                "domain is missing IOThreads",
            ));
        }
        for thread in 1..=supplemental {
            let host = pool.fit_thread().map_err(|e| {
                ConvertError::new(
                    "spec.domain.ioThreads.supplementalPoolThreadCount",
                    format!("no CPU allocated for the iothread: {e}"),
                )
            })?;
            tune.iothreadpin.push(CpuTuneIoThreadPin {
                iothread: thread,
                cpuset: host.to_string().into(),
            });
        }
    }
    if isolate {
        let pinned = u64::try_from(placed.len()).unwrap_or(u64::MAX) + u64::from(supplemental);
        let field = "spec.domain.cpu.isolateEmulatorThread";
        let mut emulator = vec![pool.fit_thread().map_err(|e| {
            ConvertError::new(
                field,
                format!("no CPU allocated for the emulation thread: {e}"),
            )
        })?];
        if has_even_parity_annotation(vmi) && pinned % 2 == 0 {
            emulator.push(pool.fit_thread().map_err(|e| {
                ConvertError::new(
                    field,
                    format!("no second CPU allocated for the emulation thread: {e}"),
                )
            })?);
        }
        tune.emulatorpin = Some(CpuEmulatorPin {
            cpuset: cpu_list_to_set(&emulator).into(),
        });
    }
    if crate::iothreads::has_io_threads(vmi) && supplemental == 0 {
        pin_io_threads(vmi, domain, &mut tune, &set);
    }
    domain.cputune = Some(tune);
    if vmi.spec.architecture.as_deref() == Some("amd64") {
        let f = domain.features.get_or_insert_with(Features::default);
        let kvm = f.kvm.get_or_insert_with(FeatureKvm::default);
        kvm.hint_dedicated = Some(FeatureState {
            state: Some("on".into()),
        });
    }
    if cpu.is_some_and(|c| c.realtime.is_some()) {
        let f = domain.features.get_or_insert_with(Features::default);
        f.pmu = Some(FeatureState {
            state: Some("off".into()),
        });
    }
    if cpu
        .and_then(|c| c.numa.as_ref())
        .is_some_and(|n| n.guest_mapping_passthrough.is_some())
    {
        numa_passthrough(env, vmi, domain)?;
    }
    Ok(())
}

/// KubeVirt's spec vCPU count (`cores x sockets x threads`, zeros ignored).
fn spec_vcpus(vmi: &VirtualMachineInstance) -> usize {
    let Some(cpu) = vmi.spec.domain.cpu.as_ref() else {
        return 0;
    };
    let mut n = cpu.cores.unwrap_or(0);
    for f in [cpu.sockets.unwrap_or(0), cpu.threads.unwrap_or(0)] {
        if f != 0 {
            n = if n == 0 { f } else { n * f };
        }
    }
    usize::try_from(n).unwrap_or(0)
}

/// IO threads share the emulator's CPU when it is isolated, else spread over the vCPUs' CPUs.
fn pin_io_threads(vmi: &VirtualMachineInstance, domain: &Domain, tune: &mut CpuTune, set: &[u32]) {
    let Some(threads) = domain.iothreads.as_ref().map(|t| t.count as usize) else {
        return;
    };
    let vcpus = spec_vcpus(vmi);
    let isolate = vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.isolate_emulator_thread)
        .unwrap_or(false);
    let pin = |tune: &mut CpuTune, thread: usize, cpuset: Str| {
        tune.iothreadpin.push(CpuTuneIoThreadPin {
            iothread: index_u32(thread),
            cpuset,
        });
    };
    if isolate {
        if let Some(emu) = tune.emulatorpin.as_ref().map(|e| e.cpuset.clone()) {
            pin(tune, 1, emu);
        }
    } else if vcpus == 0 || threads == 0 {
    } else if threads >= vcpus {
        for t in 1..=threads {
            if let Some(c) = set.get(t % vcpus) {
                pin(tune, t, c.to_string().into());
            }
        }
    } else {
        let series = vcpus % threads;
        let mut curr = 0usize;
        for t in 1..=threads {
            let len = vcpus / threads + usize::from(t <= series);
            let end = (curr + len).min(set.len());
            let cpus: Vec<String> = set[curr.min(end)..end].iter().map(u32::to_string).collect();
            pin(tune, t, cpus.join(",").into());
            curr += len;
        }
    }
}

/// Mirrors the host NUMA cells the pinned vCPUs landed on into the guest, with hugepages.
fn numa_passthrough(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let path = "spec.domain.cpu.numa.guestMappingPassthrough";
    let Some(topo) = env.ctx.topology.as_ref().filter(|t| !t.cells.is_empty()) else {
        return Ok(());
    };
    let pins = domain
        .cputune
        .as_ref()
        .map(|t| t.vcpupin.clone())
        .unwrap_or_default();
    // host cell id -> vCPUs placed on it, in pin order
    let mut by_cell: Vec<(u32, Vec<u32>)> = Vec::new();
    for pin in &pins {
        let host: u32 = pin.cpuset.parse().map_err(|_| {
            ConvertError::new(
                path,
                format!(
                    "expected only full cpu to be mapped, but got {}",
                    pin.cpuset
                ),
            )
        })?;
        let cell = topo
            .cells
            .iter()
            .find(|c| c.cpus.iter().any(|(id, _)| *id == host))
            .ok_or_else(|| {
                ConvertError::new(
                    path,
                    format!(
                        "vcpu {} is mapped to a not existing host cpu set {}",
                        pin.vcpu, pin.cpuset
                    ),
                )
            })?;
        match by_cell.iter_mut().find(|(id, _)| *id == cell.id) {
            Some((_, v)) => v.push(pin.vcpu),
            None => by_cell.push((cell.id, vec![pin.vcpu])),
        }
    }
    let involved: Vec<&crate::context::HostNumaCell> = topo
        .cells
        .iter()
        .filter(|c| by_cell.iter().any(|(id, _)| *id == c.id))
        .collect();
    let page = vmi
        .spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.hugepages.as_ref())
        .and_then(|h| h.page_size.as_deref())
        .filter(|_| {
            domain
                .memory_backing
                .as_ref()
                .is_some_and(|m| m.hugepages.is_some())
        });
    let Some(page) = page else {
        return Err(ConvertError::new(
            path,
            "passing through a numa topology is restricted to VMIs with hugepages enabled",
        ));
    };
    let page_size = quantity_to_bytes(
        &kvrs_api::Quantity::new(page),
        "spec.domain.memory.hugepages.pageSize",
    )?;
    let mut memory = match virtual_memory(vmi) {
        Some(q) => quantity_to_bytes(q, "spec.domain.memory.guest")?,
        None => 0,
    };
    let cells = involved.len() as u64;
    if page_size == 0 || memory < cells * page_size {
        return Err(ConvertError::new(
            path,
            "not enough memory requested to allocate at least one hugepage per numa node",
        ));
    }
    if memory % page_size != 0 {
        return Err(ConvertError::new(
            path,
            "requested memory can't be divided through the numa page size",
        ));
    }
    let rem = memory % (page_size * cells) / page_size;
    memory -= rem * page_size;
    let mut numa = Numa::default();
    let mut tune = NumaTune {
        memory: NumaTuneMemory {
            mode: "strict".into(),
            nodeset: involved
                .iter()
                .map(|c| c.id.to_string())
                .collect::<Vec<_>>()
                .join(",")
                .into(),
        },
        memnodes: Vec::new(),
    };
    let mb = domain.memory_backing.get_or_insert_with(Default::default);
    mb.allocation = Some(MemoryAllocation {
        mode: "immediate".into(),
    });
    let hp = mb.hugepages.get_or_insert_with(Default::default);
    for (virt, cell) in involved.iter().enumerate() {
        let vcpus = &by_cell
            .iter()
            .find(|(id, _)| *id == cell.id)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        numa.cells.push(NumaCell {
            id: virt.to_string().into(),
            cpus: Some(
                vcpus
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
                    .into(),
            ),
            memory: Some(memory / cells + if (virt as u64) < rem { page_size } else { 0 }),
            unit: Some("b".into()),
            ..NumaCell::default()
        });
        tune.memnodes.push(MemNode {
            cellid: index_u32(virt),
            mode: "strict".into(),
            nodeset: cell.id.to_string().into(),
        });
        hp.pages.push(HugePage {
            size: page_size.to_string().into(),
            unit: "b".into(),
            nodeset: virt.to_string().into(),
        });
    }
    if vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .is_some_and(|c| c.realtime.is_some())
    {
        mb.nosharepages = Some(Default::default());
    }
    domain.cpu.numa = Some(numa);
    domain.numatune = Some(tune);
    Ok(())
}

/// Host CPUs as libvirt's cpuset list (`3,4`), in allocation order.
fn cpu_list_to_set(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
