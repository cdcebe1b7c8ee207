//! From watch events to work: which keys to queue, and which expectations an event fulfils.
//!
//! KubeVirt's informer event handlers do two things per event — lower the expectations the
//! event proves fulfilled, and queue the keys that must look again. Both are decided here from a
//! small description of the event ([`Change`]), so the simulator's caches and the binaries'
//! kube-rs reflectors feed the controllers identically.

use crate::expectations::ControllerExpectations;

/// Which watch an event came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched {
    /// VirtualMachines.
    Vm,
    /// VirtualMachineInstances.
    Vmi,
    /// Launcher pods.
    Pod,
    /// VirtualMachineInstanceMigrations (only the migration controller looks at them).
    Migration,
    /// Anything else the controllers cache (ControllerRevisions, PVCs, DataVolumes).
    Other,
}

/// What the observer needs to know about one version of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// It has a `deletionTimestamp`.
    pub deleting: bool,
    /// For a launcher pod: the key (`namespace/name`) of the VMI it runs, from its labels.
    pub vmi_key: Option<String>,
}

/// One watch event: the object's key and its versions before and after (`None` = absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change<'a> {
    /// The watch.
    pub watched: Watched,
    /// `namespace/name` of the object.
    pub key: &'a str,
    /// The version the cache held before.
    pub old: Option<Seen>,
    /// The version the cache holds now.
    pub new: Option<Seen>,
}

impl Change<'_> {
    /// Whether the event shows the object created.
    fn created(&self) -> bool {
        self.old.is_none() && self.new.is_some()
    }

    /// Whether the event shows the object deleted, or marked for deletion for the first time
    /// (KubeVirt counts a deletion as observed once the timestamp appears).
    fn deleted(&self) -> bool {
        match (&self.old, &self.new) {
            (Some(_), None) => true,
            (Some(old), Some(new)) => !old.deleting && new.deleting,
            _ => false,
        }
    }
}

/// The keys an event asks to look at again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Enqueue {
    /// Keys for the VM controller.
    pub vm_keys: Vec<String>,
    /// Keys for the VMI controller.
    pub vmi_keys: Vec<String>,
}

/// Lowers the expectations `change` fulfils and says which keys to queue.
///
/// - A VM changed: its key goes to the VM controller.
/// - A VMI appeared or went away: the VM controller's creation or deletion is observed (a VM's
///   VMI has the VM's name); the VMI controller's own update is observed; both controllers look.
/// - A launcher pod appeared or went away: the VMI controller's pod creation or deletion is
///   observed under the VMI's key, and the VMI controller looks. A pod that changed shows the
///   VMI controller's own pod update (its readiness-gate patch), under the VMI's key too.
pub fn observe(
    change: &Change<'_>,
    vm_expectations: &mut ControllerExpectations,
    vmi_expectations: &mut ControllerExpectations,
) -> Enqueue {
    let key = change.key.to_string();
    let mut out = Enqueue::default();
    match change.watched {
        Watched::Vm => out.vm_keys.push(key),
        Watched::Vmi => {
            if change.created() {
                vm_expectations.objects.creation_observed(&key);
            } else if change.deleted() {
                vm_expectations.objects.deletion_observed(&key, &key);
            }
            vmi_expectations.updates.creation_observed(&key);
            if change.new.is_none() {
                vmi_expectations.forget(&key);
            }
            out.vm_keys.push(key.clone());
            out.vmi_keys.push(key);
        }
        Watched::Pod => {
            let vmi_key = change
                .new
                .as_ref()
                .or(change.old.as_ref())
                .and_then(|s| s.vmi_key.clone());
            if let Some(vmi_key) = vmi_key {
                if change.created() {
                    vmi_expectations.objects.creation_observed(&vmi_key);
                } else if change.deleted() {
                    vmi_expectations.objects.deletion_observed(&vmi_key, &key);
                } else if change.old.is_some() && change.new.is_some() {
                    vmi_expectations.pod_updates.creation_observed(&vmi_key);
                }
                out.vmi_keys.push(vmi_key);
            }
        }
        Watched::Migration | Watched::Other => {}
    }
    out
}

/// Lowers the migration controller's expectations `change` fulfils and says which migration
/// keys to queue (KubeVirt's migration controller's informer handlers).
///
/// `migrations` are the migration keys the changed object concerns, which only the caller's
/// caches can tell: for a migration, its own key; for a launcher pod, the migration its
/// `kubevirt.io/migrationJobName` annotation names if that migration's UID is the pod's
/// `kubevirt.io/migrationJobUID` label (KubeVirt's `resolveControllerRef`); for a VMI, the
/// migrations whose `spec.vmiName` it is. The store is the migration controller's own: a
/// migration and a VMI of the same name must not share expectations.
///
/// - A migration changed: the controller's own update of it is observed; gone, its
///   expectations are forgotten.
/// - A target pod appeared, or went away or was marked for deletion (one already marked when
///   first seen counts as deleted, as in KubeVirt's `addPod`): the pod creation or deletion
///   is observed under its migration's key.
pub fn observe_migrations(
    change: &Change<'_>,
    migrations: &[String],
    expectations: &mut ControllerExpectations,
) -> Vec<String> {
    match change.watched {
        Watched::Migration => {
            let key = change.key.to_string();
            expectations.updates.creation_observed(&key);
            if change.new.is_none() {
                expectations.forget(&key);
            }
            vec![key]
        }
        Watched::Pod => {
            let deleting_when_seen =
                change.created() && change.new.as_ref().is_some_and(|n| n.deleting);
            for m in migrations {
                if change.deleted() || deleting_when_seen {
                    expectations
                        .objects
                        .deletion_observed(m, &change.key.to_string());
                } else if change.created() {
                    expectations.objects.creation_observed(m);
                }
            }
            migrations.to_vec()
        }
        Watched::Vmi => migrations.to_vec(),
        Watched::Vm | Watched::Other => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_decide::Expectation;
    use kvrs_queue::Instant;

    fn seen() -> Option<Seen> {
        Some(Seen::default())
    }

    #[test]
    fn a_vmi_seen_created_fulfils_the_vm_controllers_expectation() {
        let (mut vm, mut vmi) = (ControllerExpectations::new(), ControllerExpectations::new());
        let now = Instant::ZERO;
        vm.raise(
            &Expectation::Creations {
                key: "ns/a".into(),
                count: 1,
            },
            now,
        );
        let change = Change {
            watched: Watched::Vmi,
            key: "ns/a",
            old: None,
            new: seen(),
        };
        let keys = observe(&change, &mut vm, &mut vmi);
        assert!(vm.pending("ns/a", now).satisfied());
        assert_eq!(keys.vm_keys, ["ns/a"]);
        assert_eq!(keys.vmi_keys, ["ns/a"]);
    }

    #[test]
    fn a_pod_marked_deleting_fulfils_the_vmi_controllers_deletion_once() {
        let (mut vm, mut vmi) = (ControllerExpectations::new(), ControllerExpectations::new());
        let now = Instant::ZERO;
        vmi.raise(
            &Expectation::Deletions {
                key: "ns/a".into(),
                objects: vec!["ns/virt-launcher-a-x".into()],
            },
            now,
        );
        let pod = |deleting| {
            Some(Seen {
                deleting,
                vmi_key: Some("ns/a".into()),
            })
        };
        let marked = Change {
            watched: Watched::Pod,
            key: "ns/virt-launcher-a-x",
            old: pod(false),
            new: pod(true),
        };
        let keys = observe(&marked, &mut vm, &mut vmi);
        assert!(vmi.pending("ns/a", now).satisfied());
        assert_eq!(keys.vmi_keys, ["ns/a"]);
        assert!(keys.vm_keys.is_empty());
    }

    #[test]
    fn the_vmi_controllers_own_pod_update_is_seen_on_the_pods_update_only() {
        let (mut vm, mut vmi) = (ControllerExpectations::new(), ControllerExpectations::new());
        let now = Instant::ZERO;
        vmi.raise(
            &Expectation::ObservedPodUpdate {
                vmi_key: "ns/a".into(),
            },
            now,
        );
        let pod = Some(Seen {
            deleting: false,
            vmi_key: Some("ns/a".into()),
        });
        // The VMI's own update event (its status write) does not show the pod patched.
        let vmi_update = Change {
            watched: Watched::Vmi,
            key: "ns/a",
            old: seen(),
            new: seen(),
        };
        observe(&vmi_update, &mut vm, &mut vmi);
        assert_eq!(vmi.pending("ns/a", now).creations, 1);
        let pod_update = Change {
            watched: Watched::Pod,
            key: "ns/virt-launcher-a-x",
            old: pod.clone(),
            new: pod,
        };
        let keys = observe(&pod_update, &mut vm, &mut vmi);
        assert!(vmi.pending("ns/a", now).satisfied());
        assert_eq!(keys.vmi_keys, ["ns/a"]);
    }

    #[test]
    fn a_target_pod_fulfils_its_migrations_creation_then_deletion() {
        let mut mig = ControllerExpectations::new();
        let now = Instant::ZERO;
        let key = "ns/m".to_string();
        mig.raise(
            &Expectation::Creations {
                key: key.clone(),
                count: 1,
            },
            now,
        );
        let owners = [key.clone()];
        let pod = |deleting| {
            Some(Seen {
                deleting,
                vmi_key: Some("ns/a".into()),
            })
        };
        let created = Change {
            watched: Watched::Pod,
            key: "ns/virt-launcher-a-t",
            old: None,
            new: pod(false),
        };
        assert_eq!(observe_migrations(&created, &owners, &mut mig), owners);
        assert!(mig.pending(&key, now).satisfied());
        mig.raise(
            &Expectation::Deletions {
                key: key.clone(),
                objects: vec!["ns/virt-launcher-a-t".into()],
            },
            now,
        );
        let marked = Change {
            old: pod(false),
            new: pod(true),
            ..created
        };
        observe_migrations(&marked, &owners, &mut mig);
        assert!(mig.pending(&key, now).satisfied());
    }

    #[test]
    fn a_migration_seen_updated_fulfils_its_own_update_and_a_vmi_wakes_its_migrations() {
        let mut mig = ControllerExpectations::new();
        let now = Instant::ZERO;
        mig.raise(&Expectation::ObservedUpdate { key: "ns/a".into() }, now);
        // A VMI of the same name is not the migration.
        let vmi = Change {
            watched: Watched::Vmi,
            key: "ns/a",
            old: seen(),
            new: seen(),
        };
        assert_eq!(
            observe_migrations(&vmi, &["ns/m1".into()], &mut mig),
            ["ns/m1"]
        );
        assert_eq!(mig.pending("ns/a", now).creations, 1);
        let updated = Change {
            watched: Watched::Migration,
            ..vmi
        };
        assert_eq!(observe_migrations(&updated, &[], &mut mig), ["ns/a"]);
        assert!(mig.pending("ns/a", now).satisfied());
    }

    #[test]
    fn a_pod_without_a_vmi_label_queues_nothing() {
        let (mut vm, mut vmi) = (ControllerExpectations::new(), ControllerExpectations::new());
        let change = Change {
            watched: Watched::Pod,
            key: "ns/p",
            old: None,
            new: seen(),
        };
        assert_eq!(observe(&change, &mut vm, &mut vmi), Enqueue::default());
    }
}
