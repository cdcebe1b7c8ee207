//! virt-controller on a real kube-apiserver: a VM with `runStrategy: Always` becomes a VMI, the VMI
//! a launcher pod, the pod (bound and made Ready by the test, playing kubelet) hands the VMI to
//! its node, and the VMI Running (as virt-handler would report it) makes the VM Running and Ready.
//! What the controller wrote is compared with what kvrs's pure decision and pod renderer produce
//! for the same objects.

mod support;

use std::time::Duration;

use kvrs_admission::ClusterConfig;
use kvrs_api::VirtualMachine;
use kvrs_decide::vm::{VmWorld, decide_vm};
use kvrs_decide::{Now, WriteOp};
use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

/// The create the VM decision plans for `vm` with no VMI yet.
fn planned_vmi(vm: &Value) -> Value {
    let vm: VirtualMachine = serde_json::from_value(vm.clone()).expect("typed VM");
    let config = ClusterConfig::default();
    let world = VmWorld {
        vm: &vm,
        vmi: None,
        revisions: &[],
        data_volumes: &[],
        pvcs: &[],
        expectations: Default::default(),
        now: Now::from_unix(1_800_000_000),
        jitter: 0.5,
        config: &config,
    };
    let decision = decide_vm(&world);
    decision
        .plan
        .writes()
        .find_map(|w| match &w.op {
            WriteOp::Create { object } if w.resource == "virtualmachineinstances" => {
                Some(object.clone())
            }
            _ => None,
        })
        .expect("the decision creates a VMI")
}

#[test]
fn an_always_vm_runs_through_vmi_pod_and_node() {
    let mut h = Harness::start();
    h.start_controller("a", &[]);
    h.create(&vm("demo", "Always"));

    let vmi = h.wait_for("the VMI", T, || h.get("vmi", "default", "demo"));
    let stored_vm = h.get("vm", "default", "demo").expect("the VM");
    let planned = planned_vmi(&stored_vm);
    for field in [
        "/spec",
        "/metadata/labels",
        "/metadata/finalizers",
        "/metadata/ownerReferences",
    ] {
        assert_eq!(
            vmi.pointer(field),
            planned.pointer(field),
            "VMI {field} differs from what `kvrs decide vm` plans"
        );
    }
    assert_eq!(
        vmi.pointer("/metadata/ownerReferences/0/uid"),
        stored_vm.pointer("/metadata/uid")
    );
    assert!(
        stored_vm["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("kubevirt.io/virtualMachineControllerFinalize"))),
        "the VM carries the controller's finalizer"
    );

    let pod_name = h.run_launcher_pod("default", "demo", "node01");
    let pod = h.get("pod", "default", &pod_name).expect("the pod");
    assert_eq!(
        pod.pointer("/metadata/ownerReferences/0/kind"),
        Some(&json!("VirtualMachineInstance"))
    );
    assert_eq!(
        pod.pointer("/metadata/labels/kubevirt.io~1created-by"),
        vmi.pointer("/metadata/uid")
    );

    let scheduled = h.wait_for("the VMI Scheduled on node01", T, || {
        let v = h.get("vmi", "default", "demo")?;
        (v["status"]["phase"] == "Scheduled").then_some(v)
    });
    assert_eq!(scheduled["status"]["nodeName"], "node01");
    assert_eq!(
        scheduled["metadata"]["labels"]["kubevirt.io/nodeName"],
        "node01"
    );

    // virt-handler's part: the domain runs.
    h.patch(
        "vmi",
        "default",
        "demo",
        &json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastProbeTime": null,
             "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}),
        false,
    );
    let vm = h.wait_for("the VM Running and Ready", T, || {
        let v = h.get("vm", "default", "demo")?;
        (v["status"]["printableStatus"] == "Running" && v["status"]["ready"] == true).then_some(v)
    });
    assert_eq!(vm["status"]["created"], true);

    // The replica says what it did: it leads, it is ready, its queues counted the work.
    let port = h.controller(0).metrics_port;
    assert_eq!(support::http_get(port, "/healthz").0, 200);
    assert_eq!(support::http_get(port, "/readyz").0, 200);
    assert_eq!(support::http_get(port, "/leader").0, 200);
    let (_, body) = support::http_get(port, "/metrics");
    assert!(
        support::metric(
            &body,
            "kubevirt_workqueue_adds_total{name=\"virt-controller-vm\"}"
        )
        .is_some_and(|v| v > 0.0),
        "{body}"
    );
    assert_eq!(
        support::metric(&body, "kubevirt_virt_controller_leading_status"),
        Some(1.0),
        "{body}"
    );
}
