//! virt-controller on a real kube-apiserver: a VM with `runStrategy: Always` becomes a VMI, the VMI
//! a launcher pod, the pod (bound and made Ready by the test, playing kubelet) hands the VMI to
//! its node, and the VMI Running (as virt-handler would report it) makes the VM Running and Ready.
//! What the controller wrote is compared with what kvrs's pure decision and pod renderer produce
//! for the same objects.

mod support;

use std::time::Duration;

use kvrs_admission::ClusterConfig;
use kvrs_api::VirtualMachine;
use kvrs_decide::Now;
use kvrs_decide::vm::{VmWorld, decide_vm};
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
        instancetype_objects: &[],
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
        .created("virtualmachineinstances")
        .cloned()
        .expect("the decision creates a VMI")
}

/// The launcher pod `kvrs pod` renders for `vmi` as stored.
fn rendered_pod(vmi: &Value) -> Value {
    let vmi: kvrs_api::VirtualMachineInstance = serde_json::from_value(vmi.clone()).expect("VMI");
    // The controller's default launcher image is kvrs's own (`--launcher-image`).
    let config = ClusterConfig {
        launcher_image: format!("kvrs/virt-launcher:v{}", env!("CARGO_PKG_VERSION")),
        ..ClusterConfig::default()
    };
    let pod =
        kvrs_pod::render_launcher_pod(&vmi, &config, &Default::default()).expect("rendered pod");
    serde_json::to_value(pod).expect("pod json")
}

/// `field` of a pod with what differs by design blanked: the random `--qemu-timeout` (240 s plus
/// a jitter drawn per pod) and what the API server defaults into every container (termination
/// message fields, `fieldRef.apiVersion: v1`, extended-resource requests copied from limits, the
/// image pull policy).
fn comparable(pod: &Value, field: &str) -> Value {
    let mut v = pod.pointer(field).cloned().unwrap_or(Value::Null);
    if field == "/spec/volumes" {
        for vol in v.as_array_mut().into_iter().flatten() {
            if let Some(img) = vol.get_mut("image").and_then(Value::as_object_mut)
                && !img.contains_key("pullPolicy")
            {
                let reference = img["reference"].as_str().unwrap_or_default();
                img.insert("pullPolicy".into(), json!(default_pull_policy(reference)));
            }
        }
        return v;
    }
    let containers = v.as_array_mut().into_iter().flatten();
    for c in containers.filter(|c| c.get("image").is_some()) {
        if let Some(m) = c.as_object_mut() {
            for server_default in ["terminationMessagePath", "terminationMessagePolicy"] {
                m.remove(server_default);
            }
            if !m.contains_key("imagePullPolicy") {
                let image = m["image"].as_str().unwrap_or_default();
                m.insert("imagePullPolicy".into(), json!(default_pull_policy(image)));
            }
            let limits = m
                .get("resources")
                .and_then(|r| r.get("limits"))
                .cloned()
                .unwrap_or(Value::Null);
            if let Some(req) = m
                .get_mut("resources")
                .and_then(|r| r.get_mut("requests"))
                .and_then(Value::as_object_mut)
            {
                req.retain(|k, v| !(k.contains('/') && limits.get(k) == Some(v)));
            }
            for env in m
                .get_mut("env")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(f) = env
                    .pointer_mut("/valueFrom/fieldRef")
                    .and_then(Value::as_object_mut)
                    && f.get("apiVersion") == Some(&json!("v1"))
                {
                    f.remove("apiVersion");
                }
            }
        }
        for list in ["command", "args"] {
            if let Some(args) = c.get_mut(list).and_then(Value::as_array_mut) {
                let mut after_timeout = false;
                for a in args.iter_mut() {
                    if after_timeout {
                        *a = json!("<240s+jitter>");
                    }
                    after_timeout = a == "--qemu-timeout";
                }
            }
        }
    }
    v
}

/// The API server's default pull policy: Always for `:latest` or untagged images.
fn default_pull_policy(image: &str) -> &'static str {
    let tagged = image.rsplit('/').next().is_some_and(|n| n.contains(':'));
    if !tagged || image.ends_with(":latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

#[test]
fn an_always_vm_runs_through_vmi_pod_and_node() {
    let mut h = Harness::start();
    // The VMI is compared with `kvrs decide vm`'s plan, KubeVirt's controller's bare create: as
    // on a cluster where virt-api's webhook mutates it (the default stores it mutated, which
    // the cluster e2e in bins/kvrs covers).
    h.start_controller("a", &["--virt-api-webhooks"]);
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

    // The pod as the controller created it (before the kubelet and the controller's later
    // metadata sync touch it) is the pod `kvrs pod` renders for the VMI.
    let pod = h.wait_for("the launcher pod", T, || {
        h.list("pods", "default", "vm.kubevirt.io/name=demo")
            .into_iter()
            .next()
    });
    let rendered = rendered_pod(&vmi);
    for field in [
        "/metadata/labels",
        "/metadata/annotations",
        "/metadata/ownerReferences",
        "/spec/containers",
        "/spec/initContainers",
        "/spec/volumes",
        "/spec/nodeSelector",
        "/spec/readinessGates",
        "/spec/terminationGracePeriodSeconds",
    ] {
        assert_eq!(
            comparable(&pod, field),
            comparable(&rendered, field),
            "launcher pod {field} differs from what `kvrs pod` renders"
        );
    }
    h.run_launcher_pod("default", "demo", "node01");
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
