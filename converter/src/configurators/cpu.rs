//! `<cpu>`, `<vcpu>` and `<vcpus>`: mode/model, features, topology and hotplug slots.

use super::{Configurator, Env};
use crate::context::Arch;
use crate::domain::{CpuFeature, CpuTopology, Domain, Str, Vcpu, Vcpus, VcpusVcpu};
use crate::error::ConvertError;
use crate::topology::{Topology, checked_cpu_topology, checked_max_topology};
use kvrs_api::VirtualMachineInstance;

/// Writes the CPU section.
pub(super) struct Cpu<'a> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{node, run, vmi};
    use crate::context::ConverterContext;
    use serde_json::{Value, json};

    fn cpu_of(domain_spec: Value, ctx: &ConverterContext) -> Domain {
        let vmi = vmi(json!({"domain": domain_spec}));
        let env = Env::new(&vmi, ctx);
        run(&Cpu { env: &env }, &vmi).expect("configures")
    }

    fn cpu(domain_spec: Value) -> Domain {
        cpu_of(domain_spec, &ConverterContext::default())
    }

    /// (sockets, cores, threads) and the `<vcpu>` count.
    fn topology(d: &Domain) -> ((u32, u32, u32), u32) {
        let t = d
            .cpu
            .topology
            .clone()
            .expect("a topology is always written");
        let n = |v: Option<u32>| v.unwrap_or(0);
        (
            (n(t.sockets), n(t.cores), n(t.threads)),
            d.vcpu.as_ref().expect("a vcpu count").cpus,
        )
    }

    /// `name:policy` of each CPU feature.
    fn features(d: &Domain) -> Vec<String> {
        let policy = |f: &CpuFeature| f.policy.as_deref().unwrap_or("").to_string();
        d.cpu
            .features
            .iter()
            .map(|f| format!("{}:{}", f.name, policy(f)))
            .collect()
    }

    #[test]
    fn topology_and_vcpu_count_come_from_the_cpu_spec_or_the_cpu_resources() {
        assert_eq!(topology(&cpu(json!({"devices": {}}))), ((1, 1, 1), 1));
        let explicit = cpu(json!({"devices": {}, "cpu": {"sockets": 2, "cores": 3, "threads": 2}}));
        assert_eq!(topology(&explicit), ((2, 3, 2), 12));
        let request = cpu(json!({"devices": {}, "resources": {"requests": {"cpu": "3"}}}));
        assert_eq!(topology(&request), ((3, 1, 1), 3));
        let limit = cpu(json!({"devices": {}, "resources": {"limits": {"cpu": "4"}}}));
        assert_eq!(topology(&limit), ((4, 1, 1), 4));
        // The limit wins over the request.
        let both = cpu(json!({"devices": {},
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}}));
        assert_eq!(topology(&both), ((4, 1, 1), 4));
    }

    #[test]
    fn the_model_sets_the_mode() {
        let mode_model = |model: Value| {
            let d = cpu(json!({"devices": {}, "cpu": {"model": model}}));
            (
                d.cpu.mode.map(|s| s.to_string()),
                d.cpu.model.map(|s| s.to_string()),
            )
        };
        let s = |v: &str| Some(v.to_string());
        assert_eq!(mode_model(Value::Null), (s("host-model"), None));
        assert_eq!(mode_model(json!("")), (s("host-model"), None));
        assert_eq!(mode_model(json!("host-model")), (s("host-model"), None));
        assert_eq!(
            mode_model(json!("host-passthrough")),
            (s("host-passthrough"), None)
        );
        assert_eq!(
            mode_model(json!("Skylake-Client")),
            (s("custom"), s("Skylake-Client"))
        );
    }

    #[test]
    fn features_are_copied_and_a_named_model_on_amd64_disables_mpx() {
        let d = cpu(json!({"devices": {}, "cpu": {"model": "Skylake-Client",
            "features": [{"name": "invtsc", "policy": "require"}, {"name": "pcid"}]}}));
        assert_eq!(features(&d), ["invtsc:require", "pcid:", "mpx:disable"]);
    }

    #[test]
    fn mpx_is_left_alone_for_host_models_a_users_own_mpx_and_other_architectures() {
        for model in ["host-model", "host-passthrough"] {
            assert!(features(&cpu(json!({"devices": {}, "cpu": {"model": model}}))).is_empty());
        }
        let own = cpu(json!({"devices": {}, "cpu": {"model": "Haswell",
            "features": [{"name": "mpx", "policy": "require"}]}}));
        assert_eq!(features(&own), ["mpx:require"]);
        let arm = cpu_of(
            json!({"devices": {}, "cpu": {"model": "cortex-a57"}}),
            &node(Arch::Arm64),
        );
        assert!(features(&arm).is_empty());
    }

    #[test]
    fn cross_architecture_emulation_uses_the_max_model_for_host_models_and_no_model() {
        let cross = ConverterContext {
            allow_cross_arch_emulation: true,
            ..ConverterContext::default()
        };
        let mode_model = |cpu_spec: Value| {
            let d = cpu_of(json!({"devices": {}, "cpu": cpu_spec}), &cross);
            (
                d.cpu.mode.map(|s| s.to_string()),
                d.cpu.model.map(|s| s.to_string()),
            )
        };
        let custom = |m: &str| (Some("custom".to_string()), Some(m.to_string()));
        assert_eq!(mode_model(json!({"model": "host-model"})), custom("max"));
        assert_eq!(
            mode_model(json!({"model": "host-passthrough"})),
            custom("max")
        );
        assert_eq!(mode_model(json!({})), custom("max"));
        assert_eq!(mode_model(json!({"model": "Haswell"})), custom("Haswell"));
    }

    #[test]
    fn max_sockets_writes_hotplug_slots_with_the_first_socket_fixed() {
        let d = cpu(
            json!({"devices": {}, "cpu": {"sockets": 2, "cores": 2, "threads": 1,
            "maxSockets": 3}}),
        );
        // The topology and count become the maximum; the started vCPUs are enabled.
        assert_eq!(topology(&d), ((3, 2, 1), 6));
        // (id, enabled, hotpluggable)
        let slots: Vec<(u32, Option<&str>, Option<&str>)> = d
            .vcpus
            .as_ref()
            .expect("hotplug slots")
            .vcpu
            .iter()
            .map(|v| (v.id, v.enabled.as_deref(), v.hotpluggable.as_deref()))
            .collect();
        let (yes, no) = (Some("yes"), Some("no"));
        assert_eq!(
            slots,
            [
                (0, yes, no),
                (1, yes, no),
                (2, yes, yes),
                (3, yes, yes),
                (4, no, yes),
                (5, no, yes),
            ]
        );
    }

    #[test]
    fn no_hotplug_slots_without_max_sockets_or_on_s390x() {
        let zero = cpu(json!({"devices": {}, "cpu": {"sockets": 2, "maxSockets": 0}}));
        assert_eq!(zero.vcpus, None);
        assert_eq!(topology(&zero), ((2, 1, 1), 2));
        let s390x = cpu_of(
            json!({"devices": {}, "cpu": {"sockets": 2, "maxSockets": 4}}),
            &node(Arch::S390x),
        );
        assert_eq!(s390x.vcpus, None);
        assert_eq!(topology(&s390x), ((2, 1, 1), 2));
    }
}
