//! Stored objects: for VMs and VMIs (when the store is typed) the parsed struct alone, for
//! everything else the JSON.
//!
//! A typed object keeps no JSON: its JSON is what the struct serialises to, built when a reader
//! asks ([`crate::json_of`]) and, for a patch, only for the top-level fields the patch touches.
//! That is also why the stored JSON and what a decision serialises from its typed snapshot
//! always compare equal — the `test` operations of JSON patches depend on that. Keeping the
//! patched JSON beside the struct cost a check that the two still agreed on every write and
//! about a quarter of a large simulation's memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use kvrs_api::{VirtualMachine, VirtualMachineInstance};

use crate::resource::Typed;
use kvrs_decide::small_json::ScanPointer;

/// A stored object, parsed once per write and shared with every event and reader of it.
///
/// The typed variants are boxed: a VMI struct is about 8 KB inline (every optional device and
/// setting of the API has its place), and unboxed every pod and revision — every write of
/// them — took an 8 KB allocation and copy too, most of a large simulation's memory.
#[derive(Debug)]
pub enum Obj {
    /// A VirtualMachine.
    Vm(Box<VirtualMachine>),
    /// A VirtualMachineInstance.
    Vmi(Box<VirtualMachineInstance>),
    /// Anything else, as JSON.
    Other(Value),
}

impl Obj {
    /// The VM, if this is one.
    pub fn vm(&self) -> Option<&VirtualMachine> {
        match self {
            Obj::Vm(v) => Some(&**v),
            _ => None,
        }
    }

    /// The VMI, if this is one.
    pub fn vmi(&self) -> Option<&VirtualMachineInstance> {
        match self {
            Obj::Vmi(v) => Some(&**v),
            _ => None,
        }
    }

    /// The JSON, if this is an untyped object.
    pub fn json(&self) -> Option<&Value> {
        match self {
            Obj::Other(v) => Some(v),
            _ => None,
        }
    }

    /// The object as JSON (a copy for typed objects, which serialise to exactly what is stored).
    pub fn to_json(&self) -> Value {
        match self {
            Obj::Vm(v) => serde_json::to_value(v).unwrap_or(Value::Null),
            Obj::Vmi(v) => serde_json::to_value(v).unwrap_or(Value::Null),
            Obj::Other(v) => v.clone(),
        }
    }

    /// The object's UID.
    pub fn uid(&self) -> Option<&str> {
        match self {
            Obj::Vm(v) => v.metadata.uid.as_deref(),
            Obj::Vmi(v) => v.metadata.uid.as_deref(),
            Obj::Other(v) => v.at("/metadata/uid").and_then(Value::as_str),
        }
    }
}

/// Parses `value` as the resource's typed struct (when `typed`); an untyped object's JSON moves
/// into the object itself.
pub(crate) fn parse(typed: Typed, value: Value) -> Arc<Obj> {
    match typed {
        Typed::Vm => parse_as(value, Obj::Vm),
        Typed::Vmi => parse_as(value, Obj::Vmi),
        Typed::Json => Arc::new(Obj::Other(value)),
    }
}

/// [`parse`] for one typed struct; JSON that does not parse as it is kept untyped.
fn parse_as<T>(value: Value, wrap: fn(Box<T>) -> Obj) -> Arc<Obj>
where
    T: for<'de> Deserialize<'de>,
{
    // Deserialising from a borrowed `Value` avoids a deep copy of the object on every write.
    match T::deserialize(&value) {
        Ok(typed) => Arc::new(wrap(Box::new(typed))),
        Err(_) => Arc::new(Obj::Other(value)),
    }
}

/// The owner UIDs of a stored object (read from the struct of a typed one, without building
/// its JSON).
pub(crate) fn owner_uids_of(obj: &Obj) -> Vec<String> {
    let refs = match obj {
        Obj::Vm(v) => v.metadata.owner_references.as_deref(),
        Obj::Vmi(v) => v.metadata.owner_references.as_deref(),
        Obj::Other(v) => return owner_uids(v),
    };
    refs.into_iter().flatten().map(|r| r.uid.clone()).collect()
}

/// `metadata.<field>` as a string.
pub(crate) fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?.get(field)?.as_str()
}

/// `metadata`, created as an empty map when missing or not a map.
pub(crate) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Value::Object(map) = v else {
        unreachable!("made an object above")
    };
    let md = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !md.is_object() {
        *md = Value::Object(Map::new());
    }
    match md {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// Whether `metadata.finalizers` is missing or empty.
pub(crate) fn finalizers_empty(v: &Value) -> bool {
    v.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
}

/// The UIDs of `metadata.ownerReferences`.
pub(crate) fn owner_uids(v: &Value) -> Vec<String> {
    owner_uids_in(v.get("metadata"))
}

/// The UIDs of a `metadata` map's `ownerReferences`.
pub(crate) fn owner_uids_in(metadata: Option<&Value>) -> Vec<String> {
    metadata
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("uid").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// A copy of `cur` whose status is `status` (or no status when `None`), copying every other
/// field but never the old status it replaces; field order is kept.
pub(crate) fn with_status(cur: &Value, status: Option<Value>) -> Value {
    let Some(map) = cur.as_object() else {
        return cur.clone();
    };
    let mut status = status;
    let mut out = Map::with_capacity(map.len() + 1);
    for (k, v) in map {
        if k == "status" {
            if let Some(s) = status.take() {
                out.insert(k.clone(), s);
            }
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    if let Some(s) = status {
        out.insert("status".to_string(), s);
    }
    Value::Object(out)
}

/// Whether two objects differ outside `metadata` and `status` (what bumps a CRD's generation).
pub(crate) fn spec_differs(a: &Value, b: &Value) -> bool {
    fn rest(v: &Value) -> Option<BTreeMap<&String, &Value>> {
        v.as_object().map(|m| {
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                .collect()
        })
    }
    rest(a) != rest(b)
}
