//! The VM controller decision: KubeVirt v1.9.0's `pkg/virt-controller/watch/vm` reconcile of one
//! VirtualMachine key, as a pure function.
//!
//! [`decide_vm`] walks the same steps as KubeVirt's controller — API-version annotations, claiming
//! the VMI of the same name, the expectations gate, deletion and finalizer, the run strategy,
//! the firmware UUID, then the status — and records every write it would send in a [`Plan`],
//! in order. Each step assumes the previous writes succeed; the shell stops at the first failure.

mod backoff;
mod claim;
mod conditions;
mod data_volumes;
mod finalizer;
mod hotplug;
mod instancetype;
mod revision;
mod run_strategy;
mod start;
mod status;
mod sync_meta;

pub use backoff::{
    MAX_DELAY_SECONDS, base_delay_seconds, jitter_for_extra_seconds, start_backoff_seconds,
};
pub use data_volumes::data_volume_create_failed;
pub use hotplug::{
    HOTPLUG_VOLUME_ERROR, apply_volume_request, declarative_lists, is_declarative_hotplug,
    is_hotplug,
};
pub use revision::Revision;
pub use run_strategy::{RunStrategy, RunStrategyError};
pub use start::revision_name;

use std::borrow::Cow;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;

use super::meta;
use super::{ApiWrite, Now, Plan, WriteOp};
use crate::ClusterConfig;
use crate::api::{VirtualMachine, VirtualMachineInstance};

/// The finalizer the VM controller keeps on VMs and the VMIs it starts.
pub const VM_CONTROLLER_FINALIZER: &str = kvrs_api::names::finalizers::VM_CONTROLLER;
/// Annotation on a VMI: the VM generation it was started from (or found equivalent to).
pub const VM_GENERATION_ANNOTATION: &str = "kubevirt.io/vm-generation";
/// Annotation marking a VMI as a migration receiver.
pub const CREATE_MIGRATION_TARGET_ANNOTATION: &str =
    kvrs_api::names::annotations::CREATE_MIGRATION_TARGET;
/// Annotation holding the run strategy to restore once a receiver's migration completed.
pub const RESTORE_RUN_STRATEGY_ANNOTATION: &str = "kubevirt.io/restore-run-strategy";

pub use crate::PendingExpectations;

/// Everything the VM decision reads: the VM, the VMI of the same name from the cache, the
/// ControllerRevisions, DataVolumes and PVCs in the VM's namespace, the expectations of the key,
/// the clock reading and a uniform random draw in `[0, 1)` for the start-failure jitter.
#[derive(Clone, Debug)]
pub struct VmWorld<'a> {
    /// The VM as the cache holds it.
    pub vm: &'a VirtualMachine,
    /// The VMI with the VM's name, if the cache holds one (ownership is checked here).
    pub vmi: Option<&'a VirtualMachineInstance>,
    /// ControllerRevisions of the namespace: this VM's start revisions and the instancetype
    /// and preference revisions it owns or names.
    pub revisions: &'a [Revision],
    /// The instancetypes and preferences (`instancetype.kubevirt.io`, all four kinds, each
    /// with its `kind`) a VM can reference: the cluster-wide ones and those of its namespace.
    /// Read only for a VM with `spec.instancetype` or `spec.preference`.
    pub instancetype_objects: &'a [Value],
    /// DataVolumes of the namespace, as JSON objects: CDI's DataVolume has no Rust type here,
    /// and the decision reads only its phase and conditions.
    pub data_volumes: &'a [Value],
    /// PersistentVolumeClaims of the namespace.
    pub pvcs: &'a [PersistentVolumeClaim],
    /// Outstanding expectations of this VM's key.
    pub expectations: PendingExpectations,
    /// Seconds since the epoch.
    pub now: Now,
    /// Uniform draw from `[0, 1)` used for the start-failure jitter.
    pub jitter: f64,
    /// Cluster configuration.
    pub config: &'a ClusterConfig,
}

/// The decision: the plan, and the VM status it writes (absent when the status is unchanged or
/// the reconcile stopped before the status step).
#[derive(Clone, Debug, PartialEq)]
pub struct VmDecision {
    /// Writes, events, queue outcome and error.
    pub plan: Plan,
    /// The complete VM status after the plan's status write.
    pub status: Option<Value>,
}

/// An error that ends the reconcile's sync step but still lets the status be written, carrying
/// the reason shown in the VM's `Failure` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyncError {
    pub reason: String,
    pub message: String,
}

impl SyncError {
    pub(crate) fn new(reason: &str, message: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Working state of one reconcile: the VM and VMI as the controller believes them to be after
/// its own writes so far, the plan being built and the expectations it raised.
pub(crate) struct Reconcile<'w, 'a> {
    pub w: &'w VmWorld<'a>,
    pub key: String,
    pub vm: VirtualMachine,
    /// The VMI, borrowed from the cache until a step changes it (most reconciles only read it,
    /// and a VMI is the largest thing a reconcile would copy).
    pub vmi: Option<Cow<'a, VirtualMachineInstance>>,
    pub plan: Plan,
    pub pending: PendingExpectations,
    /// The VM status as stored after the status writes already in the plan; serialised from
    /// the cached VM only when a status write needs it (most reconciles write none).
    stored_status: Option<Value>,
}

impl Reconcile<'_, '_> {
    /// The VM status as stored after the status writes already in the plan.
    pub(crate) fn stored_status(&mut self) -> &mut Value {
        let cached = self.w.vm.status.as_ref();
        self.stored_status.get_or_insert_with(|| {
            cached
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or(Value::Null)
        })
    }

    pub(crate) fn ns(&self) -> String {
        meta::namespace(&self.vm.metadata).to_string()
    }

    pub(crate) fn name(&self) -> String {
        meta::name(&self.vm.metadata).to_string()
    }

    /// A JSON patch of this VM (its `metadata`/`spec`; add `.on_subresource("status")` for the
    /// status), the form every VM write of this controller takes.
    pub(crate) fn vm_patch(&self, patch: Value) -> ApiWrite {
        ApiWrite::new(
            "virtualmachines",
            &self.ns(),
            &self.name(),
            WriteOp::Patch {
                patch_type: super::PatchType::Json,
                patch,
            },
        )
    }

    /// Records [`Self::vm_patch`] in the plan.
    pub(crate) fn push_vm_patch(&mut self, patch: Value) {
        let write = self.vm_patch(patch);
        self.plan.push_write(write);
    }

    /// Records the creation of `object` (a `resource` named `name` in the VM's namespace) with a
    /// creation expectation on this key raised first, so a lagging cache cannot cause a second.
    pub(crate) fn push_create(&mut self, resource: &str, name: &str, object: Value) {
        self.pending.creations += 1;
        let write = ApiWrite::new(resource, &self.ns(), name, WriteOp::Create { object })
            .expecting(super::Expectation::Creations {
                key: self.key.clone(),
                count: 1,
            });
        self.plan.push_write(write);
    }

    pub(crate) fn vm_ref(&self) -> super::ObjectRef {
        super::ObjectRef {
            kind: "VirtualMachine".into(),
            namespace: self.ns(),
            name: self.name(),
            uid: self.vm.metadata.uid.clone(),
        }
    }
}

/// Decides one reconcile of a VM key. See the module documentation.
///
/// A key whose VM is no longer in the cache needs no decision: the shell forgets the key and
/// drops its expectations (KubeVirt does the same).
pub fn decide_vm(world: &VmWorld<'_>) -> VmDecision {
    let vm = world.vm;
    let mut r = Reconcile {
        w: world,
        key: meta::key(&vm.metadata),
        vm: vm.clone(),
        vmi: None,
        plan: Plan::idle(),
        pending: world.expectations,
        stored_status: None,
    };

    // Writing the annotations makes the API server re-store the object at the current version.
    // KubeVirt writes them with an update of the whole VM and ends the reconcile there: any
    // later write of the same reconcile would carry the old resourceVersion and conflict. A
    // JSON patch carries none, so the reconcile goes on from the annotated working copy, and
    // the later patches of the VM object (the finalizer, in a new VM's first reconcile) fold
    // into this one (`merge_vm_object_patches`): a new VM costs one write and one reconcile
    // fewer, and ends as KubeVirt's does (tests/deliberate-differences.json).
    if !meta::observed_latest_api_version(&vm.metadata) {
        annotate_api_version(&mut r);
    }

    r.vmi = claim::claim_vmi(&mut r);

    let (sync_err, fatal) = sync(&mut r);
    if let Some(err) = fatal {
        r.plan.fail(crate::ErrorKind::InvalidObject, err);
        return VmDecision {
            plan: r.plan,
            status: None,
        };
    }
    let status = status::update_status(&mut r, sync_err.as_ref());
    if let Some(e) = sync_err {
        r.plan.fail(crate::ErrorKind::Sync, e.message);
    }
    let (ns, name) = (r.ns(), r.name());
    merge_vm_object_patches(&mut r.plan, &ns, &name);
    send_revision_with_vm_patch(&mut r.plan, world.vm);
    VmDecision {
        plan: r.plan,
        status,
    }
}

/// Folds every later JSON patch of the VM object itself (metadata and spec: the finalizer, the
/// firmware UUID, the PCI topology annotations, the run strategy) into the first one, so a
/// reconcile sends at most one such write instead of one per step.
///
/// Why this is the same change: each step computed its patch against the working copy of the
/// VM, which already had the earlier steps' edits, and the steps touch different paths — so the
/// concatenated operations (every `test` included) apply in one request exactly as the separate
/// patches would in sequence, and the API server applies all or none of them. The later patches
/// move ahead of the writes in between (the start revision, the VMI create), which none of them
/// depends on: they read the VM and the cached VMI only. The first patch keeps its place, so the
/// finalizer is still stored before a VMI is created. Fewer writes also mean fewer watch events
/// of the VM, each of which queues the key again.
fn merge_vm_object_patches(plan: &mut Plan, ns: &str, name: &str) {
    let is_vm_object_patch = |a: &crate::Action| {
        a.as_write().is_some_and(|w| {
            w.resource == "virtualmachines"
                && w.subresource.is_none()
                && w.namespace == ns
                && w.name == name
                && w.expectation.is_none()
                && matches!(
                    &w.op,
                    WriteOp::Patch {
                        patch_type: super::PatchType::Json,
                        patch: Value::Array(_),
                    }
                )
        })
    };
    let Some(first) = plan.actions.iter().position(&is_vm_object_patch) else {
        return;
    };
    let mut later_ops = Vec::new();
    let mut i = first + 1;
    while i < plan.actions.len() {
        if is_vm_object_patch(&plan.actions[i]) {
            if let crate::Action::Write(ApiWrite {
                op:
                    WriteOp::Patch {
                        patch: Value::Array(ops),
                        ..
                    },
                ..
            }) = plan.actions.remove(i)
            {
                later_ops.extend(ops);
            }
        } else {
            i += 1;
        }
    }
    if let crate::Action::Write(ApiWrite {
        op: WriteOp::Patch {
            patch: Value::Array(ops),
            ..
        },
        ..
    }) = &mut plan.actions[first]
    {
        ops.extend(later_ops);
    }
}

/// Lets the start revision's create go out together with the VM object patch right before it
/// (the finalizer, in a VM's first start): neither reads the other, and both still come before
/// the VMI create, which waits for the two. KubeVirt sends them one after the other only
/// because its steps run in sequence.
///
/// Only when the revision records the VM exactly as the cache holds it (`stored`): its
/// generation and its spec. A revision is named after the VM's UID and generation, and a
/// stored object's spec at a generation never changes, so the revision is right whether the
/// patch is accepted or refused (its `test`s make it fail rather than apply to a changed VM).
/// A revision made from a spec this reconcile changed would hold a spec the VM may never have
/// at that generation if the patch failed; that one waits for the patch as in KubeVirt. If the
/// patch fails, the revision stands without the VMI; the retry finds it (in the cache, or
/// refused as existing, which retries once more) — the start itself still waits for the
/// finalizer.
fn send_revision_with_vm_patch(plan: &mut Plan, stored: &VirtualMachine) {
    let (ns, name) = (
        stored.metadata.namespace.as_deref().unwrap_or_default(),
        stored.metadata.name.as_deref().unwrap_or_default(),
    );
    let writes: Vec<&ApiWrite> = plan.writes().collect();
    let Some(i) = writes.windows(2).position(|pair| {
        let (patch, create) = (pair[0], pair[1]);
        patch.resource == "virtualmachines"
            && patch.subresource.is_none()
            && patch.namespace == ns
            && patch.name == name
            && matches!(patch.op, WriteOp::Patch { .. })
            && create.resource == "controllerrevisions"
            && matches!(&create.op, WriteOp::Create { object } if records_stored_vm(object, stored))
    }) else {
        return;
    };
    if let Some(create) = plan
        .actions
        .iter_mut()
        .filter_map(|a| match a {
            crate::Action::Write(w) => Some(w),
            _ => None,
        })
        .nth(i + 1)
    {
        create.alongside_previous = true;
    }
}

/// Whether the start revision `object` holds `stored`'s generation and spec.
fn records_stored_vm(object: &Value, stored: &VirtualMachine) -> bool {
    stored.metadata.generation.is_some()
        && object["revision"].as_i64() == stored.metadata.generation
        && serde_json::to_value(&stored.spec).is_ok_and(|spec| object["data"]["spec"] == spec)
}

/// KubeVirt's `sync`: returns the sync error (status is still written) or a fatal error (the
/// reconcile ends without a status write).
fn sync(r: &mut Reconcile<'_, '_>) -> (Option<SyncError>, Option<String>) {
    if !r.pending.satisfied() {
        return (None, None);
    }
    // Whether a VMI existed when the sync began: only then is its start revision compared with
    // the template (read lazily below, as the steps in between may end the sync first).
    let had_vmi = r.vmi.is_some();

    if r.vm.metadata.deletion_timestamp.is_some() {
        let orphan = meta::has_finalizer(&r.vm.metadata, "orphan");
        if r.vmi.is_none() || orphan {
            finalizer::remove_vm_finalizer(r);
            return (None, None);
        }
        let vmi = r.vmi.clone();
        start::stop_vmi(r, vmi.as_deref());
        return (None, None);
    }
    finalizer::add_vm_finalizer(r);

    start::bump_generation_annotation(r);

    let strategy = match RunStrategy::of(&r.vm) {
        Ok(s) => s,
        Err(e @ RunStrategyError::Unknown(_)) => {
            return (
                Some(SyncError::new(run_strategy::FAILED_CREATE, e.to_string())),
                None,
            );
        }
        Err(e) => return (None, Some(e.to_string())),
    };

    // KubeVirt's instancetype controller runs here: a VM whose references are not stored yet
    // stores them and ends this sync (the next one starts from the stored revisions).
    match instancetype::sync_references(r) {
        Ok(true) => return (None, None),
        Ok(false) => {}
        Err(e) => return (Some(e), None),
    }

    if meta::annotation(&r.vm.metadata, data_volumes::IMMEDIATE_DATA_VOLUME_CREATION)
        != Some("false")
    {
        let ready = match data_volumes::handle_data_volumes(r) {
            Ok(ready) => ready,
            Err(e) => {
                return (
                    Some(SyncError::new(
                        run_strategy::FAILED_CREATE,
                        format!("Error encountered while creating DataVolumes: {e}"),
                    )),
                    None,
                );
            }
        };
        // KubeVirt lets a Halted VM proceed without its DataVolumes (legacy behaviour).
        if !ready && strategy != RunStrategy::Halted {
            return (None, None);
        }
    }

    if let Some(err) = run_strategy::sync_run_strategy(r, strategy) {
        return (Some(err), None);
    }

    if had_vmi {
        let started = start::last_revision(r);
        status::sync_restart_required(r, started.as_ref().and_then(Revision::vm_spec));
    }

    if !r.pending.satisfied() {
        return (None, None);
    }

    firmware_sync(r);
    if let Some(e) = hotplug::sync(r) {
        return (Some(e), None);
    }
    sync_meta::sync_annotations_to_vmi(r);
    sync_meta::sync_pci_topology_to_vm(r);
    (None, None)
}

/// Persists the derived firmware UUID into a VM template that has none, so the VM keeps it even
/// if it is renamed into a copy later.
fn firmware_sync(r: &mut Reconcile<'_, '_>) {
    let Some(spec) = r.vm.spec.template.spec.as_ref() else {
        return;
    };
    let current = spec.domain.firmware.as_ref();
    if current
        .and_then(|f| f.uuid.as_deref())
        .is_some_and(|u| !u.is_empty())
    {
        return;
    }
    let old = current
        .and_then(|f| serde_json::to_value(f).ok())
        .unwrap_or(Value::Null);
    let mut new = if old.is_object() {
        old.clone()
    } else {
        serde_json::json!({})
    };
    let uuid = kvrs_admission::template::firmware_uuid_for_vm(&r.name());
    new["uuid"] = Value::String(uuid.clone());
    let path = "/spec/template/spec/domain/firmware";
    let mut ops = vec![
        super::patch::op("test", path, Some(old)),
        super::patch::op("add", path, Some(new)),
    ];
    // The patch changes the spec, so the API server stores the VM at the next generation.
    // KubeVirt's status write that follows reports that generation (`desiredGeneration`), read
    // from the VM its patch returned; the decision knows it without the answer once the patch
    // also tests the generation it read (a VM whose spec changed meanwhile refuses the patch,
    // and the retry decides from the newer VM). Without this, the status reports the old
    // generation and the VM's own watch event brings a second status write for nothing but the
    // new one.
    if let Some(g) = r.vm.metadata.generation.as_mut() {
        ops.insert(
            0,
            super::patch::op("test", "/metadata/generation", Some(Value::from(*g))),
        );
        *g += 1;
    }
    r.push_vm_patch(Value::Array(ops));
    if let Some(spec) = r.vm.spec.template.spec.as_mut() {
        spec.domain
            .firmware
            .get_or_insert_with(Default::default)
            .uuid = Some(uuid);
    }
}

/// Sets the API-version annotations on the working copy and records them as a patch of the VM
/// this reconcile read: its first operation tests the VM's UID. KubeVirt's update of the whole VM fails for a VM deleted and created
/// again under the same name (the UID and resourceVersion differ); the patch must fail too,
/// since the rest of the reconcile — the finalizer folded into it, the VMI created after it —
/// is about the VM that was read.
fn annotate_api_version(r: &mut Reconcile<'_, '_>) {
    let old = r.vm.metadata.annotations.clone();
    let new =
        r.vm.metadata
            .annotations
            .get_or_insert_with(Default::default);
    new.insert(meta::LATEST_OBSERVED_API_VERSION.into(), "v1".into());
    new.insert(meta::STORAGE_OBSERVED_API_VERSION.into(), "v1".into());
    let mut patch = annotations_patch(old.as_ref(), new);
    if let (Some(uid), Value::Array(ops)) = (r.vm.metadata.uid.as_deref(), &mut patch) {
        ops.insert(
            0,
            super::patch::op("test", "/metadata/uid", Some(uid.into())),
        );
    }
    r.push_vm_patch(patch);
}

/// A JSON patch replacing `/metadata/annotations` (tested against the old map) or adding it.
pub(crate) fn annotations_patch(
    old: Option<&std::collections::BTreeMap<String, String>>,
    new: &std::collections::BTreeMap<String, String>,
) -> Value {
    super::patch::replace_map("/metadata/annotations", old, new)
}

impl VmDecision {
    /// The decision as oracle-shaped JSON (`actions`, `events`, `queue`, `error`, `vmStatus`).
    pub fn to_json(&self, key: &str) -> Value {
        let mut v = self.plan.to_json(key);
        if let (Some(s), Value::Object(m)) = (&self.status, &mut v) {
            m.insert("statusUpdated".into(), Value::Bool(true));
            m.insert("vmStatus".into(), s.clone());
        }
        v
    }
}

#[cfg(test)]
mod data_volume_tests;
#[cfg(test)]
mod tests;
