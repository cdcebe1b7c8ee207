//! KubeVirt v1.9.0's validating webhook for VMI CREATE, for the checks that matter in practice:
//! feature gates, volume/disk mapping, mandatory fields, CPU and memory sanity, device buses and
//! names, networks, probes and per-architecture rules.
//!
//! Every check adds [`Cause`]s (field path + message, KubeVirt's wording where users may search
//! for it) instead of stopping at the first problem, so one run reports everything wrong.
//! Validation runs on the *defaulted* VMI, as in the cluster.

mod access;
mod arch;
mod causes;
mod cpu_memory;
mod devices;
mod firmware;
mod gates;
mod hotplug;
mod limits;
mod machine;
mod metadata;
mod network;
mod vm;
mod volume_requests;
mod volumes;

pub use causes::{Cause, CauseKind, ValidationError};
pub use cpu_memory::MAX_GUEST_VCPUS;
pub use gates::{DEFAULT_ON_FEATURE_GATES, gate_enabled};
pub use hotplug::{admit_hotplug_storage, hotplug_disk_configuration};
pub use limits::MAX_LIST_ITEMS;
pub use metadata::RESERVED_LABELS;
pub use network::DISCONTINUED;
pub use vm::{RUN_STRATEGIES, validate_vm};
pub use volume_requests::{
    VOLUME_REQUESTS_FIELD, apply_volume_request, template_spec_causes, validate_volume_requests,
};

use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;

use causes::Causes;

/// Checks a defaulted VMI as KubeVirt's validating webhook does on CREATE.
pub fn validate(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<(), ValidationError> {
    let mut causes = Causes::default();
    let spec = &vmi.spec;
    limits::check(spec, &mut causes);
    gates::check(spec, &vmi.metadata, config, &mut causes);
    cpu_memory::check(spec, config, &mut causes);
    machine::check(spec, config, &mut causes);
    network::check(spec, &mut causes);
    devices::check(spec, &mut causes);
    volumes::check(spec, config, &mut causes);
    metadata::check(vmi, &mut causes);
    access::check(spec, &mut causes);
    arch::check(spec, &mut causes);
    causes.into_result()
}

#[cfg(test)]
mod tests;
