//! Dedicated CPUs: vCPU pinning onto the pod's CPU set, the emulator thread pin, and the
//! dedicated-CPU KVM hint.

use crate::configurators::Env;
use crate::context::Arch;
use crate::domain::{CpuEmulatorPin, CpuTune, CpuTuneVcpuPin, Domain, FeatureKvm, FeatureState, Features};
use crate::error::ConvertError;
use kvrs_core::VirtualMachineInstance;

/// Pins vCPUs in order onto the pod CPU set (0..N-1 by default, N = vCPUs + isolated emulator).
pub fn adjust(env: &Env<'_>, vmi: &VirtualMachineInstance, domain: &mut Domain) -> Result<(), ConvertError> {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let isolate = cpu.and_then(|c| c.isolate_emulator_thread).unwrap_or(false);
    let enabled = match &domain.vcpus {
        Some(v) => v.vcpu.iter().filter(|c| c.enabled.as_deref() == Some("yes")).count() as u32,
        None => domain.vcpu.as_ref().map(|v| v.cpus).unwrap_or(1),
    };
    let needed = enabled + u32::from(isolate);
    let set: Vec<u32> = if env.ctx.cpu_set.is_empty() { (0..needed).collect() } else { env.ctx.cpu_set.clone() };
    if set.len() < enabled as usize {
        return Err(ConvertError::new(
            "spec.domain.cpu.dedicatedCpuPlacement",
            format!("not enough CPUs in the pod CPU set: {} for {enabled} vCPUs", set.len()),
        ));
    }
    let mut tune = CpuTune::default();
    for (vcpu, host) in set.iter().take(enabled as usize).enumerate() {
        tune.vcpupin.push(CpuTuneVcpuPin { vcpu: vcpu as u32, cpuset: host.to_string() });
    }
    if isolate {
        let emu = set.get(enabled as usize).copied().ok_or_else(|| {
            ConvertError::new("spec.domain.cpu.isolateEmulatorThread", "no CPU left for the emulator thread")
        })?;
        tune.emulatorpin = Some(CpuEmulatorPin { cpuset: emu.to_string() });
    }
    domain.cputune = Some(tune);
    if env.arch == Arch::Amd64 {
        let f = domain.features.get_or_insert_with(Features::default);
        let kvm = f.kvm.get_or_insert_with(FeatureKvm::default);
        kvm.hint_dedicated = Some(FeatureState { state: Some("on".into()) });
    }
    if cpu.is_some_and(|c| c.realtime.is_some()) {
        let f = domain.features.get_or_insert_with(Features::default);
        f.pmu = Some(FeatureState { state: Some("off".into()) });
    }
    Ok(())
}
