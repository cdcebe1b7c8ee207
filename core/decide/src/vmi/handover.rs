//! The shape of the status write: empty collections tidied away as Go omits them, and, once
//! virt-handler owns the VMI (Scheduled, Running), KubeVirt's field-by-field patch in which every
//! controller-owned field is tested against the value the decision saw.

use serde_json::{Map, Value};

use crate::patch::op;
use crate::{ApiWrite, PatchType, Plan, WriteOp};

/// Drops empty maps/lists Go would omit, so the patch does not churn on them.
pub(super) fn tidy(v: &mut Value) {
    for (sect, keys) in [
        ("metadata", &["labels", "annotations", "finalizers"][..]),
        ("status", &["conditions", "activePods"][..]),
    ] {
        if let Some(m) = v.get_mut(sect).and_then(Value::as_object_mut) {
            for k in keys {
                let empty = m.get(*k).is_some_and(|x| {
                    x.is_null()
                        || x.as_array().is_some_and(Vec::is_empty)
                        || x.as_object().is_some_and(Map::is_empty)
                });
                if empty && *k != "activePods" {
                    m.remove(*k);
                }
            }
        }
    }
}

/// KubeVirt's `prepareVMIPatch`: conditions, volume and interface status, active pods, phase,
/// launcher image, labels and finalizers — each tested against the old value.
pub(super) fn handed_over_patch(
    plan: &mut Plan,
    orig: &Value,
    c: Value,
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
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
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
    replace(
        "/metadata/labels",
        field(orig, "metadata", "labels"),
        field(&c, "metadata", "labels"),
        true,
    );
    replace(
        "/metadata/finalizers",
        field(orig, "metadata", "finalizers"),
        field(&c, "metadata", "finalizers"),
        true,
    );
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
    v.get(section)
        .and_then(|s| s.get(key))
        .filter(|x| !x.is_null())
}

/// The entries of a list sorted by `name` (empty when not a list).
fn sorted_by_name(v: Option<&Value>) -> Vec<&Value> {
    let mut a: Vec<&Value> = v
        .and_then(Value::as_array)
        .map(|x| x.iter().collect())
        .unwrap_or_default();
    a.sort_by_key(|x| x["name"].as_str().unwrap_or_default());
    a
}
