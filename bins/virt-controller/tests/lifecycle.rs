//! virt-controller on a real kube-apiserver: run strategies (stop, start, restart, legacy
//! `spec.running`, RerunOnFailure, Manual, Once), deletion leaving nothing behind (foreground and
//! background), and a template KubeVirt would reject.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, vm};

const T: Duration = Duration::from_secs(60);

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn printable(h: &Harness, name: &str) -> Option<String> {
    h.get("vm", "default", name)
        .and_then(|v| v["status"]["printableStatus"].as_str().map(str::to_string))
}

/// Brings VMI `name` to Running as the kubelet and virt-handler would.
fn run(h: &Harness, name: &str) -> Value {
    let vmi = h.wait_live_vmi("default", name, T);
    h.run_launcher_pod("default", name, "node01");
    h.wait_for("VMI Scheduled", T, || {
        let v = h.get("vmi", "default", name)?;
        (v["status"]["phase"] == "Scheduled").then_some(())
    });
    h.set_vmi_phase("default", name, "Running");
    h.wait_for("VM Running", T, || {
        (printable(h, name).as_deref() == Some("Running")).then_some(())
    });
    vmi
}

#[test]
fn run_strategies_stop_start_restart_and_legacy_running() {
    let mut h = Harness::start();
    h.start_controller("a", &[]);

    // Always -> Halted stops the VM; Always again starts a new VMI.
    h.create(&vm("s1", "Always"));
    let first = run(&h, "s1");
    h.patch(
        "vm",
        "default",
        "s1",
        &json!({"spec": {"runStrategy": "Halted"}}),
        false,
    );
    h.wait_vmi_gone("default", "s1", T);
    h.wait_for("VM Stopped", T, || {
        (printable(&h, "s1").as_deref() == Some("Stopped")).then_some(())
    });
    h.patch(
        "vm",
        "default",
        "s1",
        &json!({"spec": {"runStrategy": "Always"}}),
        false,
    );
    let second = run(&h, "s1");
    assert_ne!(uid(&first), uid(&second), "a new VMI after the restart");

    // A VMI that stops by itself under Always is replaced (restart).
    h.set_vmi_phase("default", "s1", "Succeeded");
    let third = h.wait_for("a replacement VMI", T, || {
        h.finish_deleted_pods("default", "s1");
        h.get("vmi", "default", "s1")
            .filter(|v| uid(v) != uid(&second) && v["metadata"]["deletionTimestamp"].is_null())
    });
    assert_ne!(uid(&third), uid(&second));

    // Legacy spec.running: false stops, true starts.
    let mut legacy = vm("s2", "Always");
    legacy["spec"]
        .as_object_mut()
        .unwrap()
        .remove("runStrategy");
    legacy["spec"]["running"] = json!(true);
    h.create(&legacy);
    run(&h, "s2");
    h.patch(
        "vm",
        "default",
        "s2",
        &json!({"spec": {"running": false}}),
        false,
    );
    h.wait_vmi_gone("default", "s2", T);
    h.patch(
        "vm",
        "default",
        "s2",
        &json!({"spec": {"running": true}}),
        false,
    );
    h.wait_live_vmi("default", "s2", T);

    // Exactly one VMI per VM at every point: the names are the VM's, so count the pods.
    for name in ["s1", "s2"] {
        let live = h
            .list("pods", "default", &format!("vm.kubevirt.io/name={name}"))
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .count();
        assert!(live <= 1, "{name}: {live} live launcher pods");
    }
}

#[test]
fn rerun_on_failure_manual_and_once() {
    let mut h = Harness::start();
    h.start_controller("a", &[]);

    // RerunOnFailure: a VMI that fails after running is replaced at once, without a start
    // failure counted.
    h.create(&vm("r1", "RerunOnFailure"));
    let first = run(&h, "r1");
    h.set_vmi_phase("default", "r1", "Failed");
    let second = h.wait_for("a new VMI after the failure", T, || {
        h.finish_deleted_pods("default", "r1");
        h.get("vmi", "default", "r1")
            .filter(|v| uid(v) != uid(&first) && v["metadata"]["deletionTimestamp"].is_null())
    });
    let status = h.get("vm", "default", "r1").expect("VM")["status"].clone();
    assert!(
        status["startFailure"].is_null(),
        "no start failure: {status}"
    );

    // A VMI that fails before it ever ran is a failed start: KubeVirt's backoff counts it and
    // the next VMI waits for `retryAfterTimestamp`.
    h.set_vmi_phase("default", "r1", "Failed");
    let status = h.wait_for("the start failure recorded", T, || {
        h.finish_deleted_pods("default", "r1");
        let s = h.get("vm", "default", "r1")?["status"].clone();
        (s["startFailure"]["consecutiveFailCount"].as_i64() >= Some(1)).then_some(s)
    });
    assert!(
        status["startFailure"]["retryAfterTimestamp"].is_string(),
        "{status}"
    );
    let third = h.wait_for(
        "a new VMI after the backoff",
        Duration::from_secs(90),
        || {
            h.finish_deleted_pods("default", "r1");
            h.get("vmi", "default", "r1")
                .filter(|v| uid(v) != uid(&second) && v["metadata"]["deletionTimestamp"].is_null())
        },
    );
    assert_ne!(uid(&third), uid(&second));

    // A guest that shuts down (Succeeded) stays down: its VMI is deleted, none is started.
    run(&h, "r1");
    h.set_vmi_phase("default", "r1", "Succeeded");
    h.wait_vmi_gone("default", "r1", T);
    h.wait_for("VM Stopped after success", T, || {
        (printable(&h, "r1").as_deref() == Some("Stopped")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        h.get("vmi", "default", "r1").is_none(),
        "no new VMI after success"
    );

    // Manual: nothing starts by itself.
    h.create(&vm("m1", "Manual"));
    h.wait_for("VM Stopped", T, || {
        (printable(&h, "m1").as_deref() == Some("Stopped")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        h.get("vmi", "default", "m1").is_none(),
        "Manual starts nothing"
    );

    // Once: runs once, not again after it stops.
    h.create(&vm("o1", "Once"));
    let once = run(&h, "o1");
    h.set_vmi_phase("default", "o1", "Succeeded");
    h.wait_for("VM Once done", T, || {
        let p = printable(&h, "o1")?;
        (p == "Stopped" || p == "Succeeded").then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        h.get("vmi", "default", "o1").map(|v| uid(&v)),
        Some(uid(&once))
    );
}

#[test]
fn deleting_a_vm_leaves_nothing_behind() {
    let mut h = Harness::start();
    h.start_controller("a", &[]);
    for (name, cascade) in [
        ("d1", "--cascade=background"),
        ("d2", "--cascade=foreground"),
    ] {
        h.create(&vm(name, "Always"));
        run(&h, name);
        h.delete("vm", "default", name, &[cascade]);
        h.wait_for(
            &format!("{name}: VM, VMI and pods gone ({cascade})"),
            T,
            || {
                h.finish_deleted_pods("default", name);
                let gone = h.get("vm", "default", name).is_none()
                    && h.get("vmi", "default", name).is_none()
                    && h.list("pods", "default", &format!("vm.kubevirt.io/name={name}"))
                        .is_empty();
                gone.then_some(())
            },
        );
        // The VM's start revisions go with it (the garbage collector follows their owner).
        h.wait_for(&format!("{name}: start revisions collected"), T, || {
            h.list("controllerrevisions", "default", "")
                .iter()
                .all(|r| r["metadata"]["ownerReferences"][0]["name"] != json!(name))
                .then_some(())
        });
    }
}

#[test]
fn a_template_kubevirt_rejects_gets_a_warning_and_a_condition() {
    let mut h = Harness::start();
    h.start_controller("a", &[]);
    let mut bad = vm("bad", "Always");
    // A disk naming a volume that does not exist: KubeVirt's validation refuses the VMI.
    bad["spec"]["template"]["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "nosuchvolume", "disk": {"bus": "virtio"}}]);
    h.create(&bad);
    let events = h.wait_for("a warning event on the VM", T, || {
        let out = h.cluster.kubectl([
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.name=bad,type=Warning",
            "-o",
            "json",
        ]);
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let items = v["items"].as_array()?.clone();
        (!items.is_empty()).then_some(items)
    });
    assert!(
        events.iter().any(|e| e["reason"] == "FailedCreate"),
        "{events:?}"
    );
    let vm = h.wait_for("a Failure condition on the VM", T, || {
        let v = h.get("vm", "default", "bad")?;
        let has = v["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Failure" && c["status"] == "True");
        has.then_some(v)
    });
    assert!(
        h.get("vmi", "default", "bad").is_none(),
        "no VMI for a rejected template"
    );
    let cond = vm["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failure")
        .unwrap()
        .clone();
    assert!(
        cond["message"]
            .as_str()
            .is_some_and(|m| m.contains("nosuchvolume")),
        "the condition names the field: {cond}"
    );
    // Retries are rate-limited: a few per second at first, then backing off.
    std::thread::sleep(Duration::from_secs(5));
    let port = h.controller(0).metrics_port;
    let (_, body) = support::http_get(port, "/metrics");
    let retries = support::metric(
        &body,
        "kubevirt_workqueue_retries_total{name=\"virt-controller-vm\"}",
    )
    .unwrap_or(0.0);
    assert!(retries >= 1.0, "the failing VM is retried: {body}");
    assert!(
        retries < 40.0,
        "with backoff, not in a hot loop: {retries} retries in ~5 s"
    );
}
