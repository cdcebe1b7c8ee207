//! DataVolumes from the VM's `dataVolumeTemplates`: created before the first start (unless the VM
//! opts out with `kubevirt.io/immediate-data-volume-creation: "false"`), and a start waits until
//! every one of them is populated.
//!
//! Not done here (KubeVirt resolves them with API calls): resolving a `sourceRef` DataSource into
//! a source, and the SubjectAccessReview that authorizes cloning from another namespace.

use serde_json::{Value, json};

use super::Reconcile;
use crate::{Event, meta};
use kvrs_api::json_pointer::JsonPointer;

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

/// Creates the missing DataVolumes and reports whether all are populated.
pub(super) fn handle_data_volumes(r: &mut Reconcile<'_, '_>) -> bool {
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
                _ => ready = false,
            },
        }
    }
    ready
}
