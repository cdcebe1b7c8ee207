//! The VMI of a VM that references an instancetype or a preference, expanded from the
//! ControllerRevisions that store them (KubeVirt v1.9.0's `Reference` policy: the revisions are
//! named in the matcher's `revisionName` or in `status.instancetypeRef` / `preferenceRef`).
//!
//! Order, as KubeVirt's VM controller: the VMI from the template, the preference's auto-attach
//! values, the controller's input device and pod network, then the annotations naming the
//! instancetype and preference and the application at `spec`. A reference whose revision is
//! not among the namespace's ControllerRevisions stops the start with KubeVirt's reasons
//! (`FailedFindInstancetype` / `FailedFindPreference`): storing the revisions
//! ([`kvrs_instancetype::revision::store_plan`]) comes first.

use kvrs_instancetype::revision::store_plan;
use kvrs_instancetype::vm::controller_apply;
use kvrs_instancetype::{Catalog, instancetype_is_namespaced, preference_is_namespaced};
use serde_json::{Value, json};

use super::{Reconcile, Revision, SyncError, run_strategy};
use crate::api::VirtualMachineInstance;
use crate::small_json::ScanPointer;
use crate::{ApiWrite, Event, WriteOp};

/// The VMI to start, expanded when the VM has references (see the module documentation).
pub(super) fn vmi_to_start(r: &Reconcile<'_, '_>) -> Result<VirtualMachineInstance, SyncError> {
    let vm = &r.vm;
    let start_error = |e: &dyn std::fmt::Display| {
        SyncError::new(
            run_strategy::FAILED_CREATE,
            format!("Failure while starting VMI: {e}"),
        )
    };
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return kvrs_admission::template::vmi_to_start(vm, r.w.config).map_err(|e| start_error(&e));
    }
    let mut catalog = Catalog::default();
    let namespace = r.ns();
    for cr in r.w.revisions {
        if cr
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|n| n != namespace)
        {
            continue;
        }
        if let Ok(doc) = serde_json::to_value(&**cr) {
            // A revision whose data does not read is not one this VM can use; the finder then
            // reports the reference as not found.
            let _ = catalog.add(doc);
        }
    }
    let instancetype = catalog
        .find_instancetype(vm)
        .map_err(|e| SyncError::new("FailedFindInstancetype", e.to_string()))?;
    let preference = catalog
        .find_preference(vm)
        .map_err(|e| SyncError::new("FailedFindPreference", e.to_string()))?;
    let mut vmi = kvrs_admission::template::vmi_from_vm(vm).map_err(|e| start_error(&e))?;
    if vm.spec.preference.is_some() {
        kvrs_instancetype::apply_autoattach_preferences(preference.as_ref(), &mut vmi.spec);
    }
    kvrs_admission::template::add_controller_devices(&mut vmi, r.w.config)
        .map_err(|e| start_error(&e))?;
    controller_apply(
        vm,
        instancetype.as_ref(),
        preference.as_ref(),
        &mut vmi.spec,
        &mut vmi.metadata,
    )
    .map_err(|e| start_error(&format!("Failed to apply instancetype: {e}")))?;
    Ok(vmi)
}

/// KubeVirt's message for a failed store (`storeControllerRevisionErrFmt`).
const STORE_ERROR: &str =
    "error encountered while storing instancetype.kubevirt.io controllerRevisions";

/// The instancetype or preference object a matcher names, as the world holds it (the kind
/// decides between the namespaced and the cluster-wide object).
fn referenced<'a>(
    objects: &'a [Value],
    name: Option<&str>,
    is_namespaced: Option<bool>,
    kinds: (&str, &str),
    namespace: &str,
) -> Option<&'a Value> {
    let name = name.filter(|n| !n.is_empty())?;
    let namespaced = is_namespaced?;
    let kind = if namespaced { kinds.0 } else { kinds.1 };
    objects.iter().find(|o| {
        o.get("kind").and_then(Value::as_str) == Some(kind)
            && o.at("/metadata/name").and_then(Value::as_str) == Some(name)
            && (!namespaced
                || o.at("/metadata/namespace").and_then(Value::as_str) == Some(namespace))
    })
}

/// KubeVirt's instancetype controller `Sync` under the `Reference` policy, before the run
/// strategy: the referenced objects must exist (else `FailedFindInstancetype` /
/// `FailedFindPreference`), then [`kvrs_instancetype::revision::store_plan`]'s
/// ControllerRevisions are created and the VM's `status.instancetypeRef` / `preferenceRef`
/// patched. Returns whether the VM status changed: KubeVirt then ends the sync, and the next
/// one starts the VMI from the stored revisions.
pub(super) fn sync_references(r: &mut Reconcile<'_, '_>) -> Result<bool, SyncError> {
    if r.vm.spec.instancetype.is_none() && r.vm.spec.preference.is_none() {
        return Ok(false);
    }
    let namespace = r.ns();
    let mut catalog = Catalog::default();
    for object in r.w.instancetype_objects {
        // An object that does not read cannot be referenced; the finder reports it missing.
        let _ = catalog.add(object.clone());
    }
    for cr in in_namespace(r.w.revisions, &namespace) {
        if let Ok(doc) = serde_json::to_value(&**cr) {
            let _ = catalog.add(doc);
        }
    }
    catalog
        .find_instancetype(&r.vm)
        .map_err(|e| SyncError::new("FailedFindInstancetype", e.to_string()))?;
    catalog
        .find_preference(&r.vm)
        .map_err(|e| SyncError::new("FailedFindPreference", e.to_string()))?;

    let objects = r.w.instancetype_objects;
    let instancetype = r.vm.spec.instancetype.as_ref().and_then(|m| {
        referenced(
            objects,
            m.name.as_deref(),
            instancetype_is_namespaced(m.kind.as_deref()),
            (
                "VirtualMachineInstancetype",
                "VirtualMachineClusterInstancetype",
            ),
            &namespace,
        )
    });
    let preference = r.vm.spec.preference.as_ref().and_then(|m| {
        referenced(
            objects,
            m.name.as_deref(),
            preference_is_namespaced(m.kind.as_deref()),
            (
                "VirtualMachinePreference",
                "VirtualMachineClusterPreference",
            ),
            &namespace,
        )
    });
    let plan = match store_plan(&r.vm, instancetype, preference) {
        Ok(p) => p,
        Err(e) => {
            let message = format!("{STORE_ERROR}: {e}");
            let ev = Event::warning(r.vm_ref(), run_strategy::FAILED_CREATE, message.clone());
            r.plan.events.push(ev);
            return Err(SyncError::new(run_strategy::FAILED_CREATE, message));
        }
    };
    for object in plan.create {
        let name = object
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // A revision stored by an earlier sync whose status patch did not land is reused, as
        // KubeVirt does (its name fixes the object's UID and generation).
        if in_namespace(r.w.revisions, &namespace)
            .any(|cr| cr.metadata.name.as_deref() == Some(&name))
        {
            continue;
        }
        r.plan.push_write(ApiWrite::new(
            "controllerrevisions",
            &namespace,
            &name,
            WriteOp::Create { object },
        ));
    }
    if plan.status_patch.is_empty() {
        return Ok(false);
    }
    let mut ops = Vec::new();
    // A VM that never had a status has no /status to add into.
    if !r.stored_status().is_object() {
        ops.push(crate::patch::op("add", "/status", Some(json!({}))));
    }
    ops.extend(plan.status_patch);
    let patch = Value::Array(ops);
    let mut doc = json!({"status": r.stored_status().clone()});
    crate::patch::apply_json_patch(&mut doc, &patch)
        .map_err(|e| SyncError::new(run_strategy::FAILED_CREATE, format!("{STORE_ERROR}: {e}")))?;
    let write = r.vm_patch(patch).on_subresource("status");
    r.plan.push_write(write);
    let stored = doc["status"].take();
    if let Ok(status) = serde_json::from_value(stored.clone()) {
        r.vm.status = Some(status);
    }
    r.stored_status = Some(stored);
    Ok(true)
}

fn in_namespace<'a>(
    revisions: &'a [Revision],
    namespace: &'a str,
) -> impl Iterator<Item = &'a Revision> + 'a {
    revisions.iter().filter(move |cr| {
        cr.metadata
            .namespace
            .as_deref()
            .is_none_or(|n| n == namespace)
    })
}
