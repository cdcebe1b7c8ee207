//! From DataVolume and PersistentVolumeClaim watch events to work, as KubeVirt v1.9.0's VM and
//! VMI controllers' storage event handlers do it: a DataVolume the VM controller created is
//! observed (its creation expectation lowered), and the VMs and VMIs whose volumes stand on the
//! object look again — a launcher pod waits for them, a VM's printable status shows them.
//!
//! Which VMs and VMIs stand on an object only the caller's caches can tell (KubeVirt keeps
//! `dv` and `pvc` indexes of its VM and VMI informers for it): they come in as [`Dependents`].

use crate::expectations::ControllerExpectations;
use crate::observer::Enqueue;

/// Which kind of storage object changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageKind {
    /// A CDI DataVolume.
    DataVolume,
    /// A PersistentVolumeClaim.
    Claim,
}

/// What the observer needs to know about one version of a DataVolume or claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageSeen {
    /// It has a `deletionTimestamp`.
    pub deleting: bool,
    /// The VM controlling it (`namespace/name`, from its controller owner reference of kind
    /// VirtualMachine): the VM controller's DataVolumes.
    pub owner_vm_key: Option<String>,
    /// A claim's capacity and requested size, in any stable textual form: the VMI controller
    /// looks at an updated claim again only when they changed (the volume status it writes
    /// carries them).
    pub size: Option<String>,
    /// For a claim: the VMI it is the backend storage of (its `persistent-state-for` label),
    /// see [`backend_claim_created`].
    pub backend_storage_for: Option<String>,
}

/// One watch event of a DataVolume or claim: its key and versions before and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageChange<'a> {
    /// DataVolume or claim.
    pub kind: StorageKind,
    /// `namespace/name` of the object.
    pub key: &'a str,
    /// The version the cache held before (`None`: it is new).
    pub old: Option<StorageSeen>,
    /// The version the cache holds now (`None`: it is gone).
    pub new: Option<StorageSeen>,
}

/// The VMs and VMIs of the object's namespace whose volumes name it (a DataVolume volume, or a
/// PVC volume whose claim has its name: a DataVolume's claim has the DataVolume's name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependents {
    /// VM keys (their template's volumes).
    pub vm_keys: Vec<String>,
    /// VMI keys.
    pub vmi_keys: Vec<String>,
}

/// The VMI key (`namespace/name`) whose backend-storage claim `change` shows created: the VMI
/// controller's creation expectation of that key is fulfilled and the VMI looks again (KubeVirt's
/// `addPVC`; such a claim is named by no volume, so [`observe_storage`] does not find the VMI).
pub fn backend_claim_created(change: &StorageChange<'_>) -> Option<String> {
    if change.kind != StorageKind::Claim || change.old.is_some() {
        return None;
    }
    let new = change.new.as_ref().filter(|n| !n.deleting)?;
    let vmi = new.backend_storage_for.as_deref()?;
    let ns = change.key.split_once('/').map_or("", |(ns, _)| ns);
    Some(format!("{ns}/{vmi}"))
}

/// Lowers the VM controller's expectations `change` fulfils and says which keys to queue.
///
/// - A DataVolume appeared: the creation of its controlling VM is observed; gone or marked for
///   deletion, its deletion. Its controlling VM (before and after), the VMs and the VMIs
///   standing on it look again, at every event.
/// - A claim appeared (not being deleted): the VMs and VMIs standing on it look again; updated,
///   the VMs always (their printable status shows unbound claims), the VMIs only when its size
///   changed. A claim being deleted queues nothing.
pub fn observe_storage(
    change: &StorageChange<'_>,
    dependents: &Dependents,
    vm_expectations: &mut ControllerExpectations,
) -> Enqueue {
    let mut out = Enqueue::default();
    match change.kind {
        StorageKind::DataVolume => {
            let created = change.old.is_none() && change.new.is_some();
            let deleted = match (&change.old, &change.new) {
                (Some(_), None) => true,
                (Some(old), Some(new)) => !old.deleting && new.deleting,
                (None, Some(new)) => new.deleting,
                (None, None) => false,
            };
            let owners = [&change.old, &change.new]
                .into_iter()
                .flatten()
                .filter_map(|s| s.owner_vm_key.clone());
            let current_owner = change
                .new
                .as_ref()
                .or(change.old.as_ref())
                .and_then(|s| s.owner_vm_key.clone());
            if let Some(owner) = current_owner {
                if deleted {
                    vm_expectations
                        .objects
                        .deletion_observed(&owner, &change.key.to_string());
                } else if created {
                    vm_expectations.objects.creation_observed(&owner);
                }
            }
            out.vm_keys.extend(owners);
            out.vm_keys.extend(dependents.vm_keys.iter().cloned());
            out.vmi_keys.extend(dependents.vmi_keys.iter().cloned());
        }
        StorageKind::Claim => {
            let Some(new) = change.new.as_ref().filter(|n| !n.deleting) else {
                return out;
            };
            out.vm_keys.extend(dependents.vm_keys.iter().cloned());
            let resized = change.old.as_ref().is_some_and(|old| old.size != new.size);
            if change.old.is_none() || resized {
                out.vmi_keys.extend(dependents.vmi_keys.iter().cloned());
            }
        }
    }
    out.vm_keys.sort();
    out.vm_keys.dedup();
    out.vmi_keys.sort();
    out.vmi_keys.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_decide::Expectation;
    use kvrs_queue::Instant;

    fn dv(owner: Option<&str>, deleting: bool) -> Option<StorageSeen> {
        Some(StorageSeen {
            deleting,
            owner_vm_key: owner.map(String::from),
            size: None,
            backend_storage_for: None,
        })
    }

    fn dependents() -> Dependents {
        Dependents {
            vm_keys: vec!["ns/other-vm".into()],
            vmi_keys: vec!["ns/vm".into()],
        }
    }

    #[test]
    fn a_created_data_volume_fulfils_its_vms_creation_expectation() {
        let mut exp = ControllerExpectations::new();
        let now = Instant::ZERO;
        exp.raise(
            &Expectation::Creations {
                key: "ns/vm".into(),
                count: 1,
            },
            now,
        );
        assert!(!exp.pending("ns/vm", now).satisfied());
        let change = StorageChange {
            kind: StorageKind::DataVolume,
            key: "ns/disk",
            old: None,
            new: dv(Some("ns/vm"), false),
        };
        let keys = observe_storage(&change, &dependents(), &mut exp);
        assert!(exp.pending("ns/vm", now).satisfied());
        assert_eq!(keys.vm_keys, ["ns/other-vm", "ns/vm"]);
        assert_eq!(keys.vmi_keys, ["ns/vm"]);
        // A status update (the import progressing) wakes the same keys, observes nothing.
        let update = StorageChange {
            old: dv(Some("ns/vm"), false),
            ..change
        };
        let keys = observe_storage(&update, &Dependents::default(), &mut exp);
        assert_eq!(keys.vm_keys, ["ns/vm"]);
    }

    /// A new claim labelled `persistent-state-for: vm` is VMI `ns/vm`'s backend storage; its
    /// later versions, a deleting one and an unlabelled claim are not a creation of one.
    #[test]
    fn a_backend_storage_claim_appearing_is_its_vmis() {
        let backend = |deleting| {
            Some(StorageSeen {
                deleting,
                backend_storage_for: Some("vm".into()),
                ..StorageSeen::default()
            })
        };
        let change = |old, new| StorageChange {
            kind: StorageKind::Claim,
            key: "ns/persistent-state-for-vm-x2k9z",
            old,
            new,
        };
        assert_eq!(
            backend_claim_created(&change(None, backend(false))).as_deref(),
            Some("ns/vm")
        );
        assert_eq!(
            backend_claim_created(&change(backend(false), backend(false))),
            None
        );
        assert_eq!(backend_claim_created(&change(None, backend(true))), None);
        let plain = Some(StorageSeen::default());
        assert_eq!(backend_claim_created(&change(None, plain)), None);
    }

    #[test]
    fn a_claim_wakes_vmis_when_it_appears_or_is_resized() {
        let mut exp = ControllerExpectations::new();
        let claim = |size: &str, deleting| {
            Some(StorageSeen {
                deleting,
                owner_vm_key: None,
                size: Some(size.into()),
                backend_storage_for: None,
            })
        };
        let created = StorageChange {
            kind: StorageKind::Claim,
            key: "ns/disk",
            old: None,
            new: claim("1Gi", false),
        };
        let keys = observe_storage(&created, &dependents(), &mut exp);
        assert_eq!(keys.vmi_keys, ["ns/vm"]);
        let bound = StorageChange {
            old: claim("1Gi", false),
            ..created.clone()
        };
        let keys = observe_storage(&bound, &dependents(), &mut exp);
        assert!(keys.vmi_keys.is_empty());
        assert_eq!(keys.vm_keys, ["ns/other-vm"]);
        let resized = StorageChange {
            old: claim("1Gi", false),
            new: claim("2Gi", false),
            ..created.clone()
        };
        assert_eq!(
            observe_storage(&resized, &dependents(), &mut exp).vmi_keys,
            ["ns/vm"]
        );
        let deleting = StorageChange {
            new: claim("1Gi", true),
            ..created
        };
        assert_eq!(
            observe_storage(&deleting, &dependents(), &mut exp),
            Enqueue::default()
        );
    }
}
