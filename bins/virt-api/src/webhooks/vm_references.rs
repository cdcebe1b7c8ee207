//! The instancetype and preference part of the VirtualMachine webhooks (KubeVirt v1.9.0's
//! `pkg/instancetype/webhooks/vm`): what the VM webhooks read from the cluster for a VM's
//! matchers, the mutator's checks of the matchers, and the specs the matchers resolve to.
//!
//! KubeVirt's webhooks ignore a reference they cannot resolve (they log it and go on): a VM
//! naming an instancetype or preference that does not exist (yet) is admitted, and its VM
//! controller reports `FailedFindInstancetype` / `FailedFindPreference` until it appears. The
//! same holds here: a missing object is simply absent from [`Facts::objects`].

use kvrs_api::VirtualMachine;
use kvrs_api::api::{InstancetypeMatcher, PreferenceMatcher};
use kvrs_instancetype::{Catalog, InstancetypeSpec, PreferenceSpec};
use serde_json::Value;
use tracing::warn;

use super::vm_infer::{Objects, Step, infer_matchers};
use super::{Facts, Lookup};
use crate::response::cause;
use crate::review::{AdmissionRequest, Operation, StatusCause};
use crate::subresources::expand::{Reference, references};

/// The matcher fields both kinds of matcher share, as KubeVirt's `Matcher` interface sees them.
struct Matcher<'a> {
    name: &'a str,
    kind: &'a str,
    revision_name: &'a str,
    infer_from_volume: &'a str,
    failure_policy: Option<&'a str>,
    /// `instancetype` or `preference`: the VM field.
    field: &'static str,
    /// `InstancetypeMatcher` or `PreferenceMatcher`: KubeVirt's messages name the type.
    type_name: &'static str,
}

fn text(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

fn instancetype_matcher(m: &InstancetypeMatcher) -> Matcher<'_> {
    Matcher {
        name: text(&m.name),
        kind: text(&m.kind),
        revision_name: text(&m.revision_name),
        infer_from_volume: text(&m.infer_from_volume),
        failure_policy: m.infer_from_volume_failure_policy.as_deref(),
        field: "instancetype",
        type_name: "InstancetypeMatcher",
    }
}

fn preference_matcher(m: &PreferenceMatcher) -> Matcher<'_> {
    Matcher {
        name: text(&m.name),
        kind: text(&m.kind),
        revision_name: text(&m.revision_name),
        infer_from_volume: text(&m.infer_from_volume),
        failure_policy: m.infer_from_volume_failure_policy.as_deref(),
        field: "preference",
        type_name: "PreferenceMatcher",
    }
}

/// What a VM webhook reads for `req`'s VM ([`Lookup::Vm`]); `None` for a VM being deleted.
pub(super) fn lookup(req: &AdmissionRequest, preference_only: bool) -> Option<Lookup> {
    let mut vm = req.object.clone()?;
    if !vm["metadata"]["deletionTimestamp"].is_null() {
        return None;
    }
    let namespace = vm["metadata"]["namespace"].as_str().unwrap_or("");
    if namespace.is_empty() {
        vm["metadata"]["namespace"] = Value::String(req.namespace.clone().unwrap_or_default());
    }
    let vmi = if preference_only {
        None
    } else {
        super::status::vmi_to_read(&vm)
    };
    let needs_vmi = vmi.is_some();
    let lookup = Lookup::Vm {
        vm,
        preference_only,
        vmi,
    };
    (needs_vmi || !reads(&lookup, &[], &[]).is_empty()).then_some(lookup)
}

/// The objects still to read for a [`Lookup::Vm`], given those `found` among those `read`
/// so far: the objects `inferFromVolume` walks through (one step at a time: where the walk
/// goes next depends on what it found), then the instancetype, preference and
/// ControllerRevisions the matchers name once inferred. Both VM webhooks read the references
/// (the validator both, the mutator only the preference: it writes the preferred architecture,
/// machine type and storage class); the mutator also reads the DataSources its DataVolume
/// templates import from (their architecture label). The shell reads until nothing new is
/// asked for.
pub fn reads(lookup: &Lookup, found: &[Value], read: &[Reference]) -> Vec<Reference> {
    let Lookup::Vm {
        vm,
        preference_only,
        ..
    } = lookup
    else {
        return Vec::new();
    };
    let Ok(mut typed) = serde_json::from_value::<VirtualMachine>(vm.clone()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match infer_matchers(&mut typed, &Objects::so_far(found, read)) {
        Err(Step::Read(next)) => out.push(next),
        Err(Step::Failed(..)) => return Vec::new(),
        Ok(()) => {}
    }
    let mut inferred = serde_json::to_value(&typed).unwrap_or(Value::Null);
    if *preference_only
        && let Err(Step::Read(next)) =
            super::vm_architecture::from_data_sources(&inferred, &Objects::so_far(found, read))
    {
        out.push(next);
    }
    if *preference_only && let Some(spec) = inferred["spec"].as_object_mut() {
        spec.remove("instancetype");
    }
    out.extend(references(&inferred));
    out.retain(|r| !read.contains(r));
    out
}

/// KubeVirt's `infer` step of the mutator over the objects read (see [`super::vm_infer`]): the
/// error is the 400's message.
pub(super) fn infer(vm: &mut VirtualMachine, facts: &Facts) -> Result<(), String> {
    match infer_matchers(vm, &Objects::all(&facts.objects)) {
        Ok(()) => Ok(()),
        Err(Step::Failed(message, _)) => Err(message),
        Err(Step::Read(r)) => Err(format!("{} {:?} was not read", r.kind, r.name)),
    }
}

/// The architecture the VM's DataSources give ([`super::vm_architecture`]), over the objects
/// read.
pub(super) fn data_source_architecture(vm: &VirtualMachine, facts: &Facts) -> Option<String> {
    let value = serde_json::to_value(vm).ok()?;
    super::vm_architecture::from_data_sources(&value, &Objects::all(&facts.objects))
        .ok()
        .flatten()
}

/// The VM as the API server stores it: the request's namespace when the object names none.
pub(super) fn in_request_namespace(
    mut vm: VirtualMachine,
    req: &AdmissionRequest,
) -> VirtualMachine {
    if vm.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        vm.metadata.namespace = req.namespace.clone().filter(|n| !n.is_empty());
    }
    vm
}

fn catalog(facts: &Facts, key: &str) -> Catalog {
    let mut catalog = Catalog::default();
    for object in &facts.objects {
        if let Err(e) = catalog.add(object.clone()) {
            warn!(vm = %key, error = %e, "ignoring a referenced object that does not parse");
        }
    }
    catalog
}

fn key(vm: &VirtualMachine) -> String {
    format!(
        "{}/{}",
        text(&vm.metadata.namespace),
        text(&vm.metadata.name)
    )
}

/// The instancetype spec `vm` references, from the facts; `None` when it references none or
/// it cannot be found (ignored, as KubeVirt's webhooks ignore it).
pub(super) fn find_instancetype(vm: &VirtualMachine, facts: &Facts) -> Option<InstancetypeSpec> {
    let key = key(vm);
    catalog(facts, &key)
        .find_instancetype(vm)
        .inspect_err(
            |e| warn!(vm = %key, error = %e, "ignoring err when looking for instance type"),
        )
        .ok()
        .flatten()
}

/// The preference spec `vm` references (see [`find_instancetype`]).
pub(super) fn find_preference(vm: &VirtualMachine, facts: &Facts) -> Option<PreferenceSpec> {
    let key = key(vm);
    catalog(facts, &key)
        .find_preference(vm)
        .inspect_err(|e| warn!(vm = %key, error = %e, "ignoring err when looking for preference"))
        .ok()
        .flatten()
}

/// The mutator's checks of the matchers (KubeVirt's `validateMatchers`): on UPDATE a name
/// changed without its revision name, then each matcher's own fields. Each group refuses on
/// its own, in KubeVirt's order.
pub(super) fn matcher_causes(
    req: &AdmissionRequest,
    vm: &VirtualMachine,
    old: Option<&VirtualMachine>,
) -> Vec<StatusCause> {
    if req.operation == Operation::Update
        && let Some(old) = old
    {
        let pairs = [
            (
                vm.spec.instancetype.as_ref().map(instancetype_matcher),
                old.spec.instancetype.as_ref().map(instancetype_matcher),
            ),
            (
                vm.spec.preference.as_ref().map(preference_matcher),
                old.spec.preference.as_ref().map(preference_matcher),
            ),
        ];
        for (new, old) in pairs {
            if let (Some(new), Some(old)) = (new, old)
                && let Some(c) = matcher_update_cause(&new, &old)
            {
                return vec![c];
            }
        }
    }
    let matchers = [
        vm.spec.instancetype.as_ref().map(instancetype_matcher),
        vm.spec.preference.as_ref().map(preference_matcher),
    ];
    for m in matchers.into_iter().flatten() {
        let causes = matcher_fields_causes(&m);
        if !causes.is_empty() {
            return causes;
        }
    }
    Vec::new()
}

/// KubeVirt's `validateMatcherUpdate`, called (as KubeVirt calls it) with the new VM's matcher
/// in the place of the old one: nothing to check when it has no revision name; else a changed
/// matcher whose name changed while the revision name did not is refused.
fn matcher_update_cause(new: &Matcher<'_>, old: &Matcher<'_>) -> Option<StatusCause> {
    if new.revision_name.is_empty() {
        return None;
    }
    let same = new.name == old.name
        && new.kind == old.kind
        && new.revision_name == old.revision_name
        && new.infer_from_volume == old.infer_from_volume
        && new.failure_policy == old.failure_policy;
    if !same && new.name != old.name && new.revision_name == old.revision_name {
        return Some(cause(
            "FieldValueInvalid",
            "the Matcher Name has been updated without updating the RevisionName",
            format!("spec.{}.revisionName", new.field),
        ));
    }
    None
}

/// KubeVirt's `validateInstancetypeMatcher` / `validatePreferenceMatcher`.
fn matcher_fields_causes(m: &Matcher<'_>) -> Vec<StatusCause> {
    let field = m.field;
    let mut causes = Vec::new();
    if m.name.is_empty() && m.infer_from_volume.is_empty() {
        causes.push(cause(
            "FieldValueNotFound",
            format!(
                "Either Name or InferFromVolume should be provided within the {}",
                m.type_name
            ),
            format!("spec.{field}"),
        ));
    }
    if !m.infer_from_volume.is_empty() {
        if !m.name.is_empty() {
            causes.push(cause(
                "FieldValueNotSupported",
                "Name already set, should be cleared before setting inferFromVolume",
                format!("spec.{field}.name"),
            ));
        }
        if !m.kind.is_empty() {
            causes.push(cause(
                "FieldValueNotSupported",
                "Kind already set, should be cleared before setting inferFromVolume",
                format!("spec.{field}.kind"),
            ));
        }
    }
    if let Some(policy) = m.failure_policy
        && policy != "Ignore"
        && policy != "Reject"
    {
        causes.push(cause(
            "FieldValueInvalid",
            format!("Invalid value '{policy}' for InferFromVolumeFailurePolicy"),
            format!("spec.{field}.inferFromVolumeFailurePolicy"),
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Webhook;
    use super::super::testing::{Req, patched, vm};
    use super::*;

    const RESOURCE: &str = "virtualmachines";

    fn facts(objects: Vec<Value>) -> Facts {
        Facts {
            objects,
            ..Facts::default()
        }
    }

    fn small() -> Value {
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "small"},
            "spec": {"cpu": {"guest": 1}, "memory": {"guest": "256Mi"}}})
    }

    fn preference(spec: Value) -> Value {
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachinePreference",
            "metadata": {"name": "pref", "namespace": "default"}, "spec": spec})
    }

    /// The test VM without its own size, referencing `small` and `pref`.
    fn referencing() -> Value {
        let mut v = vm();
        v["spec"]["template"]["spec"]["domain"]
            .as_object_mut()
            .unwrap()
            .remove("resources");
        v["spec"]["instancetype"] = json!({"name": "small"});
        v["spec"]["preference"] = json!({"name": "pref", "kind": "VirtualMachinePreference"});
        v
    }

    fn first_cause(v: &crate::review::Verdict) -> (String, String) {
        let c = &v.status.as_ref().unwrap().details.as_ref().unwrap().causes[0];
        (c.field.clone(), c.message.clone())
    }

    #[test]
    fn the_lookups_name_the_references_the_webhook_reads() {
        let req = Req::create(RESOURCE, referencing()).request();
        let validator = super::super::lookup(Webhook::VmValidate, &req).expect("a lookup");
        let plurals: Vec<&str> = reads(&validator, &[], &[])
            .iter()
            .map(|r| r.plural)
            .collect();
        assert_eq!(
            plurals,
            [
                "virtualmachineclusterinstancetypes",
                "virtualmachinepreferences"
            ]
        );
        let mutator = super::super::lookup(Webhook::VmMutate, &req).expect("a lookup");
        let wanted = reads(&mutator, &[], &[]);
        assert_eq!(wanted.len(), 1);
        assert_eq!(wanted[0].namespace.as_deref(), Some("default"));
        // Once read (found or not), nothing more is asked for.
        assert!(reads(&mutator, &[], &wanted).is_empty());
        let plain = Req::create(RESOURCE, vm()).request();
        assert_eq!(super::super::lookup(Webhook::VmValidate, &plain), None);
    }

    /// A VM inferring its preference from volume `root` of `source`.
    fn inferring(source: Value) -> Value {
        let mut v = vm();
        v["spec"]["template"]["spec"]["volumes"] = json!([{"name": "root"}]);
        for (k, val) in source.as_object().unwrap() {
            v["spec"]["template"]["spec"]["volumes"][0][k] = val.clone();
        }
        v["spec"]["preference"] = json!({"inferFromVolume": "root"});
        v
    }

    fn labelled(kind: &str, name: &str, labels: Value, spec: Value) -> Value {
        json!({"kind": kind, "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": spec})
    }

    #[test]
    fn inference_walks_the_chain_one_read_at_a_time() {
        let v = inferring(json!({"dataVolume": {"name": "dv"}}));
        let req = Req::create(RESOURCE, v.clone()).request();
        let lookup = super::super::lookup(Webhook::VmMutate, &req).expect("a lookup");
        // The DataVolume first; it points at a DataSource, whose labels name the preference.
        let first = reads(&lookup, &[], &[]);
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].kind, first[0].name.as_str()),
            ("DataVolume", "dv")
        );
        let dv = labelled(
            "DataVolume",
            "dv",
            json!({}),
            json!({"sourceRef": {"kind": "DataSource", "name": "fedora"}}),
        );
        let ds = labelled(
            "DataSource",
            "fedora",
            json!({"instancetype.kubevirt.io/default-preference": "fedora-pref",
                "instancetype.kubevirt.io/default-preference-kind": "VirtualMachinePreference"}),
            json!({}),
        );
        let second = reads(&lookup, std::slice::from_ref(&dv), &first);
        assert_eq!(
            (second[0].kind, second[0].name.as_str()),
            ("DataSource", "fedora")
        );
        let read: Vec<Reference> = first.iter().chain(&second).cloned().collect();
        let found = [dv, ds];
        let third = reads(&lookup, &found, &read);
        assert_eq!(
            (third[0].kind, third[0].name.as_str()),
            ("VirtualMachinePreference", "fedora-pref")
        );
        let out =
            Req::create(RESOURCE, v.clone()).send_with(Webhook::VmMutate, &facts(found.to_vec()));
        assert_eq!(
            patched(&v, &out)["spec"]["preference"],
            json!({"name": "fedora-pref", "kind": "VirtualMachinePreference"})
        );
    }

    #[test]
    fn the_mutator_takes_the_architecture_of_a_data_source() {
        let mut v = vm();
        v["spec"]["dataVolumeTemplates"] = json!([{"metadata": {"name": "dv"},
            "spec": {"sourceRef": {"kind": "DataSource", "name": "img"}}}]);
        let req = Req::create(RESOURCE, v.clone()).request();
        let lookup = super::super::lookup(Webhook::VmMutate, &req).expect("a lookup");
        let wanted = reads(&lookup, &[], &[]);
        assert_eq!(
            (wanted[0].kind, wanted[0].name.as_str()),
            ("DataSource", "img")
        );
        let ds = labelled(
            "DataSource",
            "img",
            json!({"template.kubevirt.io/architecture": "arm64"}),
            json!({}),
        );
        let out = Req::create(RESOURCE, v.clone()).send_with(Webhook::VmMutate, &facts(vec![ds]));
        let spec = &patched(&v, &out)["spec"]["template"]["spec"];
        assert_eq!(spec["architecture"], "arm64");
        assert_eq!(spec["domain"]["machine"]["type"], "virt");
    }

    #[test]
    fn inference_from_a_claim_and_its_failures() {
        let v = inferring(json!({"persistentVolumeClaim": {"claimName": "disk"}}));
        let out = Req::create(RESOURCE, v.clone()).send_with(Webhook::VmMutate, &facts(vec![]));
        assert_eq!(out.status.as_ref().unwrap().code, 400);
        assert_eq!(out.message(), "persistentvolumeclaims \"disk\" not found");
        let unlabelled = labelled("PersistentVolumeClaim", "disk", json!({}), json!({}));
        let out = Req::create(RESOURCE, v.clone())
            .send_with(Webhook::VmMutate, &facts(vec![unlabelled.clone()]));
        assert_eq!(
            out.message(),
            "unable to find required instancetype.kubevirt.io/default-preference label on the volume"
        );
        let mut ignoring = v.clone();
        ignoring["spec"]["preference"]["inferFromVolumeFailurePolicy"] = json!("Ignore");
        let out = Req::create(RESOURCE, ignoring.clone())
            .send_with(Webhook::VmMutate, &facts(vec![unlabelled]));
        assert!(patched(&ignoring, &out)["spec"].get("preference").is_none());
        let claim = labelled(
            "PersistentVolumeClaim",
            "disk",
            json!({"instancetype.kubevirt.io/default-preference": "p"}),
            json!({}),
        );
        let out =
            Req::create(RESOURCE, v.clone()).send_with(Webhook::VmMutate, &facts(vec![claim]));
        assert_eq!(
            patched(&v, &out)["spec"]["preference"],
            json!({"name": "p"})
        );
    }

    #[test]
    fn references_that_resolve_are_admitted() {
        let f = facts(vec![
            small(),
            preference(json!({"cpu": {"preferredCPUTopology": "cores"}})),
        ]);
        let v = Req::create(RESOURCE, referencing()).send_with(Webhook::VmValidate, &f);
        assert!(v.allowed, "{:?}", v.status);
    }

    #[test]
    fn missing_references_are_ignored_as_kubevirt_ignores_them() {
        let v = Req::create(RESOURCE, referencing()).send_with(Webhook::VmValidate, &facts(vec![]));
        assert!(v.allowed, "{:?}", v.status);
        let v = Req::create(RESOURCE, referencing()).send_with(Webhook::VmMutate, &facts(vec![]));
        assert!(v.allowed);
    }

    #[test]
    fn a_template_field_the_instancetype_owns_is_refused() {
        let mut sized = referencing();
        sized["spec"]["template"]["spec"]["domain"]["cpu"] = json!({"sockets": 2});
        sized["spec"]["template"]["spec"]["domain"]["memory"] = json!({"guest": "1Gi"});
        let v = Req::create(RESOURCE, sized).send_with(Webhook::VmValidate, &facts(vec![small()]));
        assert!(!v.allowed);
        let causes = &v.status.as_ref().unwrap().details.as_ref().unwrap().causes;
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.domain.cpu.sockets",
                "spec.template.spec.domain.memory.guest"
            ]
        );
        assert_eq!(causes[0].kind, "FieldValueInvalid");
        assert_eq!(
            causes[0].message,
            "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type"
        );
    }

    #[test]
    fn an_unmet_preference_requirement_is_refused() {
        let needy = preference(json!({"requirements": {"cpu": {"guest": 2}}}));
        let v = Req::create(RESOURCE, referencing())
            .send_with(Webhook::VmValidate, &facts(vec![small(), needy]));
        assert_eq!(
            first_cause(&v),
            (
                "spec.instancetype".to_string(),
                "failure checking preference requirements: insufficient CPU resources of 1 vCPU \
                 provided by instance type, preference requires 2 vCPU"
                    .to_string()
            )
        );
        assert_eq!(
            v.status.unwrap().details.unwrap().causes[0].kind,
            "FieldValueNotFound"
        );
    }

    #[test]
    fn a_spread_that_does_not_divide_the_vcpus_is_refused() {
        let spread = preference(json!({"cpu": {"preferredCPUTopology": "spread"}}));
        let v = Req::create(RESOURCE, referencing())
            .send_with(Webhook::VmValidate, &facts(vec![small(), spread]));
        let (field, message) = first_cause(&v);
        assert_eq!(field, "instancetype.spec.cpu.guest");
        assert!(message.starts_with("1 vCPUs provided by the instance type are not divisible"));
    }

    #[test]
    fn the_applied_template_is_validated_with_the_vmi_rules() {
        let ide = preference(json!({"devices": {"preferredDiskBus": "ide"}}));
        let mut with_disk = referencing();
        with_disk["spec"]["template"]["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "d"}]);
        with_disk["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "d", "emptyDisk": {"capacity": "1Gi"}}]);
        let v = Req::create(RESOURCE, with_disk)
            .send_with(Webhook::VmValidate, &facts(vec![small(), ide]));
        assert_eq!(
            first_cause(&v),
            (
                "spec.template.spec.domain.devices.disks[0].disk.bus".to_string(),
                "IDE bus is not supported".to_string()
            )
        );
    }

    #[test]
    fn the_mutator_writes_the_preferred_machine_type_and_storage_class() {
        let pref = preference(json!({"machine": {"preferredMachineType": "pc-q35-9.0"},
            "volumes": {"preferredStorageClassName": "fast"}}));
        let mut input = referencing();
        input["spec"]["dataVolumeTemplates"] = json!([{"metadata": {"name": "dv"},
            "spec": {"storage": {"resources": {"requests": {"storage": "1Gi"}}}}}]);
        let v =
            Req::create(RESOURCE, input.clone()).send_with(Webhook::VmMutate, &facts(vec![pref]));
        let out = patched(&input, &v);
        assert_eq!(
            out["spec"]["template"]["spec"]["domain"]["machine"]["type"],
            "pc-q35-9.0"
        );
        assert_eq!(
            out["spec"]["dataVolumeTemplates"][0]["spec"]["storage"]["storageClassName"],
            "fast"
        );
    }

    #[test]
    fn the_mutator_checks_the_matchers() {
        let send = |it: Value| {
            let mut v = vm();
            v["spec"]["instancetype"] = it;
            Req::create(RESOURCE, v).send(Webhook::VmMutate)
        };
        let v = send(json!({"kind": "VirtualMachineInstancetype"}));
        assert_eq!(
            first_cause(&v),
            (
                "spec.instancetype".to_string(),
                "Either Name or InferFromVolume should be provided within the InstancetypeMatcher"
                    .to_string()
            )
        );
        let v = send(json!({"name": "a", "kind": "k", "inferFromVolume": "root"}));
        let causes = v.status.unwrap().details.unwrap().causes;
        assert_eq!(
            causes.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["spec.instancetype.name", "spec.instancetype.kind"]
        );
        assert_eq!(
            causes[0].message,
            "Name already set, should be cleared before setting inferFromVolume"
        );
        let v = send(json!({"name": "a", "inferFromVolumeFailurePolicy": "Maybe"}));
        assert_eq!(
            first_cause(&v),
            (
                "spec.instancetype.inferFromVolumeFailurePolicy".to_string(),
                "Invalid value 'Maybe' for InferFromVolumeFailurePolicy".to_string()
            )
        );
    }

    #[test]
    fn an_update_may_not_rename_a_matcher_and_keep_its_revision() {
        let mut old = vm();
        old["spec"]["preference"] = json!({"name": "a", "revisionName": "vm-a-1"});
        let mut new = old.clone();
        new["spec"]["preference"]["name"] = json!("b");
        let v = Req::update(RESOURCE, old.clone(), new).send(Webhook::VmMutate);
        assert_eq!(
            first_cause(&v),
            (
                "spec.preference.revisionName".to_string(),
                "the Matcher Name has been updated without updating the RevisionName".to_string()
            )
        );
        let mut cleared = old.clone();
        cleared["spec"]["preference"] = json!({"name": "b"});
        assert!(
            Req::update(RESOURCE, old, cleared)
                .send(Webhook::VmMutate)
                .allowed
        );
    }

    #[test]
    fn inference_needs_the_volume_and_a_supported_type() {
        let mut v = vm();
        v["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "root", "containerDisk": {"image": "x"}}]);
        v["spec"]["preference"] = json!({"inferFromVolume": "missing"});
        let out = Req::create(RESOURCE, v.clone()).send(Webhook::VmMutate);
        assert_eq!(out.status.as_ref().unwrap().code, 400);
        assert_eq!(
            out.message(),
            "unable to find volume missing to infer defaults"
        );
        v["spec"]["preference"] = json!({"inferFromVolume": "root"});
        let out = Req::create(RESOURCE, v.clone()).send(Webhook::VmMutate);
        assert_eq!(
            out.message(),
            "unable to infer defaults from volume root as type is not supported"
        );
        v["spec"]["preference"]["inferFromVolumeFailurePolicy"] = json!("Ignore");
        let out = Req::create(RESOURCE, v.clone()).send(Webhook::VmMutate);
        assert!(patched(&v, &out)["spec"].get("preference").is_none());
    }
}
