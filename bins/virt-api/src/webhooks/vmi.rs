//! The VirtualMachineInstance webhooks (KubeVirt's `VMIsMutator`, `VMICreateAdmitter`,
//! `VMIUpdateAdmitter`).
//!
//! - **mutate, CREATE**: kvrs-admission's defaulting ([`default_created`]): every default, the
//!   PCI topology annotation, the non-root runtime user, the foreground-delete finalizer, phase
//!   `Pending` and its transition stamped with the webhook's clock. The patch replaces only
//!   `/spec`, `/metadata` and `/status`, as KubeVirt's. VMI presets (deprecated) are not applied.
//! - **mutate, UPDATE**: a status change by anyone but KubeVirt's service accounts is reverted.
//! - **validate, CREATE**: kvrs-admission's validation; KubeVirt's service accounts may set the
//!   reserved `kubevirt.io/` labels.
//! - **validate, UPDATE**: node restriction for virt-handler (gate `NodeRestriction`); the spec
//!   is frozen for everyone but KubeVirt's service accounts, which may change it only as
//!   hotplug does (`maxSockets` and `maxGuest` stay; volumes and disks as KubeVirt's storage
//!   hotplug admitter allows, `kvrs_admission::validate::admit_hotplug_storage`); reserved
//!   labels may not change.

use kvrs_admission::default_created;
use kvrs_admission::validate::{CauseKind, RESERVED_LABELS, gate_enabled, validate};
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::VirtualMachineInstanceStatus;

use super::Context;
use crate::response::{bad_request, causes_of, denied, patch_between, read_object};
use crate::review::{AdmissionRequest, Operation, StatusCause, Verdict};

const RESOURCE: &str = "virtualmachineinstances";
/// The user-info key a node-bound service-account token carries its node in.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

fn wrong_resource() -> Verdict {
    bad_request(format!("expect resource to be '{RESOURCE}'"))
}

pub(super) fn mutate(req: &AdmissionRequest, ctx: &Context<'_>) -> Verdict {
    if !req.is_kubevirt_resource(RESOURCE) {
        return wrong_resource();
    }
    match req.operation {
        Operation::Create => mutate_create(req, ctx).unwrap_or_else(|v| v),
        Operation::Update => mutate_update(req, ctx).unwrap_or_else(|v| v),
        Operation::Delete | Operation::Connect => Verdict::allow(),
    }
}

fn mutate_create(req: &AdmissionRequest, ctx: &Context<'_>) -> Result<Verdict, Verdict> {
    let mut vmi: VirtualMachineInstance = read_object("object", req.object.as_ref())?;
    // The API server put the request's namespace into the object; a hand-made review may not.
    if vmi.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        vmi.metadata.namespace = req.namespace.clone().filter(|n| !n.is_empty());
    }
    let admitted = default_created(vmi, ctx.config, ctx.now);
    let admitted = serde_json::to_value(&admitted).map_err(|e| bad_request(e.to_string()))?;
    let original = req.object.as_ref().ok_or_else(wrong_resource)?;
    Ok(Verdict::allow_patched(patch_between(
        original,
        &admitted,
        &["spec", "metadata", "status"],
    )))
}

fn mutate_update(req: &AdmissionRequest, ctx: &Context<'_>) -> Result<Verdict, Verdict> {
    let new: VirtualMachineInstance = read_object("object", req.object.as_ref())?;
    let old: VirtualMachineInstance = read_object("oldObject", req.old_object.as_ref())?;
    if status_of(&new) == status_of(&old) || ctx.is_kubevirt(&req.user_info.username) {
        return Ok(Verdict::allow());
    }
    let (Some(object), Some(old_object)) = (&req.object, &req.old_object) else {
        return Ok(Verdict::allow());
    };
    Ok(Verdict::allow_patched(patch_between(
        object,
        old_object,
        &["status"],
    )))
}

/// Go's value semantics: an absent status is the empty one.
fn status_of(vmi: &VirtualMachineInstance) -> VirtualMachineInstanceStatus {
    vmi.status.clone().unwrap_or_default()
}

pub(super) fn validate_create(req: &AdmissionRequest, ctx: &Context<'_>) -> Verdict {
    if !req.is_kubevirt_resource(RESOURCE) {
        return wrong_resource();
    }
    let vmi: VirtualMachineInstance = match read_object("object", req.object.as_ref()) {
        Ok(vmi) => vmi,
        Err(v) => return v,
    };
    let mut causes = validate(&vmi, ctx.config)
        .err()
        .map(|e| causes_of(&e))
        .unwrap_or_default();
    if ctx.is_kubevirt(&req.user_info.username) {
        causes.retain(|c| !is_reserved_label_cause(c));
    }
    denied(causes)
}

/// kvrs-admission's cause for reserved labels on a new VMI, which KubeVirt's own service
/// accounts may set.
fn is_reserved_label_cause(c: &StatusCause) -> bool {
    c.kind == CauseKind::NotSupported.as_str() && c.field.ends_with("metadata.labels")
}

pub(super) fn validate_update(req: &AdmissionRequest, ctx: &Context<'_>) -> Verdict {
    if !req.is_kubevirt_resource(RESOURCE) {
        return wrong_resource();
    }
    let read = || -> Result<(VirtualMachineInstance, VirtualMachineInstance), Verdict> {
        Ok((
            read_object("object", req.object.as_ref())?,
            read_object("oldObject", req.old_object.as_ref())?,
        ))
    };
    let (new, old) = match read() {
        Ok(pair) => pair,
        Err(v) => return v,
    };
    let user = req.user_info.username.as_str();
    if gate_enabled(ctx.config, "NodeRestriction")
        && user == ctx.handler_account
        && ctx.is_kubevirt(user)
        && let Some(refusal) = node_restriction(req, &new, &old)
    {
        return denied(vec![refusal]);
    }
    let kubevirt = ctx.is_kubevirt(user);
    if new.spec != old.spec {
        if !kubevirt {
            return denied(vec![not_supported("update of VMI object is restricted")]);
        }
        if let Some(refusal) = hotplug(&old, &new) {
            return denied(vec![refusal]);
        }
        if let Some(message) =
            kvrs_admission::validate::admit_hotplug_storage(&old, &new, ctx.config)
        {
            return denied(vec![invalid(&message)]);
        }
    }
    if !kubevirt && reserved_labels(&new) != reserved_labels(&old) {
        return denied(vec![not_supported(
            "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
        )]);
    }
    Verdict::allow()
}

fn not_supported(message: &str) -> StatusCause {
    crate::response::cause(CauseKind::NotSupported.as_str(), message, "")
}

fn invalid(message: &str) -> StatusCause {
    crate::response::cause(CauseKind::Invalid.as_str(), message, "")
}

/// virt-handler may change only the VMIs of its node (source, or target of a migration), and
/// never name a migration's target itself.
fn node_restriction(
    req: &AdmissionRequest,
    new: &VirtualMachineInstance,
    old: &VirtualMachineInstance,
) -> Option<StatusCause> {
    let Some(node) = req
        .user_info
        .extra
        .get(NODE_NAME_EXTRA)
        .and_then(|v| v.first())
    else {
        return Some(invalid(
            "Node restriction failed, virt-handler service account is missing node name",
        ));
    };
    let old_status = status_of(old);
    let source = old_status.node_name.clone().unwrap_or_default();
    let target = old_status
        .migration_state
        .as_ref()
        .and_then(|m| m.target_node.clone())
        .unwrap_or_default();
    if *node != source && (target.is_empty() || *node != target) {
        return Some(invalid(
            "Node restriction, virt-handler is only allowed to modify VMIs it owns",
        ));
    }
    let new_target = status_of(new)
        .migration_state
        .and_then(|m| m.target_node)
        .unwrap_or_default();
    let sets_target = new
        .status
        .as_ref()
        .is_some_and(|s| s.migration_state.is_some());
    if target.is_empty() && sets_target && new_target != target {
        return Some(invalid(
            "Node restriction, virt-handler is not allowed to set target node",
        ));
    }
    None
}

/// The changes hotplug may not make: the CPU's `maxSockets`, the memory's `maxGuest`.
fn hotplug(old: &VirtualMachineInstance, new: &VirtualMachineInstance) -> Option<StatusCause> {
    let max_sockets = |v: &VirtualMachineInstance| {
        v.spec
            .domain
            .cpu
            .as_ref()
            .and_then(|c| c.max_sockets)
            .unwrap_or(0)
    };
    if max_sockets(old) != max_sockets(new) {
        return Some(invalid("CPU topology maxSockets changed"));
    }
    let max_guest = |v: &VirtualMachineInstance| {
        v.spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.max_guest.as_ref())
            .map(|q| q.value().ok())
    };
    if let (Some(a), Some(b)) = (max_guest(old), max_guest(new))
        && a != b
    {
        return Some(invalid("Memory maxGuest changed"));
    }
    None
}

/// The reserved labels a VMI carries, with their values.
fn reserved_labels(vmi: &VirtualMachineInstance) -> Vec<(String, String)> {
    vmi.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| RESERVED_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::Webhook;
    use super::super::testing::{CONTROLLER, HANDLER, Req, patched, vmi};
    use super::*;

    #[test]
    fn create_defaults_the_vmi_and_stamps_pending() {
        let input = vmi();
        let v = Req::create(RESOURCE, input.clone()).send(Webhook::VmiMutate);
        assert!(v.allowed);
        let out = patched(&input, &v);
        assert_eq!(out["status"]["phase"], "Pending");
        assert_eq!(
            out["status"]["phaseTransitionTimestamps"],
            json!([{"phase": "Pending", "phaseTransitionTimestamp": "2023-11-14T22:13:20Z"}])
        );
        assert_eq!(out["status"]["runtimeUser"], 107);
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["kubevirt.io/foregroundDeleteVirtualMachine"])
        );
        assert_eq!(out["spec"]["domain"]["machine"]["type"], "q35");
        assert_eq!(
            out["apiVersion"], input["apiVersion"],
            "only spec, metadata, status"
        );
    }

    #[test]
    fn create_takes_the_namespace_of_the_request() {
        let mut input = vmi();
        input["metadata"]["namespace"] = json!("");
        let v = Req::create(RESOURCE, input.clone())
            .namespace("team-a")
            .send(Webhook::VmiMutate);
        assert_eq!(patched(&input, &v)["metadata"]["namespace"], "team-a");
    }

    #[test]
    fn a_wrong_resource_or_unreadable_object_is_a_bad_request() {
        let v = Req::create("virtualmachines", vmi()).send(Webhook::VmiMutate);
        assert_eq!(
            v.message(),
            "expect resource to be 'virtualmachineinstances'"
        );
        let mut bad = vmi();
        bad["spec"]["domain"]["cpu"] = json!({"sockets": "x"});
        let v = Req::create(RESOURCE, bad).send(Webhook::VmiValidateCreate);
        assert_eq!(v.status.as_ref().unwrap().code, 400);
        assert!(
            v.message().contains("spec.domain.cpu.sockets"),
            "{}",
            v.message()
        );
    }

    #[test]
    fn a_status_change_by_a_user_is_reverted_and_kubevirts_is_kept() {
        let old = json!({"status": {"phase": "Running"}, "spec": {"domain": {"devices": {}}},
            "metadata": {"name": "a", "namespace": "default"}});
        let mut new = old.clone();
        new["status"]["phase"] = json!("Failed");
        let v = Req::update(RESOURCE, old.clone(), new.clone()).send(Webhook::VmiMutate);
        assert_eq!(patched(&new, &v)["status"], old["status"]);
        let v = Req::update(RESOURCE, old, new.clone())
            .by(HANDLER)
            .send(Webhook::VmiMutate);
        assert!(v.patch.is_none());
    }

    fn defaulted() -> Value {
        let input = vmi();
        let v = Req::create(RESOURCE, input.clone()).send(Webhook::VmiMutate);
        patched(&input, &v)
    }

    #[test]
    fn validation_refuses_with_kubevirts_message_and_code() {
        let mut bad = defaulted();
        bad["spec"]["domain"]["devices"]["disks"] = json!([{"name": "d", "disk": {"bus": "ide"}}]);
        bad["spec"]["volumes"] = json!([{"name": "d", "emptyDisk": {"capacity": "1Gi"}}]);
        let v = Req::create(RESOURCE, bad).send(Webhook::VmiValidateCreate);
        assert!(!v.allowed);
        let status = v.status.unwrap();
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        assert_eq!(status.message, "IDE bus is not supported");
        let cause = &status.details.unwrap().causes[0];
        assert_eq!(cause.field, "spec.domain.devices.disks[0].disk.bus");
        assert!(
            Req::create(RESOURCE, defaulted())
                .send(Webhook::VmiValidateCreate)
                .allowed
        );
    }

    #[test]
    fn reserved_labels_on_create_are_kubevirts_alone() {
        let mut labelled = defaulted();
        labelled["metadata"]["labels"] = json!({"kubevirt.io/nodeName": "n1"});
        let v = Req::create(RESOURCE, labelled.clone()).send(Webhook::VmiValidateCreate);
        assert_eq!(
            v.message(),
            "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited"
        );
        let v = Req::create(RESOURCE, labelled)
            .by(CONTROLLER)
            .send(Webhook::VmiValidateCreate);
        assert!(v.allowed, "{}", v.message());
    }

    #[test]
    fn a_spec_update_is_refused_to_users() {
        let old = defaulted();
        let mut new = old.clone();
        new["spec"]["domain"]["cpu"]["cores"] = json!(4);
        let v = Req::update(RESOURCE, old.clone(), new.clone()).send(Webhook::VmiValidateUpdate);
        assert_eq!(v.message(), "update of VMI object is restricted");
        assert_eq!(
            v.status.unwrap().details.unwrap().causes[0].kind,
            "FieldValueNotSupported"
        );
        // Metadata and status are not the spec.
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"] = json!({"team": "a"});
        assert!(
            Req::update(RESOURCE, old.clone(), relabelled)
                .send(Webhook::VmiValidateUpdate)
                .allowed
        );
        // KubeVirt's controller may change it (hotplug) ...
        let v = Req::update(RESOURCE, old.clone(), new).by(CONTROLLER);
        assert!(v.send(Webhook::VmiValidateUpdate).allowed);
        // ... but not maxSockets or maxGuest.
        let mut sockets = old.clone();
        sockets["spec"]["domain"]["cpu"]["maxSockets"] = json!(64);
        let v = Req::update(RESOURCE, old.clone(), sockets).by(CONTROLLER);
        assert_eq!(
            v.send(Webhook::VmiValidateUpdate).message(),
            "CPU topology maxSockets changed"
        );
        let mut old = old;
        old["spec"]["domain"]["memory"]["maxGuest"] = json!("1Gi");
        let mut guest = old.clone();
        guest["spec"]["domain"]["memory"]["maxGuest"] = json!("2Gi");
        let v = Req::update(RESOURCE, old, guest).by(CONTROLLER);
        assert_eq!(
            v.send(Webhook::VmiValidateUpdate).message(),
            "Memory maxGuest changed"
        );
    }

    #[test]
    fn hotplug_volumes_are_admitted_as_kubevirts_storage_admitter_does() {
        let old = defaulted();
        let mut new = old.clone();
        new["spec"]["volumes"] = json!([{"name": "data",
            "persistentVolumeClaim": {"claimName": "c1", "hotpluggable": true}}]);
        new["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "data", "serial": "data", "disk": {"bus": "scsi"}}]);
        let v = Req::update(RESOURCE, old.clone(), new.clone()).by(CONTROLLER);
        assert!(v.send(Webhook::VmiValidateUpdate).allowed);
        let v = Req::update(RESOURCE, old.clone(), new.clone()).send(Webhook::VmiValidateUpdate);
        assert_eq!(v.message(), "update of VMI object is restricted");
        // Unplugged again: accepted too.
        let v = Req::update(RESOURCE, new.clone(), old.clone()).by(CONTROLLER);
        assert!(v.send(Webhook::VmiValidateUpdate).allowed);
        let mut sata = new;
        sata["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = json!("sata");
        let v = Req::update(RESOURCE, old, sata).by(CONTROLLER);
        let v = v.send(Webhook::VmiValidateUpdate);
        assert!(!v.allowed);
        assert_eq!(
            v.message(),
            "Hotplug configuration for disk [data] requires bus to be 'scsi' or 'virtio'. [sata] is not permitted."
        );
    }

    #[test]
    fn reserved_labels_may_not_change_on_update() {
        let old = defaulted();
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"kubevirt.io/nodeName": "n2"});
        let v = Req::update(RESOURCE, old.clone(), new.clone()).send(Webhook::VmiValidateUpdate);
        assert_eq!(
            v.message(),
            "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited"
        );
        let v = Req::update(RESOURCE, old, new).by(CONTROLLER);
        assert!(v.send(Webhook::VmiValidateUpdate).allowed);
    }

    #[test]
    fn virt_handler_may_change_only_the_vmis_of_its_node() {
        let gated = kvrs_admission::ClusterConfig::with_feature_gates("NodeRestriction");
        let mut old = defaulted();
        old["status"]["nodeName"] = json!("n1");
        let mut new = old.clone();
        new["status"]["phase"] = json!("Running");
        let send = |node: Option<&str>, new: &Value| {
            let mut r = Req::update(RESOURCE, old.clone(), new.clone()).by(HANDLER);
            if let Some(node) = node {
                r = r.extra(NODE_NAME_EXTRA, &[node]);
            }
            r.send_config(Webhook::VmiValidateUpdate, &gated)
        };
        assert!(send(Some("n1"), &new).allowed);
        assert_eq!(
            send(Some("n2"), &new).message(),
            "Node restriction, virt-handler is only allowed to modify VMIs it owns"
        );
        assert_eq!(
            send(None, &new).message(),
            "Node restriction failed, virt-handler service account is missing node name"
        );
        let mut targeted = new.clone();
        targeted["status"]["migrationState"] = json!({"targetNode": "n3"});
        assert_eq!(
            send(Some("n1"), &targeted).message(),
            "Node restriction, virt-handler is not allowed to set target node"
        );
        // Without the gate virt-handler is KubeVirt's like any other service account.
        let ungated = Req::update(RESOURCE, old.clone(), new.clone()).by(HANDLER);
        assert!(ungated.send(Webhook::VmiValidateUpdate).allowed);
    }
}
