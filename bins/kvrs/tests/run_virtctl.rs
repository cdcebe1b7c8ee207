//! KubeVirt v1.9.0's own virtctl against `kvrs run`: `virtctl-harness` (tests/virtctl, built by
//! `scripts/virtctl-harness.sh`) with the run's kubeconfig pauses and unpauses the VMI, reads
//! the guest agent's `guestosinfo`, types into the serial console and opens the VNC display
//! (an RFB handshake through `virtctl vnc --proxy-only`), all answered by the
//! embedded API server's VMI subresources (virt-api's decisions, the in-process handler's REST
//! logic on the launcher). Every real component runs (API server, virt-controller,
//! virt-handler, the kubelet with runc, virt-launcher, libvirt, QEMU, the kvrs-test-guest
//! busybox guest with qemu-ga and a shell on its console). Needs root, as `kvrs run` does.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kvrs_test_guest::pod::{is_root, launcher_binaries, repo_root, target_dir};
use kvrs_test_guest::virtctl::{Session, Virtctl, rfb_handshake};
use serde_json::{Value, json};

fn images() -> PathBuf {
    let dir = target_dir().join("kvrs-run-images");
    kvrs_test_guest::write_images(&target_dir(), &dir).expect("the guest images");
    dir
}

/// The run fixture with a shell on the guest's serial console (a `KVRS-RUN` line of its
/// cloud-init user-data).
fn manifest() -> String {
    std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the run fixture")
        .replace(
            "              KVRS-E2E: hello from cloud-init\n",
            "              KVRS-E2E: hello from cloud-init\n\
             \x20             KVRS-RUN: sh -i </dev/ttyS0 >/dev/ttyS0 2>&1\n",
        )
}

/// `kubectl get ARGS -o json` against the run's API server.
fn get_json(kubeconfig: &Path, args: &[&str]) -> Option<Value> {
    let kubectl = kvrs_test_cluster::locate_binaries().ok()?.join("kubectl");
    let cache = tempfile::tempdir().ok()?;
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("get")
        .args(args)
        .args(["-o", "json"])
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// The VMI `guest` as the run's API server has it.
fn vmi(kubeconfig: &Path) -> Option<Value> {
    get_json(kubeconfig, &["vmi", "guest"])
}

fn paused(vmi: &Value) -> Option<&Value> {
    vmi["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Paused")
}

/// Polls `f` until it answers, at most `timeout`.
fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn virtctl_pauses_reads_the_agent_and_uses_the_console_and_vnc_of_a_kvrs_run_vm() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let (monitor, _) = launcher_binaries();
    assert_eq!(
        monitor.parent(),
        Path::new(env!("CARGO_BIN_EXE_kvrs")).parent(),
        "the launcher binaries are built beside kvrs"
    );
    let bin = kvrs_test_guest::virtctl::harness();
    let dir = tempfile::tempdir().unwrap();
    let vm = dir.path().join("vm.yaml");
    std::fs::write(&vm, manifest()).unwrap();
    let state = PathBuf::from(format!("/tmp/kvrs-run-virtctl-{}", std::process::id()));
    let pods = PathBuf::from(format!("/tmp/kpv{}", std::process::id() % 10_000));
    let mut run = Command::new(env!("CARGO_BIN_EXE_kvrs"))
        .arg("run")
        .arg(&vm)
        .arg("--images")
        .arg(images())
        .arg("--state-dir")
        .arg(&state)
        .arg("--pods-dir")
        .arg(&pods)
        .args(["--timeout-seconds", "240"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // A file, not a pipe: the run's logs must never wait for this test to read them.
        .stderr(std::fs::File::create(dir.path().join("run.err")).unwrap())
        .spawn()
        .expect("run kvrs");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let (out, lines) = (run.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        })
    };
    // Whatever fails below, the run is stopped (SIGTERM: the VM stopped, everything removed).
    struct Stop(u32);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.to_string()])
                .status();
        }
    }
    let stop = Stop(run.id());
    let seen = || lines.lock().unwrap().join("\n");
    wait_for(
        "the guest agent connected",
        Duration::from_secs(240),
        || seen().contains("guest agent connected").then_some(()),
    );
    let kubeconfig = state.join("kubeconfig");
    let virtctl = Virtctl {
        bin,
        kubeconfig,
        namespace: "default".into(),
    };

    // pause / unpause: the handler pauses the domain, its status update writes the condition.
    let out = virtctl.ok(&["pause", "vmi", "guest"]);
    assert_eq!(out, "VMI guest was scheduled to pause\n");
    let v = wait_for("the Paused condition", Duration::from_secs(60), || {
        vmi(&virtctl.kubeconfig).filter(|v| paused(v).is_some())
    });
    assert_eq!(paused(&v).unwrap()["reason"], "PausedByUser", "{v}");
    let err = virtctl.refused(&["pause", "vmi", "guest"]);
    assert!(err.contains("VMI is already paused"), "{err}");
    let out = virtctl.ok(&["unpause", "vmi", "guest"]);
    assert_eq!(out, "VMI guest was scheduled to unpause\n");
    wait_for(
        "the Paused condition removed",
        Duration::from_secs(60),
        || vmi(&virtctl.kubeconfig).filter(|v| paused(v).is_none()),
    );
    let err = virtctl.refused(&["unpause", "vmi", "guest"]);
    assert!(err.contains("VMI is not paused"), "{err}");

    // guestosinfo: the agent's report through the launcher.
    let out = virtctl.ok(&["guestosinfo", "guest"]);
    let info: Value = serde_json::from_str(&out).expect("guestosinfo JSON");
    assert_eq!(info["os"]["id"], kvrs_test_guest::OS_ID, "{info}");
    assert_eq!(
        info["os"]["prettyName"],
        kvrs_test_guest::OS_PRETTY_NAME,
        "{info}"
    );

    // The serial console: a command typed, its answer read; Ctrl+] ends virtctl.
    let mut console = Session::start(
        &virtctl,
        &["console", "guest", "--timeout=1"],
        &dir.path().join("console.err"),
    );
    console
        .ask("echo KVRS-VIRTCTL-$((6*7))", "KVRS-VIRTCTL-42")
        .unwrap_or_else(|e| panic!("{e}\nkvrs run:\n{}", seen()));
    console.type_in(&[29]);
    let status = console
        .wait(Duration::from_secs(20))
        .expect("virtctl console ends after Ctrl+]");
    assert!(status.success(), "virtctl console after Ctrl+]: {status}");
    drop(console);

    // vnc --proxy-only: the port it prints, an RFB handshake through it to QEMU's VNC server.
    let vnc = Session::start(
        &virtctl,
        &["vnc", "guest", "--proxy-only"],
        &dir.path().join("vnc.err"),
    );
    let port = wait_for("virtctl vnc's port", Duration::from_secs(30), || {
        let out = vnc.stdout();
        let v: Value = serde_json::from_str(out.lines().next()?).ok()?;
        v["port"].as_u64().and_then(|p| u16::try_from(p).ok())
    });
    let server = rfb_handshake(port);
    assert_eq!(server.version, "RFB 003.008");
    assert!(
        server.width > 0 && server.height > 0,
        "a {}x{} display",
        server.width,
        server.height
    );
    drop(vnc);

    // virtctl migrate: a dry run creates nothing; then KubeVirt's migration object is
    // created and the run's migration controller takes it up (a phase is written; with one node
    // the target pod has nowhere to go, so no further claim is made here).
    let migrations = || {
        get_json(&virtctl.kubeconfig, &["vmim", "-n", "default"])
            .map(|l| l["items"].clone())
            .unwrap_or(Value::Null)
    };
    virtctl.ok(&["migrate", "guest", "--dry-run"]);
    assert_eq!(migrations(), json!([]), "a dry run creates no migration");
    virtctl.ok(&["migrate", "guest"]);
    let created = migrations()[0].clone();
    assert_eq!(created["spec"]["vmiName"], "guest", "{created}");
    assert!(
        created["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kubevirt-migrate-vm-")),
        "{created}"
    );
    wait_for(
        "the migration controller writes the migration's phase",
        Duration::from_secs(30),
        || {
            migrations()[0]["status"]["phase"]
                .as_str()
                .map(str::to_string)
        },
    );

    // A VMI that does not exist: KubeVirt's not-found.
    let err = virtctl.refused(&["pause", "vmi", "absent"]);
    assert!(
        err.contains(r#"virtualmachineinstance.kubevirt.io "absent" not found"#),
        "{err}"
    );

    drop(stop);
    let status = run.wait().expect("kvrs run exits");
    reader.join().unwrap();
    let stderr = std::fs::read_to_string(dir.path().join("run.err")).unwrap_or_default();
    let stdout = seen();
    assert!(status.success(), "kvrs run: {status}\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("stopped; nothing left behind"),
        "{stdout}\n{stderr}"
    );
    assert!(
        !state.exists(),
        "the state directory {} is removed",
        state.display()
    );
}
