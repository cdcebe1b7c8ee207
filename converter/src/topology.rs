//! vCPU topology and memory size as KubeVirt computes them from a VMI.

use crate::error::ConvertError;
use kvrs_api::{Quantity, VirtualMachineInstance};

/// Sockets x cores x threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    /// Sockets.
    pub sockets: u32,
    /// Cores per socket.
    pub cores: u32,
    /// Threads per core.
    pub threads: u32,
}

impl Topology {
    /// Number of vCPUs.
    pub fn vcpus(&self) -> u32 {
        self.sockets
            .saturating_mul(self.cores)
            .saturating_mul(self.threads)
    }
}

fn positive_u32(v: Option<i64>) -> u32 {
    v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

/// The VMI's CPU topology: explicit counts, else sockets from the CPU limit or request.
pub fn cpu_topology(vmi: &VirtualMachineInstance) -> Topology {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let (c, t, s) = match cpu {
        Some(cpu) => (
            positive_u32(cpu.cores),
            positive_u32(cpu.threads),
            positive_u32(cpu.sockets),
        ),
        None => (0, 0, 0),
    };
    let mut topo = Topology {
        sockets: if s != 0 { s } else { 1 },
        cores: if c != 0 { c } else { 1 },
        threads: if t != 0 { t } else { 1 },
    };
    if c == 0 && s == 0 && t == 0 {
        let res = vmi.spec.domain.resources.as_ref();
        let pick = |m: Option<&std::collections::BTreeMap<String, Quantity>>| {
            m.and_then(|m| m.get("cpu")).cloned()
        };
        let q = pick(res.and_then(|r| r.limits.as_ref()))
            .or_else(|| pick(res.and_then(|r| r.requests.as_ref())));
        if let Some(q) = q {
            topo.sockets = q
                .value()
                .ok()
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(0);
        }
    }
    topo
}

/// vCPUs the VMI asks for, at least 1.
pub fn vcpu_count(vmi: &VirtualMachineInstance) -> u32 {
    cpu_topology(vmi).vcpus().max(1)
}

/// Guest memory: `memory.guest`, else the memory request, else the limit.
pub fn virtual_memory(vmi: &VirtualMachineInstance) -> Option<&Quantity> {
    let d = &vmi.spec.domain;
    if let Some(g) = d.memory.as_ref().and_then(|m| m.guest.as_ref()) {
        return Some(g);
    }
    let res = d.resources.as_ref()?;
    let req = res.requests.as_ref().and_then(|r| r.get("memory"));
    if req.is_none()
        && let Some(l) = res.limits.as_ref().and_then(|l| l.get("memory"))
    {
        return Some(l);
    }
    req
}

/// A memory quantity in bytes (fractions rounded the way KubeVirt does: down).
pub fn quantity_to_bytes(q: &Quantity, path: &str) -> Result<u64, ConvertError> {
    let bad = |e: kvrs_api::QuantityError| ConvertError::new(path, e.to_string());
    let v = q.value().map_err(bad)?;
    let milli = q.milli_value().map_err(bad)?;
    let exact = v.checked_mul(1000) == Some(milli);
    let bytes = if exact { v } else { v - 1 };
    u64::try_from(bytes).map_err(|_| {
        ConvertError::new(
            path,
            format!(
                "Memory size '{}' must be greater than or equal to 0",
                q.as_str()
            ),
        )
    })
}
