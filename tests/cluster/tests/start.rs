//! End-to-end checks of the test control plane: a real etcd + kube-apiserver (+ controller
//! manager and scheduler) built from tests/kube. A missing or unbuildable binary fails these
//! tests (never skips them).

mod common;
use common::{ok, text};

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use kvrs_test_cluster::{ClusterError, Component, Options, TestCluster};

/// Whether any process's command line mentions `dir` (`pgrep -f`, exit 1 = none).
fn processes_mentioning(dir: &str) -> String {
    let out = Command::new("pgrep")
        .args(["-a", "-f", dir])
        .stdin(Stdio::null())
        .output()
        .expect("pgrep");
    match out.status.code() {
        Some(0) => text(&out),
        Some(1) => String::new(),
        other => panic!(
            "pgrep failed ({other:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[track_caller]
fn assert_no_process_left(dir: &str) {
    // Killed processes are reaped before drop returns; allow the kernel a moment anyway.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_mentioning(dir);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind:\n{left}");
        thread::sleep(Duration::from_millis(200));
    }
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn full_cluster_enforces_rbac_collects_garbage_compacts_and_restarts() {
    let mut cluster = TestCluster::start(Options::full()).expect("cluster starts");
    eprintln!(
        "full cluster started in {:?} at {} (dir {})",
        cluster.started_in(),
        cluster.server_url(),
        cluster.dir().display()
    );
    assert_eq!(cluster.pids().len(), 4);
    assert!(cluster.server_url().starts_with("https://127.0.0.1:"));
    assert!(cluster.ca_cert_pem().contains("BEGIN CERTIFICATE"));
    assert!(!cluster.admin_token().is_empty());
    for c in [
        Component::Etcd,
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
    ] {
        assert!(cluster.log_path(c).is_file(), "{c} log");
    }

    // Admin works.
    assert_eq!(
        ok(cluster.kubectl(["get", "ns", "default", "-o", "jsonpath={.metadata.name}"])),
        "default"
    );
    assert_eq!(
        ok(cluster.kubectl(["auth", "can-i", "create", "pods"])),
        "yes"
    );

    // RBAC is enforced for a fresh ServiceAccount's token.
    ok(cluster.kubectl(["create", "serviceaccount", "probe", "-n", "default"]));
    let token = cluster.service_account_token("default", "probe");
    assert!(token.split('.').count() == 3, "a JWT: {token}");
    let sa = cluster.kubeconfig_for_token(&token);
    let whoami = ok(cluster.kubectl_with_kubeconfig(
        &sa,
        [
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    ));
    assert_eq!(whoami, "system:serviceaccount:default:probe");
    let can =
        cluster.kubectl_with_kubeconfig(&sa, ["auth", "can-i", "create", "pods", "-n", "default"]);
    assert_eq!(
        text(&can),
        "no",
        "stderr {}",
        String::from_utf8_lossy(&can.stderr)
    );
    assert!(!can.status.success());
    let denied = cluster.kubectl_with_kubeconfig(&sa, ["get", "configmaps", "-n", "default"]);
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );

    // The garbage collector deletes a ConfigMap whose owner ConfigMap was deleted.
    ok(cluster.kubectl(["create", "configmap", "owner", "-n", "default"]));
    let uid = ok(cluster.kubectl([
        "get",
        "cm",
        "owner",
        "-n",
        "default",
        "-o",
        "jsonpath={.metadata.uid}",
    ]));
    let dependent = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"dependent","namespace":"default",
            "ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"{uid}"}}]}},
            "data":{{"k":"v"}}}}"#
    );
    ok(cluster.kubectl_with_stdin(["apply", "-f", "-"], &dependent));
    ok(cluster.kubectl(["get", "cm", "dependent", "-n", "default"]));
    ok(cluster.kubectl(["delete", "cm", "owner", "-n", "default", "--wait=true"]));
    let started = Instant::now();
    wait_until(
        "the garbage collector to delete the dependent",
        Duration::from_secs(90),
        || {
            let out = cluster.kubectl(["get", "cm", "dependent", "-n", "default"]);
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound")
        },
    );
    eprintln!("garbage collected in {:?}", started.elapsed());

    // Compaction: a watch from a resourceVersion older than the compacted revision is 410 Gone.
    ok(cluster.kubectl([
        "create",
        "configmap",
        "watched",
        "-n",
        "default",
        "--from-literal=n=0",
    ]));
    let old_rv = ok(cluster.kubectl([
        "get",
        "cm",
        "watched",
        "-n",
        "default",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]));
    for n in 1..=3 {
        ok(cluster.kubectl([
            "patch",
            "cm",
            "watched",
            "-n",
            "default",
            "--type=merge",
            "-p",
            &format!(r#"{{"data":{{"n":"{n}"}}}}"#),
        ]));
    }
    let watch_path = format!(
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old_rv}&timeoutSeconds=2"
    );
    let before = ok(cluster.kubectl(["get", "--raw", &watch_path]));
    assert!(
        before.contains("\"MODIFIED\""),
        "watch before compaction: {before}"
    );
    let revision = cluster.compact_etcd().expect("compaction");
    assert!(revision > old_rv.parse::<i64>().unwrap());
    assert_eq!(cluster.etcd_revision().unwrap(), revision);
    let after = cluster.kubectl(["get", "--raw", &watch_path]);
    let said = format!(
        "{} {}",
        text(&after),
        String::from_utf8_lossy(&after.stderr)
    );
    assert!(
        said.contains("410") || said.contains("too old") || said.contains("Expired"),
        "watch after compaction: {said}"
    );
    eprintln!("watch after compaction: {said}");

    // A restart of the API server keeps the data (it is in etcd) and serves again.
    ok(cluster.kubectl([
        "create",
        "configmap",
        "survivor",
        "-n",
        "default",
        "--from-literal=k=kept",
    ]));
    let started = Instant::now();
    cluster.stop_apiserver().expect("stop");
    let stopped = started.elapsed();
    cluster.start_apiserver().expect("start again");
    eprintln!(
        "apiserver stopped in {stopped:?}, restarted in {:?}",
        started.elapsed()
    );
    assert_eq!(
        ok(cluster.kubectl([
            "get",
            "cm",
            "survivor",
            "-n",
            "default",
            "-o",
            "jsonpath={.data.k}"
        ])),
        "kept"
    );
    // The token still works after the restart (same signing key).
    let again = cluster.kubectl_with_kubeconfig(&sa, ["auth", "can-i", "create", "pods"]);
    assert_eq!(text(&again), "no");

    // Dropping kills everything and removes the directory.
    let dir = cluster.dir().to_path_buf();
    let dir_str = dir.display().to_string();
    assert!(
        !processes_mentioning(&dir_str).is_empty(),
        "pgrep sees the cluster"
    );
    drop(cluster);
    assert_no_process_left(&dir_str);
    if std::env::var_os("KVRS_KEEP_CLUSTER_DIR").is_none() {
        assert!(!dir.exists(), "{} removed", dir.display());
    }
}

#[test]
fn apiserver_only_cluster_stops_starts_and_cleans_up() {
    let mut cluster = TestCluster::start(Options::apiserver_only()).expect("cluster starts");
    eprintln!("etcd + apiserver started in {:?}", cluster.started_in());
    assert_eq!(cluster.pids().len(), 2);
    ok(cluster.kubectl(["get", "ns", "kube-system"]));
    // Without the controller manager pods still pass admission (no default ServiceAccount).
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},
        "spec":{"containers":[{"name":"c","image":"example.invalid/none"}]}}"#;
    ok(cluster.kubectl_with_stdin(["apply", "-f", "-"], pod));

    cluster.stop_apiserver().unwrap();
    assert!(!cluster.apiserver_running());
    assert!(
        !cluster
            .kubectl(["get", "ns", "default", "--request-timeout=3s"])
            .status
            .success()
    );
    cluster.start_apiserver().unwrap();
    assert!(matches!(
        cluster.start_apiserver(),
        Err(ClusterError::AlreadyRunning(Component::ApiServer))
    ));
    ok(cluster.kubectl(["get", "pod", "p", "-n", "default"]));

    let dir_str = cluster.dir().display().to_string();
    drop(cluster);
    assert_no_process_left(&dir_str);
}

/// Run only by `processes_die_with_an_aborted_test_process` (in a child process).
#[test]
#[ignore = "helper: run by processes_die_with_an_aborted_test_process"]
fn abort_helper() {
    if std::env::var_os("KVRS_CLUSTER_ABORT_HELPER").is_none() {
        return;
    }
    let cluster = TestCluster::start(Options::apiserver_only()).expect("cluster starts");
    println!("CLUSTER_DIR={}", cluster.dir().display());
    // No unwinding, no Drop: only the watchdog can clean up.
    std::process::abort();
}

#[test]
fn processes_die_with_an_aborted_test_process() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "abort_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KVRS_CLUSTER_ABORT_HELPER", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout
        .lines()
        .find_map(|l| l.split_once("CLUSTER_DIR=").map(|(_, d)| d.trim()))
        .unwrap_or_else(|| {
            panic!(
                "helper printed no dir ({}): {stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_owned();
    assert!(!out.status.success(), "the helper aborted");
    assert_no_process_left(&dir);
    // The directory itself is left behind by an abort; remove it.
    let _ = std::fs::remove_dir_all(&dir);
}
