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

/// Keeps the pod's unpaused readiness-gate condition in line with the VMI's Paused condition.
pub(super) fn sync_paused_condition_to_pod(
    vmi_json: &Value,
    vmi: &VirtualMachineInstance,
    p: &Pod,
    plan: &mut Plan,
    now: i64,
) {
    let (ns, name) = (meta::namespace(&vmi.metadata), meta::name(&vmi.metadata));
    let paused = super::conditions::find_cond(vmi_json, "Paused")
        .is_some_and(|c| crate::small_json::is_str(c, "status", "True"));
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

/// The value a launcher pod should carry under one key, compared with the pod's without being
/// built: nearly every sync finds the pod in step, and building the two backup-hook commands
/// (and a map of them) on every sync of every VMI cost more than the rest of this step.
enum Wanted<'a> {
    /// The key should be absent.
    Absent,
    /// The key should carry this value.
    Value(&'a str),
    /// A backup hook's `virt-freezer` command (`--freeze` or `--unfreeze`) for the VMI.
    Freezer {
        flag: &'static str,
        name: &'a str,
        ns: &'a str,
    },
}

impl Wanted<'_> {
    fn write(&self, out: &mut impl std::fmt::Write) -> std::fmt::Result {
        match self {
            Wanted::Absent => Ok(()),
            Wanted::Value(v) => out.write_str(v),
            Wanted::Freezer { flag, name, ns } => write!(
                out,
                "[\"/usr/bin/virt-freezer\", \"{flag}\", \"--name\", {name:?}, \"--namespace\", {ns:?}]"
            ),
        }
    }

    fn value(&self) -> Option<String> {
        if matches!(self, Wanted::Absent) {
            return None;
        }
        let mut s = String::new();
        // Writing into a String does not fail.
        let _ = self.write(&mut s);
        Some(s)
    }

    /// Whether the pod's value (`None`: absent) is the wanted one.
    fn matches(&self, have: Option<&str>) -> bool {
        /// Consumes `rest` as the written text matches it; an error at the first difference.
        struct Prefix<'s>(&'s str);
        impl std::fmt::Write for Prefix<'_> {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0 = self.0.strip_prefix(s).ok_or(std::fmt::Error)?;
                Ok(())
            }
        }
        match (self, have) {
            (Wanted::Absent, have) => have.is_none(),
            (_, None) => false,
            // Names and namespaces are DNS names, which `{:?}` quotes without escapes: the
            // command is compared piece by piece, without the formatter.
            (Wanted::Freezer { flag, name, ns }, Some(have))
                if [name, ns].iter().all(|s| {
                    s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
                }) =>
            {
                let pieces = [
                    "[\"/usr/bin/virt-freezer\", \"",
                    flag,
                    "\", \"--name\", \"",
                    name,
                    "\", \"--namespace\", \"",
                    ns,
                    "\"]",
                ];
                let rest = pieces
                    .iter()
                    .try_fold(have, |rest, piece| rest.strip_prefix(piece));
                rest == Some("")
            }
            (wanted, Some(have)) => {
                let mut rest = Prefix(have);
                wanted.write(&mut rest).is_ok() && rest.0.is_empty()
            }
        }
    }
}

/// Backup hook annotations the launcher pod should carry (none when backup hooks are skipped),
/// in [`MANAGED_STORAGE_ANNOTATIONS`] order.
fn storage_annotations(vmi: &VirtualMachineInstance) -> Option<[Wanted<'_>; 5]> {
    let skip = meta::annotation(&vmi.metadata, "kubevirt.io/skip-backup-hooks")
        .is_some_and(|v| v == "true");
    if skip {
        return None;
    }
    let (name, ns) = (meta::name(&vmi.metadata), meta::namespace(&vmi.metadata));
    Some([
        Wanted::Value("compute"),
        Wanted::Freezer {
            flag: "--freeze",
            name,
            ns,
        },
        Wanted::Value("60s"),
        Wanted::Value("compute"),
        Wanted::Freezer {
            flag: "--unfreeze",
            name,
            ns,
        },
    ])
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
///
/// `labels` and `annotations` are the VMI's as this reconcile leaves them (the status step's
/// typed working copy), read in place.
pub(super) fn sync_dynamic_metadata_to_pod(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
    vmi: &VirtualMachineInstance,
    p: &Pod,
    plan: &mut Plan,
    ns: &str,
) {
    let mut ops = Vec::new();
    // `wanted` gives the value the pod should carry under a key. Nearly every sync finds the
    // pod in step: the VMI's maps are read in place and the pod's map is copied only when a key
    // differs (for a Running VM, every sync of its VMI passes here).
    let mut sync_map =
        |wanted: &[(&str, Wanted<'_>)], orig: Option<&BTreeMap<String, String>>, sub: &str| {
            let differs = |(k, v): &(&str, Wanted<'_>)| {
                !v.matches(orig.and_then(|o| o.get(*k)).map(String::as_str))
            };
            if wanted.iter().any(differs) {
                let mut new = orig.cloned().unwrap_or_default();
                for (k, v) in wanted {
                    match v.value() {
                        Some(a) => new.insert((*k).into(), a),
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
    fn from_vmi<'a>(m: Option<&'a BTreeMap<String, String>>, k: &str) -> Wanted<'a> {
        m.and_then(|m| m.get(k))
            .map_or(Wanted::Absent, |v| Wanted::Value(v))
    }
    let wanted = [NODE_NAME_LABEL, OUTDATED_LAUNCHER_LABEL].map(|k| (k, from_vmi(labels, k)));
    sync_map(&wanted, p.metadata.labels.as_ref(), "labels");
    let [evict, no_evict] = [
        "descheduler.alpha.kubernetes.io/evict",
        "descheduler.alpha.kubernetes.io/prefer-no-eviction",
    ]
    .map(|k| (k, from_vmi(annotations, k)));
    // A managed key the VMI does not set from its backup hooks keeps the VMI's own value.
    let storage = match storage_annotations(vmi) {
        Some(s) => MANAGED_STORAGE_ANNOTATIONS
            .into_iter()
            .zip(s)
            .collect::<Vec<_>>(),
        None => MANAGED_STORAGE_ANNOTATIONS
            .map(|k| (k, from_vmi(annotations, k)))
            .into_iter()
            .collect(),
    };
    let wanted: Vec<(&str, Wanted<'_>)> = [evict, no_evict].into_iter().chain(storage).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A wanted value matches exactly the text it builds, and nothing shorter, longer or
    /// different; the freezer command is the one the backup hooks name (the VMI's name and
    /// namespace quoted, escapes included).
    #[test]
    fn wanted_values_match_what_they_build() {
        let freezer = Wanted::Freezer {
            flag: "--freeze",
            name: "vm\"0",
            ns: "default",
        };
        let built = freezer.value().unwrap();
        assert_eq!(
            built,
            r#"["/usr/bin/virt-freezer", "--freeze", "--name", "vm\"0", "--namespace", "default"]"#
        );
        let plain = Wanted::Freezer {
            flag: "--unfreeze",
            name: "vm-0.a",
            ns: "ns1",
        };
        assert_eq!(
            plain.value().unwrap(),
            r#"["/usr/bin/virt-freezer", "--unfreeze", "--name", "vm-0.a", "--namespace", "ns1"]"#
        );
        for w in [freezer, plain, Wanted::Value("60s"), Wanted::Value("")] {
            let v = w.value().unwrap();
            assert!(w.matches(Some(&v)), "{v}");
            assert!(!w.matches(None));
            assert!(!w.matches(Some(&format!("{v}x"))), "{v}");
            if let Some(shorter) = v.get(..v.len().saturating_sub(1)).filter(|s| *s != v) {
                assert!(!w.matches(Some(shorter)), "{v}");
            }
        }
        assert!(Wanted::Absent.matches(None));
        assert!(!Wanted::Absent.matches(Some("")));
        assert_eq!(Wanted::Absent.value(), None);
    }
}
