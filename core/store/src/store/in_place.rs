//! Patching a stored object where it lies.
//!
//! The general patch copies the whole stored object, patches the copy, compares the copy with
//! the original twice (did anything but the status change? did anything change at all?), parses
//! the whole copy into its struct and drops the original: for a status patch of a VMI that is
//! all of its spec copied, compared, parsed and freed to change a phase. In the simulator that
//! was most of the API server's work.
//!
//! A patch names the top-level fields it touches (the first segment of each JSON-patch path,
//! the keys of a merge patch). For a typed VM or VMI only those are serialised from the stored
//! struct and patched; the others stay in the struct, copied into the new one; the comparisons
//! and the parse look at the touched fields alone ([`TopLevel::rebuilt`]). A JSON object (a pod,
//! say) is copied whole — the stored one is shared with the events and caches holding it — but
//! only its touched fields are compared. The result — the object's JSON, the struct, the
//! resourceVersion and generation, the error of a refused patch — is the general path's, which
//! a property test checks for typed and untyped stores. Anything this path does not model (an
//! admission hook, a subresource other than `status`, a patch of the whole document) takes the
//! general path.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use kvrs_api::json_pointer;
use kvrs_decide::PatchType;
use kvrs_decide::patch::{
    RESOURCE_VERSION_PATH, apply_json_patch, apply_json_patch_ops, apply_merge_patch,
    apply_strategic_merge_patch,
};
use kvrs_decide::small_json;

use super::{Store, Written, check_identity_of, conflict, invalid, meta_map, releasable};
use crate::error::StoreError;
use crate::object::{Obj, meta_str, owner_uids, owner_uids_in, parse};
use crate::resource::{ResourceType, Typed};
use crate::top_level::TopLevel;

/// Metadata a client cannot change: carried over from the stored object.
pub(super) const PROTECTED_METADATA: [&str; 7] = [
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
];

/// The top-level keys of an object a patch reads or writes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Touched {
    /// Keys some operation may change, in first-seen order.
    pub written: Vec<String>,
    /// Keys only `test` operations read: lent to the patch and given back as they were, so
    /// they are neither copied nor compared nor parsed again (the resourceVersion test of a
    /// status write leaves `metadata` alone).
    pub tested: Vec<String>,
    /// Written keys whose first operation replaces the whole field (`add` or `replace` of
    /// `/<key>`): the patch never reads their stored value, so it gets no copy of it.
    pub overwritten: Vec<String>,
}

/// The top-level keys a patch touches; `None` for a patch this path does not take (not a list
/// of operations or a map, a path outside the object's fields, a top-level `$` directive).
pub(super) fn touched_keys(patch_type: PatchType, patch: &Value) -> Option<Touched> {
    let mut t = Touched::default();
    match patch_type {
        PatchType::Json => {
            let ops = patch.as_array()?;
            for op in ops {
                let rest = small_json::get(op, "path")?.as_str()?.strip_prefix('/')?;
                let first = rest.split('/').next().unwrap_or(rest);
                // Borrowed unless escaped: a key is copied only when first seen.
                let key = json_pointer::token(first);
                let has = |list: &[String]| list.iter().any(|k| *k == *key);
                let kind = small_json::get(op, "op").and_then(Value::as_str);
                let is_test = kind == Some("test");
                let seen = has(&t.written) || has(&t.tested);
                if !seen && first == rest && matches!(kind, Some("add" | "replace")) {
                    t.overwritten.push(key.to_string());
                }
                let list = if is_test {
                    &mut t.tested
                } else {
                    &mut t.written
                };
                if !has(list) {
                    list.push(key.into_owned());
                }
            }
            let written = std::mem::take(&mut t.written);
            t.tested.retain(|k| !written.contains(k));
            t.written = written;
        }
        PatchType::Merge | PatchType::StrategicMerge => {
            for k in patch.as_object()?.keys() {
                if k.starts_with('$') {
                    return None;
                }
                if !t.written.contains(k) {
                    t.written.push(k.clone());
                }
            }
        }
    }
    Some(t)
}

/// Whether the stored field under a key equals a patched value (`None`: absent).
type SameField<'a> = dyn Fn(&str, Option<&Value>) -> bool + 'a;

/// What the in-place path concluded before anything was stored.
enum Outcome {
    /// The general path decides (nothing was changed).
    General,
    /// Refused, with the error the general path gives.
    Refused(StoreError),
    /// Nothing changed: no write.
    Unchanged,
    /// A write of `next` (the touched fields; the others are still in the stored object).
    Write { next: Map<String, Value> },
}

impl Store {
    /// [`Store::patch`] of a typed VM or VMI in place; `None` when the general path must run.
    pub(super) fn patch_in_place(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        sub: Option<&str>,
        patch_type: PatchType,
        patch: &Value,
        now: i64,
    ) -> Option<Result<Arc<Obj>, StoreError>> {
        if !self.in_place || self.admit.is_some() {
            return None;
        }
        let status_only = match sub {
            None => false,
            Some("status") if rt.status_subresource => true,
            Some(_) => return None,
        };
        let Touched {
            written: mut touched,
            mut tested,
            overwritten,
        } = touched_keys(patch_type, patch)?;
        if status_only && touched != ["status"] {
            return None;
        }
        if !status_only && rt.status_subresource && touched.iter().any(|k| k == "status") {
            return None;
        }
        let old_obj = self.table(rt)?.objects.get(key)?.clone();
        let stored_rv = match &*old_obj {
            Obj::Vm(vm) => vm.metadata.resource_version.as_deref(),
            Obj::Vmi(vmi) => vmi.metadata.resource_version.as_deref(),
            Obj::Other(v) => meta_str(v, "resourceVersion"),
        };
        // A conditional write's resourceVersion test, checked here against the struct: the
        // stored metadata is then neither serialised for it nor read by the patch.
        let rv_tests_checked = patch_type == PatchType::Json
            && tested.iter().any(|k| k == "metadata")
            && resource_version_tests_hold(patch, stored_rv);
        if rv_tests_checked {
            tested.retain(|k| k != "metadata");
        }
        // The generation a spec change bumps is read from the stored metadata.
        let spec_touched = touched
            .iter()
            .any(|k| !matches!(k.as_str(), "metadata" | "status"));
        // A field the patch reads is serialised; one it overwrites is not (whether the patch
        // changed it is compared with the struct), but for `metadata`, whose stored identity
        // and generation the checks read.
        let serialised = |k: &str| {
            let has = |list: &[String]| list.iter().any(|t| t == k);
            (has(&touched) && (!has(&overwritten) || k == "metadata"))
                || has(&tested)
                || (k == "metadata" && spec_touched)
        };
        let (mut cur, same): (_, &SameField) = match &*old_obj {
            Obj::Vm(vm) => (fields_of(&**vm, serialised), &|k, j| vm.field_equals(k, j)),
            Obj::Vmi(vmi) => (fields_of(&**vmi, serialised), &|k, j| {
                vmi.field_equals(k, j)
            }),
            // A JSON object is shared with the events and caches that hold it: the new one is
            // a copy whatever the patch, but only the fields it touches are compared.
            Obj::Other(v) => (
                v.as_object()?.clone(),
                &|k, j| match (small_json::get(v, k), j) {
                    (Some(a), Some(b)) => small_json::eq(a, b),
                    (a, b) => a.is_none() && b.is_none(),
                },
            ),
        };
        let outcome = patch_touched(
            rt,
            key,
            &mut cur,
            &mut touched,
            &tested,
            &overwritten,
            patch_type,
            patch,
            status_only,
            rv_tests_checked,
            same,
        );
        if !matches!(outcome, Outcome::General) {
            self.stats.in_place_patches += 1;
        }
        let next = match outcome {
            Outcome::Write { next } => next,
            Outcome::General => return None,
            Outcome::Refused(e) => {
                self.note_refused_patch(rt, sub, &e);
                return Some(Err(e));
            }
            Outcome::Unchanged => return Some(Ok(old_obj)),
        };
        let old_owners = touched
            .iter()
            .any(|k| k == "metadata")
            .then(|| owner_uids_in(small_json::member(&cur, "metadata")));
        let rv = self.next_rv();
        let written = match &*old_obj {
            Obj::Other(_) => commit_json(self.typed(rt), next, &mut cur, &touched, rv, old_owners),
            typed => commit_typed(self.typed(rt), typed, next, touched, rv, old_owners),
        };
        Some(Ok(self.install(rt, key, written, now)))
    }

    /// Counts a refused patch under its resource and reason, as the general path does.
    fn note_refused_patch(&mut self, rt: &ResourceType, sub: Option<&str>, e: &StoreError) {
        self.stats.refused += 1;
        if let StoreError::Invalid { reason, .. } = e {
            let why = reason.split(':').next().unwrap_or("").to_string();
            *self
                .stats
                .refused_by
                .entry(format!("{} patch {} {why}", rt.plural, sub.unwrap_or("")))
                .or_default() += 1;
        }
    }
}

/// The stored object's top-level fields with `edit` applied, the fields not in `fields`
/// placeholders (`null`) that keep their keys' positions ([`Store::edit_fields_unchecked`]).
pub(super) fn edited_fields(old: &Obj, fields: &[&str], edit: impl FnOnce(&mut Value)) -> Value {
    let named = |k: &str| fields.contains(&k);
    let mut next = Value::Object(match old {
        Obj::Vm(vm) => fields_of(&**vm, named),
        Obj::Vmi(vmi) => fields_of(&**vmi, named),
        Obj::Other(v) => v.as_object().cloned().unwrap_or_default(),
    });
    edit(&mut next);
    next
}

/// The write of an edited typed object: the named fields of `next` replace the stored ones
/// (a field the edit removed is removed), as an in-place patch writes its touched fields.
pub(super) fn commit_edited(
    typed: Typed,
    old: &Obj,
    next: Map<String, Value>,
    fields: &[&str],
    rv: u64,
) -> Written {
    let touched: Vec<String> = fields.iter().map(|f| (*f).to_string()).collect();
    let old_owners = touched
        .iter()
        .any(|k| k == "metadata")
        .then(|| crate::object::owner_uids_of(old));
    commit_typed(typed, old, next, touched, rv, old_owners)
}

/// Whether `op` is a `test` of `metadata.resourceVersion` (an operation's three members are
/// scanned, not hashed: this runs on every operation of every patch).
fn is_resource_version_test(op: &Value) -> bool {
    small_json::is_str(op, "op", "test") && small_json::is_str(op, "path", RESOURCE_VERSION_PATH)
}

/// Whether a JSON patch reads `metadata` only through `test`s of its resourceVersion, and each
/// of them holds for a stored object at `stored_rv` (a test of an absent member holds against
/// `null`, as [`apply_json_patch`] tests it). A test that fails is left to the patch, so the
/// refusal is the one its operations in order give.
fn resource_version_tests_hold(patch: &Value, stored_rv: Option<&str>) -> bool {
    let Some(ops) = patch.as_array() else {
        return false;
    };
    let stored = stored_rv.filter(|rv| !rv.is_empty());
    let mut any = false;
    for op in ops {
        let Some(path) = small_json::get(op, "path").and_then(Value::as_str) else {
            return false;
        };
        if path != "/metadata" && !path.starts_with("/metadata/") {
            continue;
        }
        if !is_resource_version_test(op) {
            return false;
        }
        let expected = small_json::index(op, "value");
        let holds = match stored {
            Some(rv) => expected.as_str() == Some(rv),
            None => expected.is_null(),
        };
        if !holds {
            return false;
        }
        any = true;
    }
    any
}

/// The stored object's top-level fields in the order its JSON has them: those `serialised`
/// says the patch reads are built from the struct, every other one is a placeholder (`null`)
/// that keeps its key's position.
fn fields_of<T: TopLevel>(obj: &T, serialised: impl Fn(&str) -> bool) -> Map<String, Value> {
    obj.keys()
        .into_iter()
        .map(|k| {
            let v = if serialised(k) {
                obj.field_to_value(k).unwrap_or(Value::Null)
            } else {
                Value::Null
            };
            (k.to_string(), v)
        })
        .collect()
}

/// Patches the written fields of `cur` (the stored object's fields, serialised) and checks the
/// result as the general path's `prepare_update` and `commit_if_changed` do, comparing a field
/// with the stored one through `same` (the stored struct's [`TopLevel::field_equals`]).
/// `touched` (the written fields) gains `metadata` when a generation bump writes it; the
/// written fields move out of `cur` (but for `metadata`, whose stored value later checks read);
/// the `tested` fields are lent to the patch and are back in `cur` when this returns; the
/// `overwritten` ones start as placeholders.
#[allow(clippy::too_many_arguments)]
fn patch_touched(
    rt: &ResourceType,
    key: &str,
    cur: &mut Map<String, Value>,
    touched: &mut Vec<String>,
    tested: &[String],
    overwritten: &[String],
    patch_type: PatchType,
    patch: &Value,
    status_only: bool,
    rv_tests_checked: bool,
    same: &SameField,
) -> Outcome {
    let is_touched = |touched: &[String], k: &str| touched.iter().any(|t| t == k);
    // The untouched fields are placeholders: no operation reads or writes them, and keeping
    // their keys keeps every key's position what it is in the whole object.
    let mut work = Map::with_capacity(cur.len() + touched.len());
    for (k, v) in cur.iter_mut() {
        // An overwritten field is present (so `replace` of it succeeds, as on a copy) and
        // replaced before anything reads it.
        let v = if is_touched(overwritten, k) {
            Value::Null
        } else if is_touched(touched, k) && k == "metadata" {
            v.clone()
        } else if is_touched(touched, k) || is_touched(tested, k) {
            std::mem::take(v)
        } else {
            Value::Null
        };
        work.insert(k.clone(), v);
    }
    let mut doc = Value::Object(work);
    let applied = match patch_type {
        PatchType::Json if rv_tests_checked => {
            let ops = patch.as_array().into_iter().flatten();
            let unchecked = ops.filter(|op| !is_resource_version_test(op));
            apply_json_patch_ops(&mut doc, unchecked).map_err(|e| e.to_string())
        }
        PatchType::Json => apply_json_patch(&mut doc, patch).map_err(|e| e.to_string()),
        PatchType::Merge => {
            apply_merge_patch(&mut doc, patch);
            Ok(())
        }
        PatchType::StrategicMerge => {
            apply_strategic_merge_patch(&mut doc, patch);
            Ok(())
        }
    };
    // A `test` changes nothing, so what was lent goes back as it was, whatever the outcome.
    if let Value::Object(m) = &mut doc {
        for k in tested {
            if let (Some(lent), Some(slot)) =
                (small_json::member_mut(m, k), small_json::member_mut(cur, k))
            {
                *slot = std::mem::replace(lent, Value::Null);
            }
        }
    }
    if let Err(e) = applied {
        return Outcome::Refused(invalid(rt, key, e));
    }
    let Value::Object(mut next) = doc else {
        return Outcome::General;
    };
    if status_only && small_json::member(&next, "status").is_none_or(Value::is_null) {
        return Outcome::General;
    }
    let empty = Map::new();
    if is_touched(touched, "metadata") {
        // The name is checked before the resourceVersion, as the apiserver does (its patch
        // handler checks the name while applying the patch, before the storage's precondition).
        if let Err(e) = check_identity_of(
            rt,
            meta_map(cur, &empty),
            small_json::member(&next, "metadata").and_then(Value::as_object),
            true,
        ) {
            return Outcome::Refused(e);
        }
        let want = small_json::member(&next, "metadata")
            .and_then(|m| small_json::get(m, "resourceVersion"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let have =
            small_json::member(meta_map(cur, &empty), "resourceVersion").and_then(Value::as_str);
        if want.is_some() && want != have {
            return Outcome::Refused(conflict(
                rt,
                key,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let md = meta_of(&mut next);
        let stored_md = meta_map(cur, &empty);
        for field in PROTECTED_METADATA {
            match small_json::member(stored_md, field) {
                Some(v) => md.insert(field.into(), v.clone()),
                None => md.remove(field),
            };
        }
    }
    let spec_changed = touched
        .iter()
        .filter(|k| !matches!(k.as_str(), "metadata" | "status"))
        .any(|k| !same(k, small_json::member(&next, k)));
    if rt.status_subresource && spec_changed {
        let g = small_json::member(meta_map(cur, &empty), "generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if !is_touched(touched, "metadata") {
            let Some(stored_md) = small_json::member(cur, "metadata") else {
                return Outcome::General;
            };
            next.insert("metadata".into(), stored_md.clone());
            touched.push("metadata".into());
        }
        meta_of(&mut next).insert("generation".into(), json!(g + 1));
    }
    let unchanged = next.len() == cur.len()
        && touched.iter().all(|k| {
            match (small_json::member(cur, k), small_json::member(&next, k)) {
                (Some(a), Some(b)) if k == "metadata" => same_but_rv(a, b),
                (a, b) if k == "metadata" => a.is_none() && b.is_none(),
                (_, b) => same(k, b),
            }
        });
    if unchanged {
        Outcome::Unchanged
    } else {
        Outcome::Write { next }
    }
}

/// `metadata` of a patched object, made a map when it is not one (as the general path does).
fn meta_of(next: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let md = next
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !md.is_object() {
        *md = Value::Object(Map::new());
    }
    match md {
        Value::Object(m) => m,
        _ => unreachable!("made a map above"),
    }
}

/// Whether two metadata maps are equal but for `resourceVersion`.
fn same_but_rv(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return small_json::eq(a, b);
    };
    let without_rv = |m: &Map<String, Value>| m.keys().filter(|k| *k != "resourceVersion").count();
    without_rv(a) == without_rv(b)
        && a.iter().all(|(k, v)| {
            k == "resourceVersion" || small_json::member(b, k).is_some_and(|w| small_json::eq(w, v))
        })
}

/// Stamps the resourceVersion and builds a stored JSON object: the untouched fields move over
/// from `cur`, the copy of the stored one.
fn commit_json(
    typed: Typed,
    mut next: Map<String, Value>,
    cur: &mut Map<String, Value>,
    touched: &[String],
    rv: u64,
    old_owners: Option<Vec<String>>,
) -> Written {
    for (k, v) in next.iter_mut() {
        if !touched.iter().any(|t| t == k)
            && let Some(old) = small_json::member_mut(cur, k)
        {
            *v = std::mem::take(old);
        }
    }
    meta_of(&mut next).insert("resourceVersion".into(), json!(rv.to_string()));
    let value = Value::Object(next);
    let meta_touched = touched.iter().any(|k| k == "metadata");
    let releasable = meta_touched && releasable(&value);
    let owners = old_owners
        .filter(|_| meta_touched)
        .map(|old| (old, owner_uids(&value)));
    Written {
        stored: parse(typed, value),
        rv,
        owners,
        uid: None,
        releasable,
    }
}

/// Stamps the resourceVersion and builds the stored object: the struct from the touched fields,
/// the others copied from the old struct.
fn commit_typed(
    typed: Typed,
    old: &Obj,
    mut next: Map<String, Value>,
    touched: Vec<String>,
    rv: u64,
    old_owners: Option<Vec<String>>,
) -> Written {
    let rv_text = rv.to_string();
    let meta_touched = touched.iter().any(|k| k == "metadata");
    if meta_touched {
        meta_of(&mut next).insert("resourceVersion".into(), json!(rv_text));
    }
    let value = Value::Object(next);
    // Untouched metadata is the stored object's, which nothing held for deletion (it would
    // have been removed) and whose owners are indexed already.
    let releasable = meta_touched && releasable(&value);
    let owners = old_owners.map(|old| (old, owner_uids(&value)));
    let obj = match old {
        Obj::Vm(vm) => rebuild(&**vm, value, &touched, &rv_text, typed),
        Obj::Vmi(vmi) => rebuild(&**vmi, value, &touched, &rv_text, typed),
        Obj::Other(_) => parse(typed, value),
    };
    Written {
        stored: obj,
        rv,
        owners: if meta_touched { owners } else { None },
        uid: None,
        releasable,
    }
}

/// The struct of a patched object from its old struct and the patched fields.
fn rebuild<T: TopLevel>(
    old: &T,
    mut value: Value,
    touched: &[String],
    rv: &str,
    typed: Typed,
) -> Arc<Obj> {
    let rebuilt = match &value {
        Value::Object(map) => old.rebuilt(touched, map).ok(),
        _ => None,
    };
    match rebuilt {
        Some(mut t) => {
            if !touched.iter().any(|k| k == "metadata") {
                t.metadata_mut().resource_version = Some(rv.to_string());
            }
            Arc::new(Box::new(t).into_obj())
        }
        None => {
            // A field that does not parse: the whole object decides what it becomes (kept
            // untyped), as a whole-object parse of the general path would.
            if let Value::Object(map) = &mut value {
                for (k, v) in map.iter_mut() {
                    if !touched.iter().any(|t| t == k) {
                        *v = old.field_to_value(k).unwrap_or(Value::Null);
                    }
                }
                if !touched.iter().any(|k| k == "metadata") {
                    meta_of(map).insert("resourceVersion".into(), json!(rv));
                }
            }
            parse(typed, value)
        }
    }
}
