//! Launcher pod metadata the VMI controller keeps in line with the VMI: the unpaused
//! readiness-gate condition, the node-name and outdated-image labels, the eviction and backup-hook
//! annotations.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

use super::lifecycle::{NODE_NAME_LABEL, OUTDATED_LAUNCHER_LABEL, UNPAUSED_CONDITION};
use super::pod;
use crate::api::VirtualMachineInstance;
use crate::patch::op;
use crate::{ApiWrite, Expectation, PatchType, Plan, WriteOp, meta};
use kvrs_api::json_pointer::JsonPointer;

/// A JSON object of strings, read in place (`None` when absent, or when any value is not a
/// string, which deserialising it as a string map would refuse).
struct StringEntries<'a>(&'a Map<String, Value>);

impl StringEntries<'_> {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).and_then(Value::as_str)
    }
}

fn string_entries(v: Option<&Value>) -> Option<StringEntries<'_>> {
    v.and_then(Value::as_object)
        .filter(|m| m.values().all(Value::is_string))
        .map(StringEntries)
}

/// Keeps the pod's unpaused readiness-gate condition in line with the VMI's Paused condition.
pub(super) fn sync_paused_condition_to_pod(
    vmi_json: &Value,
    vmi: &VirtualMachineInstance,
    p: &Pod,
    plan: &mut Plan,
    now: i64,
) {
    let (ns, name) = (meta::namespace(&vmi.metadata), meta::name(&vmi.metadata));
    let paused =
        super::conditions::find_cond(vmi_json, "Paused").is_some_and(|c| c["status"] == "True");
    let unpaused_true = pod::condition(p, UNPAUSED_CONDITION).is_some_and(|c| c.status == "True");
    let new = if paused && unpaused_true {
        json!({"lastProbeTime": meta::time_json(now), "lastTransitionTime": meta::time_json(now),
               "message": "the virtual machine is paused", "reason": "Paused", "status": "False", "type": UNPAUSED_CONDITION})
    } else if !paused && !unpaused_true {
        json!({"lastProbeTime": meta::time_json(now), "lastTransitionTime": meta::time_json(now),
               "message": "the virtual machine is not paused", "reason": "NotPaused", "status": "True", "type": UNPAUSED_CONDITION})
    } else {
        return;
    };
    let existing = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let mut order: Vec<Value> = existing.iter().map(|c| json!({"type": c.type_})).collect();
    if !existing.iter().any(|c| c.type_ == UNPAUSED_CONDITION) {
        order.push(json!({"type": UNPAUSED_CONDITION}));
    }
    let mut status = Map::new();
    if !existing.is_empty() {
        status.insert("$setElementOrder/conditions".into(), Value::Array(order));
    }
    status.insert("conditions".into(), json!([new]));
    plan.push_write(
        ApiWrite::new(
            "pods",
            ns,
            pod::name(p),
            WriteOp::Patch {
                patch_type: PatchType::StrategicMerge,
                patch: json!({"status": Value::Object(status)}),
            },
        )
        .on_subresource("status")
        .expecting(Expectation::ObservedPodUpdate {
            vmi_key: format!("{ns}/{name}"),
        }),
    );
}

/// Backup hook annotations the launcher pod should carry (unless backup hooks are skipped).
fn storage_annotations(vmi: &VirtualMachineInstance) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    let skip = meta::annotation(&vmi.metadata, "kubevirt.io/skip-backup-hooks")
        .is_some_and(|v| v == "true");
    if skip {
        return a;
    }
    let (name, ns) = (meta::name(&vmi.metadata), meta::namespace(&vmi.metadata));
    a.insert(
        "pre.hook.backup.velero.io/container".into(),
        "compute".into(),
    );
    a.insert(
        "pre.hook.backup.velero.io/command".into(),
        format!("[\"/usr/bin/virt-freezer\", \"--freeze\", \"--name\", {name:?}, \"--namespace\", {ns:?}]"),
    );
    a.insert("pre.hook.backup.velero.io/timeout".into(), "60s".into());
    a.insert(
        "post.hook.backup.velero.io/container".into(),
        "compute".into(),
    );
    a.insert(
        "post.hook.backup.velero.io/command".into(),
        format!("[\"/usr/bin/virt-freezer\", \"--unfreeze\", \"--name\", {name:?}, \"--namespace\", {ns:?}]"),
    );
    a
}

const MANAGED_STORAGE_ANNOTATIONS: [&str; 5] = [
    "pre.hook.backup.velero.io/container",
    "pre.hook.backup.velero.io/command",
    "pre.hook.backup.velero.io/timeout",
    "post.hook.backup.velero.io/container",
    "post.hook.backup.velero.io/command",
];

/// Copies the "dynamic" VMI labels (node name, outdated image) and annotations (eviction,
/// backup hooks) onto the launcher pod.
pub(super) fn sync_dynamic_metadata_to_pod(
    vmi_copy: &Value,
    vmi: &VirtualMachineInstance,
    p: &Pod,
    plan: &mut Plan,
    ns: &str,
) {
    let mut ops = Vec::new();
    // `source` gives the value the pod should carry under a key. Nearly every sync finds the
    // pod in step: the VMI's maps are read in place and the pod's map is copied only when a key
    // differs (for a Running VM, every sync of its VMI passes here).
    let mut sync_map = |wanted: &[(&str, Option<&str>)],
                        orig: Option<&BTreeMap<String, String>>,
                        sub: &str| {
        let differs =
            |(k, v): &(&str, Option<&str>)| *v != orig.and_then(|o| o.get(*k)).map(String::as_str);
        if wanted.iter().any(differs) {
            let mut new = orig.cloned().unwrap_or_default();
            for (k, v) in wanted {
                match v {
                    Some(a) => new.insert((*k).into(), (*a).into()),
                    None => new.remove(*k),
                };
            }
            let path = format!("/metadata/{sub}");
            let new_v = serde_json::to_value(&new).unwrap_or_default();
            match orig {
                None => ops.push(op("add", &path, Some(new_v))),
                Some(o) => {
                    ops.push(op(
                        "test",
                        &path,
                        Some(serde_json::to_value(o).unwrap_or_default()),
                    ));
                    ops.push(op("replace", &path, Some(new_v)));
                }
            }
        }
    };
    let labels = string_entries(vmi_copy.at("/metadata/labels"));
    let wanted: Vec<(&str, Option<&str>)> = [NODE_NAME_LABEL, OUTDATED_LAUNCHER_LABEL]
        .into_iter()
        .map(|k| (k, labels.as_ref().and_then(|m| m.get(k))))
        .collect();
    sync_map(&wanted, p.metadata.labels.as_ref(), "labels");
    let annotations = string_entries(vmi_copy.at("/metadata/annotations"));
    let storage = storage_annotations(vmi);
    let wanted: Vec<(&str, Option<&str>)> = [
        "descheduler.alpha.kubernetes.io/evict",
        "descheduler.alpha.kubernetes.io/prefer-no-eviction",
    ]
    .into_iter()
    .chain(MANAGED_STORAGE_ANNOTATIONS)
    .map(|k| {
        let v = storage
            .get(k)
            .map(String::as_str)
            .or_else(|| annotations.as_ref().and_then(|m| m.get(k)));
        (k, v)
    })
    .collect();
    sync_map(&wanted, p.metadata.annotations.as_ref(), "annotations");
    if !ops.is_empty() {
        plan.push_write(ApiWrite::new(
            "pods",
            ns,
            pod::name(p),
            WriteOp::Patch {
                patch_type: PatchType::Json,
                patch: Value::Array(ops),
            },
        ));
    }
}
