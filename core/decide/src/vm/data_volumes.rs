//! DataVolumes from the VM's `dataVolumeTemplates`: created before the first start (unless the VM
//! opts out with `kubevirt.io/immediate-data-volume-creation: "false"`), and a start waits until
//! every one of them is populated.
//!
//! Not done here (KubeVirt resolves them with API calls): resolving a `sourceRef` DataSource into
//! a source, and the SubjectAccessReview that authorizes cloning from another namespace.

use serde_json::{Value, json};

use super::Reconcile;
use crate::small_json::ScanPointer;
use crate::{Event, meta};

const ALLOW_CLAIM_ADOPTION: &str = "cdi.kubevirt.io/allowClaimAdoption";
const CREATED_BY_LABEL: &str = "kubevirt.io/created-by";
/// VM annotation that, set to `"false"`, defers DataVolume creation to the first start.
pub(crate) const IMMEDIATE_DATA_VOLUME_CREATION: &str =
    "kubevirt.io/immediate-data-volume-creation";

/// The DataVolume a template asks for: the template's metadata and spec, owned by the VM,
/// labelled with its UID, with claim adoption allowed and the VM's priority class.
fn manifest(r: &Reconcile<'_, '_>, template: &crate::api::DataVolumeTemplateSpec) -> Value {
    let mut metadata = serde_json::to_value(&template.metadata).unwrap_or_else(|_| json!({}));
    if !metadata.is_object() {
        metadata = json!({});
    }
    metadata["namespace"] = json!(r.ns());
    if !metadata["labels"].is_object() {
        metadata["labels"] = json!({});
    }
    metadata["labels"][CREATED_BY_LABEL] = json!(meta::uid(&r.vm.metadata));
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = json!({});
    }
    metadata["annotations"][ALLOW_CLAIM_ADOPTION] = json!("true");
    metadata["ownerReferences"] = json!([meta::controller_ref_json(
        "VirtualMachine",
        &r.name(),
        meta::uid(&r.vm.metadata)
    )]);
    let mut spec = serde_json::to_value(&template.spec).unwrap_or_else(|_| json!({}));
    let priority =
        r.vm.spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.clone());
    if let Some(p) = priority.filter(|p| !p.is_empty())
        && spec
            .get("priorityClassName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        spec["priorityClassName"] = json!(p);
    }
    json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": metadata, "spec": spec})
}

/// KubeVirt's `HasDataVolumeExceededQuotaError`: a Pending DataVolume whose `Bound` condition
/// is not True for `ErrExceededQuota` will not import until the quota allows its claim.
fn exceeded_quota(dv: &Value) -> Option<String> {
    let bound = dv
        .at("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Bound")?;
    (bound["status"] != "True" && bound["reason"] == "ErrExceededQuota").then(|| {
        format!(
            "DataVolume {} importer is not running due to an error: {}",
            dv.at("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            bound["message"].as_str().unwrap_or_default()
        )
    })
}

/// Creates the missing DataVolumes (each with a creation expectation on the VM's key, and
/// KubeVirt's `SuccessfulDataVolumeCreate` event) and reports whether all are populated
/// (Succeeded, or waiting for a consumer / a populator, which the VMI's pod provides). A
/// failed import is reported with a `FailedDataVolumeImport` warning at every sync, as KubeVirt
/// does; a DataVolume held back by the namespace's quota too, and it is an error (the
/// message without the caller's prefix).
pub(super) fn handle_data_volumes(r: &mut Reconcile<'_, '_>) -> Result<bool, String> {
    let templates = r.vm.spec.data_volume_templates.clone().unwrap_or_default();
    let mut ready = true;
    for t in &templates {
        let name = meta::name(&t.metadata).to_string();
        match meta::find_json(r.w.data_volumes, &r.ns(), &name) {
            None => {
                ready = false;
                let object = manifest(r, t);
                r.push_create("datavolumes", &name, object);
                let ev = Event::normal(
                    r.vm_ref(),
                    "SuccessfulDataVolumeCreate",
                    format!("Created DataVolume {name}"),
                );
                r.plan.events.push(ev);
            }
            Some(dv) => match dv
                .at("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or_default()
            {
                "Succeeded" | "WaitForFirstConsumer" | "PendingPopulation" => {}
                "Failed" => {
                    ready = false;
                    let ev = Event::warning(
                        r.vm_ref(),
                        "FailedDataVolumeImport",
                        format!("DataVolume {name} failed to import disk image"),
                    );
                    r.plan.events.push(ev);
                }
                "Pending" => {
                    if let Some(err) = exceeded_quota(dv) {
                        let ev = Event::warning(
                            r.vm_ref(),
                            "FailedDataVolumeImport",
                            format!("DataVolume {name} exceeds quota limits"),
                        );
                        r.plan.events.push(ev);
                        return Err(err);
                    }
                    ready = false;
                }
                _ => ready = false,
            },
        }
    }
    Ok(ready)
}

/// The plan for a DataVolume create the API server refused: KubeVirt's `FailedDataVolumeCreate`
/// warning on the VM, and the reconcile's error (its message as KubeVirt's sync error words it),
/// which retries the key rate-limited. The shell runs it instead of continuing the failed plan.
pub fn data_volume_create_failed(
    vm: &crate::api::VirtualMachine,
    data_volume: &str,
    server_message: &str,
) -> crate::Plan {
    let mut plan = crate::Plan::idle();
    plan.events.push(Event::warning(
        crate::ObjectRef {
            kind: "VirtualMachine".into(),
            namespace: meta::namespace(&vm.metadata).into(),
            name: meta::name(&vm.metadata).into(),
            uid: vm.metadata.uid.clone(),
        },
        "FailedDataVolumeCreate",
        format!("Error creating DataVolume {data_volume}: {server_message}"),
    ));
    plan.fail(
        crate::ErrorKind::Sync,
        format!(
            "Error encountered while creating DataVolumes: failed to create DataVolume: \
             {server_message}"
        ),
    );
    plan
}
