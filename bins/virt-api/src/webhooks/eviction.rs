//! The `pods/eviction` webhook (KubeVirt's `virt-launcher-eviction-interceptor`): the
//! eviction of a launcher pod whose VMI should move instead of stop is refused with 429, after
//! the VMI is marked for evacuation (`status.evacuationNodeName`), so a `kubectl drain` keeps
//! retrying until virt-controller has migrated the guest away.
//!
//! The decision is `kvrs_decide::evacuation::admit_eviction`. Its one side effect, the mark, is
//! made by the shell while it reads the facts (`crate::cluster::read_facts`): it decides once
//! with what it read, patches the VMI if told to and records the outcome in
//! [`Facts::marked`]; [`admit`] then decides again from the same facts and answers with that
//! outcome. Deciding twice from the same facts gives the same answer, and the answer stays a
//! pure function of the facts.

use k8s_openapi::api::core::v1::Pod;
use kvrs_api::VirtualMachineInstance;
use kvrs_decide::evacuation::{
    EvictionRequest, EvictionVerdict, REFUSAL_CODE, admit_eviction, vmi_to_read,
};
use serde_json::Value;

use super::{Facts, Lookup};
use crate::review::{AdmissionRequest, Status, Verdict};

/// What the webhook reads: the pod being evicted.
pub(super) fn lookup(request: &AdmissionRequest) -> Option<Lookup> {
    Some(Lookup::Eviction {
        namespace: request.namespace.clone().unwrap_or_default(),
        pod: request.name.clone().unwrap_or_default(),
    })
}

/// The pod read, when it was (`None` otherwise: KubeVirt lets the eviction through).
pub fn pod_of(facts: &Facts) -> Option<Pod> {
    facts
        .pod
        .as_ref()
        .and_then(|p| serde_json::from_value(p.clone()).ok())
}

/// The VMI the shell must read for `pod`, if any.
pub fn vmi_name(pod: &Pod) -> Option<&str> {
    vmi_to_read(pod)
}

/// The node of the pod read (for the shell's log line).
pub fn node(facts: &Facts) -> String {
    pod_of(facts)
        .and_then(|p| p.spec.and_then(|s| s.node_name))
        .unwrap_or_default()
}

/// The decision on what was read (the shell calls it to know whether to mark the VMI).
pub fn decide(request: &AdmissionRequest, facts: &Facts) -> EvictionVerdict {
    let pod = pod_of(facts);
    let vmi: Option<VirtualMachineInstance> = facts
        .vmi
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let vmi = match (&facts.error, &vmi) {
        (Some(e), _) => Err(e.clone()),
        (None, Some(v)) => Ok(v),
        (None, None) => Err("the VMI was not read".to_string()),
    };
    let eviction = request.object.clone().unwrap_or(Value::Null);
    admit_eviction(&EvictionRequest {
        pod: pod.as_ref(),
        vmi,
        eviction: &eviction,
        dry_run: request.dry_run == Some(true),
        cluster_strategy: facts.cluster_eviction_strategy.as_deref(),
    })
}

fn refuse(message: String) -> Verdict {
    Verdict::deny(Status {
        message,
        reason: String::new(),
        details: None,
        code: REFUSAL_CODE,
    })
}

/// The webhook's answer.
pub(super) fn admit(request: &AdmissionRequest, facts: &Facts) -> Verdict {
    match decide(request, facts) {
        EvictionVerdict::Allow => Verdict::allow(),
        EvictionVerdict::Deny(message) => refuse(message),
        EvictionVerdict::Mark { message, .. } => match &facts.marked {
            Some(Ok(())) => refuse(message),
            Some(Err(e)) => refuse(EvictionVerdict::mark_failed(e)),
            None => refuse(EvictionVerdict::mark_failed(
                "virt-api did not get to mark the vmi",
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::webhooks::Webhook;
    use crate::webhooks::testing::Req;

    fn eviction_request() -> Req {
        let mut r = Req::create(
            "pods",
            json!({"apiVersion": "policy/v1", "kind": "Eviction",
                   "metadata": {"name": "virt-launcher-a-x1", "namespace": "default"}}),
        );
        r = r.namespace("default");
        r
    }

    fn facts(strategy: &str, marked: Option<Result<(), String>>) -> Facts {
        Facts {
            pod: Some(json!({
                "metadata": {"name": "virt-launcher-a-x1", "namespace": "default",
                    "labels": {"kubevirt.io": "virt-launcher"},
                    "annotations": {"kubevirt.io/domain": "a"}},
                "spec": {"nodeName": "node-a", "containers": []},
                "status": {"phase": "Running"}})),
            vmi: Some(json!({
                "metadata": {"name": "a", "namespace": "default", "uid": "a-uid"},
                "spec": {"evictionStrategy": strategy, "domain": {"devices": {}}},
                "status": {"nodeName": "node-a", "phase": "Running",
                    "conditions": [{"type": "LiveMigratable", "status": "True"}]}})),
            marked,
            ..Facts::default()
        }
    }

    #[test]
    fn a_marked_vmi_refuses_its_launchers_eviction_with_429() {
        let v =
            eviction_request().send_with(Webhook::PodEviction, &facts("LiveMigrate", Some(Ok(()))));
        assert!(!v.allowed);
        let s = v.status.unwrap();
        assert_eq!(s.code, 429);
        assert_eq!(
            s.message,
            "Eviction triggered evacuation of VMI \"default/a\""
        );
    }

    #[test]
    fn a_failed_mark_refuses_with_its_error() {
        let v = eviction_request().send_with(
            Webhook::PodEviction,
            &facts(
                "LiveMigrate",
                Some(Err("the object has been modified".into())),
            ),
        );
        assert_eq!(
            v.message(),
            "kubevirt failed marking the vmi for eviction: the object has been modified"
        );
    }

    #[test]
    fn the_none_strategy_and_unread_pods_let_the_eviction_through() {
        let v = eviction_request().send_with(Webhook::PodEviction, &facts("None", None));
        assert!(v.allowed);
        let v = eviction_request().send_with(Webhook::PodEviction, &Facts::default());
        assert!(v.allowed);
    }

    #[test]
    fn an_unreadable_vmi_refuses() {
        let mut f = facts("LiveMigrate", None);
        f.vmi = None;
        f.error = Some("virtualmachineinstances.kubevirt.io \"a\" not found".into());
        let v = eviction_request().send_with(Webhook::PodEviction, &f);
        assert_eq!(
            v.message(),
            "kubevirt failed getting the vmi: virtualmachineinstances.kubevirt.io \"a\" not found"
        );
        assert_eq!(v.status.unwrap().code, 429);
    }
}
