//! What KubeVirt's VM webhooks and VM controller do with a VM's instancetype and preference,
//! as plain functions (the caller supplies the found specs and KubeVirt's defaulting):
//!
//! - [`mutate_vm`]: the VM mutating webhook's part (preferred architecture, machine type and
//!   DataVolume storage class into the VM itself, before any other defaulting);
//! - [`webhook_apply`]: the VM validating webhook's first step: the spread check, then the
//!   application to a copy of the template at `spec.template.spec`; its result is defaulted
//!   and then [`crate::check_requirements`] runs on it ([`requirements_refusal`] words it);
//! - [`controller_apply`]: the VM controller's steps on the VMI it creates: the annotations
//!   naming the instancetype and preference, then the application at `spec`.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::{VirtualMachine, VirtualMachineInstanceSpec};

use crate::apply::{Applied, apply, apply_architecture, apply_machine_type};
use crate::catalog::{instancetype_is_namespaced, preference_is_namespaced};
use crate::check::{RequirementError, check_spread};
use crate::types::{InstancetypeSpec, PreferenceSpec};

/// The VMI annotation naming a namespaced instancetype.
pub const INSTANCETYPE_ANNOTATION: &str = "kubevirt.io/instancetype-name";
/// The VMI annotation naming a cluster instancetype.
pub const CLUSTER_INSTANCETYPE_ANNOTATION: &str = "kubevirt.io/cluster-instancetype-name";
/// The VMI annotation naming a namespaced preference.
pub const PREFERENCE_ANNOTATION: &str = "kubevirt.io/preference-name";
/// The VMI annotation naming a cluster preference.
pub const CLUSTER_PREFERENCE_ANNOTATION: &str = "kubevirt.io/cluster-preference-name";

/// One cause of a webhook's refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusalCause {
    /// The field path (may be empty).
    pub field: String,
    /// KubeVirt's message.
    pub message: String,
}

/// The VM webhook refuses the VM; the causes say why, as KubeVirt words them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct WebhookRefusal {
    /// Every cause, in KubeVirt's order.
    pub causes: Vec<RefusalCause>,
}

impl fmt::Display for WebhookRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.causes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            if c.field.is_empty() {
                f.write_str(&c.message)?;
            } else {
                write!(f, "{}: {}", c.field, c.message)?;
            }
        }
        Ok(())
    }
}

/// The VM mutating webhook's instancetype step: the preferred architecture and machine type
/// into the template, the preferred storage class into DataVolume templates that name none.
pub fn mutate_vm(vm: &mut VirtualMachine, preference: Option<&PreferenceSpec>) {
    if let Some(spec) = vm.spec.template.spec.as_mut() {
        apply_architecture(preference, spec);
        apply_machine_type(preference, spec);
    }
    let Some(class) = preference
        .and_then(|p| p.volumes.as_ref())
        .and_then(|v| v.preferred_storage_class_name.as_ref())
        .filter(|c| !c.is_empty())
    else {
        return;
    };
    for dv in vm.spec.data_volume_templates.iter_mut().flatten() {
        if let Some(pvc) = dv.spec.pvc.as_mut() {
            pvc.storage_class_name.get_or_insert_with(|| class.clone());
        }
        if let Some(storage) = dv.spec.storage.as_mut() {
            storage
                .storage_class_name
                .get_or_insert_with(|| class.clone());
        }
    }
}

/// The VM validating webhook's application (see the module documentation): the template with
/// the instancetype and preference applied, or the refusal (spread check, then conflicts, each
/// its own cause).
pub fn webhook_apply(
    vm: &VirtualMachine,
    instancetype: Option<&InstancetypeSpec>,
    preference: Option<&PreferenceSpec>,
) -> Result<Option<Applied>, WebhookRefusal> {
    if instancetype.is_none() && preference.is_none() {
        return Ok(None);
    }
    if let Some(c) = check_spread(instancetype, preference) {
        return Err(WebhookRefusal {
            causes: vec![RefusalCause {
                field: c.path.clone(),
                message: c.to_string(),
            }],
        });
    }
    let empty = VirtualMachineInstanceSpec::default();
    let spec = vm.spec.template.spec.as_ref().unwrap_or(&empty);
    apply(
        "spec.template.spec",
        spec,
        &vm.spec.template.metadata,
        instancetype,
        preference,
    )
    .map(Some)
    .map_err(|conflicts| WebhookRefusal {
        causes: conflicts
            .0
            .iter()
            .map(|c| RefusalCause {
                field: c.path.clone(),
                message: c.to_string(),
            })
            .collect(),
    })
}

/// The webhook's refusal for an unmet preference requirement.
pub fn requirements_refusal(e: &RequirementError) -> WebhookRefusal {
    WebhookRefusal {
        causes: vec![RefusalCause {
            field: e.fields.paths(),
            message: format!("failure checking preference requirements: {}", e.message),
        }],
    }
}

/// The annotations KubeVirt's VM controller puts on a VMI to name the VM's instancetype and
/// preference (`kubevirt.io/[cluster-]instancetype-name`, `kubevirt.io/[cluster-]preference-name`).
pub fn set_reference_annotations(vm: &VirtualMachine, metadata: &mut ObjectMeta) {
    let mut set = |key: &str, name: &Option<String>| {
        metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), name.clone().unwrap_or_default());
    };
    if let Some(m) = &vm.spec.instancetype {
        match instancetype_is_namespaced(m.kind.as_deref()) {
            Some(true) => set(INSTANCETYPE_ANNOTATION, &m.name),
            Some(false) => set(CLUSTER_INSTANCETYPE_ANNOTATION, &m.name),
            None => {}
        }
    }
    if let Some(m) = &vm.spec.preference {
        match preference_is_namespaced(m.kind.as_deref()) {
            Some(true) => set(PREFERENCE_ANNOTATION, &m.name),
            Some(false) => set(CLUSTER_PREFERENCE_ANNOTATION, &m.name),
            None => {}
        }
    }
}

/// Why the VM controller did not create the VMI.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("VMI conflicts with instancetype spec in fields: [{paths}]")]
pub struct ControllerConflict {
    /// The conflicting fields joined as KubeVirt joins them.
    pub paths: String,
}

/// The VM controller's instancetype steps on the VMI it is creating (see the module
/// documentation). The auto-attach preferences ([`crate::apply_autoattach_preferences`]) come
/// earlier, before the controller adds its own devices.
pub fn controller_apply(
    vm: &VirtualMachine,
    instancetype: Option<&InstancetypeSpec>,
    preference: Option<&PreferenceSpec>,
    spec: &mut VirtualMachineInstanceSpec,
    metadata: &mut ObjectMeta,
) -> Result<(), ControllerConflict> {
    if instancetype.is_none() && preference.is_none() {
        return Ok(());
    }
    set_reference_annotations(vm, metadata);
    crate::apply::apply_in_place("spec", instancetype, preference, spec, metadata)
        .map_err(|c| ControllerConflict { paths: c.paths() })
}
