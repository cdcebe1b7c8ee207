//! Starting and stopping: the VMI built from the VM template, the ControllerRevision recording
//! the spec it was started from, and the deletion that stops it.

use serde_json::{Value, json};

use super::{
    CREATE_MIGRATION_TARGET_ANNOTATION, Reconcile, SyncError, VM_CONTROLLER_FINALIZER,
    VM_GENERATION_ANNOTATION, firmware, run_strategy,
};
use crate::ClusterConfig;
use crate::api::{VirtualMachine, VirtualMachineInstance, VirtualMachineSpec};
use crate::decide::{ApiWrite, Event, Expectation, WriteOp, meta};

/// `revision-start-vm-<VM UID>-<generation>`: the ControllerRevision holding the VM spec a VMI
/// was started from, compared later to tell whether the VM needs a restart to apply changes.
pub fn revision_name(vm_uid: &str, generation: i64) -> String {
    format!("revision-start-vm-{vm_uid}-{generation}")
}

fn revision_prefix(vm_uid: &str) -> String {
    format!("revision-start-vm-{vm_uid}")
}

/// The VMI a VM starts, as JSON: the template's metadata and spec, named and namespaced like the
/// VM, controlled by it, with a stable firmware UUID, a disk for every volume that has none, and
/// the default pod network when the template names no network at all.
///
/// Returns an error message when the cluster's default interface cannot be used.
pub fn vmi_from_vm(vm: &VirtualMachine, config: &ClusterConfig) -> Result<Value, String> {
    let name = meta::name(&vm.metadata);
    let template = &vm.spec.template;
    let mut metadata = serde_json::to_value(&template.metadata).unwrap_or_else(|_| json!({}));
    if !metadata.is_object() {
        metadata = json!({});
    }
    if let Value::Object(m) = &mut metadata {
        m.remove("generateName");
        m.insert("name".into(), json!(name));
        m.insert("namespace".into(), json!(meta::namespace(&vm.metadata)));
        m.insert(
            "ownerReferences".into(),
            json!([meta::controller_ref_json(
                "VirtualMachine",
                name,
                meta::uid(&vm.metadata)
            )]),
        );
    }
    let mut spec = template
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| json!({"domain": {"devices": {}}}));
    if run_strategy::has_start_paused_request(vm) {
        spec["startStrategy"] = json!("Paused");
    }
    let uuid_missing = spec
        .pointer("/domain/firmware/uuid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if uuid_missing {
        ensure_object(&mut spec, &["domain", "firmware"])["uuid"] =
            json!(firmware::legacy_firmware_uuid(name));
    }
    add_default_volume_disks(&mut spec);
    auto_attach_input_device(&mut spec);
    set_default_network_interface(&mut spec, config)?;
    Ok(json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "VirtualMachineInstance",
        "metadata": metadata,
        "spec": spec,
    }))
}

fn ensure_object<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Value {
    let mut cur = v;
    for p in path {
        if !cur.is_object() {
            *cur = json!({});
        }
        cur = cur
            .as_object_mut()
            .map(|m| m.entry(p.to_string()).or_insert_with(|| json!({})))
            .expect("made an object above");
        if !cur.is_object() {
            *cur = json!({});
        }
    }
    cur
}

/// Every volume gets a disk of the same name unless a disk or filesystem already uses it.
fn add_default_volume_disks(spec: &mut Value) {
    let names = |p: &str, spec: &Value| -> Vec<String> {
        spec.pointer(p)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| d["name"].as_str().map(String::from))
            .collect()
    };
    let mut used = names("/domain/devices/disks", spec);
    used.extend(names("/domain/devices/filesystems", spec));
    let missing: Vec<String> = names("/volumes", spec)
        .into_iter()
        .filter(|v| !used.contains(v))
        .collect();
    if missing.is_empty() {
        return;
    }
    let devices = ensure_object(spec, &["domain", "devices"]);
    let disks = devices
        .as_object_mut()
        .map(|m| m.entry("disks").or_insert_with(|| json!([])))
        .expect("devices is an object");
    if let Value::Array(a) = disks {
        a.extend(missing.into_iter().map(|n| json!({"name": n})));
    }
}

fn auto_attach_input_device(spec: &mut Value) {
    let wanted = spec
        .pointer("/domain/devices/autoattachInputDevice")
        .and_then(Value::as_bool);
    let has_inputs = spec
        .pointer("/domain/devices/inputs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if wanted == Some(true) && !has_inputs {
        ensure_object(spec, &["domain", "devices"])["inputs"] = json!([{"name": "default-0"}]);
    }
}

fn set_default_network_interface(spec: &mut Value, config: &ClusterConfig) -> Result<(), String> {
    if spec
        .pointer("/domain/devices/autoattachPodInterface")
        .and_then(Value::as_bool)
        == Some(false)
    {
        return Ok(());
    }
    let non_empty = |p: &str| {
        spec.pointer(p)
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    };
    if non_empty("/networks") || non_empty("/domain/devices/interfaces") {
        return Ok(());
    }
    let iface = match config.default_network_interface.as_str() {
        "bridge" | "" => json!({"name": "default", "bridge": {}}),
        "masquerade" => json!({"name": "default", "masquerade": {}}),
        "slirp" => return Err("slirp interface is deprecated as of v1.3".into()),
        _ => return Ok(()),
    };
    ensure_object(spec, &["domain", "devices"])["interfaces"] = json!([iface]);
    spec["networks"] = json!([{"name": "default", "pod": {}}]);
    Ok(())
}

/// Revisions in the world owned by this VM and named after its start revisions.
fn own_revisions<'a>(r: &'a Reconcile<'_, '_>) -> impl Iterator<Item = &'a Value> + 'a {
    let uid = meta::uid(&r.vm.metadata).to_string();
    let prefix = revision_prefix(&uid);
    r.w.revisions.iter().filter(move |cr| {
        let owned = cr
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|o| o["kind"] == "VirtualMachine" && o["uid"] == uid.as_str());
        let named = cr
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.contains(&prefix));
        owned && named
    })
}

fn revision_by_name<'a>(r: &'a Reconcile<'_, '_>, name: &str) -> Option<&'a Value> {
    if name.is_empty() {
        return None;
    }
    r.w.revisions.iter().find(|cr| {
        cr.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
            && cr
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                == r.ns()
    })
}

fn revision_spec(cr: &Value) -> Option<VirtualMachineSpec> {
    serde_json::from_value(cr.pointer("/data/spec")?.clone()).ok()
}

/// The VM spec of the newest start revision of this VM (what the running VMI was started from).
pub(super) fn last_revision_spec(r: &Reconcile<'_, '_>) -> Option<VirtualMachineSpec> {
    own_revisions(r)
        .filter_map(|cr| {
            let name = cr.pointer("/metadata/name")?.as_str()?;
            let generation: i64 = name.rsplit('-').next()?.parse().ok()?;
            Some((generation, cr))
        })
        .max_by_key(|(g, _)| *g)
        .and_then(|(_, cr)| revision_spec(cr))
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
    let cr = revision_by_name(r, name)?;
    cr.pointer("/metadata/name")?
        .as_str()?
        .rsplit('-')
        .next()?
        .parse()
        .ok()
}

/// Writes the VM generation onto the VMI's annotation and records it in the working copy.
pub(super) fn patch_generation_annotation(r: &mut Reconcile<'_, '_>, generation: i64) {
    let Some(vmi) = r.vmi.as_mut() else { return };
    let old = vmi.metadata.annotations.clone();
    let mut new = old.clone().unwrap_or_default();
    new.insert(VM_GENERATION_ANNOTATION.into(), generation.to_string());
    let write = ApiWrite::new(
        "virtualmachineinstances",
        meta::namespace(&vmi.metadata),
        meta::name(&vmi.metadata),
        WriteOp::Patch {
            patch_type: crate::decide::PatchType::Json,
            patch: super::annotations_patch(old.as_ref(), &new),
        },
    );
    vmi.metadata.annotations = Some(new);
    r.plan.writes.push(write);
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
    let Some(spec) = revision_by_name(r, &name).and_then(revision_spec) else {
        return;
    };
    let same = |t: &crate::api::VirtualMachineInstanceTemplateSpec| {
        meta::without_zero_values(&serde_json::to_value(t).unwrap_or_default())
    };
    if same(&spec.template) == same(&r.vm.spec.template) {
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
        if cr["revision"].as_i64() == Some(generation) {
            exists = true;
        } else if let Some(n) = cr.pointer("/metadata/name").and_then(Value::as_str) {
            stale.push(n.to_string());
        }
    }
    for n in stale {
        r.plan.writes.push(ApiWrite::new(
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
        r.plan.writes.push(ApiWrite::new(
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
    if manual_recovery || !super::data_volumes::handle_data_volumes(r) {
        return None;
    }
    remove_restart_required(r);
    let mut vmi = match vmi_from_vm(&r.vm, r.w.config) {
        Ok(v) => v,
        Err(e) => {
            return Some(SyncError::new(
                run_strategy::FAILED_CREATE,
                format!("Failure while starting VMI: {e}"),
            ));
        }
    };
    let revision = create_revision(r);
    vmi["status"] = json!({"virtualMachineRevisionName": revision});
    let md = &mut vmi["metadata"];
    let generation = r.vm.metadata.generation.unwrap_or(0).to_string();
    ensure_object(md, &["annotations"])[VM_GENERATION_ANNOTATION] = json!(generation);
    if r.vm.spec.run_strategy.as_deref() == Some("WaitAsReceiver") {
        md["annotations"][CREATE_MIGRATION_TARGET_ANNOTATION] = json!("true");
    }
    let mut finalizers = md["finalizers"].as_array().cloned().unwrap_or_default();
    finalizers.push(json!(VM_CONTROLLER_FINALIZER));
    md["finalizers"] = Value::Array(finalizers);

    let name = r.name();
    r.pending.creations += 1;
    r.plan.writes.push(
        ApiWrite::new(
            "virtualmachineinstances",
            &r.ns(),
            &name,
            WriteOp::Create { object: vmi },
        )
        .expecting(Expectation::Creations {
            key: r.key.clone(),
            count: 1,
        }),
    );
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
    r.plan.writes.push(
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
