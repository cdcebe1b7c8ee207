//! The launcher pod's readiness gate is patched once per pod, as KubeVirt's VMI controller
//! patches it: on a real kube-apiserver, a burst of VMs whose VMI status writes wake the VMI
//! controller again before the pod watch shows its own `pods/status` patch must not patch the
//! same pod twice (the reconcile waits to observe its pod update, `ObservedPodUpdate`).

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Harness, vm};

const T: Duration = Duration::from_secs(120);
const VMS: usize = 30;
const UNPAUSED: &str = "kubevirt.io/virtual-machine-unpaused";

/// Whether the pod carries the unpaused readiness-gate condition, True.
fn unpaused(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == UNPAUSED && c["status"] == "True")
}

#[test]
fn a_burst_of_vms_patches_each_launcher_pods_status_once() {
    let mut h = Harness::start();
    let i = h.start_controller("a", &[]);
    for n in 0..VMS {
        h.create(&vm(&format!("burst-{n}"), "Always"));
    }
    let pods = h.wait_for("every launcher pod with its readiness gate", T, || {
        let pods = h.list("pods", "default", "kubevirt.io=virt-launcher");
        (pods.len() == VMS && pods.iter().all(unpaused)).then_some(pods)
    });
    assert_eq!(pods.len(), VMS);
    // Let any second patch (were one planned) reach the log.
    std::thread::sleep(Duration::from_secs(3));
    let log = std::fs::read_to_string(&h.controller(i).log).expect("the controller's log");
    let mut per_vmi = std::collections::BTreeMap::<&str, usize>::new();
    for line in log.lines().filter(|l| {
        l.contains(" wrote ")
            && l.contains("resource=pods ")
            && l.contains("sub=\"status\"")
            && l.contains("verb=\"patch\"")
    }) {
        let object = line
            .split("object=")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .expect("the sync span names its object");
        *per_vmi.entry(object).or_default() += 1;
    }
    assert_eq!(
        per_vmi.len(),
        VMS,
        "every pod was patched by the controller"
    );
    assert!(
        per_vmi.values().all(|n| *n == 1),
        "one pods/status patch per VM: {per_vmi:?}; the controller's log:\n{}",
        log.lines()
            .filter(|l| l.contains("resource=pods"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
