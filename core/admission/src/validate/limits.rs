//! The list lengths KubeVirt v1.9.0's CRD schema bounds (`+kubebuilder:validation:MaxItems:=256`
//! on disks, interfaces, volumes, networks, accessCredentials and utilityVolumes). In a cluster
//! the API server enforces them before any webhook runs; kvrs checks them here so that no input
//! reaches the converter or the pod renderer with thousands of devices — each becomes XML and
//! pod entries, so this is also what keeps a rendering's size bounded (issue 17).

use super::causes::{CauseKind, Causes};
use crate::api::VirtualMachineInstanceSpec;

/// KubeVirt's `MaxItems` for the VMI's device and volume lists.
pub const MAX_LIST_ITEMS: usize = 256;

pub(super) fn check(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let devices = &spec.domain.devices;
    let lists = [
        (
            "spec.domain.devices.disks",
            devices.disks.as_ref().map(Vec::len),
        ),
        (
            "spec.domain.devices.interfaces",
            devices.interfaces.as_ref().map(Vec::len),
        ),
        ("spec.volumes", spec.volumes.as_ref().map(Vec::len)),
        ("spec.networks", spec.networks.as_ref().map(Vec::len)),
        (
            "spec.accessCredentials",
            spec.access_credentials.as_ref().map(Vec::len),
        ),
        (
            "spec.utilityVolumes",
            spec.utility_volumes.as_ref().map(Vec::len),
        ),
    ];
    for (field, len) in lists {
        if let Some(len) = len.filter(|n| *n > MAX_LIST_ITEMS) {
            // The API server's wording (`field.TooMany`).
            causes.push(
                CauseKind::TooMany,
                field,
                format!("Too many: {len}: must have at most {MAX_LIST_ITEMS} items"),
            );
        }
    }
}
