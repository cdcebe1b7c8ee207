//! Dedicated CPUs: vCPU pinning onto the pod's CPU set, the emulator thread pin, and the
//! dedicated-CPU KVM hint.

use crate::configurators::Env;
use crate::domain::{
    CpuEmulatorPin, CpuTune, CpuTuneIoThreadPin, CpuTuneVcpuPin, Domain, FeatureKvm, FeatureState,
    Features, HugePage, MemNode, MemoryAllocation, Numa, NumaCell, NumaTune, NumaTuneMemory,
};
use crate::error::ConvertError;
use crate::topology::{quantity_to_bytes, virtual_memory};
use kvrs_api::VirtualMachineInstance;

/// A position in a list the converter built as a libvirt index. The lists are bounded by the
/// vCPU count, itself a `u32`, so the saturation never happens; it keeps the conversion checked.
fn index_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Pins vCPUs in order onto the pod CPU set (0..N-1 by default, N = vCPUs + isolated emulator).
pub fn adjust(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let isolate = cpu.and_then(|c| c.isolate_emulator_thread).unwrap_or(false);
    let enabled = match &domain.vcpus {
        Some(v) => index_u32(
            v.vcpu
                .iter()
                .filter(|c| c.enabled.as_deref() == Some("yes"))
                .count(),
        ),
        None => domain.vcpu.as_ref().map(|v| v.cpus).unwrap_or(1),
    };
    let needed = enabled + u32::from(isolate);
    let mut set: Vec<u32> = if env.ctx.cpu_set.is_empty() {
        (0..needed).collect()
    } else {
        env.ctx.cpu_set.clone()
    };
    // KubeVirt builds its CPU pool from the pod's CPU set as the node topology lists it: a CPU
    // the node does not have cannot be pinned to, so a VMI needing more CPUs than the node has
    // fails here (for the emulator thread: "no CPU allocated for the emulation thread").
    if let Some(topo) = env.ctx.topology.as_ref().filter(|t| !t.cells.is_empty()) {
        set.retain(|c| {
            topo.cells
                .iter()
                .any(|cell| cell.cpus.iter().any(|(id, _)| id == c))
        });
    }
    if set.len() < enabled as usize {
        return Err(ConvertError::new(
            "spec.domain.cpu.dedicatedCpuPlacement",
            format!(
                "not enough CPUs in the pod CPU set: {} for {enabled} vCPUs",
                set.len()
            ),
        ));
    }
    let mut tune = CpuTune::default();
    for (vcpu, host) in set.iter().take(enabled as usize).enumerate() {
        tune.vcpupin.push(CpuTuneVcpuPin {
            vcpu: index_u32(vcpu),
            cpuset: host.to_string(),
        });
    }
    if isolate {
        let emu = set.get(enabled as usize).copied().ok_or_else(|| {
            ConvertError::new(
                "spec.domain.cpu.isolateEmulatorThread",
                "no CPU left for the emulator thread",
            )
        })?;
        tune.emulatorpin = Some(CpuEmulatorPin {
            cpuset: emu.to_string(),
        });
    }
    let supplemental = vmi.spec.domain.io_threads_policy.as_deref() == Some("supplementalPool")
        && vmi
            .spec
            .domain
            .io_threads
            .as_ref()
            .and_then(|t| t.supplemental_pool_thread_count)
            .unwrap_or(0)
            > 0;
    if crate::iothreads::has_io_threads(vmi) && !supplemental {
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
    let pin = |tune: &mut CpuTune, thread: usize, cpuset: String| {
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
                pin(tune, t, c.to_string());
            }
        }
    } else {
        let series = vcpus % threads;
        let mut curr = 0usize;
        for t in 1..=threads {
            let len = vcpus / threads + usize::from(t <= series);
            let end = (curr + len).min(set.len());
            let cpus: Vec<String> = set[curr.min(end)..end].iter().map(u32::to_string).collect();
            pin(tune, t, cpus.join(","));
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
                .join(","),
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
            id: virt.to_string(),
            cpus: Some(
                vcpus
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            memory: Some(memory / cells + if (virt as u64) < rem { page_size } else { 0 }),
            unit: Some("b".into()),
            ..NumaCell::default()
        });
        tune.memnodes.push(MemNode {
            cellid: index_u32(virt),
            mode: "strict".into(),
            nodeset: cell.id.to_string(),
        });
        hp.pages.push(HugePage {
            size: page_size.to_string(),
            unit: "b".into(),
            nodeset: virt.to_string(),
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
