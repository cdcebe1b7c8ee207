//! virt-controller's availability on a real kube-apiserver: two replicas with one leader, the
//! standby taking over when the leader is killed, an early hand-over on SIGTERM, and watch
//! streams cut by an API-server restart after an etcd compaction — with no duplicate VMI or pod.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Harness, http_get, vm};

const T: Duration = Duration::from_secs(60);

fn holder(h: &Harness) -> String {
    let out = h.cluster.kubectl([
        "get",
        "lease",
        "-n",
        "kubevirt",
        "virt-controller",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn leads(h: &Harness, i: usize) -> bool {
    http_get(h.metrics_port(i), "/leader").0 == 200
}

/// Live launcher pods per VMI name, over every VMI of the namespace.
fn assert_one_pod_per_vmi(h: &Harness) {
    for vmi in h.list("vmi", "default", "") {
        let name = vmi["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let live: Vec<Value> = h
            .list("pods", "default", &format!("vm.kubevirt.io/name={name}"))
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        assert!(live.len() <= 1, "{name}: {} live launcher pods", live.len());
    }
}

fn sigterm(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn one_replica_leads_and_the_standby_takes_over() {
    let mut h = Harness::start();
    let a = h.start_controller("a", &[]);
    h.wait_for("a leads", T, || (holder(&h) == "a").then_some(()));
    let b = h.start_controller("b", &[]);
    h.wait_for("b up as a standby", T, || {
        (http_get(h.metrics_port(b), "/readyz").0 == 200).then_some(())
    });
    assert!(!leads(&h, b), "the standby does not lead");
    assert!(leads(&h, a));

    for name in ["ha1", "ha2", "ha3"] {
        h.create(&vm(name, "Always"));
    }
    for name in ["ha1", "ha2", "ha3"] {
        h.wait_live_vmi("default", name, T);
        h.wait_for(&format!("{name}: launcher pod"), T, || {
            (!h.list("pods", "default", &format!("vm.kubevirt.io/name={name}"))
                .is_empty())
            .then_some(())
        });
    }
    // Only the leader worked: the standby processed no key (its work-duration histograms are
    // empty), and the events came from KubeVirt's source.
    let processed = |i: usize| -> f64 {
        http_get(h.metrics_port(i), "/metrics")
            .1
            .lines()
            .filter(|l| l.starts_with("kubevirt_workqueue_work_duration_seconds_count"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(processed(a) > 0.0, "the leader processes keys");
    assert_eq!(processed(b), 0.0, "the standby processes none");
    let out = h
        .cluster
        .kubectl(["get", "events", "-n", "default", "-o", "json"]);
    let events: Value = serde_json::from_slice(&out.stdout).expect("events");
    let sources: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        // kvrs's events (kube-controller-manager records its own about nodes).
        .filter(|e| {
            matches!(
                e["involvedObject"]["kind"].as_str(),
                Some("VirtualMachine" | "VirtualMachineInstance")
            )
        })
        .filter_map(|e| e["source"]["component"].as_str())
        .collect();
    assert!(!sources.is_empty(), "the leader records events");
    assert!(
        sources.iter().all(|c| *c == "virtualmachine-controller"),
        "{sources:?}"
    );

    // SIGKILL the leader: b leads within the lease duration (4 s) plus a retry or two.
    let killed = Instant::now();
    h.controller(a).child.kill().expect("kill a");
    h.wait_for("b leads", Duration::from_secs(20), || {
        (holder(&h) == "b").then_some(())
    });
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(12), "take-over took {took:?}");
    h.wait_for("b serves as leader", T, || leads(&h, b).then_some(()));

    // b converges what a left, and new work.
    h.create(&vm("ha4", "Always"));
    for name in ["ha1", "ha2", "ha3", "ha4"] {
        h.run_launcher_pod("default", name, "node01");
    }
    for name in ["ha1", "ha2", "ha3", "ha4"] {
        h.wait_for(&format!("{name} Scheduled"), T, || {
            let v = h.get("vmi", "default", name)?;
            (v["status"]["phase"] == "Scheduled").then_some(())
        });
    }
    assert_eq!(h.list("vmi", "default", "").len(), 4, "one VMI per VM");
    assert_one_pod_per_vmi(&h);

    // SIGTERM: b hands the lease over at once instead of letting it expire.
    let c = h.start_controller("c", &[]);
    let pid = h.controller(b).child.id();
    let stopped = Instant::now();
    sigterm(pid);
    h.wait_for("c leads after b's release", Duration::from_secs(20), || {
        (holder(&h) == "c").then_some(())
    });
    assert!(
        stopped.elapsed() < Duration::from_secs(4),
        "released early: c led after {:?} (the lease lasts 4 s)",
        stopped.elapsed()
    );
    let status = h.controller(b).child.wait().expect("b exits");
    assert!(status.success(), "b exits cleanly on SIGTERM: {status}");
    h.wait_for("c serves as leader", T, || leads(&h, c).then_some(()));
}

#[test]
fn a_compacted_etcd_and_a_restarted_apiserver_lose_nothing() {
    let mut h = Harness::start();
    // KubeVirt's lease timing: a restart of a few seconds stays within the renew deadline, so
    // the same replica rides through it on relisted watches.
    h.start_controller(
        "a",
        &[
            "--lease-duration-seconds",
            "15",
            "--renew-deadline-seconds",
            "10",
            "--retry-period-seconds",
            "2",
        ],
    );
    h.create(&vm("w1", "Always"));
    h.create(&vm("w2", "Always"));
    h.wait_live_vmi("default", "w1", T);
    h.wait_live_vmi("default", "w2", T);

    // Cut every watch: compact etcd (old resourceVersions are gone: 410 on resume) and restart
    // the API server.
    h.cluster.compact_etcd().expect("compaction");
    h.cluster.restart_apiserver().expect("apiserver restart");

    // Work that arrives after the restart is seen (the watches relisted) ...
    h.create(&vm("w3", "Always"));
    h.wait_live_vmi("default", "w3", T);
    // ... and so is a deletion.
    h.delete("vm", "default", "w2", &[]);
    h.wait_for("w2 gone", T, || {
        h.finish_deleted_pods("default", "w2");
        (h.get("vm", "default", "w2").is_none() && h.get("vmi", "default", "w2").is_none())
            .then_some(())
    });
    for name in ["w1", "w3"] {
        h.run_launcher_pod("default", name, "node01");
        h.wait_for(&format!("{name} Scheduled"), T, || {
            let v = h.get("vmi", "default", name)?;
            (v["status"]["phase"] == "Scheduled").then_some(())
        });
    }
    assert_eq!(h.list("vmi", "default", "").len(), 2);
    assert_one_pod_per_vmi(&h);
}
