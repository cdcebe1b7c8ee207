//! Volume hotplug in the VM controller, as KubeVirt v1.9.0 does it for a running VM.
//!
//! - **Declarative** (`DeclarativeHotplugVolumes`, on by default, and `HotplugVolumes` off;
//!   `pkg/storage/hotplug`): the VM template is the truth. A hotpluggable volume (a PVC or
//!   DataVolume with `hotpluggable: true`) and its disk in the template but not in the running
//!   VMI are added to the VMI's spec; one in the VMI but gone from (or changed in) the template
//!   is removed. One JSON patch of the VMI, both lists tested against what was read.
//! - **Legacy** (`status.volumeRequests`, written by virt-api's VM `addvolume` with
//!   `HotplugVolumes` on): each request is applied to the template (one VM patch) and carried to
//!   the VMI as virt-api's VMI `addvolume` / `removevolume` would (one VMI patch, refused as
//!   that subresource refuses).
//!
//! Neither emits events (KubeVirt only logs); a refusal is a sync error with KubeVirt's reason
//! `HotPlugVolumeError`.

use serde_json::Value;

use super::{Reconcile, SyncError};
use crate::api::{
    Disk, VirtualMachineInstance, VirtualMachineInstanceSpec, VirtualMachineVolumeRequest, Volume,
};
use crate::{ApiWrite, PatchType, WriteOp, meta, patch};

/// KubeVirt's `hotplugVolumeErrorReason`.
pub const HOTPLUG_VOLUME_ERROR: &str = "HotPlugVolumeError";

/// KubeVirt's `IsDeclarativeHotplugVolume`: a PVC or DataVolume marked hotpluggable.
pub fn is_declarative_hotplug(v: &Volume) -> bool {
    v.persistent_volume_claim
        .as_ref()
        .is_some_and(|p| p.hotpluggable == Some(true))
        || v.data_volume
            .as_ref()
            .is_some_and(|d| d.hotpluggable == Some(true))
}

/// KubeVirt's `IsHotplugVolume`: declarative, or a hotpluggable memory dump.
pub fn is_hotplug(v: &Volume) -> bool {
    is_declarative_hotplug(v)
        || v.memory_dump
            .as_ref()
            .is_some_and(|m| m.hotpluggable == Some(true))
}

/// KubeVirt's `ApplyVolumeRequestOnVMISpec` (the legacy `status.volumeRequests` path): the
/// webhook's, so what virt-api validated is what the controller applies.
pub use kvrs_admission::validate::apply_volume_request;

/// The VMI's volumes and disks under declarative hotplug (KubeVirt's `patchHotplugVolumes`):
/// `None` when they are already what the template asks for.
pub fn declarative_lists(
    template: &VirtualMachineInstanceSpec,
    vmi: &VirtualMachineInstance,
) -> Option<(Vec<Volume>, Vec<Disk>)> {
    let empty_v = Vec::new();
    let empty_d = Vec::new();
    let vm_volumes = template.volumes.as_ref().unwrap_or(&empty_v);
    let vm_disks = template.domain.devices.disks.as_ref().unwrap_or(&empty_d);
    let vmi_volumes = vmi.spec.volumes.as_ref().unwrap_or(&empty_v);
    let vmi_disks = vmi.spec.domain.devices.disks.as_ref().unwrap_or(&empty_d);
    let vm_volume = |name: &str| vm_volumes.iter().find(|v| v.name == name);
    let vm_disk = |name: &str| vm_disks.iter().find(|d| d.name == name);

    // The VMI's volumes, without the hotplugged ones gone from or changed in the template.
    let mut volumes: Vec<Volume> = vmi_volumes
        .iter()
        .filter(|v| {
            !is_declarative_hotplug(v)
                || vm_volume(&v.name).is_some_and(|t| !is_declarative_hotplug(t) || t == *v)
        })
        .cloned()
        .collect();
    // Then the template's hotpluggable volumes the VMI has neither in its spec nor (being
    // unplugged) in its status.
    let with_status: Vec<&str> = vmi
        .status
        .as_ref()
        .and_then(|s| s.volume_status.as_ref())
        .into_iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    for v in vm_volumes {
        if is_declarative_hotplug(v)
            && !vmi_volumes.iter().any(|x| x.name == v.name)
            && !with_status.contains(&v.name.as_str())
        {
            volumes.push(v.clone());
        }
    }

    let new_volume = |name: &str| volumes.iter().find(|v| v.name == name);
    let mut disks: Vec<Disk> = vmi_disks
        .iter()
        .filter(|d| {
            if new_volume(&d.name).is_some() {
                return true;
            }
            // A disk whose volume went: kept only while the template still has the disk and
            // both are CD-ROMs (an ejected CD-ROM keeps its drive), or the template has no
            // volume of that name.
            let Some(t) = vm_disk(&d.name) else {
                return false;
            };
            vm_volume(&d.name).is_none() || (t.cdrom.is_some() && d.cdrom.is_some())
        })
        .cloned()
        .collect();
    for d in vm_disks {
        if new_volume(&d.name).is_some_and(is_declarative_hotplug)
            && !vmi_disks.iter().any(|x| x.name == d.name)
        {
            disks.push(d.clone());
        }
    }

    (volumes != *vmi_volumes || disks != *vmi_disks).then_some((volumes, disks))
}

/// KubeVirt's `handleVolumeRequests` then `handleDeclarativeVolumeHotplug`, on the working VM
/// and VMI: records the writes, updates the working copies, returns the sync error if any.
pub(super) fn sync(r: &mut Reconcile<'_, '_>) -> Option<SyncError> {
    if let Some(e) = volume_requests(r) {
        return Some(SyncError::new(
            HOTPLUG_VOLUME_ERROR,
            format!("Error encountered while handling volume hotplug requests: {e}"),
        ));
    }
    let gate = |g| kvrs_admission::validate::gate_enabled(r.w.config, g);
    if gate("HotplugVolumes") || !gate("DeclarativeHotplugVolumes") {
        return None;
    }
    if r.vm.spec.update_volumes_strategy.as_deref() == Some("Migration") {
        return None;
    }
    let vmi = r.vmi.as_ref().filter(|v| is_running(v))?;
    let template = r.vm.spec.template.spec.clone().unwrap_or_default();
    let (volumes, disks) = declarative_lists(&template, vmi)?;
    patch_vmi_lists(r, volumes, disks);
    None
}

fn is_running(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Running")
}

/// The legacy path: the requests applied to the template (one VM patch) and carried to a VMI
/// not being deleted as virt-api's VMI subresource would (one VMI patch for all the requests it
/// accepted before the first it refuses, whose message is returned).
fn volume_requests(r: &mut Reconcile<'_, '_>) -> Option<String> {
    let requests =
        r.vm.status
            .as_ref()
            .and_then(|s| s.volume_requests.clone())
            .filter(|q| !q.is_empty())?;
    let old_template = r.vm.spec.template.spec.clone().unwrap_or_default();
    let mut template = old_template.clone();
    for q in &requests {
        apply_volume_request(&mut template, q);
    }
    if template != old_template {
        let base = "/spec/template/spec";
        let ops = list_patch(base, &old_template, &template);
        r.push_vm_patch(Value::Array(ops));
        r.vm.spec.template.spec = Some(template);
    }

    let vmi = r
        .vmi
        .as_ref()
        .filter(|v| v.metadata.deletion_timestamp.is_none())?;
    let mut spec = vmi.spec.clone();
    let mut refusal = None;
    for q in &requests {
        let (name, add) = match (&q.add_volume_options, &q.remove_volume_options) {
            (Some(a), _) => (a.name.as_str(), true),
            (None, Some(rm)) => (rm.name.as_str(), false),
            _ => continue,
        };
        let present = spec.volumes.iter().flatten().any(|v| v.name == name);
        if present == add {
            continue;
        }
        if let Err(e) = vmi_subresource(r, vmi, &spec, q) {
            refusal = Some(e);
            break;
        }
        apply_volume_request(&mut spec, q);
    }
    if spec != vmi.spec {
        let volumes = spec.volumes.clone().unwrap_or_default();
        let disks = spec.domain.devices.disks.clone().unwrap_or_default();
        patch_vmi_lists(r, volumes, disks);
    }
    refusal
}

/// What virt-api's VMI `addvolume` / `removevolume` refuses (its `Status` message, as the
/// client returns it), for a VMI with `spec` as it stands after the earlier requests.
fn vmi_subresource(
    r: &Reconcile<'_, '_>,
    vmi: &VirtualMachineInstance,
    spec: &VirtualMachineInstanceSpec,
    request: &VirtualMachineVolumeRequest,
) -> Result<(), String> {
    let gate = |g| kvrs_admission::validate::gate_enabled(r.w.config, g);
    if !gate("HotplugVolumes") && !gate("DeclarativeHotplugVolumes") {
        return Err(
            "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate to use this API."
                .into(),
        );
    }
    let name = meta::name(&vmi.metadata);
    let owned = vmi.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.kind == "VirtualMachine"
            && o.api_version == "kubevirt.io/v1"
    });
    if owned && !gate("HotplugVolumes") {
        return Err(format!(
            "VMI {}/{name} is owned by a VM",
            meta::namespace(&vmi.metadata)
        ));
    }
    let conflict = |m: &str| {
        format!(
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"{name}\": {m}"
        )
    };
    if !is_running(vmi) {
        return Err(conflict("VMI is not running"));
    }
    verify(spec, request).map_err(|m| conflict(&m))
}

fn source_name(v: &Volume) -> Option<&str> {
    v.data_volume.as_ref().map(|d| d.name.as_str()).or_else(|| {
        v.persistent_volume_claim
            .as_ref()
            .map(|p| p.claim_name.as_str())
    })
}

/// virt-api's `verifyVolumeOption` (see kvrs-virt-api's `subresources::volumes::verify`).
fn verify(
    spec: &VirtualMachineInstanceSpec,
    request: &VirtualMachineVolumeRequest,
) -> Result<(), String> {
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    if let Some(add) = &request.add_volume_options {
        let s = &add.volume_source;
        let source = s
            .data_volume
            .as_ref()
            .map(|d| d.name.as_str())
            .or_else(|| {
                s.persistent_volume_claim
                    .as_ref()
                    .map(|p| p.claim_name.as_str())
            })
            .unwrap_or("");
        for v in volumes {
            if v.name == add.name {
                return Err(format!(
                    "Unable to add volume [{}] because volume with that name already exists",
                    add.name
                ));
            }
            if source_name(v) == Some(source) {
                return Err(format!(
                    "Unable to add volume source [{source}] because it already exists"
                ));
            }
        }
    } else if let Some(rm) = &request.remove_volume_options {
        match volumes
            .iter()
            .find(|v| v.name == rm.name || source_name(v) == Some(rm.name.as_str()))
        {
            Some(v) if !is_declarative_hotplug(v) => {
                return Err(format!(
                    "Unable to remove volume [{}] because it is not hotpluggable",
                    v.name
                ));
            }
            Some(_) => {}
            None => {
                return Err(format!(
                    "Unable to remove volume [{}] because it does not exist",
                    rm.name
                ));
            }
        }
    }
    Ok(())
}

/// `test` of both lists as read, then `replace` (or `add` where a list was empty), as
/// KubeVirt's patch sets for volumes and disks do.
fn list_patch(
    base: &str,
    old: &VirtualMachineInstanceSpec,
    new: &VirtualMachineInstanceSpec,
) -> Vec<Value> {
    fn json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap_or(Value::Null)
    }
    let old_volumes = json(&old.volumes);
    let old_disks = json(&old.domain.devices.disks);
    let new_volumes = json(&new.volumes.clone().unwrap_or_default());
    let new_disks = json(&new.domain.devices.disks.clone().unwrap_or_default());
    let write = |old: &Value| {
        if old.as_array().is_some_and(|a| !a.is_empty()) {
            "replace"
        } else {
            "add"
        }
    };
    let (vp, dp) = (
        format!("{base}/volumes"),
        format!("{base}/domain/devices/disks"),
    );
    vec![
        patch::op("test", &vp, Some(old_volumes.clone())),
        patch::op("test", &dp, Some(old_disks.clone())),
        patch::op(write(&old_volumes), &vp, Some(new_volumes)),
        patch::op(write(&old_disks), &dp, Some(new_disks)),
    ]
}

/// Records the VMI patch setting its volumes and disks, and sets them on the working VMI.
fn patch_vmi_lists(r: &mut Reconcile<'_, '_>, volumes: Vec<Volume>, disks: Vec<Disk>) {
    let Some(vmi) = r.vmi.as_mut() else { return };
    let old = vmi.spec.clone();
    let vmi = vmi.to_mut();
    vmi.spec.volumes = Some(volumes);
    vmi.spec.domain.devices.disks = Some(disks);
    let ops = list_patch("/spec", &old, &vmi.spec);
    let write = ApiWrite::new(
        "virtualmachineinstances",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata),
        WriteOp::Patch {
            patch_type: PatchType::Json,
            patch: Value::Array(ops),
        },
    );
    r.plan.push_write(write);
}

/// KubeVirt's `validLiveUpdateVolumes` and `validLiveUpdateDisks`: whether the template's
/// volumes and disks changed from `last` (the spec the VMI started from) only as hotplug may
/// change them, so the change needs no restart.
pub(super) fn live_updatable(
    last: &VirtualMachineInstanceSpec,
    current: &VirtualMachineInstanceSpec,
    migration_strategy: bool,
) -> (bool, bool) {
    let empty_v = Vec::new();
    let empty_d = Vec::new();
    let old_volumes = last.volumes.as_ref().unwrap_or(&empty_v);
    let new_volumes = current.volumes.as_ref().unwrap_or(&empty_v);
    let old_disks = last.domain.devices.disks.as_ref().unwrap_or(&empty_d);
    let new_disks = current.domain.devices.disks.as_ref().unwrap_or(&empty_d);
    let old_volume = |n: &str| old_volumes.iter().find(|v| v.name == n);
    let new_volume = |n: &str| new_volumes.iter().find(|v| v.name == n);

    let mut seen: Vec<&str> = Vec::new();
    let mut volumes_ok = true;
    for v in new_volumes {
        let claim = v.persistent_volume_claim.is_some() || v.data_volume.is_some();
        let ok = is_hotplug(v)
            || old_volume(&v.name).is_some_and(|o| (claim && migration_strategy) || o == v);
        if !ok {
            volumes_ok = false;
            break;
        }
        seen.push(&v.name);
    }
    if volumes_ok {
        volumes_ok = old_volumes
            .iter()
            .filter(|o| !seen.contains(&o.name.as_str()))
            .all(is_hotplug);
    }

    let mut disks_ok = true;
    let mut seen: Vec<&str> = Vec::new();
    for d in new_disks {
        let hot = new_volume(&d.name).is_some_and(is_hotplug);
        let ok = hot
            || old_disks
                .iter()
                .find(|o| o.name == d.name)
                .is_some_and(|o| o == d);
        if !ok {
            disks_ok = false;
            break;
        }
        seen.push(&d.name);
    }
    if disks_ok {
        disks_ok = old_disks
            .iter()
            .filter(|o| !seen.contains(&o.name.as_str()))
            .all(|o| {
                let volume_ok = old_volume(&o.name).is_none_or(is_hotplug);
                let cdrom_removed =
                    o.cdrom.is_some() && !new_disks.iter().any(|d| d.name == o.name);
                volume_ok && !cdrom_removed
            });
    }
    (volumes_ok, disks_ok)
}

/// KubeVirt's `trimDoneVolumeRequests`: a request goes once the template shows it done (an
/// added volume and its disk there, a removed one's both gone).
pub(super) fn trim_done_volume_requests(
    template: Option<&VirtualMachineInstanceSpec>,
    requests: &mut Vec<VirtualMachineVolumeRequest>,
) {
    let has_volume =
        |n: &str| template.is_some_and(|t| t.volumes.iter().flatten().any(|v| v.name == n));
    let has_disk = |n: &str| {
        template.is_some_and(|t| t.domain.devices.disks.iter().flatten().any(|d| d.name == n))
    };
    requests.retain(|q| {
        let (name, added) = match (&q.add_volume_options, &q.remove_volume_options) {
            (Some(a), _) => (a.name.as_str(), true),
            (None, Some(rm)) => (rm.name.as_str(), false),
            _ => ("", false),
        };
        let (v, d) = (has_volume(name), has_disk(name));
        let done = if added { v && d } else { !v && !d };
        !done
    });
}

#[cfg(test)]
#[path = "hotplug_tests.rs"]
mod tests;
