// The VM, VMI and world every VM decision test starts from: included (`include!`) by the unit
// tests beside the decision and by the store tests in tests/on_the_store, which name the same
// types through the crate's public paths. Needs in scope: `json`, `Value`, `VirtualMachine`,
// `VirtualMachineInstance`, `ClusterConfig`, `VmWorld`, `PendingExpectations`, `Now`.

const NOW: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

fn vm(strategy: Option<&str>, running: Option<bool>, status: Value) -> VirtualMachine {
    let mut v = json!({
        "metadata": {
            "name": "vm1", "namespace": "default", "uid": "vm-uid", "generation": 1,
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                            "kubevirt.io/storage-observed-api-version": "v1"},
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
        },
        "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}},
                       "firmware": {"uuid": "11111111-2222-3333-4444-555555555555"}},
            "volumes": [{"name": "root", "containerDisk": {"image": "img"}}],
        }}},
        "status": status,
    });
    if let Some(s) = strategy {
        v["spec"]["runStrategy"] = json!(s);
    }
    if let Some(r) = running {
        v["spec"]["running"] = json!(r);
    }
    serde_json::from_value(v).unwrap()
}

fn vmi(phase: &str, ever_running: bool) -> VirtualMachineInstance {
    let mut ts =
        vec![json!({"phase": "Pending", "phaseTransitionTimestamp": "2025-12-31T23:50:00Z"})];
    if ever_running {
        ts.push(json!({"phase": "Running", "phaseTransitionTimestamp": "2025-12-31T23:51:00Z"}));
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": "vm1", "namespace": "default", "uid": "vmi-uid",
            "annotations": {"kubevirt.io/vm-generation": "1"},
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vm1",
                                 "uid": "vm-uid", "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"domain": {"devices": {}}},
        "status": {"phase": phase, "phaseTransitionTimestamps": ts},
    }))
    .unwrap()
}

fn world<'a>(
    vm: &'a VirtualMachine,
    vmi: Option<&'a VirtualMachineInstance>,
    cfg: &'a ClusterConfig,
) -> VmWorld<'a> {
    VmWorld {
        vm,
        vmi,
        revisions: &[],
        instancetype_objects: &[],
        data_volumes: &[],
        pvcs: &[],
        expectations: PendingExpectations::default(),
        now: Now::from_unix(NOW),
        jitter: 0.0,
        config: cfg,
    }
}
