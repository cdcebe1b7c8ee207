//! The shape of the status write: empty collections tidied away as Go omits them, and, once
//! virt-handler owns the VMI (Scheduled, Running), KubeVirt's field-by-field patch in which every
//! controller-owned field is tested against the value the decision saw.

use serde_json::{Map, Value};

use super::status::{MetaEdit, string_list_json};
use crate::patch::op;
use crate::small_json::{get, get_mut, index, member};
use crate::{ApiWrite, PatchType, Plan, WriteOp};

/// Drops an empty (or null) condition list Go would omit, so the patch does not churn on it.
/// An empty `activePods` stays, as KubeVirt writes it; the metadata's emptied maps and lists are
/// left out when the typed copy is built as JSON (`MetaEdit`).
pub(super) fn tidy(v: &mut Value) {
    if let Some(m) = get_mut(v, "status").and_then(Value::as_object_mut) {
        let empty = member(m, "conditions").is_some_and(|x| {
            x.is_null()
                || x.as_array().is_some_and(Vec::is_empty)
                || x.as_object().is_some_and(Map::is_empty)
        });
        if empty {
            m.remove("conditions");
        }
    }
}

/// KubeVirt's `prepareVMIPatch`: conditions, volume and interface status, active pods, phase,
/// launcher image, labels and finalizers — each tested against the old value.
pub(super) fn handed_over_patch(
    plan: &mut Plan,
    orig: &Value,
    mut c: Value,
    m: &MetaEdit<'_>,
    ns: &str,
    name: &str,
) -> Option<Value> {
    let mut ops = Vec::new();
    // Fields are compared borrowed; only those that go into the patch are copied.
    let mut replace =
        |path: &str, old: Option<&Value>, new: Option<&Value>, add_if_absent: bool| {
            if old == new {
                return;
            }
            let new = new.cloned().unwrap_or(Value::Null);
            match old {
                None if add_if_absent => ops.push(op("add", path, Some(new))),
                old => {
                    ops.push(op("test", path, Some(old.cloned().unwrap_or(Value::Null))));
                    ops.push(op("replace", path, Some(new)));
                }
            }
        };
    replace(
        "/status/volumeStatus",
        field(orig, "status", "volumeStatus"),
        field(&c, "status", "volumeStatus"),
        true,
    );
    // Borrowed: the conditions are compared on every sync of a Running VMI.
    fn cond_key(v: &Value) -> Vec<(&str, &str, &str)> {
        field(v, "status", "conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let s = |k: &str| get(c, k).and_then(Value::as_str).unwrap_or_default();
                (s("type"), s("status"), s("reason"))
            })
            .collect()
    }
    let (mut ka, mut kb) = (cond_key(orig), cond_key(&c));
    ka.sort();
    kb.sort();
    if ka != kb {
        replace(
            "/status/conditions",
            field(orig, "status", "conditions"),
            field(&c, "status", "conditions"),
            false,
        );
    }
    replace(
        "/status/activePods",
        field(orig, "status", "activePods"),
        field(&c, "status", "activePods"),
        false,
    );
    replace(
        "/status/phase",
        field(orig, "status", "phase"),
        field(&c, "status", "phase"),
        false,
    );
    replace(
        "/status/launcherContainerImageVersion",
        field(orig, "status", "launcherContainerImageVersion"),
        field(&c, "status", "launcherContainerImageVersion"),
        true,
    );
    // The labels and finalizers are typed: compared as they are, built as JSON when they differ.
    let original = MetaEdit::of(m.source);
    if original.labels() != m.labels() {
        let (old_l, new_l) = (original.labels_json(false), m.labels_json(false));
        replace("/metadata/labels", old_l.as_ref(), new_l.as_ref(), true);
    }
    let (old_f, new_f) = (
        original.finalizers_tidied(false),
        m.finalizers_tidied(false),
    );
    if old_f != new_f {
        let json = |f: Option<&[String]>| f.map(string_list_json);
        replace(
            "/metadata/finalizers",
            json(old_f).as_ref(),
            json(new_f).as_ref(),
            true,
        );
    }
    let (old_if, new_if) = (
        field(orig, "status", "interfaces"),
        field(&c, "status", "interfaces"),
    );
    if sorted_by_name(old_if) != sorted_by_name(new_if) {
        ops.push(op(
            "test",
            "/status/interfaces",
            Some(old_if.cloned().unwrap_or(Value::Null)),
        ));
        ops.push(op(
            "add",
            "/status/interfaces",
            Some(new_if.cloned().unwrap_or(Value::Null)),
        ));
    }
    if ops.is_empty() {
        return None;
    }
    c["metadata"] = m.to_json(false);
    plan.push_write(ApiWrite::new(
        "virtualmachineinstances",
        ns,
        name,
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: Value::Array(ops),
        },
    ));
    Some(c)
}

/// `v.<section>.<key>` when set and not null, borrowed: fields are compared in place and only
/// those that go into the patch are copied.
fn field<'a>(v: &'a Value, section: &str, key: &str) -> Option<&'a Value> {
    get(v, section)
        .and_then(|s| get(s, key))
        .filter(|x| !x.is_null())
}

/// The entries of a list sorted by `name` (empty when not a list).
fn sorted_by_name(v: Option<&Value>) -> Vec<&Value> {
    let mut a: Vec<&Value> = v
        .and_then(Value::as_array)
        .map(|x| x.iter().collect())
        .unwrap_or_default();
    a.sort_by_key(|x| index(x, "name").as_str().unwrap_or_default());
    a
}
