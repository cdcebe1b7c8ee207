//! Member lookups in the small JSON objects decisions and patches walk (a condition, a status,
//! a patch operation, a volume or interface status entry) by scanning their entries.
//!
//! serde_json's maps (`preserve_order`) hash every looked-up key with std's SipHash (~190
//! instructions a key, not configurable through serde_json). The VMI status step looks up ~30
//! keys per sync, mostly each condition's `type`, `status` and `reason`; building a status patch
//! ([`crate::patch::field_ops`]) and comparing statuses ([`crate::meta::eq_without_zero_values`])
//! look up every key of both statuses; applying a patch reads `op`, `path` and `value` of every
//! operation. Scanning a dozen entries compares lengths first and costs a fraction of that. The
//! result is the map's own lookup: an object's keys are unique.

use serde_json::{Map, Value};

/// Objects larger than this are looked up through their hash table.
const SCAN_LIMIT: usize = 16;

/// `m[k]`, `None` when absent.
pub fn member<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    if m.len() > SCAN_LIMIT {
        return m.get(k);
    }
    m.iter().find(|(key, _)| key.as_str() == k).map(|(_, v)| v)
}

/// `m[k]` to edit, `None` when absent.
pub fn member_mut<'a>(m: &'a mut Map<String, Value>, k: &str) -> Option<&'a mut Value> {
    if m.len() > SCAN_LIMIT {
        return m.get_mut(k);
    }
    m.iter_mut()
        .find(|(key, _)| key.as_str() == k)
        .map(|(_, v)| v)
}

/// `v[k]` of an object, `None` when `v` is no object or lacks `k` (serde_json's `Value::get`).
pub fn get<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.as_object().and_then(|m| member(m, k))
}

/// `v[k]` of an object to edit (serde_json's `Value::get_mut`).
pub fn get_mut<'a>(v: &'a mut Value, k: &str) -> Option<&'a mut Value> {
    v.as_object_mut().and_then(|m| member_mut(m, k))
}

/// `v[k]` of an object, `null` when `v` is no object or lacks `k` (serde_json's `v[k]`).
pub fn index<'a>(v: &'a Value, k: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    get(v, k).unwrap_or(&NULL)
}

/// Whether `v[k]` is the string `s` (`v[k] == s` on serde_json's values).
pub fn is_str(v: &Value, k: &str, s: &str) -> bool {
    get(v, k).and_then(Value::as_str) == Some(s)
}

/// `a == b` on serde_json's values, objects compared by scanning when small: the same answer
/// (equal objects have the same keys, each with an equal value, in any order), without hashing
/// every key of `a` to find it in `b`.
pub fn eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| member(y, k).is_some_and(|w| eq(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| eq(v, w))
        }
        _ => a == b,
    }
}

/// An array index as RFC 6901 spells it: no sign, no leading zero (as `Value::pointer` reads it).
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// The value `pointer` refers to, as `Value::pointer` finds it, objects looked up by [`member`].
pub fn pointer<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(v);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(v, |target, raw| {
        let t = kvrs_api::json_pointer::token(raw);
        match target {
            Value::Object(m) => member(m, &t),
            Value::Array(list) => array_index(&t).and_then(|i| list.get(i)),
            _ => None,
        }
    })
}

/// [`pointer`] to edit (`Value::pointer_mut`).
pub fn pointer_mut<'a>(v: &'a mut Value, pointer: &str) -> Option<&'a mut Value> {
    if pointer.is_empty() {
        return Some(v);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(v, |target, raw| {
        let t = kvrs_api::json_pointer::token(raw);
        match target {
            Value::Object(m) => member_mut(m, &t),
            Value::Array(list) => array_index(&t).and_then(move |i| list.get_mut(i)),
            _ => None,
        }
    })
}

/// [`pointer`] and [`pointer_mut`] as methods named as `kvrs_api::json_pointer::JsonPointer`'s
/// (same answers: both are `Value::pointer`'s): a module that imports this trait instead of that
/// one walks its pointers through small objects by scanning, its calls unchanged.
pub trait ScanPointer {
    /// The value `pointer` refers to ([`pointer`]).
    fn at(&self, pointer: &str) -> Option<&Value>;
    /// The value `pointer` refers to, to edit ([`pointer_mut`]).
    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

impl ScanPointer for Value {
    fn at(&self, p: &str) -> Option<&Value> {
        pointer(self, p)
    }

    fn at_mut(&mut self, p: &str) -> Option<&mut Value> {
        pointer_mut(self, p)
    }
}

/// `m[k] = value`: replaced where it is, or appended (serde_json's `insert`, without hashing
/// the key of a small object when it is already there).
pub fn set(m: &mut Map<String, Value>, k: &str, value: Value) {
    match member_mut(m, k) {
        Some(slot) => *slot = value,
        None => {
            m.insert(k.to_string(), value);
        }
    }
}

/// The object under `v[k]`, made an empty object first when it is none (`v[k]` indexing of
/// serde_json on an object `v`; `v` must be an object).
pub fn object_mut<'a>(v: &'a mut Map<String, Value>, k: &str) -> &'a mut Map<String, Value> {
    if !member(v, k).is_some_and(Value::is_object) {
        set(v, k, Value::Object(Map::new()));
    }
    match member_mut(v, k) {
        Some(Value::Object(m)) => m,
        _ => unreachable!("made an object above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Lookups agree with serde_json's own, small and large objects, present and absent keys;
    /// `set` keeps an existing key's place and appends a new one, as `insert` does.
    #[test]
    fn lookups_are_the_maps_own() {
        let large: Map<String, Value> = (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        let small = json!({"type": "Ready", "status": "True", "reason": ""});
        let small = small.as_object().unwrap();
        for m in [small, &large] {
            for k in ["type", "status", "reason", "k3", "k39", "missing", ""] {
                assert_eq!(member(m, k), m.get(k), "{k}");
            }
        }
        assert!(is_str(&json!({"type": "Ready"}), "type", "Ready"));
        assert_eq!(index(&json!({"a": 1}), "b"), &Value::Null);
        assert_eq!(index(&json!({"a": 1}), "a"), &json!(1));
        assert!(!is_str(&json!({"type": 1}), "type", "1"));
        assert!(!is_str(&json!([]), "type", "Ready"));
        let mut m = json!({"a": 1, "b": 2}).as_object().unwrap().clone();
        set(&mut m, "a", json!(3));
        set(&mut m, "c", json!(4));
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"a":3,"b":2,"c":4}"#);
        object_mut(&mut m, "b").insert("x".into(), json!(1));
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"a":3,"b":{"x":1},"c":4}"#
        );
    }

    /// `eq` agrees with serde_json's `==`, and the pointer walks with `Value::pointer`, on
    /// small and large objects, reordered keys, nested lists and escaped or malformed pointers.
    #[test]
    fn equality_and_pointers_are_serde_jsons() {
        let large: Value = Value::Object((0..40).map(|i| (format!("k{i}"), json!(i))).collect());
        let large_reordered: Value =
            Value::Object((0..40).rev().map(|i| (format!("k{i}"), json!(i))).collect());
        let samples = [
            json!({"a": 1, "b": [1, {"c": 2}]}),
            json!({"b": [1, {"c": 2}], "a": 1}),
            json!({"b": [1, {"c": 3}], "a": 1}),
            json!({"a": 1}),
            json!({"a": 1.0}),
            json!({"a": null}),
            json!({}),
            json!([]),
            json!([{"a": 1}]),
            json!(null),
            json!("a"),
            large.clone(),
            large_reordered,
        ];
        for a in &samples {
            for b in &samples {
                assert_eq!(eq(a, b), a == b, "{a} vs {b}");
            }
        }
        let doc = json!({
            "status": {"conditions": [{"type": "Ready"}, {"type": "Paused"}]},
            "a/b": {"~": 1}, "": {"": 2}, "0": 3, "01": 4, "large": large,
        });
        for p in [
            "",
            "/",
            "/status",
            "/status/conditions/1/type",
            "/status/conditions/01",
            "/status/conditions/+1",
            "/status/conditions/2",
            "/status/x",
            "/a~1b/~0",
            "/a~1b/~01",
            "//",
            "/0",
            "/01",
            "/large/k39",
            "/large/k40",
            "status",
            "/status/conditions/-",
        ] {
            assert_eq!(pointer(&doc, p), doc.pointer(p), "{p}");
            let mut copy = doc.clone();
            let expected = doc.pointer(p).cloned();
            assert_eq!(
                pointer_mut(&mut copy, p).map(|v| v.clone()),
                expected,
                "{p} (mut)"
            );
        }
    }
}
