//! Small read helpers over object metadata shared by the decisions.

use crate::small_json::ScanPointer;
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
    obj.at("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
}

/// The object named `name` in namespace `ns` among cached JSON objects of one kind.
pub fn find_json<'a>(objs: &'a [Value], ns: &str, name: &str) -> Option<&'a Value> {
    objs.iter().find(|o| {
        o.at("/metadata/name").and_then(Value::as_str) == Some(name) && json_namespace(o) == ns
    })
}

/// The object named `name` in namespace `ns` among cached typed objects of one kind.
pub fn find<'a, T>(objs: &'a [T], ns: &str, name: &str) -> Option<&'a T>
where
    T: k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    objs.iter().find(|o| {
        let m = o.metadata();
        m.name.as_deref() == Some(name) && namespace(m) == ns
    })
}

/// The condition of type `t` in `status.conditions` of an object held as JSON (pod, VMI,
/// DataVolume: they all list conditions the same way).
pub fn json_condition<'a>(obj: &'a Value, t: &str) -> Option<&'a Value> {
    obj.at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| crate::small_json::is_str(c, "type", t))
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

/// Whether `without_zero_values(a) == without_zero_values(b)`, decided without building either
/// normalized copy: the status comparisons run on every sync, and most find no change.
pub fn eq_without_zero_values(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut kept = 0usize;
            for (k, va) in x {
                if is_zero_normalized(va) {
                    continue;
                }
                kept += 1;
                // A non-zero value equal after normalization makes `vb` non-zero as well.
                // Found by scanning: statuses and conditions are small objects (`small_json`).
                if !crate::small_json::member(y, k).is_some_and(|vb| eq_without_zero_values(va, vb))
                {
                    return false;
                }
            }
            kept == y.values().filter(|v| !is_zero_normalized(v)).count()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| eq_without_zero_values(a, b))
        }
        _ => crate::small_json::eq(a, b),
    }
}

/// [`eq_without_zero_values`] for map entries that may be absent: an absent entry equals one
/// whose normalized value is zero (normalization drops it).
pub fn eq_entry_without_zero_values(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (
        a.filter(|v| !is_zero_normalized(v)),
        b.filter(|v| !is_zero_normalized(v)),
    ) {
        (Some(a), Some(b)) => eq_without_zero_values(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Whether `without_zero_values(v)` is a zero value (normalization keeps array lengths and
/// empties a map whose values are all zero).
fn is_zero_normalized(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().all(is_zero_normalized),
        other => is_zero(other),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The borrowed comparison must agree with comparing the normalized copies.
    #[test]
    fn eq_without_zero_values_agrees_with_normalizing() {
        let samples = [
            Value::Null,
            json!({}),
            json!([]),
            json!(false),
            json!(""),
            json!(0),
            json!(0.0),
            json!({"a": null, "b": {"c": [], "d": ""}}),
            json!({"a": 1}),
            json!({"a": 1, "b": {"c": {}}}),
            json!({"a": 1.0}),
            json!({"a": [{}, {"x": false}]}),
            json!({"a": [{}, {}]}),
            json!({"a": [{"x": 1}]}),
            json!({"a": true, "b": "x"}),
            json!({"b": "x", "a": true, "z": {"y": null}}),
            json!([{"a": null}]),
            json!([{}]),
            json!("x"),
        ];
        for a in &samples {
            for b in &samples {
                let expected = without_zero_values(a) == without_zero_values(b);
                assert_eq!(eq_without_zero_values(a, b), expected, "{a} vs {b}");
                let (na, nb) = (without_zero_values(a), without_zero_values(b));
                let by_entry = na.get("a") == nb.get("a");
                assert_eq!(
                    eq_entry_without_zero_values(a.get("a"), b.get("a")),
                    by_entry,
                    "entry a of {a} vs {b}"
                );
            }
        }
    }
}
