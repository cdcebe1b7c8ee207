//! The VM and VMI controllers' worlds, from the informer caches they share.

use std::ops::Deref;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kvrs_admission::ClusterConfig;
use kvrs_api::{VirtualMachine, VirtualMachineInstance};
use kvrs_decide::vm::{Revision, VmWorld};
use kvrs_decide::vmi::VmiWorld;
use kvrs_decide::{Now, PendingExpectations};
use serde_json::Value;

use super::namespace_of;

/// The informer caches of virt-controller, as the VM and VMI worlds read them. The cluster binary
/// implements it over kube-rs reflector stores, the simulator over its own informer cache.
///
/// Every method answers from the cache alone (no API call); keys are `namespace/name`.
pub trait ControllerCache {
    /// How the cache hands out an object: a reference into it (the simulator) or a pointer it
    /// shares (a reflector store's `Arc`).
    type Obj<'a, T: 'a>: Deref<Target = T>
    where
        Self: 'a;

    /// The VirtualMachine of `key`.
    fn vm(&self, key: &str) -> Option<Self::Obj<'_, VirtualMachine>>;

    /// The VirtualMachineInstance of `key`.
    fn vmi(&self, key: &str) -> Option<Self::Obj<'_, VirtualMachineInstance>>;

    /// The launcher pods of `namespace` whose `kubevirt.io/created-by` label is `vmi_uid`, in
    /// any order.
    fn launcher_pods(&self, namespace: &str, vmi_uid: &str) -> Vec<Self::Obj<'_, Pod>>;

    /// The pods of `namespace` the pod of UID `owner_uid` controls: a launcher pod's hotplug
    /// attachment pods (labelled `kubevirt.io: hotplug-disk`), in any order. A runtime that
    /// runs no volume hotplug answers none.
    fn attachment_pods(&self, namespace: &str, owner_uid: &str) -> Vec<Self::Obj<'_, Pod>> {
        let _ = (namespace, owner_uid);
        Vec::new()
    }

    /// The ControllerRevisions of `namespace` that `wanted` selects, in any order. An answer may
    /// hold more (the namespace's every revision, say): [`vm_world`] keeps only the selected
    /// ones. `wanted` says how to find them without a scan: by the start revisions' name
    /// prefix, by owner UID, by name.
    fn revisions(&self, namespace: &str, wanted: &WantedRevisions<'_>) -> Vec<Revision>;

    /// The instancetypes and preferences (`instancetype.kubevirt.io`, all four kinds, each with
    /// its `apiVersion` and `kind` set: a list's items may come without them): the cluster-wide
    /// ones and those of `namespace`. Empty where the cluster has none of their CRDs.
    fn instancetype_objects(&self, namespace: &str) -> Vec<Value>;

    /// The CDI DataVolumes of `namespace`, as JSON. Empty where the cluster has no CDI.
    fn data_volumes(&self, namespace: &str) -> Vec<Value>;

    /// The PersistentVolumeClaims of `namespace`.
    fn pvcs(&self, namespace: &str) -> Vec<PersistentVolumeClaim>;

    /// The cluster's StorageClasses, as JSON (the class of a VMI's backend-storage claim).
    /// None by default: a VMI keeping persistent TPM or EFI state then waits with KubeVirt's
    /// "no default storage class found".
    fn storage_classes(&self) -> Vec<Value> {
        Vec::new()
    }

    /// CDI's StorageProfiles, as JSON. Empty where the cluster has no CDI.
    fn storage_profiles(&self) -> Vec<Value> {
        Vec::new()
    }

    /// The VirtualMachineInstanceMigrations of `namespace`, as JSON: the VMI controller creates
    /// no launcher pod for a VMI an active migration names. A runtime that runs no migration
    /// controller (the simulator) keeps no migrations and answers none.
    fn migrations(&self, namespace: &str) -> Vec<Value> {
        let _ = namespace;
        Vec::new()
    }
}

/// Which ControllerRevisions a VM's sync reads: its start revisions, the revisions it owns (its
/// instancetype and preference revisions), and those its matchers and status name (a
/// `revisionName` may name a revision another VM stored).
#[derive(Clone, Debug)]
pub struct WantedRevisions<'a> {
    /// The VM's UID: it owns the revisions it reads.
    pub owner_uid: &'a str,
    /// The name prefix of the VM's start revisions, `revision-start-vm-<uid>`.
    pub start_prefix: String,
    /// The revision names the VM's `spec.instancetype`, `spec.preference` and their status refs
    /// give.
    pub names: Vec<String>,
}

impl<'a> WantedRevisions<'a> {
    /// What `vm` reads.
    pub fn of(vm: &'a VirtualMachine) -> Self {
        let owner_uid = vm.metadata.uid.as_deref().unwrap_or_default();
        let spec = [
            vm.spec
                .instancetype
                .as_ref()
                .and_then(|m| m.revision_name.clone()),
            vm.spec
                .preference
                .as_ref()
                .and_then(|m| m.revision_name.clone()),
        ]
        .into_iter()
        .flatten();
        let status = vm.status.as_ref();
        let refs = [
            status.and_then(|s| s.instancetype_ref.as_ref()),
            status.and_then(|s| s.preference_ref.as_ref()),
        ]
        .into_iter()
        .flatten()
        .filter_map(|r| r.controller_revision_ref.as_ref()?.name.clone());
        Self {
            owner_uid,
            start_prefix: format!("revision-start-vm-{owner_uid}"),
            names: spec.chain(refs).collect(),
        }
    }

    /// Whether `revision` is one of them.
    pub fn selects(&self, revision: &ControllerRevision) -> bool {
        let name = revision.metadata.name.as_deref().unwrap_or_default();
        name.starts_with(&self.start_prefix)
            || revision
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == self.owner_uid)
            || self.names.iter().any(|n| n == name)
    }
}

/// What one VM sync decides from besides the caches.
#[derive(Clone, Copy, Debug)]
pub struct VmInputs<'a> {
    /// The outstanding expectations of the VM's key.
    pub expectations: PendingExpectations,
    /// The clock.
    pub now: Now,
    /// A uniform draw from `[0, 1)` for the start-failure backoff's jitter.
    pub jitter: f64,
    /// The cluster configuration.
    pub config: &'a ClusterConfig,
}

/// What one VMI sync decides from besides the caches.
#[derive(Clone, Copy, Debug)]
pub struct VmiInputs<'a> {
    /// The outstanding pod and VMI expectations of the VMI's key.
    pub expectations: PendingExpectations,
    /// The clock.
    pub now: Now,
    /// The cluster configuration.
    pub config: &'a ClusterConfig,
}

/// Builds the VM controller's world for `key` from `cache` and hands it to `decide`; `None` (and
/// `decide` not called) when the cache holds no VM of that key.
///
/// The world holds the VM, the VMI of the same name, the namespace's revisions
/// [`WantedRevisions`] selects (in name order), the instancetypes and preferences when the VM
/// references one, and the namespace's DataVolumes and PVCs.
pub fn vm_world<C, R>(
    cache: &C,
    key: &str,
    inputs: VmInputs<'_>,
    decide: impl FnOnce(&VmWorld<'_>) -> R,
) -> Option<R>
where
    C: ControllerCache + ?Sized,
{
    let vm = cache.vm(key)?;
    let vmi = cache.vmi(key);
    let ns = namespace_of(key);
    let wanted = WantedRevisions::of(&vm);
    let mut revisions = cache.revisions(ns, &wanted);
    revisions.retain(|r| wanted.selects(r));
    revisions.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    revisions.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    let instancetype_objects = if vm.spec.instancetype.is_some() || vm.spec.preference.is_some() {
        cache.instancetype_objects(ns)
    } else {
        Vec::new()
    };
    let data_volumes = cache.data_volumes(ns);
    let pvcs = cache.pvcs(ns);
    let world = VmWorld {
        vm: &vm,
        vmi: vmi.as_deref(),
        revisions: &revisions,
        instancetype_objects: &instancetype_objects,
        data_volumes: &data_volumes,
        pvcs: &pvcs,
        expectations: inputs.expectations,
        now: inputs.now,
        jitter: inputs.jitter,
        config: inputs.config,
    };
    Some(decide(&world))
}

/// Builds the VMI controller's world for `key` from `cache` and hands it to `decide`; answers the
/// VMI it was built around with what `decide` returned, or `None` (and `decide` not called) when
/// the cache holds no VMI of that key.
///
/// The world holds the VMI, its launcher pods and their attachment pods (in name order), the VM of the same name and the
/// namespace's migrations, PVCs and DataVolumes.
pub fn vmi_world<'c, C, R>(
    cache: &'c C,
    key: &str,
    inputs: VmiInputs<'_>,
    decide: impl FnOnce(&VmiWorld<'_>) -> R,
) -> Option<(C::Obj<'c, VirtualMachineInstance>, R)>
where
    C: ControllerCache + ?Sized,
{
    let vmi = cache.vmi(key)?;
    let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
    let mut pods = cache.launcher_pods(namespace_of(key), uid);
    let attachment: Vec<_> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .flat_map(|owner| cache.attachment_pods(namespace_of(key), owner))
        .collect();
    pods.extend(attachment);
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let vm = cache.vm(key);
    let pvcs = cache.pvcs(namespace_of(key));
    let data_volumes = cache.data_volumes(namespace_of(key));
    let (storage_classes, storage_profiles) = (cache.storage_classes(), cache.storage_profiles());
    let migrations = cache.migrations(namespace_of(key));
    let world = VmiWorld {
        vmi: &vmi,
        pods: pods.iter().map(|p| &**p).collect(),
        // The owner VM is the one of the same name; `vm` is checked first and `vms` would
        // only repeat it.
        vms: &[],
        vm: vm.as_deref(),
        migrations: &migrations,
        pvcs: &pvcs,
        data_volumes: &data_volumes,
        storage_classes: &storage_classes,
        storage_profiles: &storage_profiles,
        expectations: inputs.expectations,
        now: inputs.now,
        config: inputs.config,
    };
    let out = decide(&world);
    Some((vmi, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use std::collections::BTreeMap;

    /// A cache over plain maps, handing out references.
    #[derive(Default)]
    struct Maps {
        vms: BTreeMap<String, VirtualMachine>,
        vmis: BTreeMap<String, VirtualMachineInstance>,
        pods: Vec<Pod>,
        revisions: Vec<ControllerRevision>,
        /// Instancetypes, PVCs, DataVolumes, migrations: JSON with a namespace.
        others: Vec<(&'static str, Value)>,
    }

    impl Maps {
        /// The `kind` objects of `others` in `namespace` (or cluster-wide).
        fn others(&self, kind: &str, namespace: &str) -> Vec<Value> {
            self.others
                .iter()
                .filter(|(k, v)| {
                    *k == kind
                        && v["metadata"]["namespace"]
                            .as_str()
                            .is_none_or(|ns| ns == namespace)
                })
                .map(|(_, v)| v.clone())
                .collect()
        }
    }

    impl ControllerCache for Maps {
        type Obj<'a, T: 'a> = &'a T;
        fn vm(&self, key: &str) -> Option<&VirtualMachine> {
            self.vms.get(key)
        }
        fn vmi(&self, key: &str) -> Option<&VirtualMachineInstance> {
            self.vmis.get(key)
        }
        fn launcher_pods(&self, namespace: &str, vmi_uid: &str) -> Vec<&Pod> {
            self.pods
                .iter()
                .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(kvrs_api::names::labels::CREATED_BY))
                        .is_some_and(|u| u == vmi_uid)
                })
                .collect()
        }
        /// Every revision of every namespace: more than asked, which the world filters.
        fn revisions(&self, _: &str, _: &WantedRevisions<'_>) -> Vec<Revision> {
            self.revisions.iter().cloned().map(Revision::from).collect()
        }
        fn instancetype_objects(&self, namespace: &str) -> Vec<Value> {
            self.others("VirtualMachineInstancetype", namespace)
        }
        fn data_volumes(&self, namespace: &str) -> Vec<Value> {
            self.others("DataVolume", namespace)
        }
        fn pvcs(&self, namespace: &str) -> Vec<PersistentVolumeClaim> {
            let pvcs = self.others("PersistentVolumeClaim", namespace).into_iter();
            pvcs.filter_map(|v| serde_json::from_value(v).ok())
                .collect()
        }
        fn migrations(&self, namespace: &str) -> Vec<Value> {
            self.others("VirtualMachineInstanceMigration", namespace)
        }
    }

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        }
    }

    fn revision(name: &str, owner: Option<&str>) -> ControllerRevision {
        let mut m = meta("ns", name);
        m.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                uid: uid.into(),
                ..OwnerReference::default()
            }]
        });
        ControllerRevision {
            metadata: m,
            ..ControllerRevision::default()
        }
    }

    fn inputs(config: &ClusterConfig) -> VmInputs<'_> {
        VmInputs {
            expectations: PendingExpectations::default(),
            now: Now::from_unix(0),
            jitter: 0.5,
            config,
        }
    }

    #[test]
    fn a_vm_reads_its_start_owned_and_named_revisions_in_name_order() {
        let mut cache = Maps::default();
        let mut vm = VirtualMachine {
            metadata: meta("ns", "vm"),
            ..VirtualMachine::default()
        };
        vm.metadata.uid = Some("u1".into());
        vm.spec.instancetype = Some(Default::default());
        if let Some(m) = vm.spec.instancetype.as_mut() {
            m.revision_name = Some("shared-it".into());
        }
        cache.vms.insert("ns/vm".into(), vm);
        cache.revisions = vec![
            revision("revision-start-vm-u1-2", None),
            revision("vm-it-abc", Some("u1")),
            revision("shared-it", Some("someone-else")),
            revision("revision-start-vm-u2-1", Some("u2")),
            revision("unrelated", None),
            revision("revision-start-vm-u1-1", Some("u1")),
        ];
        let config = ClusterConfig::default();
        let names = vm_world(&cache, "ns/vm", inputs(&config), |w| {
            w.revisions
                .iter()
                .map(|r| r.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        });
        assert_eq!(
            names.unwrap(),
            [
                "revision-start-vm-u1-1",
                "revision-start-vm-u1-2",
                "shared-it",
                "vm-it-abc"
            ]
        );
        assert!(vm_world(&cache, "ns/other", inputs(&config), |_| ()).is_none());
    }

    #[test]
    fn a_vm_reads_its_namespaces_volumes_and_instancetypes_only_when_it_references_one() {
        let mut cache = Maps::default();
        for (name, references) in [("plain", false), ("typed", true)] {
            let mut vm = VirtualMachine {
                metadata: meta("ns", name),
                ..VirtualMachine::default()
            };
            vm.spec.instancetype = references.then(Default::default);
            cache.vms.insert(format!("ns/{name}"), vm);
        }
        let object = |kind: &'static str, ns: Option<&str>| {
            let mut v = serde_json::json!({"kind": kind, "metadata": {"name": "x"}});
            if let Some(ns) = ns {
                v["metadata"]["namespace"] = ns.into();
            }
            (kind, v)
        };
        cache.others = vec![
            object("VirtualMachineInstancetype", None),
            object("VirtualMachineInstancetype", Some("other")),
            object("PersistentVolumeClaim", Some("ns")),
            object("PersistentVolumeClaim", Some("other")),
            object("DataVolume", Some("ns")),
        ];
        let config = ClusterConfig::default();
        let read = |key| {
            vm_world(&cache, key, inputs(&config), |w| {
                let counts = [w.instancetype_objects, w.data_volumes].map(<[Value]>::len);
                (counts, w.pvcs.len())
            })
        };
        assert_eq!(read("ns/plain"), Some(([0, 1], 1)));
        assert_eq!(read("ns/typed"), Some(([1, 1], 1)));
    }

    #[test]
    fn a_vmi_reads_its_own_launcher_pods_and_its_vm() {
        let mut cache = Maps::default();
        let mut vmi = VirtualMachineInstance {
            metadata: meta("ns", "a"),
            ..VirtualMachineInstance::default()
        };
        vmi.metadata.uid = Some("vmi-uid".into());
        cache.vmis.insert("ns/a".into(), vmi);
        cache.vms.insert(
            "ns/a".into(),
            VirtualMachine {
                metadata: meta("ns", "a"),
                ..VirtualMachine::default()
            },
        );
        let pod = |ns: &str, name: &str, uid: &str| {
            let mut m = meta(ns, name);
            m.labels = Some(
                [(
                    kvrs_api::names::labels::CREATED_BY.to_string(),
                    uid.to_string(),
                )]
                .into(),
            );
            Pod {
                metadata: m,
                ..Pod::default()
            }
        };
        cache.pods = vec![
            pod("ns", "virt-launcher-a-2", "vmi-uid"),
            pod("ns", "virt-launcher-b-1", "other-uid"),
            pod("other", "virt-launcher-a-3", "vmi-uid"),
            pod("ns", "virt-launcher-a-1", "vmi-uid"),
        ];
        let config = ClusterConfig::default();
        let inputs = VmiInputs {
            expectations: PendingExpectations::default(),
            now: Now::from_unix(0),
            config: &config,
        };
        let (vmi, (pods, has_vm)) = vmi_world(&cache, "ns/a", inputs, |w| {
            let pods: Vec<_> = w
                .pods
                .iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect();
            (pods, w.vm.is_some())
        })
        .unwrap();
        assert_eq!(vmi.metadata.uid.as_deref(), Some("vmi-uid"));
        assert_eq!(pods, ["virt-launcher-a-1", "virt-launcher-a-2"]);
        assert!(has_vm);
    }

    /// The VMI controller reads the namespace's migrations: a new VMI an active migration
    /// names gets no launcher pod (KubeVirt's "active migration exists").
    #[test]
    fn a_vmi_an_active_migration_names_gets_no_pod() {
        let mut cache = Maps::default();
        // A new VMI as the VMI controller first writes it (API version observed, finalizer).
        let vmi = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "vmi-uid",
                "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                                "kubevirt.io/storage-observed-api-version": "v1"},
                "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"]},
            "spec": {"domain": {"devices": {}}, "networks": [{"name": "default", "pod": {}}],
                     "volumes": [{"name": "root", "containerDisk": {"image": "img"}}]},
            "status": {"phase": "Pending"},
        }))
        .expect("a VMI");
        cache.vmis.insert("ns/a".into(), vmi);
        let config = ClusterConfig::default();
        let inputs = VmiInputs {
            expectations: PendingExpectations::default(),
            now: Now::from_unix(1_767_225_600),
            config: &config,
        };
        let render = |v: &VirtualMachineInstance| -> Result<Value, String> {
            Ok(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": format!("virt-launcher-{}-",
                    v.metadata.name.as_deref().unwrap_or_default())}}))
        };
        let decide = |cache: &Maps| {
            vmi_world(cache, "ns/a", inputs, |w| {
                let d = kvrs_decide::vmi::decide_vmi(w, &render, "abcde");
                (w.migrations.len(), d.plan.created("pods").is_some())
            })
            .map(|(_, r)| r)
        };
        assert_eq!(decide(&cache), Some((0, true)));
        let migration = |ns: &str, phase: &str| {
            serde_json::json!({"kind": "VirtualMachineInstanceMigration",
                "metadata": {"namespace": ns, "name": format!("m-{phase}")},
                "spec": {"vmiName": "a"}, "status": {"phase": phase}})
        };
        // Another namespace's and a finished migration do not count.
        cache.others = vec![
            (
                "VirtualMachineInstanceMigration",
                migration("other", "Scheduling"),
            ),
            (
                "VirtualMachineInstanceMigration",
                migration("ns", "Succeeded"),
            ),
        ];
        assert_eq!(decide(&cache), Some((1, true)));
        cache.others.push((
            "VirtualMachineInstanceMigration",
            migration("ns", "Scheduling"),
        ));
        assert_eq!(decide(&cache), Some((2, false)));
    }
}
