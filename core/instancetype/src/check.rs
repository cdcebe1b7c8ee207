//! The checks KubeVirt's VM webhook makes of a VM's instancetype and preference: the spread
//! topology must divide the instancetype's vCPUs (`preference/validation`), and the VM must
//! meet the preference's requirements (`preference/requirements`, run on the applied and
//! defaulted template).

use kvrs_api::VirtualMachineInstanceSpec;
use kvrs_api::quantity::Quantity;

use crate::conflict::{Conflict, Conflicts};
use crate::topology::{Across, Topology, preferred_topology, spread_options};
use crate::types::{InstancetypeSpec, PreferenceSpec};

/// The spread topology's divisibility check: a conflict at `instancetype.spec.cpu.guest` with
/// KubeVirt's message when the vCPUs do not split evenly. A ratio of 0 is refused the same way
/// (KubeVirt divides by it and panics).
pub fn check_spread(
    instancetype: Option<&InstancetypeSpec>,
    preference: Option<&PreferenceSpec>,
) -> Option<Conflict> {
    let it = instancetype?;
    let preference = preference?;
    if preferred_topology(Some(preference)) != Topology::Spread {
        return None;
    }
    let (ratio, across) = spread_options(preference);
    let guest = it.cpu.guest;
    let indivisible = |a: u32, b: u32| a.checked_rem(b).is_none_or(|r| r > 0);
    let message = match across {
        Across::SocketsCores if indivisible(guest, ratio) => format!(
            "{guest} vCPUs provided by the instance type are not divisible by the \
             Spec.PreferSpreadSocketToCoreRatio or Spec.CPU.PreferSpreadOptions.Ratio of {ratio} \
             provided by the preference"
        ),
        Across::CoresThreads if indivisible(guest, ratio) => format!(
            "{guest} vCPUs provided by the instance type are not divisible by the number of \
             threads per core {ratio}"
        ),
        Across::SocketsCoresThreads if guest % 2 > 0 || indivisible(guest / 2, ratio) => format!(
            "{guest} vCPUs provided by the instance type are not divisible by the number of \
             threads per core 2 and Spec.PreferSpreadSocketToCoreRatio or \
             Spec.CPU.PreferSpreadOptions.Ratio of {ratio}"
        ),
        _ => return None,
    };
    Some(Conflict {
        path: "instancetype.spec.cpu.guest".to_string(),
        message: Some(message),
    })
}

/// A requirement of the preference the VM does not meet: the fields at fault and KubeVirt's
/// reason (the webhook refuses with `failure checking preference requirements: <reason>` at
/// the fields).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequirementError {
    /// The fields at fault.
    pub fields: Conflicts,
    /// KubeVirt's reason.
    pub message: String,
}

fn unmet(paths: &[&str], message: String) -> RequirementError {
    RequirementError {
        fields: Conflicts(paths.iter().map(|p| Conflict::at(*p)).collect()),
        message,
    }
}

/// Checks the preference's requirements (CPU, then memory, then architecture) against the
/// instancetype, or, without one, against the VM's own (applied, defaulted) spec.
pub fn check_requirements(
    instancetype: Option<&InstancetypeSpec>,
    preference: Option<&PreferenceSpec>,
    spec: &VirtualMachineInstanceSpec,
) -> Result<(), RequirementError> {
    let Some(req) = preference.and_then(|p| p.requirements.as_ref()) else {
        return Ok(());
    };
    if let Some(cpu) = &req.cpu {
        check_cpu(instancetype, preference, spec, cpu.guest)?;
    }
    if let Some(memory) = &req.memory {
        let zero = Quantity::new("0");
        check_memory(instancetype, spec, memory.guest.as_ref().unwrap_or(&zero))?;
    }
    if let Some(arch) = &req.architecture {
        let have = spec.architecture.as_deref().unwrap_or("");
        if have != arch {
            return Err(unmet(
                &["spec.template.spec.architecture"],
                format!("preference requires architecture {arch} but {have} is being requested"),
            ));
        }
    }
    Ok(())
}

fn check_cpu(
    instancetype: Option<&InstancetypeSpec>,
    preference: Option<&PreferenceSpec>,
    spec: &VirtualMachineInstanceSpec,
    required: u32,
) -> Result<(), RequirementError> {
    if let Some(it) = instancetype {
        if it.cpu.guest < required {
            return Err(unmet(
                &["spec.instancetype"],
                format!(
                    "insufficient CPU resources of {} vCPU provided by instance type, preference \
                     requires {required} vCPU",
                    it.cpu.guest
                ),
            ));
        }
        return Ok(());
    }
    let Some(cpu) = &spec.domain.cpu else {
        return Err(unmet(
            &["spec.template.spec.domain.cpu"],
            format!(
                "no CPU resources provided by VirtualMachine, preference requires {required} vCPU"
            ),
        ));
    };
    // Go's uint32 counts: a missing or out-of-range count reads as 0 / wraps as there.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "Go's uint32 fields, read as Go reads them"
    )]
    let count = |n: Option<i64>| n.unwrap_or(0) as u32;
    let (sockets, cores, threads) = (count(cpu.sockets), count(cpu.cores), count(cpu.threads));
    let base = "spec.template.spec.domain.cpu";
    let insufficient = |have: u32, provided_as: &str| {
        format!(
            "insufficient CPU resources of {have} vCPU provided by VirtualMachine, preference \
             requires {required} vCPU provided as {provided_as}"
        )
    };
    let path = |f: &str| format!("{base}.{f}");
    match preferred_topology(preference) {
        Topology::Threads if threads < required => {
            Err(unmet(&[&path("threads")], insufficient(threads, "threads")))
        }
        Topology::Cores if cores < required => {
            Err(unmet(&[&path("cores")], insufficient(cores, "cores")))
        }
        Topology::Sockets if sockets < required => {
            Err(unmet(&[&path("sockets")], insufficient(sockets, "sockets")))
        }
        Topology::Any => {
            let total = cores.wrapping_mul(sockets).wrapping_mul(threads);
            if total < required {
                return Err(unmet(
                    &[&path("cores"), &path("sockets"), &path("threads")],
                    insufficient(total, "cores, sockets and threads"),
                ));
            }
            Ok(())
        }
        Topology::Spread => {
            let (_, across) = preference
                .map(spread_options)
                .unwrap_or((2, Across::SocketsCores));
            let (total, fields): (u32, &[&str]) = match &across {
                Across::SocketsCores => (sockets.wrapping_mul(cores), &["sockets", "cores"]),
                Across::CoresThreads => (cores.wrapping_mul(threads), &["cores", "threads"]),
                Across::SocketsCoresThreads => (
                    sockets.wrapping_mul(cores).wrapping_mul(threads),
                    &["sockets", "cores", "threads"],
                ),
                Across::Unknown(_) => (0, &[]),
            };
            if total < required {
                let paths: Vec<String> = fields.iter().map(|f| path(f)).collect();
                let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
                return Err(unmet(&paths, insufficient(total, &across.to_string())));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn check_memory(
    instancetype: Option<&InstancetypeSpec>,
    spec: &VirtualMachineInstanceSpec,
    required: &Quantity,
) -> Result<(), RequirementError> {
    let zero = Quantity::new("0");
    let (mut provided, path, by) = match instancetype {
        Some(it) => (
            it.memory.guest.as_ref().unwrap_or(&zero),
            "spec.instancetype",
            "instance type",
        ),
        None => (&zero, "spec.template.spec.domain.memory", "VirtualMachine"),
    };
    if let Some(guest) = spec.domain.memory.as_ref().and_then(|m| m.guest.as_ref()) {
        provided = guest;
    }
    if compare(provided, required) == std::cmp::Ordering::Less {
        let show = |q: &Quantity| {
            q.canonical()
                .map_or_else(|_| q.to_string(), |c| c.to_string())
        };
        return Err(unmet(
            &[path],
            format!(
                "insufficient Memory resources of {} provided by {by}, preference requires {}",
                show(provided),
                show(required)
            ),
        ));
    }
    Ok(())
}

/// Quantities compared exactly where they fit in thousandths, by whole units otherwise.
fn compare(a: &Quantity, b: &Quantity) -> std::cmp::Ordering {
    match (a.milli_value(), b.milli_value()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.value().unwrap_or(0).cmp(&b.value().unwrap_or(0)),
    }
}
