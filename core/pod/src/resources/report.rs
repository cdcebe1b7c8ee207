//! The `key: value` summary `kvrs overhead` prints (the oracle's `NAME.overhead.txt` layout).

use std::fmt::Write;

use super::{
    AutoLimits, ComputeResources, MemoryOverhead, ResourceError, compute_resources, memory_overhead,
};
use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;

/// Overhead and compute-container resources of a VMI, computed together.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceReport {
    /// The memory overhead.
    pub overhead: MemoryOverhead,
    /// The compute container's requests and limits.
    pub compute: ComputeResources,
}

impl ResourceReport {
    /// Computes both for `vmi` in a namespace without limit quotas.
    pub fn new(
        vmi: &VirtualMachineInstance,
        config: &ClusterConfig,
    ) -> Result<Self, ResourceError> {
        Self::with_auto_limits(vmi, config, &AutoLimits::default())
    }

    /// Computes both for `vmi`, adding the limits a namespace quota demands.
    pub fn with_auto_limits(
        vmi: &VirtualMachineInstance,
        config: &ClusterConfig,
        auto: &AutoLimits,
    ) -> Result<Self, ResourceError> {
        let overhead = memory_overhead(vmi, config)?;
        let compute = compute_resources(vmi, config, &overhead, auto)?;
        Ok(Self { overhead, compute })
    }

    /// One `key: value` line each: overhead bytes, overhead quantity, then the compute
    /// container's memory and CPU requests and limits as `quantity (bytes|millicores)`.
    pub fn to_lines(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "memoryOverheadBytes: {}", self.overhead.bytes);
        let _ = writeln!(out, "memoryOverhead: {}", self.overhead.quantity);
        for (resource, milli) in [("memory", false), ("cpu", true)] {
            for (kind, list) in [
                ("requests", &self.compute.requests),
                ("limits", &self.compute.limits),
            ] {
                if let Some(q) = list.get(resource) {
                    let n = if milli { q.milli_value() } else { q.value() };
                    let n = n.map(|n| n.to_string()).unwrap_or_else(|e| e.to_string());
                    let _ = writeln!(out, "compute.{kind}.{resource}: {q} ({n})");
                }
            }
        }
        out
    }
}
