//! KubeVirt's `kubevirt-crd-status-validator` (`StatusAdmitter`) and the volume-request part of
//! its VM webhook (`VMsAdmitter.validateVolumeRequests`).
//!
//! The status validator is called for writes of `virtualmachines/status`,
//! `virtualmachineinstancereplicasets/status` and `virtualmachineinstancemigrations/status`;
//! only a VM's status is checked (its `status.volumeRequests`, the legacy hotplug path that
//! `virtctl addvolume` writes), the other two pass, as in KubeVirt. The checks themselves are
//! kvrs-admission's [`validate_volume_requests`]; this module decides which VMI they need and
//! turns the read into their input.
//!
//! Not carried over: KubeVirt's OpenAPI check of the whole status (`ValidateStatus`; the CRD
//! schema already types it) and its snapshot / restore status checks, which compare the spec
//! with the old object's and so cannot fire on a status write, where the API server keeps the
//! spec as stored.

use kvrs_admission::validate::validate_volume_requests;
use kvrs_api::{VirtualMachine, VirtualMachineInstance};
use serde_json::Value;

use super::{Context, Facts, Lookup};
use crate::response::{bad_request, denied, read_object, status_cause};
use crate::review::{AdmissionRequest, Verdict};

const RESOURCE: &str = "virtualmachines";

/// The VMI KubeVirt reads for `vm`'s volume requests: the VM's own, when it has requests and
/// is `Ready` (only then can a VMI carry them out).
pub(super) fn vmi_to_read(vm: &Value) -> Option<String> {
    let status = &vm["status"];
    let has_requests = status["volumeRequests"]
        .as_array()
        .is_some_and(|r| !r.is_empty());
    let ready = status["ready"].as_bool() == Some(true);
    let name = vm["metadata"]["name"].as_str().unwrap_or("");
    (has_requests && ready && !name.is_empty()).then(|| name.to_string())
}

/// What the status validator reads for `req`: the VMI of a VM with requests that is Ready.
pub(super) fn lookup(req: &AdmissionRequest) -> Option<Lookup> {
    if !req.is_kubevirt_resource(RESOURCE) {
        return None;
    }
    let vm = req.object.as_ref()?;
    let name = vmi_to_read(vm)?;
    let namespace = match vm["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => req.namespace.clone().unwrap_or_default(),
    };
    Some(Lookup::Vmi { namespace, name })
}

/// The status validator: a VM's volume requests checked, any other status admitted.
pub(super) fn validate(req: &AdmissionRequest, ctx: &Context<'_>, facts: &Facts) -> Verdict {
    if !req.is_kubevirt_resource(RESOURCE) {
        return Verdict::allow();
    }
    let vm: VirtualMachine = match read_object("object", req.object.as_ref()) {
        Ok(vm) => vm,
        Err(v) => return v,
    };
    volume_requests(&vm, ctx, facts)
}

/// `vm`'s volume requests as KubeVirt's VM admitter answers them, with the VMI read for them
/// in `facts` (a failed read refuses, as KubeVirt's `ToAdmissionResponseError` does; a VMI
/// that is missing or being deleted is left out).
pub(super) fn volume_requests(vm: &VirtualMachine, ctx: &Context<'_>, facts: &Facts) -> Verdict {
    let Some(status) = vm.status.as_ref() else {
        return Verdict::allow();
    };
    if status.volume_requests.as_ref().is_none_or(Vec::is_empty) {
        return Verdict::allow();
    }
    // The VMI counts only for a Ready VM (the shell reads it only then).
    let ready = status.ready == Some(true);
    if let (true, Some(error)) = (ready, &facts.error) {
        return bad_request(error.clone());
    }
    let vmi: Option<VirtualMachineInstance> = match facts.vmi.as_ref().filter(|_| ready) {
        None => None,
        Some(v) => match read_object("VirtualMachineInstance", Some(v)) {
            Ok(vmi) => Some(vmi),
            Err(v) => return v,
        },
    };
    let vmi = vmi.filter(|v: &VirtualMachineInstance| v.metadata.deletion_timestamp.is_none());
    let causes = validate_volume_requests(vm, vmi.as_ref(), ctx.config, ctx.now);
    denied(causes.iter().map(status_cause).collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Webhook;
    use super::super::testing::{Req, vm};
    use super::*;

    fn add(name: &str, claim: &str) -> Value {
        json!({"addVolumeOptions": {"name": name, "disk": {"name": name, "disk": {"bus": "scsi"}},
            "volumeSource": {"persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}}}})
    }

    fn with_requests(requests: Value, ready: bool) -> Value {
        let mut v = vm();
        v["status"] = json!({"ready": ready, "volumeRequests": requests});
        v
    }

    fn status_update(v: Value) -> Req {
        Req::update("virtualmachines", v.clone(), v)
    }

    #[test]
    fn a_duplicate_add_is_refused_on_the_status_and_the_vm() {
        let v = with_requests(json!([add("hot", "c1"), add("hot", "c2")]), false);
        for webhook in [Webhook::StatusValidate, Webhook::VmValidate] {
            let verdict = status_update(v.clone()).send(webhook);
            assert!(!verdict.allowed, "{webhook:?}");
            assert_eq!(
                verdict.message(),
                "AddVolume request for [hot] aleady exists"
            );
            let causes = verdict.status.unwrap().details.unwrap().causes;
            assert_eq!(causes[0].field, "Status.volumeRequests");
            assert_eq!(causes[0].kind, "FieldValueInvalid");
        }
        let fine = with_requests(json!([add("hot", "c1")]), false);
        assert!(
            status_update(fine.clone())
                .send(Webhook::StatusValidate)
                .allowed
        );
        assert!(status_update(fine).send(Webhook::VmValidate).allowed);
    }

    #[test]
    fn other_statuses_pass() {
        let v = with_requests(json!([add("hot", "c1"), add("hot", "c2")]), false);
        let r = Req::update("virtualmachineinstancemigrations", v.clone(), v);
        assert!(r.send(Webhook::StatusValidate).allowed);
    }

    #[test]
    fn a_ready_vm_reads_its_vmi_and_checks_the_requests_against_it() {
        let v = with_requests(json!([add("hot", "c1")]), true);
        let req = status_update(v.clone()).request();
        assert_eq!(
            lookup(&req),
            Some(Lookup::Vmi {
                namespace: "default".into(),
                name: "a".into()
            })
        );
        assert_eq!(lookup(&status_update(vm()).request()), None);
        let mut running = json!({"metadata": {"name": "a", "namespace": "default"},
            "spec": v["spec"]["template"]["spec"].clone()});
        running["spec"]["volumes"] = json!([{"name": "hot", "dataVolume": {"name": "dv"}}]);
        running["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "hot", "disk": {"bus": "scsi"}}]);
        let facts = Facts {
            vmi: Some(running.clone()),
            ..Facts::default()
        };
        let verdict = status_update(v.clone()).send_with(Webhook::StatusValidate, &facts);
        assert_eq!(
            verdict.message(),
            "AddVolume request for [hot] conflicts with an existing volume of the same name on currently running vmi"
        );
        // A VMI being deleted is not validated against.
        running["metadata"]["deletionTimestamp"] = json!("2023-11-14T00:00:00Z");
        let facts = Facts {
            vmi: Some(running),
            ..Facts::default()
        };
        assert!(
            status_update(v.clone())
                .send_with(Webhook::StatusValidate, &facts)
                .allowed
        );
        // A failed read refuses with its error.
        let facts = Facts {
            error: Some("etcd is gone".into()),
            ..Facts::default()
        };
        let verdict = status_update(v).send_with(Webhook::StatusValidate, &facts);
        assert!(!verdict.allowed);
        assert_eq!(verdict.message(), "etcd is gone");
    }
}
