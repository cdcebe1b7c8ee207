//! Building and applying the patches decisions write.
//!
//! Decisions write status and metadata as patches, never as full objects, so a concurrent writer's
//! fields are not overwritten. JSON patches carry `test` operations on the old values of what they
//! replace: if the stored object moved on since the snapshot, the server rejects the patch and the
//! key is retried with a fresh snapshot. The appliers here are what the simulator's and the tests'
//! fake API servers use to see the result of a plan.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::json_pointer::{self, JsonPointer};
use serde_json::{Map, Value, json};

/// One JSON-patch operation `{"op": .., "path": .., "value": ..}`.
pub fn op(op: &str, path: &str, value: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("op".into(), json!(op));
    m.insert("path".into(), json!(path));
    if let Some(v) = value {
        m.insert("value".into(), v);
    }
    Value::Object(m)
}

/// The path of the `test` operation that makes a JSON patch conditional on the whole object.
pub const RESOURCE_VERSION_PATH: &str = "/metadata/resourceVersion";

/// A `test` of the resourceVersion the decision read, when it read one: the patch then applies
/// only to that version, as KubeVirt's full `Update` does. A stale cache is refused (a conflict)
/// instead of writing values decided on an old copy; and a write that changes nothing is
/// recognisable by the server answering with that same version (see [`unchanged_by`]).
pub fn resource_version_test(meta: &ObjectMeta) -> Option<Value> {
    let rv = meta.resource_version.as_ref()?;
    Some(op("test", RESOURCE_VERSION_PATH, Some(json!(rv))))
}

/// Whether a successful `patch` left its object as it was: the patch was conditional on a
/// resourceVersion and the server answered with that same version. Such a write brings no watch
/// event, so whoever waits to observe it must stop waiting.
pub fn unchanged_by(patch: &Value, answered_resource_version: Option<&str>) -> bool {
    let Some(answered) = answered_resource_version else {
        return false;
    };
    patch
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["op"] == "test" && o["path"] == RESOURCE_VERSION_PATH && o["value"] == answered)
}

/// Escapes a key for use as a JSON-pointer segment (`~` -> `~0`, `/` -> `~1`); borrowed when
/// there is nothing to escape, as for nearly every key.
pub fn escape(key: &str) -> Cow<'_, str> {
    if key.contains(['~', '/']) {
        Cow::Owned(key.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(key)
    }
}

/// `base/<key escaped>`: the path of one field under `base`, built in one allocation.
fn child_path(base: &str, key: &str) -> String {
    let key = escape(key);
    let mut path = String::with_capacity(base.len() + 1 + key.len());
    path.push_str(base);
    path.push('/');
    path.push_str(&key);
    path
}

/// The JSON-patch operations turning the object `old` into `new` one field deep under `base`
/// (e.g. `/status`): changed fields are tested and replaced, new ones added, dropped ones tested
/// and removed. When `old` is absent or empty the whole object is added in one operation.
pub fn field_ops(base: &str, old: Option<&Value>, new: &Value) -> Vec<Value> {
    let empty = Map::new();
    let old_map = old.and_then(Value::as_object).unwrap_or(&empty);
    let new_map = new.as_object().unwrap_or(&empty);
    if old_map.is_empty() {
        if new_map.is_empty() {
            return vec![];
        }
        return vec![op("add", base, Some(new.clone()))];
    }
    let mut ops = Vec::new();
    for (k, nv) in new_map {
        match old_map.get(k) {
            Some(ov) if ov == nv => {}
            Some(ov) => {
                let path = child_path(base, k);
                ops.push(op("test", &path, Some(ov.clone())));
                ops.push(op("replace", &path, Some(nv.clone())));
            }
            None => ops.push(op("add", &child_path(base, k), Some(nv.clone()))),
        }
    }
    for (k, ov) in old_map {
        if !new_map.contains_key(k) {
            let path = child_path(base, k);
            ops.push(op("test", &path, Some(ov.clone())));
            ops.push(op("remove", &path, None));
        }
    }
    ops
}

/// A JSON patch replacing the string map at `path` (tested against the old map), or adding it
/// when there was none.
pub fn replace_map(
    path: &str,
    old: Option<&std::collections::BTreeMap<String, String>>,
    new: &std::collections::BTreeMap<String, String>,
) -> Value {
    let new_v = serde_json::to_value(new).unwrap_or(Value::Null);
    match old {
        Some(o) => Value::Array(vec![
            op(
                "test",
                path,
                Some(serde_json::to_value(o).unwrap_or(Value::Null)),
            ),
            op("replace", path, Some(new_v)),
        ]),
        None => Value::Array(vec![op("add", path, Some(new_v))]),
    }
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A `test` operation found a different value: the object changed since the snapshot.
    #[error("test operation at {0} failed")]
    TestFailed(String),
    /// A path does not exist or is malformed.
    #[error("invalid path {0}")]
    BadPath(String),
    /// The patch document is not of the expected shape.
    #[error("malformed patch: {0}")]
    Malformed(String),
}

/// The unescaped segments of a JSON pointer; a segment without `~` is borrowed from the path
/// (every write of the simulator's API server splits one or more paths, almost none escaped).
fn segments(path: &str) -> Result<Vec<Cow<'_, str>>, PatchError> {
    if path.is_empty() {
        return Ok(vec![]);
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| PatchError::BadPath(path.into()))?;
    Ok(rest.split('/').map(json_pointer::token).collect())
}

fn parent_mut<'a>(
    doc: &'a mut Value,
    segs: &[Cow<'_, str>],
    path: &str,
) -> Result<&'a mut Value, PatchError> {
    let mut cur = doc;
    for s in segs {
        cur = match cur {
            Value::Object(m) => m.get_mut(s.as_ref()),
            Value::Array(a) => s.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| PatchError::BadPath(path.into()))?;
    }
    Ok(cur)
}

fn get<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(doc);
    }
    doc.at(path)
}

/// Applies an RFC 6902 JSON patch (add, remove, replace, test) to `doc`.
///
/// A `test` against `null` succeeds when the path is absent, and a `replace` of an absent member
/// adds it, as the API server's patch implementation does.
pub fn apply_json_patch(doc: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| PatchError::Malformed("not an array".into()))?;
    apply_json_patch_ops(doc, ops)
}

/// [`apply_json_patch`] for a patch's operations, or some of them (an API server that has
/// already checked some `test` operations against its own copy of the object leaves them out).
pub fn apply_json_patch_ops<'a>(
    doc: &mut Value,
    ops: impl IntoIterator<Item = &'a Value>,
) -> Result<(), PatchError> {
    for o in ops {
        let kind = o["op"].as_str().unwrap_or_default();
        let path = o["path"]
            .as_str()
            .ok_or_else(|| PatchError::Malformed("no path".into()))?;
        // Compared in place: a test copies neither the stored nor the expected value.
        let expected = o.get("value").unwrap_or(&Value::Null);
        match kind {
            "test" => {
                if get(doc, path).unwrap_or(&Value::Null) != expected {
                    return Err(PatchError::TestFailed(path.into()));
                }
            }
            "add" | "replace" => {
                let value = expected.clone();
                let segs = segments(path)?;
                let Some((last, parents)) = segs.split_last() else {
                    *doc = value;
                    continue;
                };
                let parent = parent_mut(doc, parents, path)?;
                match parent {
                    Value::Object(m) => {
                        m.insert(last.to_string(), value);
                    }
                    Value::Array(a) => {
                        if last == "-" {
                            a.push(value);
                        } else {
                            let i: usize =
                                last.parse().map_err(|_| PatchError::BadPath(path.into()))?;
                            if kind == "replace" && i < a.len() {
                                a[i] = value;
                            } else if kind == "add" && i <= a.len() {
                                a.insert(i, value);
                            } else {
                                return Err(PatchError::BadPath(path.into()));
                            }
                        }
                    }
                    _ => return Err(PatchError::BadPath(path.into())),
                }
            }
            "remove" => {
                let segs = segments(path)?;
                let (last, parents) = segs
                    .split_last()
                    .ok_or_else(|| PatchError::BadPath(path.into()))?;
                let parent = parent_mut(doc, parents, path)?;
                let removed = match parent {
                    Value::Object(m) => m.remove(last.as_ref()).is_some(),
                    Value::Array(a) => match last.parse::<usize>() {
                        Ok(i) if i < a.len() => {
                            a.remove(i);
                            true
                        }
                        _ => false,
                    },
                    _ => false,
                };
                if !removed {
                    return Err(PatchError::BadPath(path.into()));
                }
            }
            other => return Err(PatchError::Malformed(format!("unsupported op {other}"))),
        }
    }
    Ok(())
}

/// Applies an RFC 7386 JSON merge patch to `doc`.
pub fn apply_merge_patch(doc: &mut Value, patch: &Value) {
    let Value::Object(pm) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    if let Value::Object(dm) = doc {
        for (k, v) in pm {
            if v.is_null() {
                dm.remove(k);
            } else {
                apply_merge_patch(dm.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Applies a strategic merge patch for the shapes decisions write: maps merge like a merge
/// patch, and lists named `conditions` merge by their `type` key (the Kubernetes patch strategy
/// of pod and VMI conditions); `$setElementOrder/..` directives are honoured for those lists.
pub fn apply_strategic_merge_patch(doc: &mut Value, patch: &Value) {
    let Value::Object(pm) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Value::Object(dm) = doc else { return };
    for (k, v) in pm {
        if k.starts_with("$setElementOrder/") {
            continue;
        }
        if v.is_null() {
            dm.remove(k);
        } else if k == "conditions" {
            let cur = dm.entry(k.clone()).or_insert_with(|| json!([]));
            merge_keyed_list(cur, v, "type");
            if let Some(order) = pm
                .get(&format!("$setElementOrder/{k}"))
                .and_then(Value::as_array)
            {
                reorder(cur, order, "type");
            }
        } else {
            apply_strategic_merge_patch(dm.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn merge_keyed_list(cur: &mut Value, patch: &Value, key: &str) {
    let (Some(items), Some(new_items)) = (cur.as_array_mut(), patch.as_array()) else {
        *cur = patch.clone();
        return;
    };
    for n in new_items {
        match items.iter_mut().find(|i| i.get(key) == n.get(key)) {
            Some(existing) => apply_merge_patch(existing, n),
            None => items.push(n.clone()),
        }
    }
}

fn reorder(cur: &mut Value, order: &[Value], key: &str) {
    let Some(items) = cur.as_array_mut() else {
        return;
    };
    let pos = |v: &Value| {
        order
            .iter()
            .position(|o| o.get(key) == v.get(key))
            .unwrap_or(usize::MAX)
    };
    items.sort_by_key(pos);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain key is borrowed as it is; `~` and `/` are escaped so that the pointer reader
    /// gives the key back.
    #[test]
    fn keys_escape_and_read_back() {
        assert!(matches!(
            escape("kubevirt.io"),
            Cow::Borrowed("kubevirt.io")
        ));
        for key in ["kubevirt.io/vm", "a~b", "~1/~0", ""] {
            let escaped = escape(key);
            assert!(!escaped.contains('/'), "{escaped}");
            assert_eq!(json_pointer::token(&escaped), key);
        }
        assert_eq!(child_path("/status", "a/b"), "/status/a~1b");
    }

    #[test]
    fn field_ops_round_trip_through_apply() {
        let old = json!({"a": 1, "b": [1], "c": "x"});
        let new = json!({"a": 2, "b": [1], "d": true});
        let mut doc = json!({"status": old.clone()});
        let ops = Value::Array(field_ops("/status", Some(&old), &new));
        apply_json_patch(&mut doc, &ops).unwrap();
        assert_eq!(doc["status"], new);
    }

    #[test]
    fn failed_test_rejects_patch() {
        let mut doc = json!({"status": {"a": 1}});
        let p = json!([{"op": "test", "path": "/status/a", "value": 2}]);
        assert_eq!(
            apply_json_patch(&mut doc, &p),
            Err(PatchError::TestFailed("/status/a".into()))
        );
    }

    #[test]
    fn strategic_conditions_merge_by_type() {
        let mut doc = json!({"status": {"conditions": [{"type": "A", "status": "False"}]}});
        let p = json!({"status": {"conditions": [{"type": "B", "status": "True"}, {"type": "A", "status": "True"}]}});
        apply_strategic_merge_patch(&mut doc, &p);
        assert_eq!(
            doc["status"]["conditions"],
            json!([{"type": "A", "status": "True"}, {"type": "B", "status": "True"}])
        );
    }
}
