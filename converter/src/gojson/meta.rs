//! `metav1.ObjectMeta` as the domain carries it: Kubernetes JSON names with `omitempty`, unlike
//! the rest of the domain (it is the only part with JSON tags).

use super::{GoJson, GoJsonError, Path, modes, object};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The object metadata of a domain. The launcher sets name and namespace (the VMI's), the UID once
/// known, and a deletion timestamp when it reports the domain gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// VMI name.
    pub name: String,
    /// Name prefix for generated names.
    pub generate_name: String,
    /// VMI namespace.
    pub namespace: String,
    /// VMI UID.
    pub uid: String,
    /// Resource version.
    pub resource_version: String,
    /// Generation (0 = unset).
    pub generation: i64,
    /// Creation time (RFC 3339).
    pub creation_timestamp: Option<String>,
    /// Set when the launcher reports the domain deleted (RFC 3339).
    pub deletion_timestamp: Option<String>,
    /// Grace period of the deletion.
    pub deletion_grace_period_seconds: Option<i64>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Other members (`ownerReferences`, `finalizers`, `managedFields`, `selfLink`), kept as read
    /// and written after the known ones.
    pub extra: Map<String, Value>,
}

const KNOWN: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
];

fn put_str(m: &mut Map<String, Value>, key: &str, v: &str) {
    if !v.is_empty() {
        m.insert(key.into(), Value::String(v.to_string()));
    }
}

fn put_map(m: &mut Map<String, Value>, key: &str, v: &BTreeMap<String, String>) {
    if !v.is_empty() {
        let obj = v
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        m.insert(key.into(), Value::Object(obj));
    }
}

fn get_map(v: &Value, at: &Path<'_>) -> Result<BTreeMap<String, String>, GoJsonError> {
    let Some(obj) = object(v, at)? else {
        return Ok(BTreeMap::new());
    };
    obj.iter()
        .map(|(k, x)| Ok((k.clone(), String::from_go(x, &at.key(k))?)))
        .collect()
}

impl GoJson for ObjectMeta {
    fn to_go(&self) -> Value {
        let mut m = Map::new();
        put_str(&mut m, "name", &self.name);
        put_str(&mut m, "generateName", &self.generate_name);
        put_str(&mut m, "namespace", &self.namespace);
        put_str(&mut m, "uid", &self.uid);
        put_str(&mut m, "resourceVersion", &self.resource_version);
        if self.generation != 0 {
            m.insert("generation".into(), Value::from(self.generation));
        }
        if self.creation_timestamp.is_some() {
            m.insert(
                "creationTimestamp".into(),
                modes::time::to(&self.creation_timestamp),
            );
        }
        if self.deletion_timestamp.is_some() {
            m.insert(
                "deletionTimestamp".into(),
                modes::time::to(&self.deletion_timestamp),
            );
        }
        if let Some(s) = self.deletion_grace_period_seconds {
            m.insert("deletionGracePeriodSeconds".into(), Value::from(s));
        }
        put_map(&mut m, "labels", &self.labels);
        put_map(&mut m, "annotations", &self.annotations);
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }

    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        let mut out = ObjectMeta::default();
        let Some(obj) = object(v, at)? else {
            return Ok(out);
        };
        let s = |key: &str| -> Result<String, GoJsonError> {
            obj.get(key)
                .map_or(Ok(String::new()), |x| String::from_go(x, &at.key(key)))
        };
        out.name = s("name")?;
        out.generate_name = s("generateName")?;
        out.namespace = s("namespace")?;
        out.uid = s("uid")?;
        out.resource_version = s("resourceVersion")?;
        if let Some(x) = obj.get("generation") {
            out.generation = i64::from_go(x, &at.key("generation"))?;
        }
        if let Some(x) = obj.get("creationTimestamp") {
            out.creation_timestamp = Option::from_go(x, &at.key("creationTimestamp"))?;
        }
        if let Some(x) = obj.get("deletionTimestamp") {
            out.deletion_timestamp = Option::from_go(x, &at.key("deletionTimestamp"))?;
        }
        if let Some(x) = obj.get("deletionGracePeriodSeconds") {
            out.deletion_grace_period_seconds =
                Option::from_go(x, &at.key("deletionGracePeriodSeconds"))?;
        }
        if let Some(x) = obj.get("labels") {
            out.labels = get_map(x, &at.key("labels"))?;
        }
        if let Some(x) = obj.get("annotations") {
            out.annotations = get_map(x, &at.key("annotations"))?;
        }
        out.extra = obj
            .iter()
            .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(out)
    }
}
