//! The VMI controller decision: KubeVirt v1.9.0's `pkg/virt-controller/watch/vmi` reconcile of one
//! VirtualMachineInstance key, as a pure function.
//!
//! Until virt-handler takes over (phase Scheduled), the VMI controller owns the VMI lifecycle: it
//! creates the launcher pod, follows it to a node, and marks the VMI Scheduled — or Failed when
//! the pod dies first. Afterwards it only keeps pod metadata and a few status fields in sync.
//!
//! Launcher pods are rendered through the [`LauncherRenderer`] parameter, so this module does not
//! depend on how the pod is built (`kvrs_pod::render_launcher_pod` in production).

pub mod backend_storage;
mod conditions;
pub(crate) mod data_volumes;
mod handover;
mod hotplug;
mod lifecycle;
mod network_status;
pub mod pod;
mod pod_sync;
pub mod pvc_info;
mod status;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::PendingExpectations;
use super::{ApiWrite, Event, Expectation, Now, ObjectRef, Plan, WriteOp, meta};
use crate::ClusterConfig;
use crate::api::{VirtualMachine, VirtualMachineInstance};

/// The VMI state predicates, shared with the VM decision (at `crate::vmi_state`).
pub use crate::vmi_state as state;
pub use hotplug::{attachment_pod_create_failed, is_attachment_pod_object};
pub use lifecycle::pod_create_failed;

/// Renders the launcher pod of a VMI as a JSON Pod object (with `metadata.generateName`), or
/// says why it cannot.
pub type LauncherRenderer<'r> = &'r dyn Fn(&VirtualMachineInstance) -> Result<Value, String>;

/// The production launcher renderer: [`kvrs_pod::render_launcher_pod`] with `inputs`, as JSON.
pub fn launcher_renderer<'a>(
    config: &'a ClusterConfig,
    inputs: &'a kvrs_pod::PodInputs,
) -> impl Fn(&VirtualMachineInstance) -> Result<Value, String> + 'a {
    move |vmi| {
        kvrs_pod::render_launcher_pod(vmi, config, inputs)
            .map_err(|e| e.to_string())
            .and_then(|p| serde_json::to_value(p).map_err(|e| e.to_string()))
    }
}

/// The characters Kubernetes draws `generateName` suffixes from (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A 5-character pod name suffix in the API server's alphabet from a random number, for shells
/// that name the launcher pod themselves (so the decision can name it in its event).
pub fn pod_name_suffix(mut random: u64) -> String {
    let n = SUFFIX_ALPHABET.len() as u64;
    (0..5)
        .map(|_| {
            let c = SUFFIX_ALPHABET[usize::try_from(random % n).unwrap_or(0)] as char;
            random /= n;
            c
        })
        .collect()
}

/// Everything the VMI decision reads.
#[derive(Clone, Debug)]
pub struct VmiWorld<'a> {
    /// The VMI as the cache holds it.
    pub vmi: &'a VirtualMachineInstance,
    /// Pods of the VMI's namespace in the controller's cache (labelled `kubevirt.io`); only
    /// those the VMI controls are read, and the hotplug attachment pods its launcher pods
    /// control. Labels and annotations are compared whole in the pod
    /// patches' `test` operations, so they must be the API server's.
    pub pods: Vec<&'a Pod>,
    /// VMs of the namespace (to tell whether an owner VM still exists).
    pub vms: &'a [VirtualMachine],
    /// The owner VM when the caller has it at hand (checked before `vms`).
    pub vm: Option<&'a VirtualMachine>,
    /// Migrations of the namespace, as JSON: KubeVirt's VirtualMachineInstanceMigration has no
    /// Rust type here, and the decision reads only its VMI name, phase and deletion timestamp.
    pub migrations: &'a [Value],
    /// PersistentVolumeClaims of the VMI's namespace in the controller's cache: the claims of
    /// its PVC and DataVolume volumes fill `status.volumeStatus[].persistentVolumeClaimInfo`,
    /// and the launcher pod waits until each of them exists.
    pub pvcs: &'a [PersistentVolumeClaim],
    /// CDI DataVolumes of the VMI's namespace, as JSON (no Rust type here; their phase and
    /// `Ready` condition are read): the launcher pod waits until the DataVolumes its claims
    /// stand on are populated, and the VMI's `DataVolumesReady` condition sums them up. Empty
    /// on a cluster without CDI.
    pub data_volumes: &'a [Value],
    /// The cluster's StorageClasses, as JSON: the backend-storage claim of a VMI with a
    /// persistent TPM or EFI takes the default one, and waits to be bound unless its class
    /// binds on first consumer ([`backend_storage`]).
    pub storage_classes: &'a [Value],
    /// CDI's StorageProfiles, as JSON (empty without CDI): the access mode of a new
    /// backend-storage claim.
    pub storage_profiles: &'a [Value],
    /// Outstanding pod and VMI expectations of the key.
    pub expectations: PendingExpectations,
    /// Seconds since the epoch.
    pub now: Now,
    /// Cluster configuration.
    pub config: &'a ClusterConfig,
}

/// The decision: the plan and the VMI as it is stored after the plan's VMI write (if any).
#[derive(Clone, Debug, PartialEq)]
pub struct VmiDecision {
    /// Writes, events, queue outcome and error.
    pub plan: Plan,
    /// The VMI's metadata and status (with the spec's volumes and networks they derive from)
    /// after the plan's VMI write, when the plan writes it; the rest of the spec is not carried,
    /// as no VMI controller write changes it.
    pub vmi: Option<Value>,
}

impl VmiDecision {
    /// The decision as oracle-shaped JSON (`actions`, `events`, `queue`, `error`, `vmiStatus`).
    pub fn to_json(&self, key: &str) -> Value {
        let mut v = self.plan.to_json(key);
        if let (Some(vmi), Value::Object(m)) = (&self.vmi, &mut v) {
            m.insert(
                "vmiStatus".into(),
                vmi.get("status").cloned().unwrap_or(Value::Null),
            );
        }
        v
    }
}

pub(crate) fn vmi_ref(vmi: &VirtualMachineInstance) -> ObjectRef {
    ObjectRef {
        kind: "VirtualMachineInstance".into(),
        namespace: meta::namespace(&vmi.metadata).into(),
        name: meta::name(&vmi.metadata).into(),
        uid: vmi.metadata.uid.clone(),
    }
}

/// Decides one reconcile of a VMI key. `render` builds the launcher pod; `pod_name_suffix` is
/// the random suffix of the pod name (the API server's `generateName` suffix, drawn by the caller
/// so the decision can name the pod in its event).
pub fn decide_vmi(
    world: &VmiWorld<'_>,
    render: LauncherRenderer<'_>,
    pod_name_suffix: &str,
) -> VmiDecision {
    let vmi = world.vmi;
    let key = meta::key(&vmi.metadata);
    let mut plan = Plan::idle();
    if !meta::observed_latest_api_version(&vmi.metadata) {
        let old = vmi.metadata.annotations.clone();
        let mut new = old.clone().unwrap_or_default();
        new.insert(meta::LATEST_OBSERVED_API_VERSION.into(), "v1".into());
        new.insert(meta::STORAGE_OBSERVED_API_VERSION.into(), "v1".into());
        plan.push_write(
            ApiWrite::new(
                "virtualmachineinstances",
                meta::namespace(&vmi.metadata),
                meta::name(&vmi.metadata),
                WriteOp::Patch {
                    patch_type: super::PatchType::Json,
                    patch: conditional(
                        &vmi.metadata,
                        super::patch::replace_map("/metadata/annotations", old.as_ref(), &new),
                    ),
                },
            )
            .expecting(Expectation::ObservedUpdate { key }),
        );
        return VmiDecision { plan, vmi: None };
    }
    if !world.expectations.satisfied() {
        return VmiDecision { plan, vmi: None };
    }
    lifecycle::reconcile(world, render, pod_name_suffix, plan)
}

/// `patch` made conditional on the resourceVersion of `meta` (KubeVirt writes it with `Update`).
fn conditional(meta: &ObjectMeta, patch: Value) -> Value {
    match (super::patch::resource_version_test(meta), patch) {
        (Some(test), Value::Array(ops)) => Value::Array(std::iter::once(test).chain(ops).collect()),
        (_, patch) => patch,
    }
}

/// The event recorded when the launcher pod was created.
pub(crate) fn created_pod_event(vmi: &VirtualMachineInstance, pod_name: &str) -> Event {
    Event::normal(
        vmi_ref(vmi),
        "SuccessfulCreate",
        format!("Created virtual machine pod {pod_name}"),
    )
}

#[cfg(test)]
mod backend_storage_tests;
#[cfg(test)]
mod data_volume_tests;
#[cfg(test)]
mod hotplug_tests;
#[cfg(test)]
mod tests;
