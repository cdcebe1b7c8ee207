//! Safety properties checked on every change the API server makes, and the liveness checks
//! tests call once faults stop.

use foldhash::HashMap;
use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::cache::CREATED_BY_LABEL;
use super::store::{Obj, WatchEvent, res};
use super::{MARKER_LABEL, Sim};
use kvrs_decide::small_json::ScanPointer;

/// Bookkeeping for the safety checks.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    /// Live VMIs per owning VM UID.
    vmis_of_vm: HashMap<String, BTreeSet<String>>,
    /// Running (not deleting, not finished) launcher pods per VMI UID.
    pods_of_vmi: HashMap<String, BTreeSet<String>>,
}

fn owner_uid(o: &Obj) -> Option<String> {
    match o {
        Obj::Vmi(v) => v
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.clone()),
        _ => None,
    }
}

fn has_label_marker(o: &Obj) -> bool {
    let labels = match o {
        Obj::Vm(v) => v.metadata.labels.as_ref(),
        Obj::Vmi(v) => v.metadata.labels.as_ref(),
        Obj::Other(_) => None,
    };
    labels.is_some_and(|l| l.contains_key(MARKER_LABEL))
}

fn has_status_marker(o: &Obj) -> bool {
    o.vmi()
        .and_then(|v| v.status.as_ref())
        .is_some_and(|s| s.extra.contains_key("simMarker"))
}

fn active_pod(p: &Value) -> bool {
    p.at("/metadata/deletionTimestamp").is_none()
        && !matches!(
            p.at("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        )
}

impl Sim {
    /// Checks one change; records violations.
    pub(super) fn check_event(&mut self, ev: &WatchEvent) {
        match ev.resource {
            res::VMIS => self.check_vmi(ev),
            res::VMS => self.check_markers(ev, false),
            res::PODS => self.check_pod(ev),
            _ => {}
        }
    }

    fn check_markers(&mut self, ev: &WatchEvent, status_too: bool) {
        let (Some(old), Some(new)) = (&ev.old, &ev.obj) else {
            return;
        };
        if has_label_marker(old) && !has_label_marker(new) {
            self.record_violation(format!(
                "{} {}: a write dropped label {MARKER_LABEL}",
                ev.resource, ev.key
            ));
        }
        if status_too && has_status_marker(old) && !has_status_marker(new) {
            self.record_violation(format!(
                "{} {}: a write dropped status.simMarker",
                ev.resource, ev.key
            ));
        }
    }

    fn check_vmi(&mut self, ev: &WatchEvent) {
        self.check_markers(ev, true);
        match (&ev.old, &ev.obj) {
            (None, Some(new)) => {
                // A third party decorates every new VMI; no controller write may drop these.
                let fields = ["metadata", "status"];
                self.api
                    .third_party_edit_fields(res::VMIS, &ev.key, &fields, |v| {
                        v["metadata"]["labels"][MARKER_LABEL] = json!("kept");
                        if !v["status"].is_object() {
                            v["status"] = json!({});
                        }
                        v["status"]["simMarker"] = json!("kept");
                    });
                if let Some(owner) = owner_uid(new) {
                    let set = self.tracker.vmis_of_vm.entry(owner.clone()).or_default();
                    set.insert(ev.key.clone());
                    if set.len() > 1 {
                        let v = format!("VM {owner} has {} VMIs: {set:?}", set.len());
                        self.record_violation(v);
                    }
                }
            }
            (Some(old), None) => {
                if let Some(owner) = owner_uid(old)
                    && let Some(set) = self.tracker.vmis_of_vm.get_mut(&owner)
                {
                    set.remove(&ev.key);
                }
            }
            _ => {}
        }
    }

    fn check_pod(&mut self, ev: &WatchEvent) {
        let pod = ev.obj.as_deref().or(ev.old.as_deref()).and_then(Obj::json);
        let Some(uid) = pod
            .and_then(|p| p.get("metadata")?.get("labels")?.get(CREATED_BY_LABEL))
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return;
        };
        let active = ev
            .obj
            .as_deref()
            .and_then(Obj::json)
            .is_some_and(active_pod);
        let set = self.tracker.pods_of_vmi.entry(uid.clone()).or_default();
        if active {
            set.insert(ev.key.clone());
        } else {
            set.remove(&ev.key);
        }
        let (len, empty) = (set.len(), set.is_empty());
        if len > 1 {
            let v = format!("VMI {uid} has {len} running launcher pods: {set:?}");
            self.record_violation(v);
        }
        if empty {
            self.tracker.pods_of_vmi.remove(&uid);
        }
    }

    /// Every VM is where its run strategy wants it: `Always` with a Running VMI, `Halted` with
    /// none, `RerunOnFailure` with a Running VMI or — after its VMI succeeded, which this strategy
    /// does not restart — with none and a `Stopped` status. Returns the VMs that are not.
    ///
    /// One more `RerunOnFailure` resting state is KubeVirt v1.9.0's own: a VM switched from
    /// `Halted` back to `RerunOnFailure` while its old VMI is still being deleted records the new
    /// strategy in `status.runStrategy` at once; a VMI that fails while deleting gets no start
    /// request (only a VMI failing before anyone deleted it does), and with the status already
    /// saying `RerunOnFailure` and no start request, the controller starts nothing
    /// (`syncRunStrategy`: "when coming here from a different RunStrategy we have to start the
    /// VM" sees no difference any more). The VM rests in `CrashLoopBackOff` with no VMI until the
    /// user starts it; kvrs decides as KubeVirt does, so the simulator accepts that state.
    pub fn unconverged(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (key, obj) in self.api.list(res::VMS) {
            let Some(vm) = obj.vm() else { continue };
            let phase = self.vmi_phase(key);
            let ok = match vm.spec.run_strategy.as_deref() {
                Some("Always") => phase == Some("Running"),
                Some("RerunOnFailure") => {
                    let status = vm.status.as_ref();
                    let printable = status.and_then(|s| s.printable_status.as_deref());
                    let at_rest = printable == Some("Stopped")
                        || (printable == Some("CrashLoopBackOff")
                            && status.and_then(|s| s.run_strategy.as_deref())
                                == Some("RerunOnFailure")
                            && status
                                .and_then(|s| s.state_change_requests.as_ref())
                                .is_none_or(|r| r.is_empty()));
                    phase == Some("Running")
                        || (phase.is_none() && self.api.get(res::VMIS, key).is_none() && at_rest)
                }
                Some("Halted") => self.api.get(res::VMIS, key).is_none(),
                _ => true,
            };
            if !ok || vm.metadata.deletion_timestamp.is_some() {
                out.push(format!(
                    "{key}: strategy {:?}, VMI phase {phase:?}",
                    vm.spec.run_strategy
                ));
            }
        }
        out
    }

    /// Objects still in the API server (VMs, VMIs, pods), for "everything was cleaned up" checks.
    pub fn leftovers(&self) -> Vec<String> {
        [res::VMS, res::VMIS, res::PODS]
            .into_iter()
            .flat_map(|r| {
                self.api.list(r).map(move |(k, o)| {
                    let fin = match &**o {
                        Obj::Vm(v) => v.metadata.finalizers.clone(),
                        Obj::Vmi(v) => v.metadata.finalizers.clone(),
                        Obj::Other(v) => v
                            .at("/metadata/finalizers")
                            .and_then(|f| serde_json::from_value(f.clone()).ok()),
                    };
                    format!("{r} {k} finalizers {fin:?}")
                })
            })
            .collect()
    }
}
