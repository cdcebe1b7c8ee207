//! Starting and stopping: the VMI built from the VM template (by
//! [`kvrs_admission::template::vmi_to_start`], expanded from the instancetype and preference
//! revisions of a VM that references them, plus the controller's bookkeeping metadata), the
//! ControllerRevision recording the spec it was started from, and the deletion that stops it.

use std::borrow::Cow;

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::json;

use super::{
    CREATE_MIGRATION_TARGET_ANNOTATION, Reconcile, Revision, SyncError, VM_CONTROLLER_FINALIZER,
    VM_GENERATION_ANNOTATION, run_strategy,
};
use crate::api::{VirtualMachineInstance, VirtualMachineInstanceStatus};
use crate::{ApiWrite, Event, Expectation, WriteOp, meta};

/// `revision-start-vm-<VM UID>-<generation>`: the ControllerRevision holding the VM spec a VMI
/// was started from, compared later to tell whether the VM needs a restart to apply changes.
pub fn revision_name(vm_uid: &str, generation: i64) -> String {
    format!("revision-start-vm-{vm_uid}-{generation}")
}

fn revision_prefix(vm_uid: &str) -> String {
    format!("revision-start-vm-{vm_uid}")
}

/// Revisions in the world owned by this VM and named after its start revisions.
fn own_revisions<'a>(r: &'a Reconcile<'_, '_>) -> impl Iterator<Item = &'a Revision> + 'a {
    let uid = meta::uid(&r.vm.metadata).to_string();
    let prefix = revision_prefix(&uid);
    r.w.revisions.iter().filter(move |cr| {
        let owned = cr
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "VirtualMachine" && o.uid == uid);
        let named = cr
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.contains(&prefix));
        owned && named
    })
}

fn revision_by_name<'a>(r: &'a Reconcile<'_, '_>, name: &str) -> Option<&'a Revision> {
    if name.is_empty() {
        return None;
    }
    let ns = r.ns();
    r.w.revisions
        .iter()
        .find(|cr| cr.metadata.name.as_deref() == Some(name) && meta::namespace(&cr.metadata) == ns)
}

/// The generation a start revision was recorded at, from its name
/// (`revision-start-vm-<UID>-<generation>`).
fn generation_of(cr: &ControllerRevision) -> Option<i64> {
    cr.metadata
        .name
        .as_deref()?
        .rsplit('-')
        .next()?
        .parse()
        .ok()
}

/// The newest start revision of this VM (its spec is what the running VMI was started from).
pub(super) fn last_revision(r: &Reconcile<'_, '_>) -> Option<Revision> {
    own_revisions(r)
        .filter_map(|cr| Some((generation_of(cr)?, cr)))
        .max_by_key(|(g, _)| *g)
        .map(|(_, cr)| cr.clone())
}

/// The generation the VMI's revision was recorded at, from the revision name.
pub(super) fn revision_generation(
    r: &Reconcile<'_, '_>,
    vmi: &VirtualMachineInstance,
) -> Option<i64> {
    let name = vmi
        .status
        .as_ref()?
        .virtual_machine_revision_name
        .as_deref()?;
    generation_of(revision_by_name(r, name)?)
}

/// Writes the VM generation onto the VMI's annotation and records it in the working copy.
pub(super) fn patch_generation_annotation(r: &mut Reconcile<'_, '_>, generation: i64) {
    let Some(vmi) = r.vmi.as_mut().map(Cow::to_mut) else {
        return;
    };
    let old = vmi.metadata.annotations.clone();
    let mut new = old.clone().unwrap_or_default();
    new.insert(VM_GENERATION_ANNOTATION.into(), generation.to_string());
    let write = ApiWrite::new(
        "virtualmachineinstances",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata),
        WriteOp::Patch {
            patch_type: crate::PatchType::Json,
            patch: super::annotations_patch(old.as_ref(), &new),
        },
    );
    vmi.metadata.annotations = Some(new);
    r.plan.push_write(write);
}

/// A VM edit that left the template unchanged (only the run strategy, say) still moves the VMI
/// to the new generation, so `observedGeneration` does not suggest a pending restart.
pub(super) fn bump_generation_annotation(r: &mut Reconcile<'_, '_>) {
    let Some(vmi) = r.vmi.as_ref() else { return };
    let generation = r.vm.metadata.generation.unwrap_or(0);
    if meta::annotation(&vmi.metadata, VM_GENERATION_ANNOTATION)
        == Some(generation.to_string().as_str())
    {
        return;
    }
    let Some(name) = vmi
        .status
        .as_ref()
        .and_then(|s| s.virtual_machine_revision_name.clone())
    else {
        return;
    };
    let Some(revision) = revision_by_name(r, &name) else {
        return;
    };
    if revision.records_template(&r.vm.spec.template) {
        patch_generation_annotation(r, generation);
    }
}

fn remove_restart_required(r: &mut Reconcile<'_, '_>) {
    if let Some(conds) = r.vm.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        conds.retain(|c| c.r#type != "RestartRequired");
    }
}

/// Creates the start revision (unless this generation already has one) and deletes older ones.
fn create_revision(r: &mut Reconcile<'_, '_>) -> String {
    let uid = meta::uid(&r.vm.metadata).to_string();
    let generation = r.vm.metadata.generation.unwrap_or(0);
    let name = revision_name(&uid, generation);
    let mut exists = false;
    let mut stale = Vec::new();
    for cr in own_revisions(r) {
        if cr.revision == generation {
            exists = true;
        } else if let Some(n) = cr.metadata.name.as_deref() {
            stale.push(n.to_string());
        }
    }
    for n in stale {
        r.plan.push_write(ApiWrite::new(
            "controllerrevisions",
            &r.ns(),
            &n,
            WriteOp::Delete {
                precondition_uid: None,
            },
        ));
    }
    if !exists {
        let spec = serde_json::to_value(&r.vm.spec).unwrap_or_default();
        let object = json!({
            "data": {"spec": spec},
            "metadata": {
                "name": name,
                "namespace": r.ns(),
                "ownerReferences": [meta::controller_ref_json("VirtualMachine", &r.name(), &uid)],
            },
            "revision": generation,
        });
        r.plan.push_write(ApiWrite::new(
            "controllerrevisions",
            &r.ns(),
            &name,
            WriteOp::Create { object },
        ));
    }
    name
}

/// Starts the VM: revision, VMI create (with a creation expectation raised first), event.
pub(super) fn start_vmi(r: &mut Reconcile<'_, '_>) -> Option<SyncError> {
    let manual_recovery =
        r.vm.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.r#type == "ManualRecoveryRequired" && c.status == "True")
            });
    // KubeVirt looks at the DataVolumes first (creating the missing ones) and only then at
    // the manual-recovery condition.
    match super::data_volumes::handle_data_volumes(r) {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => {
            return Some(SyncError::new(
                super::run_strategy::FAILED_CREATE,
                format!("Failure while starting VMI: {e}"),
            ));
        }
    }
    if manual_recovery {
        return None;
    }
    remove_restart_required(r);
    let mut vmi = match super::instancetype::vmi_to_start(r) {
        Ok(v) => v,
        Err(e) => return Some(e),
    };
    // The VM controller's finalizer is in the VMI it sends; virt-api's webhook appends its own
    // after it. Set before admission so the stored order is KubeVirt's.
    vmi.metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(VM_CONTROLLER_FINALIZER.into());
    // In KubeVirt, virt-api's validating webhook refuses such a VMI at create and the VM
    // controller reports the refusal. kvrs runs where no webhook stands in front of the API
    // server (its own clusters, `kvrs run`), so the controller checks the VMI exactly as the
    // webhook would before creating it, and reports the refusal the same way.
    match kvrs_admission::admit_created(vmi.clone(), r.w.config, r.w.now) {
        // No webhook in front of the API server: the VMI is stored as it would have returned it.
        Ok(admitted) if r.w.config.admit_created_vmis => vmi = admitted,
        Ok(_) => {}
        Err(e) => {
            let ev = Event::warning(
                r.vm_ref(),
                run_strategy::FAILED_CREATE,
                format!("Error creating virtual machine instance: {e}"),
            );
            r.plan.events.push(ev);
            return Some(SyncError::new(
                run_strategy::FAILED_CREATE,
                format!("Failure while starting VMI: {e}"),
            ));
        }
    }
    let revision = create_revision(r);
    if r.w.config.admit_created_vmis {
        // The webhook's status (e.g. `runtimeUser`) stays.
        vmi.status
            .get_or_insert_with(Default::default)
            .virtual_machine_revision_name = Some(revision);
    } else {
        vmi.status = Some(VirtualMachineInstanceStatus {
            virtual_machine_revision_name: Some(revision),
            ..Default::default()
        });
    }
    let md = &mut vmi.metadata;
    let annotations = md.annotations.get_or_insert_with(Default::default);
    let generation = r.vm.metadata.generation.unwrap_or(0).to_string();
    annotations.insert(VM_GENERATION_ANNOTATION.into(), generation);
    // KubeVirt creates the VMI without the API-version annotations, and its VMI controller's
    // first reconcile does nothing but store them (an update, then a requeue). The VMI is
    // created at the current version, which is what they record: set here, they save each
    // started VM that write, its watch event and that reconcile (a deliberate difference,
    // tests/deliberate-differences.json).
    annotations.insert(meta::LATEST_OBSERVED_API_VERSION.into(), "v1".into());
    annotations.insert(meta::STORAGE_OBSERVED_API_VERSION.into(), "v1".into());
    if r.vm.spec.run_strategy.as_deref() == Some("WaitAsReceiver") {
        annotations.insert(CREATE_MIGRATION_TARGET_ANNOTATION.into(), "true".into());
    }
    let vmi = serde_json::to_value(&vmi).unwrap_or_default();

    let name = r.name();
    r.push_create("virtualmachineinstances", &name, vmi);
    let ev = Event::normal(
        r.vm_ref(),
        "SuccessfulCreate",
        format!("Started the virtual machine by creating the new virtual machine instance {name}"),
    );
    r.plan.events.push(ev);
    None
}

/// Stops the VMI by deleting it (only the VMI the decision saw: the UID is a precondition), with
/// a deletion expectation raised first. Nothing to do for a VMI already being deleted.
pub(super) fn stop_vmi(
    r: &mut Reconcile<'_, '_>,
    vmi: Option<&VirtualMachineInstance>,
) -> Option<SyncError> {
    let vmi = vmi?;
    if vmi.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let uid = meta::uid(&vmi.metadata).to_string();
    r.pending.deletions += 1;
    r.plan.push_write(
        ApiWrite::new(
            "virtualmachineinstances",
            meta::namespace(&vmi.metadata),
            meta::name(&vmi.metadata),
            WriteOp::Delete {
                precondition_uid: Some(uid.clone()).filter(|u| !u.is_empty()),
            },
        )
        .expecting(Expectation::Deletions {
            key: r.key.clone(),
            objects: vec![meta::key(&vmi.metadata)],
        }),
    );
    remove_restart_required(r);
    let ev = Event::normal(
        r.vm_ref(),
        "SuccessfulDelete",
        format!("Stopped the virtual machine by deleting the virtual machine instance {uid}"),
    );
    r.plan.events.push(ev);
    None
}
