//! `addvolume` and `removevolume` of VMs and VMIs as KubeVirt v1.9.0's
//! `pkg/virt-api/rest/volumes.go` decides them, as pure functions: the request body, the object
//! as read and the feature gates in; the JSON patch to send (its `test` operations pinning the
//! lists it replaces) or KubeVirt's error out. The shell ([`super::serve_volumes`], and
//! `kvrs run`'s in-process subresources) reads the object and sends the patch.
//!
//! Which object a request changes:
//!
//! | call | gates | patch |
//! |------|-------|-------|
//! | VM   | `DeclarativeHotplugVolumes` (default) | `spec.template` volumes and disks; the VM controller carries them to the running VMI |
//! | VM   | `HotplugVolumes` | `status.volumeRequests` (the legacy path) |
//! | VMI  | `HotplugVolumes`, or a VMI no VM owns | the VMI's spec volumes and disks (an ephemeral hotplug) |
//! | any  | neither | 400 |

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ApiError;
use super::vm::{PatchOp, Target, decode};

/// KubeVirt's `hotplugVolumeNotEnabledError`.
pub const NOT_ENABLED: &str =
    "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate to use this API.";
/// KubeVirt's `vmiNotRunning`.
pub const VMI_NOT_RUNNING: &str = "VMI is not running";

/// The two gates that allow the calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gates {
    /// `HotplugVolumes` (deprecated): the legacy `status.volumeRequests` path and ephemeral
    /// hotplug into a VM's VMI.
    pub hotplug_volumes: bool,
    /// `DeclarativeHotplugVolumes` (beta, on by default): the VM's template is the truth.
    pub declarative: bool,
}

impl Gates {
    /// The gates as the cluster configuration has them (`DeclarativeHotplugVolumes` on unless
    /// the configuration says otherwise, as in KubeVirt v1.9.0).
    pub fn of(config: &kvrs_admission::ClusterConfig) -> Gates {
        use kvrs_admission::validate::gate_enabled;
        Gates {
            hotplug_volumes: gate_enabled(config, "HotplugVolumes"),
            declarative: gate_enabled(config, "DeclarativeHotplugVolumes"),
        }
    }

    fn check(self) -> Result<(), ApiError> {
        if self.hotplug_volumes || self.declarative {
            Ok(())
        } else {
            Err(ApiError::bad_request(NOT_ENABLED))
        }
    }
}

/// KubeVirt's `AddVolumeOptions`, the disk and source kept as sent (apart from what KubeVirt
/// sets on them: the disk's name, the source's `hotpluggable`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AddVolumeOptions {
    /// The volume's and the disk's name.
    #[serde(default)]
    pub name: String,
    /// The disk to plug (`disk: {bus: scsi}` from virtctl).
    #[serde(default)]
    pub disk: Option<Value>,
    /// `persistentVolumeClaim` or `dataVolume`.
    #[serde(default)]
    pub volume_source: Option<Value>,
    /// `["All"]` for a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<Vec<String>>,
}

/// KubeVirt's `RemoveVolumeOptions`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RemoveVolumeOptions {
    /// The volume's name (or its claim's).
    #[serde(default)]
    pub name: String,
    /// `["All"]` for a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<Vec<String>>,
}

/// A read and checked `addvolume` / `removevolume` request: KubeVirt's
/// `VirtualMachineVolumeRequest`.
#[derive(Clone, Debug, PartialEq)]
pub enum VolumeRequest {
    /// Plug a volume and its disk.
    Add(AddVolumeOptions),
    /// Unplug one.
    Remove(RemoveVolumeOptions),
}

impl VolumeRequest {
    /// Reads a request for `subresource`: `None` when it is neither `addvolume` nor
    /// `removevolume`; otherwise, in KubeVirt's order, 405 for a method other than `PUT`, 400
    /// with the gates off, for an unreadable body, a missing name, disk or source.
    pub fn read(
        subresource: &str,
        method: &str,
        body: &[u8],
        gates: Gates,
    ) -> Option<Result<VolumeRequest, ApiError>> {
        let add = match subresource {
            "addvolume" => true,
            "removevolume" => false,
            _ => return None,
        };
        Some(Self::read_checked(subresource, add, method, body, gates))
    }

    fn read_checked(
        subresource: &str,
        add: bool,
        method: &str,
        body: &[u8],
        gates: Gates,
    ) -> Result<VolumeRequest, ApiError> {
        if method != "PUT" {
            return Err(ApiError::status(
                405,
                "MethodNotAllowed",
                &format!("{subresource} is served for PUT only"),
            ));
        }
        gates.check()?;
        if !add {
            let opts: RemoveVolumeOptions = decode(body)?;
            if opts.name.is_empty() {
                return Err(ApiError::bad_request(
                    "RemoveVolumeOptions requires name to be set",
                ));
            }
            return Ok(VolumeRequest::Remove(opts));
        }
        let mut opts: AddVolumeOptions = decode(body)?;
        for (field, value) in [("disk", &opts.disk), ("volumeSource", &opts.volume_source)] {
            // Go decodes these into structs: anything but an object (or null) is unreadable.
            if value.as_ref().is_some_and(|v| !v.is_object()) {
                return Err(ApiError::bad_request(&format!(
                    "Can not unmarshal Request body to struct, error: {field} must be an object"
                )));
            }
        }
        if opts.name.is_empty() {
            return Err(ApiError::bad_request(
                "AddVolumeOptions requires name to be set",
            ));
        }
        let Some(disk) = opts.disk.as_mut() else {
            return Err(ApiError::bad_request(
                "AddVolumeOptions requires disk to not be nil",
            ));
        };
        disk["name"] = Value::String(opts.name.clone());
        let Some(source) = opts.volume_source.as_mut() else {
            return Err(ApiError::bad_request(
                "AddVolumeOptions requires VolumeSource to not be nil",
            ));
        };
        for key in ["dataVolume", "persistentVolumeClaim"] {
            if let Some(s) = source.get_mut(key).filter(|s| s.is_object()) {
                s["hotpluggable"] = Value::Bool(true);
                break;
            }
        }
        Ok(VolumeRequest::Add(opts))
    }

    /// Whether the request is a dry run (KubeVirt reads the first `dryRun` entry only).
    pub fn dry_run(&self) -> bool {
        let dry = match self {
            VolumeRequest::Add(o) => &o.dry_run,
            VolumeRequest::Remove(o) => &o.dry_run,
        };
        dry.as_ref()
            .and_then(|d| d.first())
            .is_some_and(|d| d == "All")
    }

    /// The request as a `status.volumeRequests` entry.
    fn as_status_entry(&self) -> Value {
        match self {
            VolumeRequest::Add(o) => json!({"addVolumeOptions": o}),
            VolumeRequest::Remove(o) => json!({"removeVolumeOptions": o}),
        }
    }
}

/// The patch of a VM's `addvolume` / `removevolume`: its template's volumes and disks (or, with
/// `HotplugVolumes` on, its `status.volumeRequests`), or KubeVirt's 409 naming the VM.
pub fn vm_patch(vm: &Value, request: &VolumeRequest, gates: Gates) -> Result<PatchOp, ApiError> {
    let name = vm["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &vm["spec"]["template"]["spec"];
    let conflict = |m: String| ApiError::conflict_on("virtualmachine", name, &m);
    verify(spec, request).map_err(conflict)?;
    if gates.hotplug_volumes {
        return Ok(PatchOp {
            target: Target::VmStatus,
            patch: volume_requests_patch(vm, request).map_err(conflict)?,
        });
    }
    Ok(PatchOp {
        target: Target::Vm,
        patch: spec_patch("/spec/template", spec, request),
    })
}

/// The patch of a VMI's `addvolume` / `removevolume`: its spec's volumes and disks; refused
/// for a VMI a VM owns unless `HotplugVolumes` is on (400), for one not running (409), and
/// for what [`verify`] refuses (409).
pub fn vmi_patch(vmi: &Value, request: &VolumeRequest, gates: Gates) -> Result<PatchOp, ApiError> {
    let meta = &vmi["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    if owned_by_vm(vmi) && !gates.hotplug_volumes {
        return Err(ApiError::bad_request(&format!(
            "VMI {}/{name} is owned by a VM",
            meta["namespace"].as_str().unwrap_or_default()
        )));
    }
    let conflict = |m: &str| ApiError::conflict_on("virtualmachineinstance", name, m);
    if vmi["status"]["phase"] != "Running" {
        return Err(conflict(VMI_NOT_RUNNING));
    }
    verify(&vmi["spec"], request).map_err(|m| conflict(&m))?;
    Ok(PatchOp {
        target: Target::Vmi,
        patch: spec_patch("", &vmi["spec"], request),
    })
}

/// KubeVirt's `ownedByVirtualMachine`: the VMI's controller is a `kubevirt.io/v1` VM.
fn owned_by_vm(vmi: &Value) -> bool {
    vmi["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|owners| {
            owners.iter().any(|o| {
                o["controller"] == true
                    && o["kind"] == "VirtualMachine"
                    && o["apiVersion"] == "kubevirt.io/v1"
            })
        })
}

fn source_name(volume: &Value) -> Option<&str> {
    volume["dataVolume"]["name"]
        .as_str()
        .or_else(|| volume["persistentVolumeClaim"]["claimName"].as_str())
}

fn hotpluggable(volume: &Value) -> bool {
    volume["dataVolume"]["hotpluggable"] == true
        || volume["persistentVolumeClaim"]["hotpluggable"] == true
}

/// KubeVirt's `verifyVolumeOption` over the volumes of `spec`: an added volume's name and
/// source must be new; a removed one (found by its name or its claim's) must exist and be
/// hotpluggable.
pub fn verify(spec: &Value, request: &VolumeRequest) -> Result<(), String> {
    let volumes = spec["volumes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    match request {
        VolumeRequest::Add(o) => {
            let source = o.volume_source.as_ref().and_then(source_name).unwrap_or("");
            for v in volumes {
                if v["name"] == o.name.as_str() {
                    return Err(format!(
                        "Unable to add volume [{}] because volume with that name already exists",
                        o.name
                    ));
                }
                if source_name(v) == Some(source) {
                    return Err(format!(
                        "Unable to add volume source [{source}] because it already exists"
                    ));
                }
            }
            Ok(())
        }
        VolumeRequest::Remove(o) => {
            let found = volumes
                .iter()
                .find(|v| v["name"] == o.name.as_str() || source_name(v) == Some(&o.name));
            match found {
                Some(v) if !hotpluggable(v) => Err(format!(
                    "Unable to remove volume [{}] because it is not hotpluggable",
                    v["name"].as_str().unwrap_or_default()
                )),
                Some(_) => Ok(()),
                None => Err(format!(
                    "Unable to remove volume [{}] because it does not exist",
                    o.name
                )),
            }
        }
    }
}

/// KubeVirt's `ApplyVolumeRequestOnVMISpec` on the volume and disk lists of a VMI spec: an add
/// appends the volume (its source marked hotpluggable) and its disk unless a volume of that
/// name is there; a remove drops the volume and the disk of that name.
pub fn apply(
    volumes: &[Value],
    disks: &[Value],
    request: &VolumeRequest,
) -> (Vec<Value>, Vec<Value>) {
    let (mut volumes, mut disks) = (volumes.to_vec(), disks.to_vec());
    match request {
        VolumeRequest::Add(o) => {
            if volumes.iter().any(|v| v["name"] == o.name.as_str()) {
                return (volumes, disks);
            }
            let mut volume = json!({"name": o.name});
            let source = o.volume_source.as_ref().unwrap_or(&Value::Null);
            for key in ["persistentVolumeClaim", "dataVolume"] {
                if let Some(s) = source.get(key).filter(|s| s.is_object()) {
                    let mut s = s.clone();
                    s["hotpluggable"] = Value::Bool(true);
                    volume[key] = s;
                    break;
                }
            }
            volumes.push(volume);
            if let Some(disk) = &o.disk {
                let mut disk = disk.clone();
                disk["name"] = Value::String(o.name.clone());
                disks.push(disk);
            }
        }
        VolumeRequest::Remove(o) => {
            volumes.retain(|v| v["name"] != o.name.as_str());
            disks.retain(|d| d["name"] != o.name.as_str());
        }
    }
    (volumes, disks)
}

/// KubeVirt's `generateVolumeRequestPatch`: both lists tested against what was read (an absent
/// list tests as `null`) and replaced, or added where they were empty.
fn spec_patch(prefix: &str, spec: &Value, request: &VolumeRequest) -> Value {
    let volume_path = format!("{prefix}/spec/volumes");
    let disk_path = format!("{prefix}/spec/domain/devices/disks");
    let old_volumes = &spec["volumes"];
    let old_disks = &spec["domain"]["devices"]["disks"];
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let (volumes, disks) = apply(&list(old_volumes), &list(old_disks), request);
    let write = |old: &Value| {
        if old.as_array().is_some_and(|a| !a.is_empty()) {
            "replace"
        } else {
            "add"
        }
    };
    json!([
        {"op": "test", "path": volume_path, "value": old_volumes},
        {"op": "test", "path": disk_path, "value": old_disks},
        {"op": write(old_volumes), "path": volume_path, "value": volumes},
        {"op": write(old_disks), "path": disk_path, "value": disks},
    ])
}

fn names_request(entry: &Value, kind: &str, name: &str) -> bool {
    entry[kind]["name"] == name
}

/// KubeVirt's `generateVMVolumeRequestPatch`: the request appended to `status.volumeRequests`
/// (a remove drops pending adds of the same volume), refused when the same request is pending
/// or an add meets a pending remove.
fn volume_requests_patch(vm: &Value, request: &VolumeRequest) -> Result<Value, String> {
    let current = &vm["status"]["volumeRequests"];
    let pending = current.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut next = Vec::new();
    match request {
        VolumeRequest::Add(o) => {
            for r in pending {
                if names_request(r, "addVolumeOptions", &o.name) {
                    return Err(format!(
                        "add volume request for volume [{}] already exists",
                        o.name
                    ));
                }
                if names_request(r, "removeVolumeOptions", &o.name) {
                    return Err(format!(
                        "unable to add volume since a remove volume request for volume [{}] already exists and is still being processed",
                        o.name
                    ));
                }
            }
            next.extend(pending.iter().cloned());
        }
        VolumeRequest::Remove(o) => {
            for r in pending {
                if names_request(r, "addVolumeOptions", &o.name) {
                    continue;
                }
                if names_request(r, "removeVolumeOptions", &o.name) {
                    return Err(format!(
                        "a remove volume request for volume [{}] already exists and is still being processed",
                        o.name
                    ));
                }
                next.push(r.clone());
            }
        }
    }
    next.push(request.as_status_entry());
    let op = if pending.is_empty() { "add" } else { "replace" };
    Ok(json!([
        {"op": "test", "path": "/status/volumeRequests", "value": current},
        {"op": op, "path": "/status/volumeRequests", "value": next},
    ]))
}

/// kube-apiserver's message for a JSON patch it could not apply (a failed `test`: someone else
/// changed the lists first), a 422 `Invalid`; virtctl retries on exactly this text.
pub const PATCH_NOT_APPLIED: &str =
    "the server rejected our request due to an error in our request";

/// KubeVirt's answer to a patch the API server refused: an `Invalid` (422) as the server sent
/// it, anything else a 500 `unable to patch vm` / `vmi` / `vm status`.
pub fn patch_failure(target: Target, code: u16, message: &str) -> ApiError {
    if code == 422 {
        return ApiError::status(422, "Invalid", message);
    }
    let what = match target {
        Target::Vm => "vm",
        Target::VmStatus => "vm status",
        Target::Vmi => "vmi",
    };
    ApiError::internal(&format!("unable to patch {what}: {message}"))
}

#[cfg(test)]
#[path = "volumes_tests.rs"]
mod tests;
