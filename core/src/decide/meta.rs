//! Small read helpers over object metadata shared by the decisions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde_json::{Value, json};

/// Annotation that records the API version the controller last observed the object at.
pub const LATEST_OBSERVED_API_VERSION: &str = "kubevirt.io/latest-observed-api-version";
/// Annotation that records the API version the object is stored at.
pub const STORAGE_OBSERVED_API_VERSION: &str = "kubevirt.io/storage-observed-api-version";

/// `namespace/name` of an object (namespace `default` when unset, as the oracles assume).
pub fn key(meta: &ObjectMeta) -> String {
    format!("{}/{}", namespace(meta), name(meta))
}

/// The namespace, `default` when unset.
pub fn namespace(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

/// The namespace of an object held as JSON (a cache entry), `default` when unset.
pub fn json_namespace(obj: &Value) -> &str {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
}

/// The object named `name` in namespace `ns` among cached JSON objects of one kind.
pub fn find_json<'a>(objs: &'a [Value], ns: &str, name: &str) -> Option<&'a Value> {
    objs.iter().find(|o| {
        o.pointer("/metadata/name").and_then(Value::as_str) == Some(name) && json_namespace(o) == ns
    })
}

/// The condition of type `t` in `status.conditions` of an object held as JSON (pod, VMI,
/// DataVolume: they all list conditions the same way).
pub fn json_condition<'a>(obj: &'a Value, t: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

/// The name, empty when unset.
pub fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

/// The UID, empty when unset.
pub fn uid(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

/// Whether the object carries `finalizer`.
pub fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// The value of annotation `k`.
pub fn annotation<'a>(meta: &'a ObjectMeta, k: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(k).map(String::as_str)
}

/// The value of label `k`.
pub fn label<'a>(meta: &'a ObjectMeta, k: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(k).map(String::as_str)
}

/// The owner reference marked `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Whether both API-version annotations say `v1` (until they do, a controller's only job is to
/// write them, which makes the API server store the object at the current version).
pub fn observed_latest_api_version(meta: &ObjectMeta) -> bool {
    annotation(meta, LATEST_OBSERVED_API_VERSION) == Some("v1")
        && annotation(meta, STORAGE_OBSERVED_API_VERSION) == Some("v1")
}

/// A controller owner reference to a kubevirt.io/v1 object, as JSON.
pub fn controller_ref_json(kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "blockOwnerDeletion": true,
        "controller": true,
        "kind": kind,
        "name": name,
        "uid": uid,
    })
}

/// A Kubernetes timestamp from seconds since the epoch.
pub fn time_at(unix: i64) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_second(unix)
        .ok()
        .map(Time)
}

/// Seconds since the epoch of a Kubernetes timestamp.
pub fn unix_of(t: &Time) -> i64 {
    t.0.as_second()
}

/// A timestamp as JSON text, the form conditions carry it in.
pub fn time_json(unix: i64) -> Value {
    Value::String(super::format_rfc3339(unix))
}

/// A value with every `null`, `false`, empty string, empty list and empty map removed (recursively
/// in maps): what Go's `omitempty` and semantic equality treat as "not set". Used to decide
/// whether a status changed at all.
pub fn without_zero_values(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), without_zero_values(v)))
                .filter(|(_, v)| !is_zero(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_zero_values).collect()),
        other => other.clone(),
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}
