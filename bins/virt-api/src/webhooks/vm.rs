//! The VirtualMachine webhooks (KubeVirt's `VMsMutator`, `VMsAdmitter`).
//!
//! - **mutate**: the instancetype and preference matchers checked (on UPDATE a name changed
//!   without its revision name; either a name or `inferFromVolume`, not both, and a known
//!   failure policy), `inferFromVolume` resolved from the volume's labels, then the
//!   referenced preference's architecture, machine type and storage class written into the VM
//!   ([`kvrs_instancetype::vm::mutate_vm`]); on CREATE a firmware UUID and serial when the
//!   template has none (fresh random ones from the [`Context`]); the template's architecture
//!   from its DataSources' `template.kubevirt.io/architecture` label, else the cluster's, and
//!   the machine type for it; on CREATE the PCI topology annotation on a template
//!   with a PCIe topology. A VM being deleted passes untouched. The patch replaces only
//!   `/spec` and `/metadata`.
//! - **validate**: the referenced instancetype and preference applied to a copy of the
//!   template (a spread topology that does not divide the vCPUs and every field the
//!   instancetype owns refused with KubeVirt's causes), the copy defaulted and the preference's
//!   requirements checked on it; then the VM-level rules of kvrs-admission's `validate_vm` (run
//!   strategy, DataVolume templates, the template's reserved labels, hotplug limits) and the
//!   template's spec validated as KubeVirt validates it: defaulted, then checked with the VMI
//!   rules that apply to a template, causes at `spec.template.spec.…`. Both read the copy.
//!   When all that passes, the VM's `status.volumeRequests` (see [`super::status`]).
//!
//! The referenced objects come from the cluster through [`super::Lookup::Vm`]; one that does
//! not exist is ignored, as KubeVirt's webhooks ignore it (see [`super::vm_references`]).

use kvrs_admission::defaults::{
    PCI_TOPOLOGY_ANNOTATION, PCI_TOPOLOGY_VERSION, apply_defaults, machine_type_for,
    supports_pcie_hotplug,
};
use kvrs_admission::validate::{DISCONTINUED, template_spec_causes, validate_vm};
use kvrs_api::api::{Firmware, Machine};
use kvrs_api::{VirtualMachine, VirtualMachineInstance};

use kvrs_instancetype::check_requirements;
use kvrs_instancetype::vm::{mutate_vm, requirements_refusal, webhook_apply};

use super::vm_references::{
    data_source_architecture, find_instancetype, find_preference, in_request_namespace, infer,
    matcher_causes,
};
use super::{Context, Facts};
use crate::response::{
    bad_request, cause, causes_of, denied, patch_between, read_object, status_cause,
};
use crate::review::{AdmissionRequest, Operation, StatusCause, Verdict};

const RESOURCE: &str = "virtualmachines";

fn read_vm(req: &AdmissionRequest) -> Result<VirtualMachine, Verdict> {
    if !req.is_kubevirt_resource(RESOURCE) {
        return Err(bad_request(format!("expect resource to be '{RESOURCE}'")));
    }
    read_object("object", req.object.as_ref())
}

pub(super) fn mutate(req: &AdmissionRequest, ctx: &Context<'_>, facts: &Facts) -> Verdict {
    let mut vm = match read_vm(req) {
        Ok(vm) => in_request_namespace(vm, req),
        Err(v) => return v,
    };
    if vm.metadata.deletion_timestamp.is_some() {
        return Verdict::allow();
    }
    let old: Option<VirtualMachine> = match (&req.operation, &req.old_object) {
        (Operation::Update, Some(_)) => match read_object("oldObject", req.old_object.as_ref()) {
            Ok(old) => Some(old),
            Err(v) => return v,
        },
        _ => None,
    };
    let causes = matcher_causes(req, &vm, old.as_ref());
    if !causes.is_empty() {
        return denied(causes);
    }
    if let Err(message) = infer(&mut vm, facts) {
        return bad_request(message);
    }
    let preference = find_preference(&vm, facts);
    mutate_vm(&mut vm, preference.as_ref());
    let create = req.operation == Operation::Create;
    let data_source_architecture = data_source_architecture(&vm, facts);
    if let Some(spec) = vm.spec.template.spec.as_mut() {
        if create {
            let firmware = spec.domain.firmware.get_or_insert_with(Firmware::default);
            if firmware.uuid.as_deref().unwrap_or("").is_empty() {
                firmware.uuid = Some(ctx.fresh_uuids[0].clone());
            }
            if firmware.serial.as_deref().unwrap_or("").is_empty() {
                firmware.serial = Some(ctx.fresh_uuids[1].clone());
            }
        }
        if spec.architecture.as_deref().unwrap_or("").is_empty() {
            spec.architecture = Some(
                data_source_architecture
                    .clone()
                    .unwrap_or_else(|| ctx.config.architecture.clone()),
            );
        }
        let machine = spec.domain.machine.get_or_insert_with(Machine::default);
        if machine.r#type.as_deref().unwrap_or("").is_empty() {
            let arch = spec.architecture.as_deref().unwrap_or("");
            machine.r#type = Some(machine_type_for(arch, ctx.config));
        }
        if create && supports_pcie_hotplug(spec) {
            vm.spec
                .template
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .entry(PCI_TOPOLOGY_ANNOTATION.to_string())
                .or_insert_with(|| PCI_TOPOLOGY_VERSION.to_string());
        }
    }
    let admitted = match serde_json::to_value(&vm) {
        Ok(v) => v,
        Err(e) => return bad_request(e.to_string()),
    };
    let Some(original) = req.object.as_ref() else {
        return Verdict::allow();
    };
    Verdict::allow_patched(patch_between(original, &admitted, &["spec", "metadata"]))
}

pub(super) fn validate(req: &AdmissionRequest, ctx: &Context<'_>, facts: &Facts) -> Verdict {
    let vm = match read_vm(req) {
        Ok(vm) => in_request_namespace(vm, req),
        Err(v) => return v,
    };
    if vm.metadata.deletion_timestamp.is_some() {
        return Verdict::allow();
    }
    let sent = vm.clone();
    let vm = match applied_copy(&vm, ctx, facts) {
        Ok(copy) => copy,
        Err(refusal) => return refusal,
    };
    let mut causes = Vec::new();
    if let Some(spec) = vm.spec.template.spec.as_ref() {
        causes.extend(template_causes(&vm, spec.clone(), ctx));
    }
    if let Err(e) = validate_vm(&vm, ctx.config) {
        causes.extend(causes_of(&e));
    }
    if ctx.is_kubevirt(&req.user_info.username) {
        causes.retain(|c| !c.field.ends_with("template.metadata.labels"));
    }
    // Discontinued bindings are refused only on CREATE, as KubeVirt's network `ValidateCreation`.
    if req.operation != Operation::Create {
        causes.retain(|c| !c.message.ends_with(DISCONTINUED));
    }
    // KubeVirt checks the volume requests (of the VM as sent, not the applied copy) only once
    // the spec passes.
    let mut verdict = if causes.is_empty() {
        super::status::volume_requests(&sent, ctx, facts)
    } else {
        denied(causes)
    };
    if verdict.allowed && vm.spec.running.is_some() {
        verdict
            .warnings
            .push("spec.running is deprecated, please use spec.runStrategy instead.".into());
    }
    verdict
}

/// KubeVirt's first steps of `VMsAdmitter.Admit`: the referenced instancetype and preference
/// applied to a copy of the VM's template (refused with the spread or conflict causes), then
/// the preference's requirements checked on the copy's defaulted spec. The copy is what the
/// rest of the validation reads; it is never stored.
fn applied_copy(
    vm: &VirtualMachine,
    ctx: &Context<'_>,
    facts: &Facts,
) -> Result<VirtualMachine, Verdict> {
    let instancetype = find_instancetype(vm, facts);
    let preference = find_preference(vm, facts);
    let (it, pref) = (instancetype.as_ref(), preference.as_ref());
    let mut copy = vm.clone();
    match webhook_apply(vm, it, pref) {
        Ok(None) => return Ok(copy),
        Ok(Some(applied)) => {
            copy.spec.template.spec = Some(applied.spec);
            copy.spec.template.metadata = applied.metadata;
        }
        Err(refusal) => {
            let causes = refusal
                .causes
                .into_iter()
                .map(|c| cause("FieldValueInvalid", c.message, c.field))
                .collect();
            return Err(denied(causes));
        }
    }
    let mut defaulted = VirtualMachineInstance {
        spec: copy.spec.template.spec.clone().unwrap_or_default(),
        ..VirtualMachineInstance::default()
    };
    apply_defaults(&mut defaulted, ctx.config);
    if let Err(e) = check_requirements(it, pref, &defaulted.spec) {
        let causes = requirements_refusal(&e)
            .causes
            .into_iter()
            .map(|c| cause("FieldValueNotFound", c.message, c.field))
            .collect();
        return Err(denied(causes));
    }
    Ok(copy)
}

/// The template's spec as the VMI rules see it (kvrs-admission's [`template_spec_causes`]:
/// defaulted, the VMI-only causes left to the VMI's own validation, the rest moved under
/// `spec.template.spec`).
fn template_causes(
    vm: &VirtualMachine,
    spec: kvrs_api::VirtualMachineInstanceSpec,
    ctx: &Context<'_>,
) -> Vec<StatusCause> {
    template_spec_causes(vm, spec, ctx.config)
        .iter()
        .map(status_cause)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Webhook;
    use super::super::testing::{CONTROLLER, Req, patched, vm};
    use super::*;

    #[test]
    fn create_gives_firmware_ids_machine_and_topology_annotation() {
        let input = vm();
        let v = Req::create(RESOURCE, input.clone()).send(Webhook::VmMutate);
        let out = patched(&input, &v);
        let tpl = &out["spec"]["template"];
        assert_eq!(
            tpl["spec"]["domain"]["firmware"],
            json!({"uuid": "11111111-1111-4111-8111-111111111111",
                "serial": "22222222-2222-4222-8222-222222222222"})
        );
        assert_eq!(tpl["spec"]["architecture"], "amd64");
        assert_eq!(tpl["spec"]["domain"]["machine"]["type"], "q35");
        assert_eq!(
            tpl["metadata"]["annotations"]["kubevirt.io/pci-topology-version"],
            "v3"
        );
    }

    #[test]
    fn update_keeps_the_firmware_ids_and_a_deleted_vm_passes() {
        let input = vm();
        let v = Req::update(RESOURCE, input.clone(), input.clone()).send(Webhook::VmMutate);
        let out = patched(&input, &v);
        assert!(out["spec"]["template"]["spec"]["domain"]["firmware"].is_null());
        assert!(out["spec"]["template"]["metadata"]["annotations"].is_null());
        let mut deleted = vm();
        deleted["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        let v = Req::create(RESOURCE, deleted).send(Webhook::VmMutate);
        assert!(v.allowed && v.patch.is_none());
    }

    #[test]
    fn validation_refuses_the_run_strategy_kubevirt_refuses() {
        let mut both = vm();
        both["spec"]["running"] = json!(true);
        let v = Req::create(RESOURCE, both).send(Webhook::VmValidate);
        assert_eq!(
            v.message(),
            "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"
        );
        assert!(
            Req::create(RESOURCE, vm())
                .send(Webhook::VmValidate)
                .allowed
        );
    }

    #[test]
    fn spec_running_is_admitted_with_kubevirts_deprecation_warning() {
        let mut running = vm();
        running["spec"]
            .as_object_mut()
            .unwrap()
            .remove("runStrategy");
        running["spec"]["running"] = json!(false);
        let v = Req::create(RESOURCE, running).send(Webhook::VmValidate);
        assert!(v.allowed, "{}", v.message());
        assert_eq!(
            v.warnings,
            vec!["spec.running is deprecated, please use spec.runStrategy instead.".to_string()]
        );
        let plain = Req::create(RESOURCE, vm()).send(Webhook::VmValidate);
        assert!(plain.allowed && plain.warnings.is_empty());
    }

    #[test]
    fn a_discontinued_binding_is_refused_on_create_only() {
        let mut slirp = vm();
        slirp["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"] =
            json!([{"name": "default", "slirp": {}}]);
        slirp["spec"]["template"]["spec"]["networks"] = json!([{"name": "default", "pod": {}}]);
        let created = Req::create(RESOURCE, slirp.clone()).send(Webhook::VmValidate);
        assert!(!created.allowed);
        assert!(
            created
                .message()
                .ends_with("has been discontinued since v1.3"),
            "{}",
            created.message()
        );
        // A VM stored before the binding was discontinued can still be changed (KubeVirt checks
        // discontinued bindings in `ValidateCreation` only).
        let updated = Req::update(RESOURCE, slirp.clone(), slirp).send(Webhook::VmValidate);
        assert!(updated.allowed, "{}", updated.message());
    }

    #[test]
    fn the_template_spec_is_validated_at_its_path() {
        let mut ide = vm();
        ide["spec"]["template"]["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "d", "disk": {"bus": "ide"}}]);
        ide["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "d", "emptyDisk": {"capacity": "1Gi"}}]);
        let v = Req::create(RESOURCE, ide).send(Webhook::VmValidate);
        assert_eq!(v.message(), "IDE bus is not supported");
        let causes = v.status.unwrap().details.unwrap().causes;
        assert_eq!(
            causes[0].field,
            "spec.template.spec.domain.devices.disks[0].disk.bus"
        );
        // A template without memory is the VMI's problem, not the VM's (as in KubeVirt).
        let mut bare = vm();
        bare["spec"]["template"]["spec"]["domain"]
            .as_object_mut()
            .unwrap()
            .remove("resources");
        assert!(
            Req::create(RESOURCE, bare)
                .send(Webhook::VmValidate)
                .allowed
        );
    }

    #[test]
    fn reserved_template_labels_are_kubevirts_alone() {
        let mut labelled = vm();
        labelled["spec"]["template"]["metadata"]["labels"] = json!({"kubevirt.io/nodeName": "n1"});
        let v = Req::create(RESOURCE, labelled.clone()).send(Webhook::VmValidate);
        assert!(!v.allowed);
        let v = Req::create(RESOURCE, labelled).by(CONTROLLER);
        assert!(v.send(Webhook::VmValidate).allowed);
    }
}
