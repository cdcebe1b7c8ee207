//! The storage side of the caches: what a DataVolume or PersistentVolumeClaim event tells the
//! VM and VMI controllers ([`kvrs_executor::observe_storage`]), and which cached VMs and VMIs
//! stand on the object (KubeVirt's `dv` and `pvc` informer indexes, here a scan of the
//! namespace's objects).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use kvrs_api::api::Volume;
use kvrs_executor::{Dependents, StorageSeen};

use crate::caches::Shared;

/// What a DataVolume version tells the observer: whether it is being deleted and the VM
/// controlling it.
pub(crate) fn data_volume_seen(dv: &DynamicObject) -> StorageSeen {
    let ns = dv.namespace().unwrap_or_default();
    let owner_vm_key = dv
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .filter(|o| o.kind == "VirtualMachine")
        .map(|o| format!("{ns}/{}", o.name));
    StorageSeen {
        deleting: dv.meta().deletion_timestamp.is_some(),
        owner_vm_key,
        size: None,
        backend_storage_for: None,
    }
}

/// What a claim version tells the observer: whether it is being deleted, and its capacity and
/// requested size.
pub(crate) fn claim_seen(pvc: &PersistentVolumeClaim) -> StorageSeen {
    let capacity = pvc.status.as_ref().and_then(|s| s.capacity.as_ref());
    let requests = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    StorageSeen {
        deleting: pvc.metadata.deletion_timestamp.is_some(),
        owner_vm_key: None,
        size: Some(format!("{capacity:?}/{requests:?}")),
        backend_storage_for: kvrs_decide::vmi::backend_storage::vmi_of_claim(pvc).map(String::from),
    }
}

/// Whether one of `volumes` stands on the DataVolume or claim `name`.
fn names(volumes: Option<&Vec<Volume>>, name: &str) -> bool {
    volumes.into_iter().flatten().any(|v| {
        v.data_volume.as_ref().is_some_and(|d| d.name == name)
            || v.persistent_volume_claim
                .as_ref()
                .is_some_and(|p| p.claim_name == name)
    })
}

/// The cached VMs and VMIs of the object `key`'s namespace whose volumes name it.
pub(crate) fn dependents(key: &str, shared: &Shared) -> Dependents {
    let (ns, name) = crate::caches::split(key);
    let in_ns = |o_ns: Option<&str>| o_ns == Some(ns);
    let vm_keys = shared
        .vms
        .get()
        .map(|store| {
            store
                .state()
                .iter()
                .filter(|vm| in_ns(vm.metadata.namespace.as_deref()))
                .filter(|vm| {
                    names(
                        vm.spec
                            .template
                            .spec
                            .as_ref()
                            .and_then(|s| s.volumes.as_ref()),
                        name,
                    )
                })
                .map(|vm| crate::caches::key_of(vm.as_ref()))
                .collect()
        })
        .unwrap_or_default();
    let vmi_keys = shared
        .vmis
        .get()
        .map(|store| {
            store
                .state()
                .iter()
                .filter(|vmi| in_ns(vmi.metadata.namespace.as_deref()))
                .filter(|vmi| names(vmi.spec.volumes.as_ref(), name))
                .map(|vmi| crate::caches::key_of(vmi.as_ref()))
                .collect()
        })
        .unwrap_or_default();
    Dependents { vm_keys, vmi_keys }
}
