//! KubeVirt v1.9.0's checks of a VM's `status.volumeRequests` (`VMsAdmitter.
//! validateVolumeRequests`), run by its VM webhook after the spec checks and by its
//! `kubevirt-crd-status-validator` on every write of `virtualmachines/status`.
//!
//! The requests are the legacy `HotplugVolumes` path: `virtctl addvolume` without declarative
//! hotplug writes them, and virt-controller later copies each into the template and the running
//! VMI. Refusing a bad one here keeps the controller from applying something that breaks the
//! VM, which is why the requests are checked *applied*: first onto the template, then onto the
//! running VMI, each validated as a VMI spec.
//!
//! The first faulty request stops the walk with one cause (as KubeVirt returns at once); its
//! field is `Status.volumeRequests`, capital S, exactly as KubeVirt spells it.

use kvrs_api::api::{
    AddVolumeOptions, DataVolumeSource, PersistentVolumeClaimVolumeSource,
    VirtualMachineVolumeRequest, Volume,
};
use kvrs_api::time::Now;
use kvrs_api::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceSpec};

use super::causes::{Cause, CauseKind};
use super::hotplug::hotplug_disk_configuration;
use crate::config::ClusterConfig;
use crate::defaults::apply_defaults;

/// KubeVirt's field of every request-level cause (`k8sfield.NewPath("Status", "volumeRequests")`).
pub const VOLUME_REQUESTS_FIELD: &str = "Status.volumeRequests";

/// KubeVirt's causes for `vm.status.volumeRequests` (empty: admitted).
///
/// `vmi` is the VM's VMI when the VM is `Ready` and the VMI exists and is not being deleted
/// (the shell reads it only then, as KubeVirt does); `now` decides whether its migration is
/// still running (KubeVirt's `IsMigrating` reads the clock).
pub fn validate_volume_requests(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    config: &ClusterConfig,
    now: Now,
) -> Vec<Cause> {
    let requests = vm
        .status
        .as_ref()
        .and_then(|s| s.volume_requests.as_deref())
        .unwrap_or_default();
    if requests.is_empty() {
        return Vec::new();
    }
    let template = vm.spec.template.spec.clone().unwrap_or_default();
    let mut vmi_spec = vmi.map(|v| v.spec.clone());
    let mut new_spec = template.clone();
    let mut added: Vec<&str> = Vec::new();
    let mut removed: Vec<&str> = Vec::new();
    for request in requests {
        match (&request.add_volume_options, &request.remove_volume_options) {
            (Some(_), Some(_)) => {
                return refused(
                    "VolumeRequests require either addVolumeOptions or removeVolumeOptions to be set, not both",
                );
            }
            (Some(add), None) => {
                let name = add.name.as_str();
                if added.contains(&name) {
                    return refused(format!("AddVolume request for [{name}] aleady exists"));
                }
                if let Some(message) =
                    hotplug_disk_configuration(&add.disk, name, "AddVolume request")
                {
                    return vec![disk_cause(message)];
                }
                let requested = requested_volume(add);
                let conflicts = |spec: &VirtualMachineInstanceSpec| {
                    spec.volumes
                        .iter()
                        .flatten()
                        .find(|v| v.name == name)
                        .is_some_and(|v| !same_volume(v, &requested))
                };
                if conflicts(&template) {
                    return refused(format!(
                        "AddVolume request for [{name}] conflicts with an existing volume of the same name on the vmi template."
                    ));
                }
                if vmi.is_some_and(|v| conflicts(&v.spec)) {
                    return refused(format!(
                        "AddVolume request for [{name}] conflicts with an existing volume of the same name on currently running vmi"
                    ));
                }
                added.push(name);
            }
            (None, Some(remove)) => {
                let name = remove.name.as_str();
                if removed.contains(&name) {
                    return refused(format!("RemoveVolume request for [{name}] aleady exists"));
                }
                removed.push(name);
            }
            (None, None) => {
                return refused(
                    "VolumeRequests require one of either addVolumeOptions or removeVolumeOptions to be set",
                );
            }
        }
        apply_volume_request(&mut new_spec, request);
        if let Some(spec) = vmi_spec.as_mut() {
            apply_volume_request(spec, request);
        }
    }
    let causes = template_spec_causes(vm, new_spec, config);
    if !causes.is_empty() {
        return causes;
    }
    if let (Some(vmi), Some(spec)) = (vmi, vmi_spec) {
        let causes = template_spec_causes(vm, spec, config);
        if !causes.is_empty() {
            return causes;
        }
        if is_migrating(vmi, now) {
            return vec![Cause {
                kind: CauseKind::NotSupported,
                field: "spec".into(),
                message: "Cannot handle volume requests while VMI migration is in progress".into(),
            }];
        }
    }
    Vec::new()
}

/// `spec` validated as KubeVirt's `ValidateVirtualMachineInstanceSpec` validates a VM's
/// template: the VMI rules that concern a spec (not the VMI's own metadata, its mandatory
/// memory request or its volumes without a disk, which KubeVirt checks elsewhere), with causes
/// at `spec.template.spec.…`. The spec is defaulted first because kvrs's VMI checks are written
/// for defaulted VMIs (a running VMI already is; a template is by the VM mutator's copy).
pub fn template_spec_causes(
    vm: &VirtualMachine,
    spec: VirtualMachineInstanceSpec,
    config: &ClusterConfig,
) -> Vec<Cause> {
    let mut vmi = VirtualMachineInstance {
        spec,
        ..VirtualMachineInstance::default()
    };
    vmi.metadata.name = vm.metadata.name.clone().or(Some("vm".into()));
    vmi.metadata.namespace = vm.metadata.namespace.clone();
    apply_defaults(&mut vmi, config);
    let Err(e) = super::validate(&vmi, config) else {
        return Vec::new();
    };
    e.causes
        .into_iter()
        .filter(applies_to_a_template)
        .map(|mut c| {
            let moved = format!("spec.template.{}", c.field);
            c.message = c.message.replace(&c.field, &moved);
            c.field = moved;
            c
        })
        .collect()
}

fn applies_to_a_template(c: &Cause) -> bool {
    let mandatory_memory =
        c.field == "spec.domain.memory.guest" && c.message.starts_with("no memory requested");
    c.field.starts_with("spec.")
        && !c.field.starts_with("spec.domain.volumes[")
        && !mandatory_memory
}

fn refused(message: impl Into<String>) -> Vec<Cause> {
    vec![Cause {
        kind: CauseKind::Invalid,
        field: VOLUME_REQUESTS_FIELD.into(),
        message: message.into(),
    }]
}

/// KubeVirt's `ValidateHotplugDiskConfiguration` names `Status.volumeRequests`, except for the
/// boot order, whose cause carries its own (fixed) field.
fn disk_cause(message: String) -> Cause {
    let field = if message.contains("boot order") {
        "spec.domain.devices.disks[1].bootOrder".to_string()
    } else {
        VOLUME_REQUESTS_FIELD.to_string()
    };
    Cause {
        kind: CauseKind::Invalid,
        field,
        message,
    }
}

/// The volume an add request describes, as KubeVirt compares it with an existing one: the name
/// and the PVC (else DataVolume) source as requested, nothing set on top.
fn requested_volume(add: &AddVolumeOptions) -> Volume {
    let source = &add.volume_source;
    let mut volume = Volume {
        name: add.name.clone(),
        ..Volume::default()
    };
    if let Some(pvc) = &source.persistent_volume_claim {
        volume.persistent_volume_claim = Some(Box::new(pvc.clone()));
    } else if let Some(dv) = &source.data_volume {
        volume.data_volume = Some(Box::new(dv.clone()));
    }
    volume
}

/// Go's `equality.Semantic.DeepEqual` on volumes: an unset `bool` is `false`.
fn same_volume(a: &Volume, b: &Volume) -> bool {
    normalized(a) == normalized(b)
}

fn normalized(v: &Volume) -> Volume {
    let unset_false = |b: &mut Option<bool>| {
        if *b == Some(false) {
            *b = None;
        }
    };
    let mut v = v.clone();
    if let Some(pvc) = v.persistent_volume_claim.as_deref_mut() {
        unset_false(&mut pvc.hotpluggable);
        unset_false(&mut pvc.read_only);
    }
    if let Some(dv) = v.data_volume.as_deref_mut() {
        unset_false(&mut dv.hotpluggable);
    }
    v
}

/// KubeVirt's `ApplyVolumeRequestOnVMISpec`: an add appends the volume (marked hotpluggable)
/// and its disk unless a volume of that name is there; a remove drops the volume and disk of
/// that name. The VM controller applies the legacy path's requests with it too.
pub fn apply_volume_request(
    spec: &mut VirtualMachineInstanceSpec,
    request: &VirtualMachineVolumeRequest,
) {
    if let Some(add) = &request.add_volume_options {
        let volumes = spec.volumes.get_or_insert_with(Vec::new);
        if volumes.iter().any(|v| v.name == add.name) {
            return;
        }
        let mut volume = Volume {
            name: add.name.clone(),
            ..Volume::default()
        };
        let source = &add.volume_source;
        if let Some(pvc) = &source.persistent_volume_claim {
            volume.persistent_volume_claim = Some(Box::new(PersistentVolumeClaimVolumeSource {
                hotpluggable: Some(true),
                ..pvc.clone()
            }));
        } else if let Some(dv) = &source.data_volume {
            volume.data_volume = Some(Box::new(DataVolumeSource {
                hotpluggable: Some(true),
                ..dv.clone()
            }));
        }
        volumes.push(volume);
        let mut disk = add.disk.clone();
        disk.name = add.name.clone();
        spec.domain
            .devices
            .disks
            .get_or_insert_with(Vec::new)
            .push(disk);
    } else if let Some(remove) = &request.remove_volume_options {
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| v.name != remove.name);
        }
        if let Some(disks) = spec.domain.devices.disks.as_mut() {
            disks.retain(|d| d.name != remove.name);
        }
    }
}

/// KubeVirt's `migrations.IsMigrating`: the migration state has started (at or before `now`)
/// and has not ended (at or before `now`).
fn is_migrating(vmi: &VirtualMachineInstance, now: Now) -> bool {
    let Some(state) = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref()) else {
        return false;
    };
    let reached = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.is_some_and(|t| Now::from_timestamp(t.0) <= now)
    };
    reached(state.start_timestamp.as_ref()) && !reached(state.end_timestamp.as_ref())
}

#[cfg(test)]
#[path = "volume_requests_tests.rs"]
mod tests;
