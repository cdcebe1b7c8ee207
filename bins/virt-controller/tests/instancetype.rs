//! virt-controller on a real kube-apiserver with instancetypes and preferences (KubeVirt
//! v1.9.0's `Reference` policy): the VM's references are stored as ControllerRevisions owned by
//! the VM and named in its status, and the VMI is started expanded from them; a VM referencing
//! a missing instancetype gets KubeVirt's `Failure` condition and no VMI.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

const CRDS: [&str; 4] = [
    "virtualmachineinstancetypes.instancetype.kubevirt.io",
    "virtualmachineclusterinstancetypes.instancetype.kubevirt.io",
    "virtualmachinepreferences.instancetype.kubevirt.io",
    "virtualmachineclusterpreferences.instancetype.kubevirt.io",
];

/// The support VM without `domain.memory` (the instancetype owns it), referencing
/// `instancetype` and (when given) `preference`, both cluster-wide, with the kinds virt-api's
/// mutating webhook would fill in (no webhook runs here).
fn vm_with(name: &str, instancetype: &str, preference: Option<&str>) -> Value {
    let mut v = vm(name, "Always");
    let domain = v["spec"]["template"]["spec"]["domain"]
        .as_object_mut()
        .expect("domain");
    domain.remove("memory");
    v["spec"]["instancetype"] =
        json!({"name": instancetype, "kind": "virtualmachineclusterinstancetype"});
    if let Some(p) = preference {
        v["spec"]["preference"] = json!({"name": p, "kind": "virtualmachineclusterpreference"});
    }
    v
}

fn condition<'a>(vm: &'a Value, kind: &str) -> Option<&'a Value> {
    vm["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[test]
fn references_are_stored_as_revisions_and_expand_the_vmi() {
    let mut h = Harness::start();
    h.cluster
        .wait_for_crds(&CRDS, T)
        .expect("instancetype CRDs established");
    h.create(&json!({
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClusterInstancetype",
        "metadata": {"name": "two-cpus"},
        "spec": {"cpu": {"guest": 2}, "memory": {"guest": "1Gi"}},
    }));
    h.create(&json!({
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClusterPreference",
        "metadata": {"name": "virtio-sockets"},
        "spec": {
            "cpu": {"preferredCPUTopology": "preferSockets"},
            "devices": {"preferredDiskBus": "virtio", "preferredInterfaceModel": "virtio"},
        },
    }));
    h.start_controller("a", &[]);

    h.create(&vm_with("it", "two-cpus", Some("virtio-sockets")));
    let stored = h.wait_for("status refs with revisions", T, || {
        let v = h.get("vm", "default", "it")?;
        let it = v["status"]["instancetypeRef"]["controllerRevisionRef"]["name"].as_str()?;
        let pref = v["status"]["preferenceRef"]["controllerRevisionRef"]["name"].as_str()?;
        Some((v.clone(), it.to_string(), pref.to_string()))
    });
    let (vm_obj, it_rev, pref_rev) = stored;
    let vm_uid = vm_obj["metadata"]["uid"].as_str().expect("uid");
    assert_eq!(vm_obj["status"]["instancetypeRef"]["name"], "two-cpus");
    assert_eq!(
        vm_obj["status"]["instancetypeRef"]["kind"],
        "virtualmachineclusterinstancetype"
    );
    assert_eq!(vm_obj["status"]["preferenceRef"]["name"], "virtio-sockets");
    assert_eq!(
        vm_obj["status"]["preferenceRef"]["kind"],
        "virtualmachineclusterpreference"
    );

    let it_object = h
        .get("virtualmachineclusterinstancetype", "default", "two-cpus")
        .expect("instancetype");
    // KubeVirt's revision name: <vm>-<object>-<version>-<object uid>-<generation>.
    assert_eq!(
        it_rev,
        format!(
            "it-two-cpus-v1beta1-{}-{}",
            it_object["metadata"]["uid"].as_str().expect("uid"),
            it_object["metadata"]["generation"]
        )
    );
    for (name, kind, object) in [
        (&it_rev, "VirtualMachineClusterInstancetype", "two-cpus"),
        (
            &pref_rev,
            "VirtualMachineClusterPreference",
            "virtio-sockets",
        ),
    ] {
        let cr = h
            .get("controllerrevisions", "default", name)
            .unwrap_or_else(|| panic!("ControllerRevision {name}"));
        let owner = &cr["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "VirtualMachine");
        assert_eq!(owner["uid"], vm_uid);
        assert_eq!(owner["controller"], true);
        let labels = &cr["metadata"]["labels"];
        assert_eq!(labels["instancetype.kubevirt.io/object-kind"], kind);
        assert_eq!(labels["instancetype.kubevirt.io/object-name"], object);
        assert_eq!(cr["data"]["kind"], kind);
        assert_eq!(cr["data"]["metadata"]["name"], object);
    }

    let vmi = h.wait_live_vmi("default", "it", T);
    let domain = &vmi["spec"]["domain"];
    // The instancetype's 2 vCPUs as sockets (the preference's topology), and its memory.
    assert_eq!(domain["cpu"]["sockets"], 2, "{domain}");
    assert_eq!(domain["cpu"]["cores"], 1, "{domain}");
    assert_eq!(domain["cpu"]["threads"], 1, "{domain}");
    assert_eq!(domain["memory"]["guest"], "1Gi", "{domain}");
    // The preference's interface model default.
    assert_eq!(
        domain["devices"]["interfaces"][0]["model"], "virtio",
        "{domain}"
    );
    let annotations = &vmi["metadata"]["annotations"];
    assert_eq!(
        annotations["kubevirt.io/cluster-instancetype-name"], "two-cpus",
        "{annotations}"
    );
    assert_eq!(
        annotations["kubevirt.io/cluster-preference-name"], "virtio-sockets",
        "{annotations}"
    );
}

#[test]
fn a_missing_instancetype_fails_the_vm_without_a_vmi() {
    let mut h = Harness::start();
    h.cluster
        .wait_for_crds(&CRDS, T)
        .expect("instancetype CRDs established");
    h.start_controller("a", &[]);
    h.create(&vm_with("lost", "nowhere", None));
    let failure = h.wait_for("the Failure condition", T, || {
        let v = h.get("vm", "default", "lost")?;
        condition(&v, "Failure").cloned()
    });
    assert_eq!(failure["status"], "True");
    assert_eq!(failure["reason"], "FailedFindInstancetype");
    assert!(
        failure["message"]
            .as_str()
            .unwrap_or("")
            .contains("nowhere"),
        "{failure}"
    );
    // Give the controller time for a few more syncs: still no VMI and no revision.
    std::thread::sleep(Duration::from_secs(3));
    assert!(h.get("vmi", "default", "lost").is_none());
    let revisions = h.list("controllerrevisions", "default", "");
    assert!(
        revisions.iter().all(|r| !r["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .starts_with("lost-")),
        "{revisions:?}"
    );
}
