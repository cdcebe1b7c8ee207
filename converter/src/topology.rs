//! vCPU topology and memory size as KubeVirt computes them from a VMI. Public: [`vcpu_count`]
//! (other crates size per-vCPU things by it) and its bound [`MAX_VCPUS`].

use crate::error::ConvertError;
use kvrs_api::{Quantity, VirtualMachineInstance};

/// Sockets x cores x threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Topology {
    /// Sockets.
    pub(crate) sockets: u32,
    /// Cores per socket.
    pub(crate) cores: u32,
    /// Threads per core.
    pub(crate) threads: u32,
}

impl Topology {
    /// Number of vCPUs.
    pub(crate) fn vcpus(&self) -> u32 {
        self.sockets
            .saturating_mul(self.cores)
            .saturating_mul(self.threads)
    }
}

fn positive_u32(v: Option<i64>) -> u32 {
    v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

/// The VMI's CPU topology: explicit counts, else sockets from the CPU limit or request.
pub(crate) fn cpu_topology(vmi: &VirtualMachineInstance) -> Topology {
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

/// The most vCPUs a domain may have; the same bound as kvrs-admission's `MAX_GUEST_VCPUS`
/// (KVM's `KVM_MAX_VCPUS` on x86-64, QEMU's q35 `max_cpus` since 8.1). Admission refuses a VMI
/// above it; the converter checks again because it writes one `<vcpu>` entry per hot-pluggable
/// vCPU, and a library caller may convert a VMI that was never admitted.
pub const MAX_VCPUS: u32 = 1024;

/// [`cpu_topology`], refusing counts above [`MAX_VCPUS`] and CPU quantities that are not a
/// count, each naming the field it comes from.
pub(crate) fn checked_cpu_topology(vmi: &VirtualMachineInstance) -> Result<Topology, ConvertError> {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let explicit = cpu.is_some_and(|c| {
        [c.cores, c.sockets, c.threads]
            .iter()
            .any(|v| v.unwrap_or(0) > 0)
    });
    let too_many = |field: &str, n: u128| {
        ConvertError::new(
            field,
            format!("{n} vCPUs, more than the {MAX_VCPUS} vCPUs a domain can have"),
        )
    };
    if let Some(c) = cpu {
        for (name, v) in [
            ("sockets", c.sockets),
            ("cores", c.cores),
            ("threads", c.threads),
        ] {
            if let Some(v) = v.filter(|v| *v > i64::from(MAX_VCPUS)) {
                return Err(too_many(
                    &format!("spec.domain.cpu.{name}"),
                    u128::from(v.unsigned_abs()),
                ));
            }
        }
    }
    if !explicit {
        let res = vmi.spec.domain.resources.as_ref();
        let limit = res
            .and_then(|r| r.limits.as_ref())
            .and_then(|m| m.get("cpu"));
        let request = res
            .and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get("cpu"));
        let picked = match (limit, request) {
            (Some(q), _) => Some(("spec.domain.resources.limits.cpu", q)),
            (None, Some(q)) => Some(("spec.domain.resources.requests.cpu", q)),
            (None, None) => None,
        };
        if let Some((field, q)) = picked {
            let v = q
                .value()
                .map_err(|e| ConvertError::new(field, e.to_string()))?;
            if v > i64::from(MAX_VCPUS) {
                return Err(too_many(field, u128::from(v.unsigned_abs())));
            }
        }
    }
    let topo = cpu_topology(vmi);
    let product =
        |t: &Topology| u128::from(t.sockets) * u128::from(t.cores) * u128::from(t.threads);
    let n = product(&topo);
    if n > u128::from(MAX_VCPUS) {
        return Err(too_many("spec.domain.cpu", n));
    }
    Ok(topo)
}

/// The hotplug ceiling `maxSockets` x cores x threads, refused above [`MAX_VCPUS`].
pub(crate) fn checked_max_topology(
    topo: Topology,
    max_sockets: i64,
) -> Result<Topology, ConvertError> {
    let field = "spec.domain.cpu.maxSockets";
    let n = i128::from(max_sockets) * i128::from(topo.cores) * i128::from(topo.threads);
    let max = Topology {
        sockets: u32::try_from(max_sockets).unwrap_or(u32::MAX),
        ..topo
    };
    if n > i128::from(MAX_VCPUS) || n < 0 {
        return Err(ConvertError::new(
            field,
            format!(
                "{max_sockets} sockets x {} cores x {} threads is {n} hot-pluggable vCPUs, more \
                 than the {MAX_VCPUS} vCPUs a domain can have",
                topo.cores, topo.threads
            ),
        ));
    }
    Ok(max)
}

/// vCPUs the VMI asks for, at least 1.
pub fn vcpu_count(vmi: &VirtualMachineInstance) -> u32 {
    cpu_topology(vmi).vcpus().max(1)
}

/// Guest memory: `memory.guest`, else the memory request, else the limit.
pub(crate) fn virtual_memory(vmi: &VirtualMachineInstance) -> Option<&Quantity> {
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
pub(crate) fn quantity_to_bytes(q: &Quantity, path: &str) -> Result<u64, ConvertError> {
    if let Some(bytes) = whole_bytes(q.as_str()) {
        return Ok(bytes);
    }
    let bad = |e: kvrs_api::QuantityError| ConvertError::new(path, e.to_string());
    // KubeVirt: `Value()`, minus one unless `Value() * 1000 == MilliValue()`. Both round away
    // from zero, so `Value()` is `MilliValue() / 1000` rounded the same way: one parse, not two
    // (a quantity whose thousandths overflow failed on `MilliValue()` before, and still does).
    let milli = q.milli_value().map_err(bad)?;
    let exact = milli % 1000 == 0;
    let v = milli / 1000 + if exact { 0 } else { milli.signum() };
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

/// [`quantity_to_bytes`] for the spelling nearly every memory size has, `<digits>[suffix]`
/// (`4Gi`, `1024M`, `512`): a whole number of bytes, so exact, in 64-bit arithmetic — where the
/// general parser's 128-bit multiplications and divisions cost a few hundred instructions per
/// quantity. `None` for anything else (fractions, signs, exponents, spaces, milli units) and for
/// values whose thousandths pass `i64::MAX` (the general path's overflow): those take the
/// general path, which gives the same answer or the same error as before.
fn whole_bytes(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let digits = b
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(b.len());
    // Eighteen digits stay below 10^18, which fits a u64 with room for the last step.
    if digits == 0 || digits > 18 {
        return None;
    }
    let unit: u64 = match b.get(digits..)? {
        b"" => 1,
        b"Ki" => 1 << 10,
        b"Mi" => 1 << 20,
        b"Gi" => 1 << 30,
        b"Ti" => 1 << 40,
        b"Pi" => 1 << 50,
        b"Ei" => 1 << 60,
        b"k" => 1_000,
        b"M" => 1_000_000,
        b"G" => 1_000_000_000,
        b"T" => 1_000_000_000_000,
        b"P" => 1_000_000_000_000_000,
        b"E" => 1_000_000_000_000_000_000,
        _ => return None,
    };
    let n = b
        .get(..digits)?
        .iter()
        .fold(0u64, |n, &c| n * 10 + u64::from(c - b'0'));
    let bytes = n.checked_mul(unit)?;
    (bytes <= i64::MAX.unsigned_abs() / 1000).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KubeVirt's rule as it was written before (two parses): `Value()`, minus one unless
    /// `Value() * 1000 == MilliValue()`.
    fn two_parses(q: &Quantity) -> Result<i64, String> {
        let v = q.value().map_err(|e| e.to_string())?;
        let milli = q.milli_value().map_err(|e| e.to_string())?;
        Ok(if v.checked_mul(1000) == Some(milli) {
            v
        } else {
            v - 1
        })
    }

    #[test]
    fn one_parse_agrees_with_value_and_milli_value() {
        let texts = [
            "0",
            "1",
            "999",
            "1000",
            "1024M",
            "1Gi",
            "64Mi",
            "1.5",
            "1.5Gi",
            "0.1",
            "0.001",
            "0.0001",
            "1m",
            "999m",
            "1001m",
            "1500m",
            "1n",
            "1u",
            "123456789n",
            "-1",
            "-1m",
            "-1.5",
            "-0.0001",
            "1e3",
            "1.2e-3",
            "8Ei",
            "9223372036854775807",
            "9223372036854775807m",
            "9223372036854776",
            "9223372036854775",
            "abc",
            "",
            "12Q",
            "4Gi",
            "16Gi",
            "0Ki",
            "007Mi",
            "1k",
            "1M",
            "1G",
            "1T",
            "1P",
            "1E",
            "9E",
            "10E",
            "8191Pi",
            "8192Pi",
            "9223372036854775Ki",
            "9223372036854775",
            "9223372036854776",
            "999999999999999999",
            "1000000000000000000",
            " 1Gi",
            "1Gi ",
            "+1Gi",
            "1Ki1",
            "1gi",
        ];
        for text in texts {
            let q = Quantity::new(text.to_string());
            let expected = two_parses(&q);
            let found = quantity_to_bytes(&q, "f").map(|b| i64::try_from(b).unwrap_or(-1));
            match (&expected, &found) {
                (Ok(e), Ok(f)) => assert_eq!(e, f, "{text}"),
                (Ok(e), Err(err)) => assert!(*e < 0, "{text}: {err}"),
                (Err(e), Err(err)) => assert_eq!(err.to_string(), format!("f: {e}"), "{text}"),
                (Err(e), Ok(f)) => panic!("{text}: expected error {e}, found {f}"),
            }
        }
    }
}
