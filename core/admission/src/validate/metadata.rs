//! Labels reserved for KubeVirt itself and the memory a VMI must ask for.

use super::causes::Causes;
use crate::api::VirtualMachineInstance;

/// Labels only KubeVirt's own components may set on a VMI.
pub(super) const RESERVED_LABELS: &[&str] = &[
    "kubevirt.io/created-by",
    "kubevirt.io/migrationJobUID",
    "kubevirt.io/nodeName",
    "kubevirt.io/migrationTargetNodeName",
    "kubevirt.io/schedulable",
    "kubevirt.io/install-strategy",
];

pub(super) fn check(vmi: &VirtualMachineInstance, causes: &mut Causes) {
    let reserved = vmi
        .metadata
        .labels
        .iter()
        .flatten()
        .any(|(k, _)| RESERVED_LABELS.contains(&k.as_str()));
    if reserved {
        causes.push(
            super::CauseKind::NotSupported,
            "metadata.labels",
            "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
        );
    }
    if vmi.metadata.name.as_deref().unwrap_or("").is_empty()
        && vmi
            .metadata
            .generate_name
            .as_deref()
            .unwrap_or("")
            .is_empty()
    {
        causes.required("metadata.name", "name or generateName is required");
    }
    let spec = &vmi.spec;
    let requested = spec
        .domain
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("memory"))
        .and_then(|q| q.value().ok())
        .unwrap_or(0);
    if requested != 0 {
        return;
    }
    let memory = spec.domain.memory.as_ref();
    if memory.is_none_or(|m| m.guest.is_none() && m.hugepages.is_none()) {
        causes.required(
            "spec.domain.memory.guest",
            "no memory requested, at least one of 'spec.domain.memory.guest', \
             'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' \
             must be set",
        );
    }
}
