//! Finding the instancetype and preference a VM references, as KubeVirt's spec finders do
//! (`pkg/instancetype/find`, `preference/find`), among objects the caller provides.
//!
//! Order: the ControllerRevision the matcher's `revisionName` names (it must exist); else the
//! one the VM's status refers to, when it was taken from an object of the matcher's name; else
//! the object by kind and name. The kind matches case-insensitively, singular or plural; an
//! empty kind means the cluster-wide kind. Namespaced objects are found in the VM's namespace
//! (an object read without a namespace is taken to be in it, as `kubectl apply` would put it).

use kvrs_api::VirtualMachine;
use serde_json::Value;

use crate::types::{Instancetype, InstancetypeSpec, Object, Preference, PreferenceSpec};

/// Why the object a VM references was not found (or not usable). Each names the VM field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// No object of that kind and name.
    #[error("{field}.name: {kind} {name:?} not found{scope}")]
    NotFound {
        /// `spec.instancetype` or `spec.preference`.
        field: &'static str,
        /// The kind looked for.
        kind: &'static str,
        /// The name looked for.
        name: String,
        /// ` in namespace "x"` for namespaced kinds.
        scope: String,
    },
    /// The ControllerRevision named by `revisionName` is not there.
    #[error(
        "{field}.revisionName: ControllerRevision {name:?} not found in namespace {namespace:?}"
    )]
    RevisionNotFound {
        /// `spec.instancetype` or `spec.preference`.
        field: &'static str,
        /// The revision's name.
        name: String,
        /// The VM's namespace.
        namespace: String,
    },
    /// The ControllerRevision does not hold an object of the expected kind.
    #[error("{field}.revisionName: ControllerRevision {name:?}: {reason}")]
    BadRevision {
        /// `spec.instancetype` or `spec.preference`.
        field: &'static str,
        /// The revision's name.
        name: String,
        /// What is wrong with its data.
        reason: String,
    },
    /// A kind KubeVirt does not know (its message).
    #[error("{field}.kind: got unexpected kind in {matcher}: {kind}")]
    UnexpectedKind {
        /// `spec.instancetype` or `spec.preference`.
        field: &'static str,
        /// `InstancetypeMatcher` or `PreferenceMatcher`.
        matcher: &'static str,
        /// The kind given.
        kind: String,
    },
    /// `inferFromVolume` needs the volume's labels, which only a cluster has.
    #[error(
        "{field}.inferFromVolume: inferring from volume {volume:?} needs its PVC or DataVolume \
         labels; name the {what} instead"
    )]
    Infer {
        /// `spec.instancetype` or `spec.preference`.
        field: &'static str,
        /// The volume named.
        volume: String,
        /// `instancetype` or `preference`.
        what: &'static str,
    },
}

/// Why an object could not be added to a [`Catalog`].
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// The object does not parse.
    #[error("{path}: {message}")]
    Parse {
        /// The field at fault (`spec.memory.guest`).
        path: String,
        /// Why it does not parse.
        message: String,
    },
    /// A quantity KubeVirt could not parse (it could not read the object at all).
    #[error("{field}: {error}")]
    Quantity {
        /// The quantity's path in the object.
        field: &'static str,
        /// Why it is not a quantity.
        error: kvrs_api::QuantityError,
    },
}

/// Deserializes `doc`, naming the field at fault on failure.
fn typed<T: serde::de::DeserializeOwned>(doc: Value) -> Result<T, AddError> {
    serde_path_to_error::deserialize(doc).map_err(|e| AddError::Parse {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

fn check_quantities(quantities: Vec<(&'static str, &kvrs_api::Quantity)>) -> Result<(), AddError> {
    for (field, q) in quantities {
        q.value()
            .map_err(|error| AddError::Quantity { field, error })?;
    }
    Ok(())
}

/// Whether a kind names the namespaced object (`true`), the cluster-wide one (`false`), or
/// neither (`None`). `names` are the lowercase singular names of the namespaced and cluster kinds.
fn namespaced(kind: Option<&str>, names: (&str, &str)) -> Option<bool> {
    let kind = kind.unwrap_or("").to_ascii_lowercase();
    let plural = |s: &str| format!("{s}s");
    if kind == names.0 || kind == plural(names.0) {
        Some(true)
    } else if kind.is_empty() || kind == names.1 || kind == plural(names.1) {
        Some(false)
    } else {
        None
    }
}

/// What differs between finding an instancetype and finding a preference.
struct Family {
    /// The VM field of the matcher, for errors.
    field: &'static str,
    /// The matcher's Go type name, for errors (KubeVirt's words).
    matcher: &'static str,
    /// The family's name in errors.
    what: &'static str,
    /// The namespaced and cluster-wide kinds.
    namespaced_kind: &'static str,
    cluster_kind: &'static str,
    /// Their lowercase names, as a matcher's `kind` may spell them.
    kinds: (&'static str, &'static str),
}

const INSTANCETYPES: Family = Family {
    field: "spec.instancetype",
    matcher: "InstancetypeMatcher",
    what: "instancetype",
    namespaced_kind: "VirtualMachineInstancetype",
    cluster_kind: "VirtualMachineClusterInstancetype",
    kinds: (
        "virtualmachineinstancetype",
        "virtualmachineclusterinstancetype",
    ),
};

const PREFERENCES: Family = Family {
    field: "spec.preference",
    matcher: "PreferenceMatcher",
    what: "preference",
    namespaced_kind: "VirtualMachinePreference",
    cluster_kind: "VirtualMachineClusterPreference",
    kinds: (
        "virtualmachinepreference",
        "virtualmachineclusterpreference",
    ),
};

/// The fields the two matchers share, and the revision the VM's status names.
struct Reference<'a> {
    name: String,
    kind: Option<&'a str>,
    revision_name: Option<&'a str>,
    infer_from_volume: Option<&'a str>,
    status_revision: Option<String>,
}

/// Whether a VM matcher's kind names the namespaced instancetype (for the VMI's annotation).
pub fn instancetype_is_namespaced(kind: Option<&str>) -> Option<bool> {
    namespaced(kind, INSTANCETYPES.kinds)
}

/// Whether a VM matcher's kind names the namespaced preference (for the VMI's annotation).
pub fn preference_is_namespaced(kind: Option<&str>) -> Option<bool> {
    namespaced(kind, PREFERENCES.kinds)
}

/// A ControllerRevision as the finders need it.
#[derive(Clone, Debug, PartialEq)]
struct Revision {
    name: String,
    namespace: Option<String>,
    object_name_label: Option<String>,
    data: Value,
}

/// The objects a VM's references are looked up in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    instancetypes: Vec<Instancetype>,
    preferences: Vec<Preference>,
    revisions: Vec<Revision>,
}

/// What [`Catalog::add`] made of a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// An instancetype (either kind).
    Instancetype,
    /// A preference (either kind).
    Preference,
    /// A ControllerRevision (its data is read when a VM names it).
    Revision,
    /// Another kind: not kept.
    Ignored,
}

impl Catalog {
    /// Adds one object by its `kind`; an object that does not parse is an error naming the field.
    pub fn add(&mut self, doc: Value) -> Result<Added, AddError> {
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match kind.as_str() {
            "VirtualMachineInstancetype" | "VirtualMachineClusterInstancetype" => {
                let it: Instancetype = typed(doc)?;
                check_quantities(crate::types::instancetype_quantities(&it.spec))?;
                self.instancetypes.push(it);
                Ok(Added::Instancetype)
            }
            "VirtualMachinePreference" | "VirtualMachineClusterPreference" => {
                let p: Preference = typed(doc)?;
                check_quantities(crate::types::preference_quantities(&p.spec))?;
                self.preferences.push(p);
                Ok(Added::Preference)
            }
            "ControllerRevision" => {
                let meta = doc.get("metadata");
                let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
                self.revisions.push(Revision {
                    name: text(meta.and_then(|m| m.get("name"))).unwrap_or_default(),
                    namespace: text(meta.and_then(|m| m.get("namespace"))),
                    object_name_label: text(
                        meta.and_then(|m| m.get("labels"))
                            .and_then(|l| l.get("instancetype.kubevirt.io/object-name")),
                    ),
                    data: doc.get("data").cloned().unwrap_or(Value::Null),
                });
                Ok(Added::Revision)
            }
            _ => Ok(Added::Ignored),
        }
    }

    /// Adds an instancetype object.
    pub fn add_instancetype(&mut self, it: Instancetype) {
        self.instancetypes.push(it);
    }

    /// Adds a preference object.
    pub fn add_preference(&mut self, p: Preference) {
        self.preferences.push(p);
    }

    /// How many ControllerRevisions the catalog holds.
    pub fn revision_count(&self) -> usize {
        self.revisions.len()
    }

    fn revision(&self, namespace: &str, name: &str) -> Option<&Revision> {
        self.revisions
            .iter()
            .find(|r| r.name == name && r.namespace.as_deref().is_none_or(|n| n == namespace))
    }

    /// The instancetype spec `vm` references (`None` when it references none).
    pub fn find_instancetype(
        &self,
        vm: &VirtualMachine,
    ) -> Result<Option<InstancetypeSpec>, FindError> {
        let Some(m) = &vm.spec.instancetype else {
            return Ok(None);
        };
        let status_revision = vm
            .status
            .as_ref()
            .and_then(|s| s.instancetype_ref.as_ref())
            .and_then(|r| r.controller_revision_ref.as_ref())
            .and_then(|r| r.name.clone());
        let reference = Reference {
            name: m.name.clone().unwrap_or_default(),
            kind: m.kind.as_deref(),
            revision_name: m.revision_name.as_deref(),
            infer_from_volume: m.infer_from_volume.as_deref(),
            status_revision,
        };
        self.find(&INSTANCETYPES, vm, reference, &self.instancetypes)
    }

    /// The preference spec `vm` references (`None` when it references none).
    pub fn find_preference(
        &self,
        vm: &VirtualMachine,
    ) -> Result<Option<PreferenceSpec>, FindError> {
        let Some(m) = &vm.spec.preference else {
            return Ok(None);
        };
        let status_revision = vm
            .status
            .as_ref()
            .and_then(|s| s.preference_ref.as_ref())
            .and_then(|r| r.controller_revision_ref.as_ref())
            .and_then(|r| r.name.clone());
        let reference = Reference {
            name: m.name.clone().unwrap_or_default(),
            kind: m.kind.as_deref(),
            revision_name: m.revision_name.as_deref(),
            infer_from_volume: m.infer_from_volume.as_deref(),
            status_revision,
        };
        self.find(&PREFERENCES, vm, reference, &self.preferences)
    }

    /// KubeVirt's finder order for either family (module doc).
    fn find<S: Clone + serde::de::DeserializeOwned>(
        &self,
        family: &Family,
        vm: &VirtualMachine,
        reference: Reference<'_>,
        objects: &[Object<S>],
    ) -> Result<Option<S>, FindError> {
        let namespace = vm_namespace(vm);
        let Reference {
            name,
            kind,
            revision_name,
            infer_from_volume,
            status_revision,
        } = reference;
        if let Some(spec) = self.revision_spec(
            family.field,
            &namespace,
            revision_name,
            status_revision,
            &name,
        )? {
            return Ok(Some(spec));
        }
        if let Some(volume) = infer_from_volume.filter(|v| !v.is_empty())
            && name.is_empty()
        {
            return Err(FindError::Infer {
                field: family.field,
                volume: volume.to_string(),
                what: family.what,
            });
        }
        let Some(is_namespaced) = namespaced(kind, family.kinds) else {
            return Err(FindError::UnexpectedKind {
                field: family.field,
                matcher: family.matcher,
                kind: kind.unwrap_or_default().to_string(),
            });
        };
        let (kind, scope) = kind_and_scope(
            is_namespaced,
            family.namespaced_kind,
            family.cluster_kind,
            &namespace,
        );
        objects
            .iter()
            .find(|o| {
                o.kind.as_deref() == Some(kind)
                    && matches(&o.metadata, &name, is_namespaced, &namespace)
            })
            .map(|o| Some(o.spec.clone()))
            .ok_or(FindError::NotFound {
                field: family.field,
                kind,
                name,
                scope,
            })
    }

    /// The spec stored in the revision the matcher (or, for the same object name, the status)
    /// names. The revision's data is the whole instancetype or preference object.
    fn revision_spec<T: serde::de::DeserializeOwned>(
        &self,
        field: &'static str,
        namespace: &str,
        revision_name: Option<&str>,
        status_revision: Option<String>,
        object_name: &str,
    ) -> Result<Option<T>, FindError> {
        let revision =
            match revision_name.filter(|n| !n.is_empty()) {
                Some(name) => Some(self.revision(namespace, name).ok_or_else(|| {
                    FindError::RevisionNotFound {
                        field,
                        name: name.to_string(),
                        namespace: namespace.to_string(),
                    }
                })?),
                None => status_revision
                    .filter(|n| !n.is_empty())
                    .and_then(|n| self.revision(namespace, &n))
                    .filter(|r| r.object_name_label.as_deref() == Some(object_name)),
            };
        let Some(revision) = revision else {
            return Ok(None);
        };
        let spec = revision.data.get("spec").cloned().unwrap_or(Value::Null);
        serde_json::from_value(spec)
            .map(Some)
            .map_err(|e| FindError::BadRevision {
                field,
                name: revision.name.clone(),
                reason: format!("data.spec: {e}"),
            })
    }
}

fn vm_namespace(vm: &VirtualMachine) -> String {
    vm.metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

fn kind_and_scope(
    is_namespaced: bool,
    namespaced_kind: &'static str,
    cluster_kind: &'static str,
    namespace: &str,
) -> (&'static str, String) {
    if is_namespaced {
        (namespaced_kind, format!(" in namespace {namespace:?}"))
    } else {
        (cluster_kind, String::new())
    }
}

fn matches(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    name: &str,
    is_namespaced: bool,
    namespace: &str,
) -> bool {
    meta.name.as_deref() == Some(name)
        && (!is_namespaced
            || meta
                .namespace
                .as_deref()
                .is_none_or(|n| n.is_empty() || n == namespace))
}
