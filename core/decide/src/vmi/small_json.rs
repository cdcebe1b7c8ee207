//! Member lookups in the small JSON objects the status step walks (a condition, a volume or
//! interface status entry, the status itself) by scanning their entries.
//!
//! serde_json's maps (`preserve_order`) hash every looked-up key with std's SipHash (~190
//! instructions a key, not configurable through serde_json); the status step looks up ~30 keys
//! per sync, most of them `type`, `status` and `reason` of each condition. Scanning a dozen
//! entries compares lengths first and costs a fraction of that. The result is the map's own
//! lookup: an object's keys are unique.

use serde_json::{Map, Value};

/// Objects larger than this are looked up through their hash table.
const SCAN_LIMIT: usize = 16;

/// `m[k]`, `None` when absent.
pub(super) fn member<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    if m.len() > SCAN_LIMIT {
        return m.get(k);
    }
    m.iter().find(|(key, _)| key.as_str() == k).map(|(_, v)| v)
}

/// `m[k]` to edit, `None` when absent.
pub(super) fn member_mut<'a>(m: &'a mut Map<String, Value>, k: &str) -> Option<&'a mut Value> {
    if m.len() > SCAN_LIMIT {
        return m.get_mut(k);
    }
    m.iter_mut()
        .find(|(key, _)| key.as_str() == k)
        .map(|(_, v)| v)
}

/// `v[k]` of an object, `None` when `v` is no object or lacks `k` (serde_json's `Value::get`).
pub(super) fn get<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.as_object().and_then(|m| member(m, k))
}

/// `v[k]` of an object to edit (serde_json's `Value::get_mut`).
pub(super) fn get_mut<'a>(v: &'a mut Value, k: &str) -> Option<&'a mut Value> {
    v.as_object_mut().and_then(|m| member_mut(m, k))
}

/// `v[k]` of an object, `null` when `v` is no object or lacks `k` (serde_json's `v[k]`).
pub(super) fn index<'a>(v: &'a Value, k: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    get(v, k).unwrap_or(&NULL)
}

/// Whether `v[k]` is the string `s` (`v[k] == s` on serde_json's values).
pub(super) fn is_str(v: &Value, k: &str, s: &str) -> bool {
    get(v, k).and_then(Value::as_str) == Some(s)
}

/// `m[k] = value`: replaced where it is, or appended (serde_json's `insert`, without hashing
/// the key of a small object when it is already there).
pub(super) fn set(m: &mut Map<String, Value>, k: &str, value: Value) {
    match member_mut(m, k) {
        Some(slot) => *slot = value,
        None => {
            m.insert(k.to_string(), value);
        }
    }
}

/// The object under `v[k]`, made an empty object first when it is none (`v[k]` indexing of
/// serde_json on an object `v`; `v` must be an object).
pub(super) fn object_mut<'a>(v: &'a mut Map<String, Value>, k: &str) -> &'a mut Map<String, Value> {
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
}
