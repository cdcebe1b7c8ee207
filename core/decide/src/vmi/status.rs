//! The status the VMI controller owns (KubeVirt's `updateStatus`): phase and its transition
//! timestamps, conditions, active pods, node name, launcher image, volume and interface status —
//! written as a JSON patch tested against the snapshot, or, once virt-handler owns the VMI
//! (Scheduled, Running), as KubeVirt's field-by-field patch.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use super::conditions::{
    cond, conds_mut, find_cond, ready_condition, remove_cond, time_value, update_cond,
    update_wanted_cond,
};
use super::handover::{handed_over_patch, tidy};
use super::lifecycle::{
    DEPRECATED_VMI_FINALIZER, MEMORY_OVERHEAD_ANNOTATION, MIGRATION_TRANSPORT_ANNOTATION,
    NODE_NAME_LABEL, OUTDATED_LAUNCHER_LABEL, SyncError, VMI_FINALIZER,
};
use super::pod_sync::{sync_dynamic_metadata_to_pod, sync_paused_condition_to_pod};
use super::{VmiWorld, data_volumes, pod, state};
use crate::api::{VirtualMachineInstance, VirtualMachineInstanceStatus};
use crate::patch::{self, op};
use crate::small_json::{get, get_mut, index, is_str, object_mut, set};
use crate::vmi_state::phase;
use crate::{ApiWrite, Expectation, PatchType, Plan, WriteOp, meta};

fn set_phase(v: &mut Value, p: &str) {
    set(status_mut(v), "phase", json!(p));
}

/// The working copy's status object, made one when it is none (as `v["status"][k] = ..`
/// does).
fn status_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    let Value::Object(root) = v else {
        unreachable!("made an object above")
    };
    object_mut(root, "status")
}

/// `v.status[k]` to edit, `None` when absent.
fn status_field_mut<'a>(v: &'a mut Value, k: &str) -> Option<&'a mut Value> {
    get_mut(v, "status").and_then(|s| get_mut(s, k))
}

/// `v.status[k]`, `None` when absent.
fn status_field<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    get(v, "status").and_then(|s| get(s, k))
}

/// The metadata fields the status step edits, typed: the labels and finalizers as the VMI's
/// JSON view holds them (`None`: absent from it, as Go's `omitempty` leaves an empty map or
/// list out; `Some` of an empty one: emptied by this step). Serialising the labels and
/// annotations into JSON maps on every sync only to compare them again cost ~4 k instructions
/// a sync; the JSON is built when the step writes.
pub(super) struct MetaEdit<'a> {
    /// The VMI's metadata the copy started from.
    pub(super) source: &'a ObjectMeta,
    labels: Option<Cow<'a, BTreeMap<String, String>>>,
    /// The label edits in the order made (a value set, or `None`: removed): a written label
    /// map carries its keys in the order the JSON edits left them (a new key last, a removed
    /// key's place taken by the last one), as the JSON working copy did.
    label_edits: Vec<(String, Option<String>)>,
    annotations: Option<&'a BTreeMap<String, String>>,
    finalizers: Option<Cow<'a, [String]>>,
}

impl<'a> MetaEdit<'a> {
    pub(super) fn of(m: &'a ObjectMeta) -> Self {
        MetaEdit {
            source: m,
            label_edits: Vec::new(),
            labels: m
                .labels
                .as_ref()
                .filter(|l| !l.is_empty())
                .map(Cow::Borrowed),
            annotations: m.annotations.as_ref().filter(|a| !a.is_empty()),
            finalizers: m
                .finalizers
                .as_deref()
                .filter(|f| !f.is_empty())
                .map(Cow::Borrowed),
        }
    }

    pub(super) fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.labels.as_deref()
    }

    fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers
            .as_ref()
            .is_some_and(|a| a.iter().any(|x| x == f))
    }

    fn remove_finalizer(&mut self, f: &str) {
        if let Some(a) = self.finalizers.as_mut()
            && a.iter().any(|x| x == f)
        {
            a.to_mut().retain(|x| x != f);
        }
    }

    fn add_finalizer(&mut self, f: &str) {
        if !self.has_finalizer(f) {
            self.finalizers
                .get_or_insert_with(|| Cow::Owned(Vec::new()))
                .to_mut()
                .push(f.to_string());
        }
    }

    fn set_label(&mut self, k: &str, val: &str) {
        let labels = self
            .labels
            .get_or_insert_with(|| Cow::Owned(BTreeMap::new()));
        if labels.get(k).map(String::as_str) != Some(val) {
            labels.to_mut().insert(k.to_string(), val.to_string());
            self.label_edits
                .push((k.to_string(), Some(val.to_string())));
        }
    }

    fn remove_label(&mut self, k: &str) {
        if let Some(l) = self.labels.as_mut()
            && l.contains_key(k)
        {
            l.to_mut().remove(k);
            self.label_edits.push((k.to_string(), None));
        }
    }

    /// The labels as JSON (`None`: absent; `tidy` as for [`Self::labels_tidied`]), keys in the
    /// order the JSON working copy's edits left them: the VMI's in the serialiser's order, then
    /// the edits replayed as serde_json's map applies them (`insert` keeps a key's place or
    /// appends it, `remove` moves the last key into the removed one's place).
    pub(super) fn labels_json(&self, tidy: bool) -> Option<Value> {
        self.labels_tidied(tidy)?;
        let mut map = self
            .source
            .labels
            .as_ref()
            .filter(|l| !l.is_empty())
            .map(|l| match string_map_json(l) {
                Value::Object(m) => m,
                _ => Map::new(),
            });
        for (k, v) in &self.label_edits {
            match v {
                Some(v) => {
                    map.get_or_insert_with(Map::new)
                        .insert(k.clone(), Value::String(v.clone()));
                }
                None => {
                    if let Some(m) = map.as_mut() {
                        m.remove(k);
                    }
                }
            }
        }
        map.map(Value::Object)
    }

    /// The labels as the VMI's view carries them; `tidy` leaves an emptied map out, as
    /// [`tidy`] does.
    fn labels_tidied(&self, tidy: bool) -> Option<&BTreeMap<String, String>> {
        self.labels().filter(|l| !tidy || !l.is_empty())
    }

    /// The finalizers as the VMI's view carries them; `tidy` as for [`Self::labels_tidied`].
    pub(super) fn finalizers_tidied(&self, tidy: bool) -> Option<&[String]> {
        self.finalizers
            .as_deref()
            .filter(|f| !tidy || !f.is_empty())
    }

    /// The metadata as the VMI's JSON view holds it (keys in the serialiser's order).
    pub(super) fn to_json(&self, tidy: bool) -> Value {
        let mut view = Map::new();
        if let Some(a) = self.annotations {
            view.insert("annotations".into(), string_map_json(a));
        }
        if let Some(f) = self.finalizers_tidied(tidy) {
            view.insert("finalizers".into(), string_list_json(f));
        }
        if let Some(l) = self.labels_json(tidy) {
            view.insert("labels".into(), l);
        }
        Value::Object(view)
    }
}

pub(super) fn string_map_json(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

pub(super) fn string_list_json(l: &[String]) -> Value {
    Value::Array(l.iter().cloned().map(Value::String).collect())
}

/// The ops of a metadata field's write, as KubeVirt's update of a VMI it owns makes them: a
/// field that differs is tested against the old value and replaced, added or removed.
fn meta_field_ops(ops: &mut Vec<Value>, f: &str, old: Option<Value>, new: Option<Value>) {
    let path = format!("/metadata/{f}");
    match (old, new) {
        (Some(a), Some(b)) => {
            ops.push(op("test", &path, Some(a)));
            ops.push(op("replace", &path, Some(b)));
        }
        (None, Some(b)) => ops.push(op("add", &path, Some(b))),
        (Some(a), None) => {
            ops.push(op("test", &path, Some(a)));
            ops.push(op("remove", &path, None));
        }
        (None, None) => {}
    }
}

/// Whether two string maps (`None`: absent) are equal once entries with an empty value are
/// left out — [`meta::eq_entry_without_zero_values`] on their JSON.
fn eq_map_without_zero_values(
    a: Option<&BTreeMap<String, String>>,
    b: Option<&BTreeMap<String, String>>,
) -> bool {
    fn non_empty(m: Option<&BTreeMap<String, String>>) -> impl Iterator<Item = (&String, &String)> {
        m.into_iter().flatten().filter(|(_, v)| !v.is_empty())
    }
    non_empty(a).eq(non_empty(b))
}

/// A Pending VMI waiting for a WaitForFirstConsumer DataVolume: the `Provisioning` condition,
/// and the temporary pod's scheduling failure as the VMI's `PodScheduled` condition (removed
/// once it is scheduled); the VMI fails with its temporary pod.
fn provisioning(c: &mut Value, temp_pod: Option<&Pod>) {
    if find_cond(c, "Provisioning").is_none() {
        conds_mut(c).push(json!({"type": "Provisioning", "status": "True",
                                 "lastProbeTime": null, "lastTransitionTime": null}));
    }
    let Some(p) = temp_pod else {
        return;
    };
    match pod::condition(p, "PodScheduled") {
        Some(pc) if pc.status == "False" => {
            if find_cond(c, "PodScheduled").is_none() {
                conds_mut(c).push(pod_condition_json(pc));
            }
        }
        _ => remove_cond(c, "PodScheduled"),
    }
    if pod::is_failed_or_going_down(p) {
        set_phase(c, phase::FAILED);
    }
}

/// A pod condition as the VMI condition KubeVirt copies it into (`AddPodCondition`).
fn pod_condition_json(pc: &k8s_openapi::api::core::v1::PodCondition) -> Value {
    json!({
        "type": pc.type_,
        "status": pc.status,
        "reason": pc.reason,
        "message": pc.message,
        "lastProbeTime": time_value(pc.last_probe_time.as_ref()),
        "lastTransitionTime": time_value(pc.last_transition_time.as_ref()),
    })
}

fn has_owner_vm(w: &VmiWorld<'_>) -> bool {
    let Some(owner) = meta::controller_of(&w.vmi.metadata).filter(|o| o.kind == "VirtualMachine")
    else {
        return false;
    };
    let typed = w.vm.is_some_and(|vm| {
        meta::name(&vm.metadata) == owner.name && meta::uid(&vm.metadata) == owner.uid
    });
    typed
        || w.vms.iter().any(|vm| {
            vm.metadata.name.as_deref() == Some(owner.name.as_str())
                && vm.metadata.uid.as_deref() == Some(owner.uid.as_str())
        })
}

/// A VMI no cached VM owns keeps no VM-controller finalizer: nobody else would remove it.
fn release_orphan(w: &VmiWorld<'_>, m: &mut MetaEdit<'_>) {
    let has_finalizers = m.finalizers.as_ref().is_some_and(|a| !a.is_empty());
    if has_finalizers && !has_owner_vm(w) {
        m.remove_finalizer(kvrs_api::names::finalizers::VM_CONTROLLER);
    }
}

/// Rebuilds the status list `status_key` from the spec list `spec_key`, in spec order: an
/// existing status entry of the same name is kept, otherwise `fresh` may make one. Nothing is
/// written when the old and the new list are both empty. Returns the old list's entries.
fn rebuild_status_list(
    v: &mut Value,
    spec_key: &str,
    status_key: &str,
    fresh: impl Fn(&str, &Value) -> Option<Value>,
) -> Vec<Value> {
    // The old list is taken out (and put back when nothing is written), not copied: only the
    // entries kept are cloned, and the list itself goes back to the caller.
    let taken = v
        .get_mut("status")
        .and_then(|s| s.get_mut(status_key))
        .map(Value::take);
    let empty = Vec::new();
    let old: &Vec<Value> = taken.as_ref().and_then(Value::as_array).unwrap_or(&empty);
    let new: Vec<Value> = v
        .get("spec")
        .and_then(|s| s.get(spec_key))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| {
            let name = index(item, "name").as_str()?;
            match old.iter().find(|o| is_str(o, "name", name)) {
                Some(o) => Some(o.clone()),
                None => fresh(name, item),
            }
        })
        .collect();
    if new.is_empty() && old.is_empty() {
        if let Some(t) = taken {
            set(status_mut(v), status_key, t);
        }
        return Vec::new();
    }
    set(status_mut(v), status_key, Value::Array(new));
    match taken {
        Some(Value::Array(old)) => old,
        _ => Vec::new(),
    }
}

/// Volume status entries for every volume (existing entries kept), sorted by name as KubeVirt's
/// VMI controller sorts them — virt-handler writes them in that order too, and a list the two
/// order differently is rewritten by each in turn, forever.
///
/// With the launcher pod at hand, hotplugged volumes' entries follow their attachment pod, and
/// entries of volumes gone from the spec stay while one still carries them
/// ([`super::hotplug::update_volume_status`]).
fn update_volume_status(w: &VmiWorld<'_>, v: &mut Value, launcher: Option<&Pod>, plan: &mut Plan) {
    let pvcs = w.pvcs;
    let old = rebuild_status_list(v, "volumes", "volumeStatus", |name, _| {
        Some(json!({"name": name, "target": ""}))
    });
    if let Some(l) = launcher {
        super::hotplug::update_volume_status(w, v, &old, l, plan);
    }
    if let Some(kept) = super::backend_storage::kept_entry(w, &old)
        && let Some(list) = status_field_mut(v, "volumeStatus").and_then(Value::as_array_mut)
        && !list
            .iter()
            .any(|e| index(e, "name") == index(&kept, "name"))
    {
        list.push(kept);
    }
    if let Some(list) = status_field_mut(v, "volumeStatus").and_then(Value::as_array_mut) {
        list.sort_by(|a, b| index(a, "name").as_str().cmp(&index(b, "name").as_str()));
    }
    super::pvc_info::fill(v, pvcs);
}

/// Interface status entries for pod-network interfaces (`eth0`), existing entries kept, and
/// for secondary Multus networks what KubeVirt's `UpdateVMIStatus` takes from the pod's Multus
/// `network-status` (see [`super::network_status`]).
fn update_network_status(v: &mut Value, pod: Option<&Pod>) {
    let statuses = pod
        .and_then(|p| meta::annotation(&p.metadata, super::network_status::ANNOTATION))
        .map(super::network_status::parse)
        .unwrap_or_default();
    let secondary = super::network_status::secondary_pod_ifaces(v, &statuses);
    rebuild_status_list(v, "networks", "interfaces", |name, net| {
        if net.get("pod").is_some() {
            return Some(json!({"name": name, "podInterfaceName": "eth0"}));
        }
        secondary
            .get(name)
            .filter(|s| s.reported)
            .map(|s| json!({"name": name, "infoSource": "multus-status", "podInterfaceName": s.pod_iface}))
    });
    super::network_status::apply_to_existing(v, &secondary);
}

/// The part of the VMI this step reads and writes, as JSON: the status, and the spec's volumes
/// and networks (whose status lists it rebuilds) — each exactly as the VMI writes it, so the
/// patch's `test` operations match what is stored (the metadata fields it edits are typed,
/// [`MetaEdit`]). Serialising the whole VMI (its domain spec above all) on every sync cost about
/// as much as the rest of the step. The spec part comes apart: only the working copy reads it,
/// so it is moved there rather than cloned with the view.
fn status_view(vmi: &VirtualMachineInstance) -> (Value, Value) {
    let mut view = Map::new();
    let mut spec = Map::new();
    if let Some(volumes) = vmi.spec.volumes.as_ref().filter(|v| !v.is_empty()) {
        spec.insert(
            "volumes".into(),
            serde_json::to_value(volumes).unwrap_or_default(),
        );
    }
    if let Some(networks) = vmi.spec.networks.as_ref().filter(|n| !n.is_empty()) {
        spec.insert(
            "networks".into(),
            serde_json::to_value(networks).unwrap_or_default(),
        );
    }
    // As the VMI writes it: a missing status is Go's zero status.
    let status = match &vmi.status {
        Some(s) => serde_json::to_value(s),
        None => serde_json::to_value(VirtualMachineInstanceStatus::default()),
    };
    view.insert("status".into(), status.unwrap_or_default());
    (Value::Object(view), Value::Object(spec))
}

pub(super) fn update_status(
    w: &VmiWorld<'_>,
    dvs: &[&Value],
    plan: &mut Plan,
    p: Option<&Pod>,
    sync_err: Option<&SyncError>,
) -> Option<Value> {
    let vmi = w.vmi;
    let now = w.now.unix();
    let ns = meta::namespace(&vmi.metadata).to_string();
    let (orig, spec) = status_view(vmi);
    let mut c = orig.clone();
    if let Value::Object(root) = &mut c {
        set(root, "spec", spec);
    }
    status_mut(&mut c);
    let mut m = MetaEdit::of(&vmi.metadata);
    if m.has_finalizer(DEPRECATED_VMI_FINALIZER) {
        m.remove_finalizer(DEPRECATED_VMI_FINALIZER);
        m.add_finalizer(VMI_FINALIZER);
    }
    let pod_exists = p.is_some_and(|p| !pod::is_temp(p));
    let temp_pod = p.filter(|p| pod::is_temp(p));
    let failed_dv = data_volumes::any_failed(dvs);
    // No reason to look for one waiting for its consumer once one failed.
    let wffc_dv = !failed_dv && data_volumes::any_wait_for_first_consumer(dvs);

    // Active pods: every pod the VMI controls (including one just created), by UID -> node.
    let mut active = Map::new();
    let mut controlled: Vec<&Pod> = w
        .pods
        .iter()
        .copied()
        .filter(|x| pod::is_controlled_by(x, vmi))
        .collect();
    if let Some(p) = p
        && !controlled.iter().any(|x| pod::name(x) == pod::name(p))
    {
        controlled.push(p);
    }
    for x in &controlled {
        if let Some(uid) = x.metadata.uid.as_deref() {
            active.insert(uid.into(), json!(pod::node_name(x)));
        }
    }
    if !active.is_empty() || status_field(&c, "activePods").is_some_and(|a| !a.is_null()) {
        set(status_mut(&mut c), "activePods", Value::Object(active));
    }

    update_wanted_cond(&mut c, "Ready", &ready_condition(vmi, p, now));
    if let Some(p) = p.filter(|_| pod_exists) {
        let image = pod::compute_image(p);
        if !image.is_empty() && image != w.config.launcher_image {
            m.set_label(OUTDATED_LAUNCHER_LABEL, "");
        } else {
            m.remove_label(OUTDATED_LAUNCHER_LABEL);
        }
        // Go omits the empty string (`omitempty`): a pod without an image leaves an absent
        // field absent, or every sync would write `""` the API server then drops again.
        let stored = status_field(&c, "launcherContainerImageVersion").and_then(Value::as_str);
        if !image.is_empty() || stored.is_some_and(|s| !s.is_empty()) {
            set(
                status_mut(&mut c),
                "launcherContainerImageVersion",
                json!(image),
            );
        }
        // As KubeVirt does, also for a pod deleted earlier in this reconcile (issue 18 class 6):
        // the API server keeps a bound pod until its grace period ends, so the paused condition
        // and labels it carries while terminating are the VMI's, as for a pod found terminating
        // (oracle case vmi-deleting-pod-terminating). A pod no node holds and no finalizer keeps
        // is gone once deleted: KubeVirt's patches of it fail with NotFound and the key is
        // retried; kvrs does not send those doomed writes.
        let deleted_here = plan.writes().any(|w| {
            w.resource == "pods" && w.name == pod::name(p) && matches!(w.op, WriteOp::Delete { .. })
        });
        let outlives_delete = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
            || p.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty());
        if !deleted_here || outlives_delete {
            sync_paused_condition_to_pod(&c, vmi, p, plan, now);
            sync_dynamic_metadata_to_pod(m.labels(), m.annotations, vmi, p, plan, &ns);
        }
        if let Some(bytes) = meta::annotation(&p.metadata, MEMORY_OVERHEAD_ANNOTATION)
            .and_then(|s| s.parse::<i64>().ok())
        {
            let q = crate::Quantity::from_value(bytes, crate::quantity::QuantityFormat::BinarySI);
            let memory = object_mut(status_mut(&mut c), "memory");
            set(memory, "memoryOverhead", json!(q.to_string()));
        }
    }

    data_volumes::aggregate_condition(&mut c, dvs);
    super::backend_storage::update_volume_status(w, &mut c);

    let mut sync_err_override: Option<SyncError> = None;
    let current_phase = state::phase_of(vmi);
    match current_phase {
        "" | phase::PENDING => {
            if pod_exists {
                set_phase(&mut c, phase::SCHEDULING);
            } else if state::is_deleting(vmi) || failed_dv {
                set_phase(&mut c, phase::FAILED);
            } else {
                set_phase(&mut c, phase::PENDING);
                if wffc_dv {
                    provisioning(&mut c, temp_pod);
                }
                if let Some(e) = sync_err.filter(|e| e.reason == "FailedPvcNotFound") {
                    // Replaced on every sync, timestamps unset, as KubeVirt appends it.
                    remove_cond(&mut c, "PodScheduled");
                    conds_mut(&mut c).push(json!({
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": e.message, "lastProbeTime": null, "lastTransitionTime": null,
                    }));
                }
            }
        }
        phase::SCHEDULING => {
            remove_cond(&mut c, "Provisioning");
            match p.filter(|_| pod_exists) {
                Some(p) => {
                    match p
                        .status
                        .as_ref()
                        .and_then(|s| s.qos_class.as_deref())
                        .filter(|q| !q.is_empty())
                    {
                        Some(q) => set(status_mut(&mut c), "qosClass", json!(q)),
                        None => {
                            status_mut(&mut c).remove("qosClass");
                        }
                    }
                    match pod::condition(p, "PodScheduled") {
                        Some(pc) if pc.status == "False" => {
                            if find_cond(&c, "PodScheduled").is_none() {
                                conds_mut(&mut c).push(pod_condition_json(pc));
                            }
                        }
                        _ => remove_cond(&mut c, "PodScheduled"),
                    }
                    if let Some((reason, message)) = pod::image_error(p) {
                        sync_err_override = Some(SyncError {
                            kind: crate::ErrorKind::Sync,
                            reason,
                            message,
                        });
                    }
                    if pod::is_ready(p) && !state::is_deleting(vmi) {
                        update_volume_status(w, &mut c, Some(p), plan);
                        update_network_status(&mut c, Some(p));
                        set_phase(&mut c, phase::SCHEDULED);
                        let node = pod::node_name(p).to_string();
                        m.set_label(NODE_NAME_LABEL, &node);
                        set(status_mut(&mut c), "nodeName", json!(node));
                        let transport =
                            meta::annotation(&p.metadata, MIGRATION_TRANSPORT_ANNOTATION).is_some();
                        if transport {
                            set(status_mut(&mut c), "migrationTransport", json!("Unix"));
                        }
                    } else if pod::is_down_or_going_down(p) {
                        set_phase(&mut c, phase::FAILED);
                    }
                }
                None => set_phase(&mut c, phase::FAILED),
            }
        }
        phase::FAILED | phase::SUCCEEDED => {
            let all_deleted = !w.pods.iter().any(|x| pod::is_controlled_by(x, vmi));
            if all_deleted {
                m.remove_finalizer(DEPRECATED_VMI_FINALIZER);
                m.remove_finalizer(VMI_FINALIZER);
                m.remove_label(OUTDATED_LAUNCHER_LABEL);
                status_mut(&mut c).remove("launcherContainerImageVersion");
            }
            release_orphan(w, &mut m);
        }
        phase::RUNNING => {
            if !pod_exists {
                set_phase(&mut c, phase::FAILED);
            } else {
                update_volume_status(w, &mut c, p, plan);
                update_network_status(&mut c, p);
            }
        }
        phase::SCHEDULED => {
            if !pod_exists {
                set_phase(&mut c, phase::FAILED);
            } else {
                update_volume_status(w, &mut c, p, plan);
            }
        }
        phase::WAITING_FOR_SYNC => {
            if state::is_deleting(vmi) {
                m.remove_finalizer(DEPRECATED_VMI_FINALIZER);
                m.remove_finalizer(VMI_FINALIZER);
                release_orphan(w, &mut m);
            } else if pod_exists {
                set_phase(&mut c, phase::SCHEDULING);
            }
        }
        other => {
            plan.fail(
                crate::ErrorKind::InvalidObject,
                format!("unknown vmi phase {other}"),
            );
            return None;
        }
    }

    let evacuating = status_field(&c, "evacuationNodeName")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if evacuating {
        if !find_cond(&c, "EvictionRequested").is_some_and(|x| is_str(x, "status", "True")) {
            update_cond(
                &mut c,
                cond(
                    "EvictionRequested",
                    "True",
                    "EvictionRequested",
                    "VMI is marked for eviction",
                    now,
                ),
            );
        }
    } else {
        remove_cond(&mut c, "EvictionRequested");
    }

    // virt-handler owns Scheduled and Running VMIs: only patch what this controller keeps.
    if matches!(current_phase, phase::RUNNING | phase::SCHEDULED) {
        return handed_over_patch(plan, &orig, c, &m, &ns, meta::name(&vmi.metadata));
    }

    let err = sync_err_override.as_ref().or(sync_err);
    match err {
        Some(e) => {
            let already = find_cond(&c, "Synchronized")
                .is_some_and(|x| is_str(x, "status", "False") && is_str(x, "reason", &e.reason));
            if !already {
                remove_cond(&mut c, "Synchronized");
                conds_mut(&mut c).push(json!({
                    "type": "Synchronized", "status": "False", "reason": e.reason, "message": e.message,
                    "lastProbeTime": null, "lastTransitionTime": meta::time_json(now),
                }));
            }
        }
        None => remove_cond(&mut c, "Synchronized"),
    }
    let new_phase = status_field(&c, "phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if new_phase != current_phase {
        let ts = status_field(&c, "phaseTransitionTimestamps")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !ts.iter().any(|t| t["phase"] == new_phase.as_str()) {
            let mut ts = ts;
            ts.push(json!({"phase": new_phase, "phaseTransitionTimestamp": meta::time_json(now)}));
            set(
                status_mut(&mut c),
                "phaseTransitionTimestamps",
                Value::Array(ts),
            );
        }
    }
    tidy(&mut c);
    let mut o = orig;
    tidy(&mut o);
    // The annotations are not edited here: only the labels and finalizers can differ.
    let original = MetaEdit::of(&vmi.metadata);
    let changed = !meta::eq_without_zero_values(index(&o, "status"), index(&c, "status"))
        || !eq_map_without_zero_values(original.labels(), m.labels())
        || m.finalizers_tidied(true) != original.finalizers_tidied(true);
    if !changed {
        return None;
    }
    // KubeVirt writes a VMI it still owns with a full `Update`: conditional on the version read.
    let mut ops: Vec<Value> = patch::resource_version_test(&vmi.metadata)
        .into_iter()
        .collect();
    ops.extend(patch::field_ops(
        "/status",
        get(&o, "status"),
        index(&c, "status"),
    ));
    if original.labels_tidied(true) != m.labels_tidied(true) {
        let (old_l, new_l) = (original.labels_json(true), m.labels_json(true));
        meta_field_ops(&mut ops, "labels", old_l, new_l);
    }
    let (old_f, new_f) = (original.finalizers_tidied(true), m.finalizers_tidied(true));
    if old_f != new_f {
        let json = |f: Option<&[String]>| f.map(string_list_json);
        meta_field_ops(&mut ops, "finalizers", json(old_f), json(new_f));
    }
    plan.push_write(
        ApiWrite::new(
            "virtualmachineinstances",
            &ns,
            meta::name(&vmi.metadata),
            WriteOp::Patch {
                patch_type: PatchType::Json,
                patch: Value::Array(ops),
            },
        )
        .expecting(Expectation::ObservedUpdate {
            key: meta::key(&vmi.metadata),
        }),
    );
    c["metadata"] = m.to_json(true);
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The typed working copy's JSON is what serialising the three fields as the VMI writes
    /// them gives, empty maps and lists included.
    #[test]
    fn metadata_json_is_the_serialised_metadata() {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        let cases = [
            ObjectMeta::default(),
            ObjectMeta {
                labels: map(&[]),
                annotations: map(&[]),
                finalizers: Some(vec![]),
                ..ObjectMeta::default()
            },
            ObjectMeta {
                labels: map(&[("b", "1"), ("a", "")]),
                annotations: map(&[("kubevirt.io/x", "y")]),
                finalizers: Some(vec!["f2".into(), "f1".into()]),
                ..ObjectMeta::default()
            },
            ObjectMeta {
                labels: map(&[("a", "b")]),
                ..ObjectMeta::default()
            },
        ];
        for m in cases {
            let want = kvrs_api::object_meta_json(&m).unwrap();
            let got = MetaEdit::of(&m).to_json(true);
            assert_eq!(got, want, "{m:?}");
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&want).unwrap(),
                "key order of {m:?}"
            );
        }
    }

    /// Edits read back as the JSON edits they replace: a label or finalizer set twice is one
    /// entry, an emptied map or list stays present until tidied.
    #[test]
    fn metadata_edits_keep_the_json_shape() {
        let m = ObjectMeta {
            labels: Some([("l".to_string(), "v".to_string())].into()),
            finalizers: Some(vec!["a".into(), "b".into()]),
            ..ObjectMeta::default()
        };
        let mut e = MetaEdit::of(&m);
        e.remove_label("l");
        e.remove_finalizer("a");
        e.add_finalizer("c");
        e.add_finalizer("c");
        assert_eq!(
            e.to_json(false),
            json!({"finalizers": ["b", "c"], "labels": {}})
        );
        assert_eq!(e.to_json(true), json!({"finalizers": ["b", "c"]}));
        e.set_label("x", "");
        e.set_label("x", "");
        e.remove_finalizer("b");
        e.remove_finalizer("c");
        assert_eq!(
            e.to_json(false),
            json!({"finalizers": [], "labels": {"x": ""}})
        );
        assert!(!eq_map_without_zero_values(
            MetaEdit::of(&m).labels(),
            e.labels()
        ));
        assert!(eq_map_without_zero_values(None, e.labels()));
        // Written label maps keep the JSON edits' key order: a removed key's place goes to the
        // last key, a new key comes last.
        let m = ObjectMeta {
            labels: Some(
                [("a", "1"), ("b", "2"), ("c", "3")]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
            ),
            ..ObjectMeta::default()
        };
        let mut e = MetaEdit::of(&m);
        e.remove_label("a");
        e.set_label("b", "2");
        e.set_label("0", "new");
        assert_eq!(
            serde_json::to_string(&e.labels_json(true)).unwrap(),
            r#"{"c":"3","b":"2","0":"new"}"#
        );
        assert_eq!(
            serde_json::to_string(&MetaEdit::of(&m).labels_json(true)).unwrap(),
            r#"{"a":"1","b":"2","c":"3"}"#
        );
        let untouched = ObjectMeta::default();
        let mut f = MetaEdit::of(&untouched);
        f.remove_label("x");
        f.remove_finalizer("x");
        assert_eq!(f.to_json(false), json!({}));
    }
}
