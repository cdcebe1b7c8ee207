//! What virt-controller reserves for a VMI's launcher pod: the memory overhead and the compute
//! container's requests and limits, as KubeVirt v1.9.0 computes them.
//!
//! The arithmetic lives in `kvrs-overhead` on plain numbers; this module reads the VMI and the
//! cluster configuration and feeds it. Quantities keep Kubernetes' print formats, so the pod shows
//! `1294Mi` where KubeVirt does and `1305018368` where KubeVirt does.

mod compute;
mod overhead;
mod qty;
mod report;

use std::collections::BTreeMap;

pub use compute::{AutoLimits, ComputeResources, compute_resources};
pub use overhead::{MemoryOverhead, memory_overhead, overhead_inputs};
pub use report::ResourceReport;

use crate::api::{CPU, VirtualMachineInstance};
use crate::quantity::{Quantity, QuantityError};

/// Why resources cannot be computed for a VMI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// A quantity in the VMI is not a Kubernetes quantity.
    #[error("{field}: {source}")]
    Quantity {
        /// Field path of the bad quantity.
        field: String,
        /// What is wrong with it.
        source: QuantityError,
    },
    /// Nothing says how much memory the guest gets.
    #[error(
        "spec.domain.memory.guest: missing, and neither spec.domain.resources.requests.memory nor \
         spec.domain.resources.limits.memory nor hugepages give the guest memory"
    )]
    MemoryMissing,
    /// The cluster's CPU allocation ratio is zero.
    #[error("cpuAllocationRatio: must be at least 1, got 0")]
    ZeroCpuAllocationRatio,
}

/// The number of vCPUs of a CPU topology: sockets x cores x threads, where a zero or missing
/// factor is skipped (KubeVirt's `GetNumberOfVCPUs`).
pub fn vcpus(cpu: &CPU) -> i64 {
    let mut n = cpu.cores.unwrap_or(0);
    for f in [cpu.sockets.unwrap_or(0), cpu.threads.unwrap_or(0)] {
        if f != 0 {
            n = if n == 0 { f } else { n.saturating_mul(f) };
        }
    }
    n
}

/// Whether the VMI asks for dedicated CPUs.
pub fn is_cpu_dedicated(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.dedicated_cpu_placement)
        .unwrap_or(false)
}

fn resource_list(
    vmi: &VirtualMachineInstance,
    limits: bool,
) -> Option<&BTreeMap<String, Quantity>> {
    let r = vmi.spec.domain.resources.as_ref()?;
    if limits {
        r.limits.as_ref()
    } else {
        r.requests.as_ref()
    }
}

/// The milli value of `spec.domain.resources.<requests|limits>.<name>`, 0 when absent.
fn resource_milli(
    vmi: &VirtualMachineInstance,
    limits: bool,
    name: &str,
) -> Result<i64, ResourceError> {
    match resource_list(vmi, limits).and_then(|l| l.get(name)) {
        None => Ok(0),
        Some(q) => q.milli_value().map_err(|e| ResourceError::Quantity {
            field: resource_field(limits, name),
            source: e,
        }),
    }
}

fn resource_field(limits: bool, name: &str) -> String {
    format!(
        "spec.domain.resources.{}.{name}",
        if limits { "limits" } else { "requests" }
    )
}

/// Whether requests equal limits for memory and CPU, the sign that the user wants QoS
/// Guaranteed (a memory limit alone counts: KubeVirt copies it into the request).
pub fn wants_qos_guaranteed(vmi: &VirtualMachineInstance) -> Result<bool, ResourceError> {
    let req_mem = resource_milli(vmi, false, "memory")?;
    let lim_mem = resource_milli(vmi, true, "memory")?;
    let req_cpu = resource_milli(vmi, false, "cpu")?;
    let lim_cpu = resource_milli(vmi, true, "cpu")?;
    let memory = (req_mem == 0 && lim_mem != 0) || (req_mem != 0 && req_mem == lim_mem);
    let cpu = req_cpu != 0 && req_cpu == lim_cpu;
    Ok(memory && cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpus_skip_missing_factors() {
        let cpu = |c, s, t| CPU {
            cores: c,
            sockets: s,
            threads: t,
            ..Default::default()
        };
        assert_eq!(vcpus(&cpu(Some(2), None, None)), 2);
        assert_eq!(vcpus(&cpu(Some(1), Some(3), Some(1))), 3);
        assert_eq!(vcpus(&cpu(None, Some(2), Some(2))), 4);
        assert_eq!(vcpus(&cpu(None, None, None)), 0);
    }
}

#[cfg(test)]
mod properties;
