//! `<cpu>`, `<vcpu>` and `<vcpus>`: mode/model, features, topology and hotplug slots.

use super::{Configurator, Env};
use crate::context::Arch;
use crate::domain::{CpuFeature, CpuTopology, Domain, Str, Vcpu, Vcpus, VcpusVcpu};
use crate::error::ConvertError;
use crate::topology::{Topology, checked_cpu_topology, checked_max_topology};
use kvrs_api::VirtualMachineInstance;

/// Writes the CPU section.
pub struct Cpu<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

fn dom_topology(t: Topology) -> CpuTopology {
    let nz = |v: u32| (v != 0).then_some(v);
    CpuTopology {
        sockets: nz(t.sockets),
        cores: nz(t.cores),
        threads: nz(t.threads),
    }
}

impl Configurator for Cpu<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let topo = checked_cpu_topology(vmi)?;
        let count = topo.vcpus();
        domain.cpu.topology = Some(dom_topology(topo));
        domain.vcpu = Some(Vcpu {
            placement: "static".into(),
            cpus: count,
        });
        let cross = self.env.ctx.allow_cross_arch_emulation;
        let hotplug_supported = self.env.arch != Arch::S390x;
        if let Some(cpu) = &vmi.spec.domain.cpu {
            let max_sockets = cpu.max_sockets.unwrap_or(0);
            if max_sockets != 0 && hotplug_supported {
                // Bounded before anything is allocated per vCPU.
                let max = checked_max_topology(topo, max_sockets)?;
                let min_enabled = topo.cores * topo.threads;
                let total = max.vcpus();
                let yn = |b: bool| Some(Str::Borrowed(if b { "yes" } else { "no" }));
                domain.vcpus = Some(Vcpus {
                    vcpu: (0..total)
                        .map(|id| VcpusVcpu {
                            id,
                            enabled: yn(id < count),
                            hotpluggable: yn(id >= min_enabled),
                            order: None,
                        })
                        .collect(),
                });
                domain.cpu.topology = Some(dom_topology(max));
                domain.vcpu = Some(Vcpu {
                    placement: "static".into(),
                    cpus: total,
                });
            }
            let model = cpu.model.as_deref().unwrap_or("");
            let host_mode = model == "host-model" || model == "host-passthrough";
            if !model.is_empty() {
                if cross && host_mode {
                    domain.cpu.mode = Some("custom".into());
                    domain.cpu.model = Some("max".into());
                } else if host_mode {
                    // One of the two constants (host_mode), so borrowed.
                    domain.cpu.mode = Some(
                        if model == "host-model" {
                            "host-model"
                        } else {
                            "host-passthrough"
                        }
                        .into(),
                    );
                } else {
                    domain.cpu.mode = Some("custom".into());
                    domain.cpu.model = Some(model.to_string().into());
                }
            }
            let mut has_mpx = false;
            for f in cpu.features.iter().flatten() {
                has_mpx |= f.name == "mpx";
                domain.cpu.features.push(CpuFeature {
                    name: super::util::intern(&f.name),
                    policy: f.policy.clone().filter(|p| !p.is_empty()).map(Into::into),
                });
            }
            if self.env.arch == Arch::Amd64 && !has_mpx && !host_mode {
                domain.cpu.features.push(CpuFeature {
                    name: "mpx".into(),
                    policy: Some("disable".into()),
                });
            }
        }
        if vmi
            .spec
            .domain
            .cpu
            .as_ref()
            .and_then(|c| c.model.as_deref())
            .unwrap_or("")
            .is_empty()
        {
            if cross {
                domain.cpu.mode = Some("custom".into());
                domain.cpu.model = Some("max".into());
            } else {
                domain.cpu.mode = Some("host-model".into());
            }
        }
        Ok(())
    }
}
