//! Building and applying the patches decisions write.
//!
//! Decisions write status and metadata as patches, never as full objects, so a concurrent writer's
//! fields are not overwritten. JSON patches carry `test` operations on the old values of what they
//! replace: if the stored object moved on since the snapshot, the server rejects the patch and the
//! key is retried with a fresh snapshot. The appliers here are what the simulator's and the tests'
//! fake API servers use to see the result of a plan.
//!
//! The RFC 6902 operations and the RFC 7396 merge are applied by the `json-patch` crate. What
//! stays here is what neither RFC has:
//! - building the patches: the `test` preconditions on old values and on the resourceVersion
//!   ([`field_ops`], [`resource_version_test`], [`unchanged_by`]);
//! - two leniencies of the Kubernetes API server, whose JSON-patch library (evanphx/json-patch
//!   v4) lets a `test` of `null` hold for an absent member and a `replace` of an absent object
//!   member add it; decisions rely on both (the VM controller tests a firmware it found absent
//!   against `null`, the handler replaces a `/status` the VMI may not have yet). `test` is also
//!   compared in place, copying neither value: the simulator tests on nearly every write;
//! - the strategic merge patch for the shapes decisions write (a Kubernetes notion: its merge
//!   keys live in Go struct tags, no JSON-patch crate has them);
//! - [`PatchError`], whose messages are the refusal labels the stores count and return.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use crate::small_json::{self, member, member_mut};

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
    patch.as_array().into_iter().flatten().any(|o| {
        small_json::is_str(o, "op", "test")
            && small_json::is_str(o, "path", RESOURCE_VERSION_PATH)
            && small_json::is_str(o, "value", answered)
    })
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
/// Fields are looked up and compared by scanning (`small_json`): a status has a dozen or two.
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
        match member(old_map, k) {
            Some(ov) if small_json::eq(ov, nv) => {}
            Some(ov) => {
                let path = child_path(base, k);
                ops.push(op("test", &path, Some(ov.clone())));
                ops.push(op("replace", &path, Some(nv.clone())));
            }
            None => ops.push(op("add", &child_path(base, k), Some(nv.clone()))),
        }
    }
    for (k, ov) in old_map {
        if member(new_map, k).is_none() {
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

fn get<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    small_json::pointer(doc, path)
}

/// Applies an RFC 6902 JSON patch (add, remove, replace, move, copy, test) to `doc`.
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
/// Operations apply one after another; on an error `doc` keeps those before it (callers patch a
/// copy, or lend only fields the failed patch's `test`s read).
pub fn apply_json_patch_ops<'a>(
    doc: &mut Value,
    ops: impl IntoIterator<Item = &'a Value>,
) -> Result<(), PatchError> {
    for o in ops {
        let kind = small_json::index(o, "op").as_str().unwrap_or_default();
        let path = small_json::index(o, "path")
            .as_str()
            .ok_or_else(|| PatchError::Malformed("no path".into()))?;
        if kind == "test" {
            // Compared in place: a test copies neither the stored nor the expected value.
            let expected = small_json::index(o, "value");
            if !small_json::eq(get(doc, path).unwrap_or(&Value::Null), expected) {
                return Err(PatchError::TestFailed(path.into()));
            }
            continue;
        }
        if let Some(done) = apply_to_member(doc, kind, path, o) {
            done?;
            continue;
        }
        let op = operation(kind, path, o, doc)?;
        json_patch::patch_unsafe(doc, std::slice::from_ref(&op))
            .map_err(|_| PatchError::BadPath(path.into()))?;
    }
    Ok(())
}

/// An `add`, `replace` or `remove` of a member of an object, applied where the member lies
/// (`None`: anything else, which `json-patch` applies). Nearly every operation a decision sends
/// is one of these; through `json-patch` its value was cloned twice (into the operation, then
/// out of it) and its path parsed into a pointer. The parent is found as `json-patch` finds it
/// (`Value::pointer_mut`'s walk, its objects scanned by `small_json`), and the member is set or removed with the map operation it uses, so
/// the result, key order included, is the same; a path with an escaped token takes the general
/// path, which validates the escape.
fn apply_to_member(
    doc: &mut Value,
    kind: &str,
    path: &str,
    o: &Value,
) -> Option<Result<(), PatchError>> {
    if !matches!(kind, "add" | "replace" | "remove") || path.contains('~') {
        return None;
    }
    let (parent, member) = path.strip_prefix('/').and(path.rsplit_once('/'))?;
    let Value::Object(map) = small_json::pointer_mut(doc, parent)? else {
        return None;
    };
    let value = || small_json::index(o, "value").clone();
    match kind {
        "remove" => {
            if map.remove(member).is_none() {
                return Some(Err(PatchError::BadPath(path.into())));
            }
        }
        // A `replace` of a present member swaps its value in place; of an absent one, it is an
        // `add` (see [`operation`]); an `add` of a present member replaces its value, in place.
        _ => match member_mut(map, member) {
            Some(slot) => *slot = value(),
            None => {
                map.insert(member.to_string(), value());
            }
        },
    }
    Some(Ok(()))
}

/// The `json-patch` operation for `o` (an operation other than `test`) against `doc` as it is
/// now: a `replace` of an absent member of an object becomes an `add`.
fn operation(
    kind: &str,
    path: &str,
    o: &Value,
    doc: &Value,
) -> Result<json_patch::PatchOperation, PatchError> {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{
        AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation,
        ReplaceOperation,
    };
    let pointer = |p: &str| PointerBuf::parse(p).map_err(|_| PatchError::BadPath(path.into()));
    let from = || {
        o["from"]
            .as_str()
            .ok_or_else(|| PatchError::Malformed(format!("{kind} without from")))
            .and_then(pointer)
    };
    let value = || o.get("value").cloned().unwrap_or(Value::Null);
    Ok(match kind {
        "add" => PatchOperation::Add(AddOperation {
            path: pointer(path)?,
            value: value(),
        }),
        "replace" if absent_object_member(doc, path) => PatchOperation::Add(AddOperation {
            path: pointer(path)?,
            value: value(),
        }),
        "replace" => PatchOperation::Replace(ReplaceOperation {
            path: pointer(path)?,
            value: value(),
        }),
        "remove" => PatchOperation::Remove(RemoveOperation {
            path: pointer(path)?,
        }),
        "move" => PatchOperation::Move(MoveOperation {
            from: from()?,
            path: pointer(path)?,
        }),
        "copy" => PatchOperation::Copy(CopyOperation {
            from: from()?,
            path: pointer(path)?,
        }),
        other => return Err(PatchError::Malformed(format!("unsupported op {other}"))),
    })
}

/// `path` names a member its parent object does not have (looked up in place; nearly every
/// `replace` finds its member, so the parent is looked up only when it does not).
fn absent_object_member(doc: &Value, path: &str) -> bool {
    if get(doc, path).is_some() {
        return false;
    }
    path.rsplit_once('/')
        .is_some_and(|(parent, _)| get(doc, parent).is_some_and(Value::is_object))
}

/// Applies an RFC 7396 JSON merge patch to `doc`.
pub fn apply_merge_patch(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
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
            Some(existing) => json_patch::merge(existing, n),
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
            assert_eq!(kvrs_api::json_pointer::token(&escaped), key);
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

    proptest::proptest! {
        /// Every `add`, `replace` and `remove` applied in place gives what `json-patch` gives
        /// (the value and its key order; whether it fails), wherever the path leads: into an
        /// object, an array, a scalar, an absent parent; escaped or not. A `replace` of an absent
        /// member is an `add` here (as the API server's), so `json-patch` is given an `add` then.
        #[test]
        fn member_ops_agree_with_json_patch(
            ops in proptest::collection::vec(
                (0..3usize, proptest::sample::select(vec![
                    "/a", "/a/x", "/a/y", "/a/x/z", "/b", "/b/0", "/b/-", "/b/1/k", "/c",
                    "/c/x", "/n/x", "/a/~1s", "/a/~0t", "/a/", "", "/e~1f",
                ]), 0..4i64),
                1..6,
            )
        ) {
            let base = json!({"a": {"x": 1, "y": {"z": true}, "/s": 2}, "b": [{"k": 1}, 2],
                              "c": "s", "e/f": null, "d": 0});
            let (mut ours, mut theirs) = (base.clone(), base);
            for (kind, path, v) in ops {
                let kind = ["add", "replace", "remove"][kind];
                let o = json!({"op": kind, "path": path, "value": v});
                let got = apply_json_patch_ops(&mut ours, [&o]);
                let as_json_patch = match kind {
                    "replace" if absent_object_member(&theirs, path) => "add",
                    k => k,
                };
                let reference: json_patch::Patch = serde_json::from_value(json!([
                    {"op": as_json_patch, "path": path, "value": v}
                ])).unwrap();
                let want = json_patch::patch_unsafe(&mut theirs, &reference);
                proptest::prop_assert_eq!(got.is_ok(), want.is_ok(), "{} {}", kind, path);
                proptest::prop_assert_eq!(
                    serde_json::to_string(&ours).unwrap(),
                    serde_json::to_string(&theirs).unwrap()
                );
            }
        }
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

    /// The API server's leniencies (a `test` of `null` holds for an absent member, `replace`
    /// of an absent object member adds it) and the refusals' labels.
    #[test]
    fn api_server_semantics_and_labels() {
        let mut doc = json!({"status": {"a": 1, "list": [1, 2]}});
        let p = json!([
            {"op": "test", "path": "/status/absent", "value": null},
            {"op": "replace", "path": "/status/b", "value": 2},
            {"op": "copy", "from": "/status/a", "path": "/status/c"},
            {"op": "move", "from": "/status/list/0", "path": "/status/list/-"},
            {"op": "remove", "path": "/status/a"},
        ]);
        apply_json_patch(&mut doc, &p).unwrap();
        assert_eq!(doc, json!({"status": {"b": 2, "c": 1, "list": [2, 1]}}));
        let refused = |p: Value| {
            apply_json_patch(&mut doc.clone(), &p)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(json!([{"op": "test", "path": "/status/b", "value": null}])),
            "test operation at /status/b failed"
        );
        assert_eq!(
            refused(json!([{"op": "replace", "path": "/status/list/2", "value": 0}])),
            "invalid path /status/list/2"
        );
        assert_eq!(
            refused(json!([{"op": "add", "path": "/nope/x", "value": 0}])),
            "invalid path /nope/x"
        );
        assert_eq!(
            refused(json!([{"op": "remove", "path": "/status/a"}])),
            "invalid path /status/a"
        );
        assert_eq!(
            refused(json!([{"op": "add", "path": "status", "value": 0}])),
            "invalid path status"
        );
        assert_eq!(
            refused(json!([{"op": "frob", "path": "/status"}])),
            "malformed patch: unsupported op frob"
        );
        assert_eq!(refused(json!({})), "malformed patch: not an array");
    }

    #[test]
    fn merge_patch_drops_nulls_and_replaces_lists() {
        let mut doc = json!({"a": {"b": 1, "c": [1]}, "d": 1});
        apply_merge_patch(&mut doc, &json!({"a": {"b": null, "c": [2]}, "e": "x"}));
        assert_eq!(doc, json!({"a": {"c": [2]}, "d": 1, "e": "x"}));
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
