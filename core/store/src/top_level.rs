//! A VM or VMI rebuilt one top-level field at a time.
//!
//! A patch names the top-level fields it touches (`status`, `metadata`, ...); the rest of the
//! object is what it was. Serialising only those fields for the patch, and re-reading only
//! them from the patched JSON, gives the struct a whole-object round trip would give, for a
//! fraction of the work: the spec of a VMI — most of it — is neither serialised nor read
//! when its status changes.
//!
//! The fields are those of the generated structs: `apiVersion`, `kind`, `metadata`, `spec`,
//! `status`, and everything else in the flattened `extra` map.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::{VirtualMachine, VirtualMachineInstance};

use crate::equal_json::serialises_equal;
use crate::object::Obj;

/// A typed object whose top-level fields can be set and checked one by one.
pub(crate) trait TopLevel: Clone + Serialize {
    /// Wraps the struct as a stored object.
    fn into_obj(self: Box<Self>) -> Obj;

    /// A copy of the struct whose fields under `touched` keys are read again from `map` (the
    /// patched object), as the derived `Deserialize` reads them from the whole object; the
    /// other fields are cloned.
    fn rebuilt(
        &self,
        touched: &[String],
        map: &Map<String, Value>,
    ) -> Result<Self, serde_json::Error>;

    /// The field under `key` as JSON, as the whole struct writes it (`None` when not written).
    fn field_to_value(&self, key: &str) -> Option<Value>;

    /// Whether the field under `key` as the whole struct writes it equals `json` (`None`: not
    /// written), by serde_json's equality, without building the field's JSON.
    fn field_equals(&self, key: &str, json: Option<&Value>) -> bool;

    /// The top-level keys the struct serialises, in the order it writes them.
    fn keys(&self) -> Vec<&str>;

    /// The metadata, for a change that needs no parse (the resourceVersion of a write).
    fn metadata_mut(&mut self) -> &mut ObjectMeta;
}

/// `metadata` serialised as the generated structs write it (Go's `omitempty` rules).
struct GoMeta<'a>(&'a ObjectMeta);

impl Serialize for GoMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        kvrs_api::go_object_meta(self.0, serializer)
    }
}

/// Go's zero value of an optional field's type (what `None` is written as).
fn zero_of<T: Default>(_: &Option<T>) -> T {
    T::default()
}

/// Whether an `omitempty` string is written at all.
fn written(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

/// Whether an `omitempty` string field is written as `json`.
fn written_equals(s: &Option<String>, json: Option<&Value>) -> bool {
    match (s.as_deref().filter(|s| !s.is_empty()), json) {
        (Some(a), Some(Value::String(b))) => a == b,
        (None, None) => true,
        _ => false,
    }
}

fn missing(field: &'static str) -> serde_json::Error {
    serde::de::Error::missing_field(field)
}

/// An optional field: absent or `null` is `None`.
fn optional<T: for<'de> Deserialize<'de>>(
    json: Option<&Value>,
) -> Result<Option<T>, serde_json::Error> {
    json.map_or(Ok(None), Deserialize::deserialize)
}

/// The top-level keys the structs have fields for; any other goes to `extra`.
const KNOWN: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

macro_rules! top_level_impl {
    ($ty:ty, $variant:ident) => {
        impl TopLevel for $ty {
            fn into_obj(self: Box<Self>) -> Obj {
                Obj::$variant(self)
            }

            fn rebuilt(
                &self,
                touched: &[String],
                map: &Map<String, Value>,
            ) -> Result<Self, serde_json::Error> {
                let is = |k: &str| touched.iter().any(|t| t == k);
                // A top-level map has a handful of keys: scanned, not hashed.
                use kvrs_decide::small_json::member;
                let mut extra = self.extra.clone();
                for k in touched.iter().filter(|k| !KNOWN.contains(&k.as_str())) {
                    match member(map, k) {
                        Some(v) => extra.insert(k.clone(), v.clone()),
                        None => extra.remove(k),
                    };
                }
                Ok(Self {
                    api_version: if is("apiVersion") {
                        optional(member(map, "apiVersion"))?
                    } else {
                        self.api_version.clone()
                    },
                    kind: if is("kind") {
                        optional(member(map, "kind"))?
                    } else {
                        self.kind.clone()
                    },
                    metadata: match (is("metadata"), member(map, "metadata")) {
                        (true, Some(v)) => Deserialize::deserialize(v)?,
                        (true, None) => ObjectMeta::default(),
                        (false, _) => self.metadata.clone(),
                    },
                    spec: match (is("spec"), member(map, "spec")) {
                        (true, Some(v)) => Deserialize::deserialize(v)?,
                        (true, None) => return Err(missing("spec")),
                        (false, _) => self.spec.clone(),
                    },
                    status: if is("status") {
                        optional(member(map, "status"))?
                    } else {
                        self.status.clone()
                    },
                    extra,
                })
            }

            fn field_to_value(&self, key: &str) -> Option<Value> {
                let written_str = |s: &Option<String>| {
                    s.as_ref()
                        .filter(|s| !s.is_empty())
                        .map(|s| Value::String(s.clone()))
                };
                match key {
                    "apiVersion" => written_str(&self.api_version),
                    "kind" => written_str(&self.kind),
                    "metadata" => serde_json::to_value(GoMeta(&self.metadata)).ok(),
                    "spec" => serde_json::to_value(&self.spec).ok(),
                    "status" => match &self.status {
                        Some(s) => serde_json::to_value(s).ok(),
                        None => serde_json::to_value(zero_of(&self.status)).ok(),
                    },
                    other => self.extra.get(other).cloned(),
                }
            }

            fn field_equals(&self, key: &str, json: Option<&Value>) -> bool {
                match (key, json) {
                    ("apiVersion", j) => written_equals(&self.api_version, j),
                    ("kind", j) => written_equals(&self.kind, j),
                    ("metadata", Some(j)) => serialises_equal(&GoMeta(&self.metadata), j),
                    ("spec", Some(j)) => serialises_equal(&self.spec, j),
                    ("status", Some(j)) => match &self.status {
                        Some(s) => serialises_equal(s, j),
                        None => serialises_equal(&zero_of(&self.status), j),
                    },
                    ("metadata" | "spec" | "status", None) => false,
                    (other, j) => self.extra.get(other) == j,
                }
            }

            fn keys(&self) -> Vec<&str> {
                let fixed = [
                    ("apiVersion", written(&self.api_version)),
                    ("kind", written(&self.kind)),
                    ("metadata", true),
                    ("spec", true),
                    ("status", true),
                ];
                fixed
                    .iter()
                    .filter(|(_, present)| *present)
                    .map(|(k, _)| *k)
                    .chain(self.extra.keys().map(String::as_str))
                    .collect()
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

top_level_impl!(VirtualMachine, Vm);
top_level_impl!(VirtualMachineInstance, Vmi);
