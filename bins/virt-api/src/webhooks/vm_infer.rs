//! `inferFromVolume` as KubeVirt v1.9.0's VM mutator resolves it (`pkg/instancetype/infer`): the
//! instancetype or preference named by the default-instancetype / default-preference labels of
//! the volume's PersistentVolumeClaim, DataVolume (a template of the VM or an object in the
//! cluster), DataSource or VolumeSnapshot, following KubeVirt's chain from one to the next.
//!
//! The chain is walked over the objects read so far ([`Objects`]). While reading, an object not
//! read yet stops the walk with [`Step::Read`]: the shell reads it and walks again, until nothing
//! new is needed (see [`super::vm_references::reads`]). When deciding, every object the walk
//! can reach has been read, and one that is absent does not exist.

use std::collections::BTreeMap;

use kvrs_api::VirtualMachine;
use kvrs_api::api::{InstancetypeMatcher, PreferenceMatcher};
use serde_json::Value;

use crate::subresources::expand::Reference;

const INSTANCETYPE_LABELS: (&str, &str) = (
    "instancetype.kubevirt.io/default-instancetype",
    "instancetype.kubevirt.io/default-instancetype-kind",
);
const PREFERENCE_LABELS: (&str, &str) = (
    "instancetype.kubevirt.io/default-preference",
    "instancetype.kubevirt.io/default-preference-kind",
);

/// The kinds the chain may read: (group, version, kind, plural, KubeVirt's not-found resource).
const PVC: (&str, &str, &str, &str, &str) = (
    "",
    "v1",
    "PersistentVolumeClaim",
    "persistentvolumeclaims",
    "persistentvolumeclaims",
);
const DATA_VOLUME: (&str, &str, &str, &str, &str) = (
    "cdi.kubevirt.io",
    "v1beta1",
    "DataVolume",
    "datavolumes",
    "datavolumes.cdi.kubevirt.io",
);
pub(super) const DATA_SOURCE: (&str, &str, &str, &str, &str) = (
    "cdi.kubevirt.io",
    "v1beta1",
    "DataSource",
    "datasources",
    "datasources.cdi.kubevirt.io",
);
const SNAPSHOT: (&str, &str, &str, &str, &str) = (
    "snapshot.storage.k8s.io",
    "v1",
    "VolumeSnapshot",
    "volumesnapshots",
    "volumesnapshots.snapshot.storage.k8s.io",
);

pub(super) type Kind = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// The objects read so far, and whether an absent one was read (it does not exist) or not.
pub(super) struct Objects<'a> {
    found: BTreeMap<(String, String, String), &'a Value>,
    /// `None`: every object was read (deciding); else those read (reading).
    read: Option<&'a [Reference]>,
}

impl<'a> Objects<'a> {
    /// For the decision: `found` is everything that exists.
    pub(super) fn all(found: &'a [Value]) -> Self {
        Objects::new(found, None)
    }

    /// While reading: `found` among `read`.
    pub(super) fn so_far(found: &'a [Value], read: &'a [Reference]) -> Self {
        Objects::new(found, Some(read))
    }

    fn new(found: &'a [Value], read: Option<&'a [Reference]>) -> Self {
        let found = found
            .iter()
            .map(|o| {
                let s = |v: &Value| v.as_str().unwrap_or("").to_string();
                let meta = &o["metadata"];
                ((s(&o["kind"]), s(&meta["namespace"]), s(&meta["name"])), o)
            })
            .collect();
        Objects { found, read }
    }

    /// The object; `None` when it does not exist (or could not be read); [`Step::Read`] when
    /// it has not been read yet.
    pub(super) fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&'a Value>, Step> {
        let key = (kind.2.to_string(), namespace.to_string(), name.to_string());
        if let Some(o) = self.found.get(&key) {
            return Ok(Some(o));
        }
        let reference = Reference {
            group: kind.0,
            version: kind.1,
            kind: kind.2,
            plural: kind.3,
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        };
        match self.read {
            Some(read) if !read.contains(&reference) => Err(Step::Read(reference)),
            _ => Ok(None),
        }
    }

    /// The object, or KubeVirt's (the API's) not-found error.
    fn must(&self, kind: Kind, namespace: &str, name: &str) -> Result<&'a Value, Step> {
        self.get(kind, namespace, name)?
            .ok_or_else(|| Step::Failed(format!("{} \"{name}\" not found", kind.4), false))
    }
}

/// Why a walk stopped.
#[derive(Debug)]
pub(super) enum Step {
    /// This object must be read first.
    Read(Reference),
    /// Inference failed with KubeVirt's message; `true` when the `Ignore` policy may clear the
    /// matcher (KubeVirt's `IgnoreableInferenceError`).
    Failed(String, bool),
}

fn ignorable(message: String) -> Step {
    Step::Failed(message, true)
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// (name, kind) from `labels`, as KubeVirt's `fromLabels`.
fn from_labels(object: &Value, labels: (&str, &str)) -> Result<(String, String), Step> {
    let all = &object["metadata"]["labels"];
    let Some(name) = all[labels.0].as_str() else {
        return Err(ignorable(format!(
            "unable to find required {} label on the volume",
            labels.0
        )));
    };
    Ok((name.to_string(), text(&all[labels.1]).to_string()))
}

struct Walk<'o, 'v> {
    objects: &'o Objects<'o>,
    vm: &'v Value,
    namespace: String,
    labels: (&'static str, &'static str),
}

impl Walk<'_, '_> {
    fn pvc(&self, namespace: &str, name: &str) -> Result<(String, String), Step> {
        from_labels(self.objects.must(PVC, namespace, name)?, self.labels)
    }

    fn snapshot(&self, namespace: &str, name: &str) -> Result<(String, String), Step> {
        from_labels(self.objects.must(SNAPSHOT, namespace, name)?, self.labels)
    }

    fn volume(&self, volume: &str) -> Result<(String, String), Step> {
        let volumes = self.vm["spec"]["template"]["spec"]["volumes"].as_array();
        let Some(v) = volumes
            .into_iter()
            .flatten()
            .find(|v| v["name"].as_str() == Some(volume))
        else {
            return Err(Step::Failed(
                format!("unable to find volume {volume} to infer defaults"),
                false,
            ));
        };
        if let Some(pvc) = v["persistentVolumeClaim"].as_object() {
            let claim = pvc.get("claimName").map_or("", text);
            return self.pvc(&self.namespace, claim);
        }
        if let Some(dv) = v["dataVolume"].as_object() {
            return self.data_volume(dv.get("name").map_or("", text));
        }
        Err(ignorable(format!(
            "unable to infer defaults from volume {volume} as type is not supported"
        )))
    }

    fn data_volume(&self, name: &str) -> Result<(String, String), Step> {
        let templates = self.vm["spec"]["dataVolumeTemplates"].as_array();
        if let Some(t) = templates
            .into_iter()
            .flatten()
            .find(|t| t["metadata"]["name"].as_str() == Some(name))
        {
            return self.data_volume_spec(&t["spec"]);
        }
        let Some(dv) = self.objects.get(DATA_VOLUME, &self.namespace, name)? else {
            return self.pvc(&self.namespace, name);
        };
        match from_labels(dv, self.labels) {
            Ok(found) => Ok(found),
            Err(_) => self.data_volume_spec(&dv["spec"]),
        }
    }

    fn data_volume_spec(&self, spec: &Value) -> Result<(String, String), Step> {
        let source = &spec["source"];
        if source["pvc"].is_object() {
            let pvc = &source["pvc"];
            return self.pvc(text(&pvc["namespace"]), text(&pvc["name"]));
        }
        if source["snapshot"].is_object() {
            let s = &source["snapshot"];
            return self.snapshot(text(&s["namespace"]), text(&s["name"]));
        }
        let r = &spec["sourceRef"];
        if r.is_object() {
            if text(&r["kind"]) != "DataSource" {
                return Err(ignorable(format!(
                    "unable to infer defaults from DataVolumeSourceRef as Kind {} is not supported",
                    text(&r["kind"])
                )));
            }
            let namespace = r["namespace"].as_str().unwrap_or(&self.namespace);
            return self.data_source(namespace, text(&r["name"]));
        }
        Err(ignorable(
            "unable to infer defaults from DataVolumeSpec as DataVolumeSource is not supported"
                .to_string(),
        ))
    }

    fn data_source(&self, namespace: &str, name: &str) -> Result<(String, String), Step> {
        let ds = self.objects.must(DATA_SOURCE, namespace, name)?;
        if let Ok(found) = from_labels(ds, self.labels) {
            return Ok(found);
        }
        let source = &ds["spec"]["source"];
        if source["pvc"].is_object() {
            return self.pvc(
                text(&source["pvc"]["namespace"]),
                text(&source["pvc"]["name"]),
            );
        }
        if source["snapshot"].is_object() {
            let s = &source["snapshot"];
            return self.snapshot(text(&s["namespace"]), text(&s["name"]));
        }
        Err(ignorable(
            "unable to infer defaults from DataSource that doesn't provide DataVolumeSourcePVC or \
             DataVolumeSourceSnapshot"
                .to_string(),
        ))
    }
}

fn infer(
    vm: &Value,
    volume: &str,
    labels: (&'static str, &'static str),
    objects: &Objects<'_>,
) -> Result<(String, String), Step> {
    let walk = Walk {
        objects,
        vm,
        namespace: text(&vm["metadata"]["namespace"]).to_string(),
        labels,
    };
    walk.volume(volume)
}

fn ignores(policy: Option<&str>) -> bool {
    policy == Some("Ignore")
}

/// KubeVirt's `infer` handler on `vm`: each matcher with `inferFromVolume` replaced by the
/// name and kind the volume's labels give (an instancetype inferred under the `Ignore` policy
/// also drops the template's `domain.memory`), or cleared when an ignorable failure meets the
/// `Ignore` policy. The error is the 400's message, or the object still to read.
pub(super) fn infer_matchers(vm: &mut VirtualMachine, objects: &Objects<'_>) -> Result<(), Step> {
    let value = serde_json::to_value(&*vm).unwrap_or(Value::Null);
    if let Some(m) = &vm.spec.instancetype
        && let Some(volume) = m.infer_from_volume.clone().filter(|v| !v.is_empty())
    {
        let ignore = ignores(m.infer_from_volume_failure_policy.as_deref());
        match infer(&value, &volume, INSTANCETYPE_LABELS, objects) {
            Ok((name, kind)) => {
                if ignore && let Some(spec) = vm.spec.template.spec.as_mut() {
                    spec.domain.memory = None;
                }
                vm.spec.instancetype = Some(InstancetypeMatcher {
                    name: Some(name),
                    kind: Some(kind).filter(|k| !k.is_empty()),
                    ..InstancetypeMatcher::default()
                });
            }
            Err(Step::Failed(_, true)) if ignore => vm.spec.instancetype = None,
            Err(e) => return Err(e),
        }
    }
    if let Some(m) = &vm.spec.preference
        && let Some(volume) = m.infer_from_volume.clone().filter(|v| !v.is_empty())
    {
        let ignore = ignores(m.infer_from_volume_failure_policy.as_deref());
        match infer(&value, &volume, PREFERENCE_LABELS, objects) {
            Ok((name, kind)) => {
                vm.spec.preference = Some(PreferenceMatcher {
                    name: Some(name),
                    kind: Some(kind).filter(|k| !k.is_empty()),
                    ..PreferenceMatcher::default()
                });
            }
            Err(Step::Failed(_, true)) if ignore => vm.spec.preference = None,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
