//! KubeVirt's admission webhooks, in front of the embedded API server: what virt-api does on a
//! cluster. A VMI is defaulted and validated when it is created (the mutating and validating
//! webhooks); a VM is validated when it is created or changed. Everything else passes.

use kvrs_apiserver::{Admission, Operation};
use kvrs_core::{ClusterConfig, VirtualMachine, VirtualMachineInstance};
use serde_json::Value;

/// The webhooks with the cluster's configuration.
pub struct KubevirtWebhooks {
    /// What virt-api would read from the KubeVirt CR.
    pub config: ClusterConfig,
}

impl Admission for KubevirtWebhooks {
    fn admit(&self, op: Operation, resource: &str, obj: &mut Value) -> Result<(), String> {
        match (op, resource) {
            (Operation::Create, "virtualmachineinstances") => {
                let vmi: VirtualMachineInstance = serde_json::from_value(obj.clone())
                    .map_err(|e| format!("admission webhook \"virtualmachineinstances-mutator.kubevirt.io\" denied the request: {e}"))?;
                let admitted = kvrs_core::admission::admit_created(vmi, &self.config, wall_clock()).map_err(|e| {
                    format!("admission webhook \"virtualmachineinstances-create-validator.kubevirt.io\" denied the request: {e}")
                })?;
                *obj = serde_json::to_value(admitted).map_err(|e| e.to_string())?;
                Ok(())
            }
            (_, "virtualmachines") => {
                let vm: VirtualMachine = serde_json::from_value(obj.clone())
                    .map_err(|e| format!("admission webhook \"virtualmachine-validator.kubevirt.io\" denied the request: {e}"))?;
                kvrs_core::validate::validate_vm(&vm, &self.config)
                    .map_err(|e| format!("admission webhook \"virtualmachine-validator.kubevirt.io\" denied the request: {e}"))
            }
            _ => Ok(()),
        }
    }
}

/// The webhook's clock: virt-api stamps the `Pending` transition with the time of the create.
fn wall_clock() -> kvrs_core::time::Now {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    kvrs_core::time::Now::from_unix(unix)
}
