// The VMI, launcher pods and world every VMI decision test starts from: included (`include!`)
// by the unit tests beside the decision and by the store tests in tests/on_the_store, which name
// the same types through the crate's public paths. Needs in scope: `json`, `Value`, `Pod`,
// `VirtualMachineInstance`, `ClusterConfig`, `VmiWorld`, `PendingExpectations`, `Now`.

const NOW: i64 = 1_767_225_600;

fn vmi(phase: &str) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {
            "name": "vmi1", "namespace": "default", "uid": "vmi-uid",
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                            "kubevirt.io/storage-observed-api-version": "v1"},
            "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"],
        },
        "spec": {"domain": {"devices": {}}, "networks": [{"name": "default", "pod": {}}],
                 "volumes": [{"name": "root", "containerDisk": {"image": "img"}}]},
        "status": {"phase": phase, "phaseTransitionTimestamps": [
            {"phase": "Pending", "phaseTransitionTimestamp": "2025-12-31T23:50:00Z"}]},
    }))
    .unwrap()
}

fn pod(phase: &str, node: Option<&str>, compute: Value) -> Value {
    json!({
        "metadata": {"name": "virt-launcher-vmi1-abcde", "namespace": "default", "uid": "pod-uid",
                     "creationTimestamp": "2025-12-31T23:51:00Z",
                     "labels": {"kubevirt.io": "virt-launcher"},
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                          "name": "vmi1", "uid": "vmi-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "compute", "ready": true, "state": compute}]},
    })
}

/// The typed view of a JSON fixture, as an informer cache holds it.
fn typed(p: &Value) -> Pod {
    serde_json::from_value(p.clone()).unwrap()
}

fn render(v: &VirtualMachineInstance) -> Result<Value, String> {
    // A minimal launcher pod: this test is about the lifecycle, not the pod's content.
    Ok(
        json!({"metadata": {"generateName": format!("virt-launcher-{}-", v.metadata.name.as_deref().unwrap_or_default()),
                           "namespace": "default",
                           "labels": {"kubevirt.io": "virt-launcher"},
                           "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                                "name": "vmi1", "uid": "vmi-uid", "controller": true}]},
              "spec": {"containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}]}}),
    )
}

fn world<'a>(
    v: &'a VirtualMachineInstance,
    pods: Vec<&'a Pod>,
    cfg: &'a ClusterConfig,
) -> VmiWorld<'a> {
    VmiWorld {
        vmi: v,
        pods,
        vms: &[],
        vm: None,
        migrations: &[],
        pvcs: &[],
        data_volumes: &[],
        storage_classes: &[],
        storage_profiles: &[],
        expectations: PendingExpectations::default(),
        now: Now::from_unix(NOW),
        config: cfg,
    }
}
