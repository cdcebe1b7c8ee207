//! The full cluster end to end: a real kube-apiserver, etcd, kube-controller-manager and
//! kube-scheduler (kvrs-test-cluster, built from the Go module proxy); kvrs's CRDs and the RBAC
//! of `bins/deploy`; the real `virt-controller` and `virt-handler` binaries running with their
//! ServiceAccounts' tokens; `kvrs kubelet` as the node's kubelet (registering the Node with
//! KubeVirt's device resources, so kube-scheduler places the launcher pod on it); kvrs's
//! launcher with real libvirt and QEMU (TCG) booting the Debian kernel + busybox guest.
//!
//! `kubectl apply` a VirtualMachine → the guest boots and answers ping; stop, start, delete →
//! nothing is left (no VMI, no pod, no network namespace, no launcher process).

mod common;

use common::{NS, Stack, kubectl_json};
use kvrs_test_guest::pod::is_root;
use std::time::Duration;

#[test]
fn a_vm_applied_with_kubectl_boots_answers_ping_stops_starts_and_is_deleted_without_a_trace() {
    assert!(
        is_root(),
        "the cluster e2e runs launcher pods (network namespaces, mounts, UID 107): run as root"
    );
    let stack = Stack::start();
    stack.apply_vm("Always");
    stack.wait_booted("first start", Duration::from_secs(240));
    stack.set_run_strategy("Halted");
    stack.wait_gone("the VM stopped: no VMI, pod, netns or launcher");
    stack.set_run_strategy("Always");
    stack.wait_booted("after a stop", Duration::from_secs(240));
    let delete = stack
        .cluster
        .kubectl(["delete", "vm", "-n", NS, "guest", "--wait=false"]);
    assert!(
        delete.status.success(),
        "{}",
        String::from_utf8_lossy(&delete.stderr)
    );
    stack.wait_gone("the VM deleted: no VMI, pod, netns or launcher");
    assert!(
        kubectl_json(&stack.cluster, &["get", "vm", "-n", NS, "guest"]).is_none(),
        "the VM is gone"
    );
    stack.stop();
}
