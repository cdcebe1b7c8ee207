//! The shape of the status write: empty collections tidied away as Go omits them, and, once
//! virt-handler owns the VMI (Scheduled, Running), KubeVirt's field-by-field patch in which every
//! controller-owned field is tested against the value the decision saw.

use serde_json::{Map, Value};

use crate::decide::patch::op;
use crate::decide::{ApiWrite, PatchType, Plan, WriteOp};

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
    c: &mut Value,
    ns: &str,
    name: &str,
) -> Option<Value> {
    let mut ops = Vec::new();
    let st = |v: &Value, k: &str| {
        v.pointer(&format!("/status/{k}"))
            .cloned()
            .filter(|x| !x.is_null())
    };
    let mut replace = |path: &str, old: Option<Value>, new: Option<Value>, add_if_absent: bool| {
        if old == new {
            return;
        }
        let new = new.unwrap_or(Value::Null);
        match old {
            None if add_if_absent => ops.push(op("add", path, Some(new))),
            old => {
                ops.push(op("test", path, Some(old.unwrap_or(Value::Null))));
                ops.push(op("replace", path, Some(new)));
            }
        }
    };
    replace(
        "/status/volumeStatus",
        st(orig, "volumeStatus"),
        st(c, "volumeStatus"),
        true,
    );
    let cond_key = |v: &Value| -> Vec<(String, String, String)> {
        v.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (s("type"), s("status"), s("reason"))
            })
            .collect()
    };
    let (mut ka, mut kb) = (cond_key(orig), cond_key(c));
    ka.sort();
    kb.sort();
    if ka != kb {
        replace(
            "/status/conditions",
            st(orig, "conditions"),
            st(c, "conditions"),
            false,
        );
    }
    replace(
        "/status/activePods",
        st(orig, "activePods"),
        st(c, "activePods"),
        false,
    );
    replace("/status/phase", st(orig, "phase"), st(c, "phase"), false);
    replace(
        "/status/launcherContainerImageVersion",
        st(orig, "launcherContainerImageVersion"),
        st(c, "launcherContainerImageVersion"),
        true,
    );
    let md = |v: &Value, k: &str| {
        v.pointer(&format!("/metadata/{k}"))
            .cloned()
            .filter(|x| !x.is_null())
    };
    replace(
        "/metadata/labels",
        md(orig, "labels"),
        md(c, "labels"),
        true,
    );
    replace(
        "/metadata/finalizers",
        md(orig, "finalizers"),
        md(c, "finalizers"),
        true,
    );
    let sorted = |v: Option<Value>| {
        let mut a = v.and_then(|x| x.as_array().cloned()).unwrap_or_default();
        a.sort_by_key(|x| x["name"].as_str().unwrap_or_default().to_string());
        a
    };
    let (old_if, new_if) = (st(orig, "interfaces"), st(c, "interfaces"));
    if sorted(old_if.clone()) != sorted(new_if.clone()) {
        ops.push(op(
            "test",
            "/status/interfaces",
            Some(old_if.unwrap_or(Value::Null)),
        ));
        ops.push(op(
            "add",
            "/status/interfaces",
            Some(new_if.unwrap_or(Value::Null)),
        ));
    }
    if ops.is_empty() {
        return None;
    }
    plan.writes.push(ApiWrite::new(
        "virtualmachineinstances",
        ns,
        name,
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: Value::Array(ops),
        },
    ));
    Some(c.clone())
}
