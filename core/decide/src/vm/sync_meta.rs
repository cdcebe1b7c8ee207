//! Metadata kept in sync between a VM and its running VMI without a restart: descheduler
//! eviction annotations and the backup-hooks opt-out flow VM -> VMI; the PCI topology the
//! launcher chose flows VMI -> VM template, so the next VMI gets the same slots.

use std::collections::BTreeMap;

use super::Reconcile;
use crate::patch::replace_map;
use crate::{ApiWrite, PatchType, WriteOp, meta};

const EVICT: &str = "descheduler.alpha.kubernetes.io/evict";
const PREFER_NO_EVICTION: &str = "descheduler.alpha.kubernetes.io/prefer-no-eviction";
const SKIP_BACKUP_HOOKS: &str = "kubevirt.io/skip-backup-hooks";
const PCI_TOPOLOGY_VERSION: &str = "kubevirt.io/pci-topology-version";
const PCI_INTERFACE_SLOT_COUNT: &str = "kubevirt.io/pci-interface-slot-count";

fn sync_key(
    key: &str,
    source: Option<&BTreeMap<String, String>>,
    target: &mut BTreeMap<String, String>,
) {
    match source.and_then(|s| s.get(key)) {
        Some(v) => {
            target.insert(key.into(), v.clone());
        }
        None => {
            target.remove(key);
        }
    }
}

/// Copies the eviction annotations of the VM template and the backup-hooks opt-out of the VM
/// onto the VMI (one patch tested against the VMI's annotations).
pub(super) fn sync_annotations_to_vmi(r: &mut Reconcile<'_, '_>) {
    let Some(vmi) = r
        .vmi
        .as_ref()
        .filter(|v| v.metadata.deletion_timestamp.is_none())
    else {
        return;
    };
    let old = vmi.metadata.annotations.clone();
    let mut new = old.clone().unwrap_or_default();
    let template = r.vm.spec.template.metadata.annotations.as_ref();
    sync_key(EVICT, template, &mut new);
    sync_key(PREFER_NO_EVICTION, template, &mut new);
    sync_key(
        SKIP_BACKUP_HOOKS,
        r.vm.metadata.annotations.as_ref(),
        &mut new,
    );
    if new == old.clone().unwrap_or_default() {
        return;
    }
    let write = ApiWrite::new(
        "virtualmachineinstances",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata),
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: replace_map("/metadata/annotations", old.as_ref(), &new),
        },
    );
    r.plan.push_write(write);
    if let Some(v) = r.vmi.as_mut() {
        v.to_mut().metadata.annotations = Some(new);
    }
}

/// Persists the PCI topology version (and interface slot count) the VMI was given into the VM
/// template, once, so later VMIs keep the same device layout.
pub(super) fn sync_pci_topology_to_vm(r: &mut Reconcile<'_, '_>) {
    let Some(vmi) = r.vmi.as_ref() else { return };
    let Some(version) =
        meta::annotation(&vmi.metadata, PCI_TOPOLOGY_VERSION).filter(|v| !v.is_empty())
    else {
        return;
    };
    let old = r.vm.spec.template.metadata.annotations.clone();
    if old
        .as_ref()
        .and_then(|a| a.get(PCI_TOPOLOGY_VERSION))
        .is_some_and(|v| !v.is_empty())
    {
        return;
    }
    let mut new = old.clone().unwrap_or_default();
    new.insert(PCI_TOPOLOGY_VERSION.into(), version.into());
    if let Some(count) = meta::annotation(&vmi.metadata, PCI_INTERFACE_SLOT_COUNT) {
        new.insert(PCI_INTERFACE_SLOT_COUNT.into(), count.into());
    }
    r.push_vm_patch(replace_map(
        "/spec/template/metadata/annotations",
        old.as_ref(),
        &new,
    ));
    r.vm.spec.template.metadata.annotations = Some(new);
}
