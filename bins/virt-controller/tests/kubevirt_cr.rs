//! The KubeVirt CR drives the running controller: on a real kube-apiserver, editing
//! `kubevirt/kubevirt` changes the launcher pod of the next VM without a restart; an edit the
//! controller refuses leaves the previous behaviour, is logged, counted and recorded once as a
//! Warning event on the CR; the controller never writes the CR.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);
const KVM: &str = "devices.kubevirt.io/kvm";

/// Whether a container of the pod asks for `/dev/kvm`.
fn requests_kvm(pod: &Value) -> bool {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            !c["resources"]["limits"][KVM].is_null() || !c["resources"]["requests"][KVM].is_null()
        })
}

/// The launcher pod of VM `name`, once the controller created it.
fn launcher_pod(h: &Harness, name: &str) -> Value {
    h.wait_for(&format!("the launcher pod of {name}"), T, || {
        h.list("pods", "default", &format!("vm.kubevirt.io/name={name}"))
            .into_iter()
            .next()
    })
}

/// The CR's resourceVersion now.
fn cr_version(h: &Harness) -> String {
    let cr = h
        .get("kubevirt", "kubevirt", "kubevirt")
        .expect("the KubeVirt CR");
    cr["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits until the controller's log has a line containing `text`.
fn wait_log(h: &Harness, log: &Path, text: &str) {
    h.wait_for(&format!("the log line {text:?}"), T, || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains(text)
            .then_some(())
    });
}

/// The events with `reason` on the CR.
fn cr_events(h: &Harness, reason: &str) -> Vec<Value> {
    h.list("events", "kubevirt", "")
        .into_iter()
        .filter(|e| {
            e["involvedObject"]["kind"] == "KubeVirt"
                && e["involvedObject"]["name"] == "kubevirt"
                && e["reason"] == reason
        })
        .collect()
}

#[test]
fn editing_the_kubevirt_cr_changes_the_next_launcher_pod_without_a_restart() {
    let mut h = Harness::start();
    // As a KubeVirt install has it, minus virt-operator: nobody sets `status.phase`, so the one
    // CR of the namespace counts.
    h.create(&json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"smbios": {"manufacturer": "Acme"}}}}));
    let first = cr_version(&h);
    let i = h.start_controller("a", &[]);
    let log = h.controller(i).log.clone();
    wait_log(
        &h,
        &log,
        &format!("Updating cluster config from KubeVirt to resource version '{first}'"),
    );

    // KubeVirt's default: the guest needs /dev/kvm.
    h.create(&vm("before", "Always"));
    assert!(requests_kvm(&launcher_pod(&h, "before")));

    // Software emulation allowed, live: the next pod asks for no /dev/kvm.
    h.patch(
        "kubevirt",
        "kubevirt",
        "kubevirt",
        &json!({"spec": {"configuration": {"developerConfiguration": {"useEmulation": true}}}}),
        false,
    );
    let emulation = cr_version(&h);
    wait_log(
        &h,
        &log,
        &format!("Updating cluster config from KubeVirt to resource version '{emulation}'"),
    );
    h.create(&vm("emulated", "Always"));
    assert!(!requests_kvm(&launcher_pod(&h, "emulated")));
    // Nothing retroactive: the first VM's pod is as it was.
    assert!(requests_kvm(&launcher_pod(&h, "before")));

    // An edit KubeVirt refuses (with emulation turned off in the same edit): refused, reported
    // on the CR naming the field, and the last good configuration (emulation) stays.
    h.patch(
        "kubevirt",
        "kubevirt",
        "kubevirt",
        &json!({"spec": {"configuration": {"developerConfiguration":
            {"useEmulation": false, "cpuAllocationRatio": -1}}}}),
        false,
    );
    let refused = cr_version(&h);
    let events = h.wait_for("the InvalidConfiguration event", T, || {
        Some(cr_events(&h, "InvalidConfiguration")).filter(|e| !e.is_empty())
    });
    let event = &events[0];
    assert_eq!(event["type"], "Warning");
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("resource version '{refused}'"))
            && message.contains(&format!("keeping the last good one (resource version '{emulation}')"))
            && message.contains("spec.configuration.developerConfiguration.cpuAllocationRatio: the cpu allocation ratio must be positive, got -1"),
        "{message}"
    );
    h.create(&vm("still-emulated", "Always"));
    assert!(!requests_kvm(&launcher_pod(&h, "still-emulated")));

    // Another edit with the same mistake: still refused, not reported again.
    h.patch(
        "kubevirt",
        "kubevirt",
        "kubevirt",
        &json!({"metadata": {"labels": {"edited": "again"}}}),
        false,
    );
    let again = cr_version(&h);
    wait_log(
        &h,
        &log,
        &format!("invalid configuration at resource version '{again}'"),
    );
    let port = h.metrics_port(i);
    let (_, body) = support::http_get(port, "/metrics");
    assert_eq!(
        support::metric(
            &body,
            "kvrs_kubevirt_config_refused_total{reason=\"invalid_value\"}"
        ),
        Some(1.0),
        "{body}"
    );
    // Give a second event (were one recorded) time to arrive.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(cr_events(&h, "InvalidConfiguration").len(), 1);

    // Fixed: emulation off is now valid, and the next pod needs /dev/kvm again.
    h.patch(
        "kubevirt",
        "kubevirt",
        "kubevirt",
        &json!({"spec": {"configuration": {"developerConfiguration": {"cpuAllocationRatio": null}}}}),
        false,
    );
    let fixed = cr_version(&h);
    wait_log(
        &h,
        &log,
        &format!("Updating cluster config from KubeVirt to resource version '{fixed}'"),
    );
    h.create(&vm("after", "Always"));
    assert!(requests_kvm(&launcher_pod(&h, "after")));

    // The controller read the CR and never wrote it: no status, no managed fields of its own.
    let cr = h
        .get("kubevirt", "kubevirt", "kubevirt")
        .expect("the KubeVirt CR");
    assert!(cr["status"].is_null(), "{cr}");
    let managers: Vec<&str> = cr["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        !managers.iter().any(|m| m.contains("virt-controller")),
        "{managers:?}"
    );
}

#[test]
fn a_cr_understood_in_part_is_applied_in_that_part_and_the_rest_reported_once() {
    let mut h = Harness::start();
    // Emulation (read) beside migration settings and a beta gate turned off (not applied).
    h.create(&json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {
            "developerConfiguration": {"useEmulation": true, "disabledFeatureGates": ["ImageVolume"]},
            "migrations": {"parallelMigrationsPerCluster": 2, "bandwidthPerMigration": "64Mi", "network": "migration-net"}}}}));
    let first = cr_version(&h);
    let i = h.start_controller("a", &[]);
    let log = h.controller(i).log.clone();
    wait_log(
        &h,
        &log,
        &format!("Updating cluster config from KubeVirt to resource version '{first}'"),
    );
    // The part understood applies: no /dev/kvm asked for.
    h.create(&vm("partial", "Always"));
    assert!(!requests_kvm(&launcher_pod(&h, "partial")));
    let events = h.wait_for("the ConfigurationNotApplied event", T, || {
        Some(cr_events(&h, "ConfigurationNotApplied")).filter(|e| !e.is_empty())
    });
    let event = &events[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["source"]["component"], "virtualmachine-controller");
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.configuration.migrations.network (kvrs does not act on this migration setting yet: it only reaches migrationConfiguration)")
            && message.contains("spec.configuration.developerConfiguration.disabledFeatureGates[0] (kvrs cannot turn off the beta feature gate \"ImageVolume\" yet: it stays on)"),
        "{message}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("spec.configuration.migrations.network (kvrs does not act on this migration setting yet: it only reaches migrationConfiguration)"),
        "the log line names the settings too"
    );
    // An edit that leaves out the same settings: applied, not reported again.
    h.patch(
        "kubevirt",
        "kubevirt",
        "kubevirt",
        &json!({"spec": {"configuration": {"smbios": {"manufacturer": "Acme"}}}}),
        false,
    );
    let edited = cr_version(&h);
    wait_log(
        &h,
        &log,
        &format!("Updating cluster config from KubeVirt to resource version '{edited}'"),
    );
    std::thread::sleep(Duration::from_secs(2));
    let events = cr_events(&h, "ConfigurationNotApplied");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0]["count"], 1,
        "not reported again, not even as a repeat"
    );
    // No crash loop: the controller is still up and serving.
    assert!(
        h.controller(i).child.try_wait().expect("wait").is_none(),
        "the controller exited"
    );
    let (status, _) = support::http_get(h.metrics_port(i), "/metrics");
    assert_eq!(status, 200);
}
