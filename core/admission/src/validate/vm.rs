//! The VM-level checks of KubeVirt's VirtualMachine webhook: run strategy, DataVolume
//! templates, the template's metadata and the hotplug limits of its spec. The template's spec
//! itself is checked as the VMI it becomes (see [`crate::template::vmi_from_vm`] and
//! [`super::validate`]).

use super::causes::Causes;
use super::{CauseKind, ValidationError, gate_enabled};
use crate::api::VirtualMachine;
use crate::config::ClusterConfig;

/// Run strategies a VM may name (`WaitAsReceiver` only with `DecentralizedLiveMigration`).
pub const RUN_STRATEGIES: &[&str] = &["Halted", "Manual", "Always", "RerunOnFailure", "Once"];

/// Checks a VirtualMachine as KubeVirt's VM webhook does on CREATE, apart from the template's
/// VMI spec.
pub fn validate_vm(vm: &VirtualMachine, config: &ClusterConfig) -> Result<(), ValidationError> {
    let mut causes = Causes::default();
    let spec = &vm.spec;
    match (&spec.running, spec.run_strategy.as_deref()) {
        (Some(_), Some(_)) => causes.invalid(
            "spec.running",
            "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead",
        ),
        (None, None) => causes.invalid("spec.running", "RunStrategy must be specified"),
        _ => {}
    }
    if let Some(rs) = spec.run_strategy.as_deref() {
        if rs == "WaitAsReceiver" {
            if !gate_enabled(config, "DecentralizedLiveMigration") {
                causes.invalid(
                    "spec.runStrategy",
                    format!(
                        "Invalid RunStrategy ({rs}), DecentralizedLiveMigration feature gate is not enabled in kubevirt resource"
                    ),
                );
            }
        } else if !RUN_STRATEGIES.contains(&rs) {
            causes.invalid("spec.runStrategy", format!("Invalid RunStrategy ({rs})"));
        }
    }
    let Some(template_spec) = &spec.template.spec else {
        causes.required("spec.template.spec", "missing virtual machine template.");
        return causes.into_result();
    };
    for (idx, dv) in spec.data_volume_templates.iter().flatten().enumerate() {
        let path = format!("spec.dataVolumeTemplate[{idx}]");
        let name = dv.metadata.name.as_deref().unwrap_or("");
        if name.is_empty() {
            causes.required(
                format!("{path}.name"),
                format!("'name' field must not be empty for DataVolumeTemplate entry {path}.name."),
            );
            continue;
        }
        match (&dv.spec.pvc, &dv.spec.storage) {
            (None, None) => {
                causes.invalid(
                    format!("{path}.PVC.Storage"),
                    "Missing Data volume PVC or Storage",
                );
                continue;
            }
            (Some(_), Some(_)) => {
                causes.invalid(
                    format!("{path}.PVC.Storage"),
                    "Duplicate storage definition, both target storage and target pvc defined",
                );
                continue;
            }
            _ => {}
        }
        let referenced = template_spec.volumes.iter().flatten().any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|p| p.claim_name == name)
                || v.data_volume.as_ref().is_some_and(|d| d.name == name)
        });
        if !referenced {
            causes.required(
                path.clone(),
                format!(
                    "DataVolumeTemplate entry {path} must be referenced in the VMI template's 'volumes' list"
                ),
            );
        }
    }
    let reserved = spec
        .template
        .metadata
        .labels
        .iter()
        .flatten()
        .any(|(k, _)| super::metadata::RESERVED_LABELS.contains(&k.as_str()));
    if reserved {
        causes.push(
            CauseKind::NotSupported,
            "spec.template.metadata.labels",
            "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
        );
    }
    if config.live_update {
        if let Some(cpu) = &template_spec.domain.cpu {
            let (s, m) = (cpu.sockets.unwrap_or(0), cpu.max_sockets.unwrap_or(0));
            if s != 0 && m != 0 && s > m {
                causes.invalid(
                    "spec.template.spec.domain.cpu.sockets",
                    "Number of sockets in CPU topology is greater than the maximum sockets allowed",
                );
            }
        }
        let memory = template_spec.domain.memory.as_ref();
        if let Some(max) = memory.and_then(|m| m.max_guest.as_ref()) {
            let guest = memory
                .and_then(|m| m.guest.as_ref())
                .and_then(|g| g.value().ok());
            let max = max.value().unwrap_or(0);
            let reason = match guest {
                None => Some("Guest memory must be configured when memory hotplug is enabled"),
                Some(g) => {
                    // The VM webhook sees the template after the VM mutator set its architecture.
                    let mut spec = template_spec.clone();
                    if spec.architecture.as_deref().unwrap_or("").is_empty() {
                        spec.architecture = Some(config.architecture.clone());
                    }
                    crate::defaults::memory_hotplug_blocker(&spec, g, max)
                }
            };
            if let Some(reason) = reason {
                causes.invalid("spec.template.spec.domain.memory.guest", reason);
            }
        }
    }
    causes.into_result()
}
