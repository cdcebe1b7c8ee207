//! Mixed fleet: kvrs and KubeVirt v1.9.0's own Go code on the two ends of the handler<->launcher
//! gRPC protocol. The Go side is `kvrs-mixed` (tests/mixed, built by scripts/mixed-harness.sh),
//! which imports KubeVirt's packages from the kubevirt.io/kubevirt module:
//! pkg/virt-handler/cmd-client, pkg/virt-handler/notify-server (+ its pipe) and
//! pkg/virt-launcher/virtwrap/cmd-server.
//!
//! (a) `kubevirt_handler_drives_kvrs_launcher`: the real kvrs virt-launcher-monitor +
//!     virt-launcher (real libvirt + QEMU, UID 107, pod-like /run, as in e2e_launcher.rs) booting
//!     the kvrs-test-guest guest, driven by KubeVirt's cmd client, with KubeVirt's notify server
//!     behind KubeVirt's notify pipe on the pod's `domain-notify-pipe.sock`.
//! (b) `kvrs_handler_drives_kubevirt_launcher`: kvrs-ipc's `LauncherClient` against KubeVirt's
//!     cmd server (backed by the harness's in-memory domain manager, no libvirt).
//! (c) `kubevirt_launcher_boots_the_guest_under_the_comparison_harness`: KubeVirt's own
//!     virt-launcher-monitor + virt-launcher (tests/kvlauncher, scripts/kvlauncher-harness.sh)
//!     boot the same guest in the pod benches/compare-launchers.sh measures both launchers in.
//!
//! What passes (both directions, real run of `cargo test -p kvrs-tests --test mixed_fleet`):
//! (a) KubeVirt client -> kvrs launcher: NewClient (Info / version negotiation -> v1), Ping,
//!     SyncVirtualMachine (the VMI as Go's json.Marshal writes it), GetDomain until Running
//!     (kvrs's domain JSON decoded into KubeVirt's api.Domain), GetQemuVersion (QEMU's real
//!     version), GetDomainStats, SyncVirtualMachine again, ShutdownVirtualMachine (ACPI; repeated
//!     every 5 s, as virt-handler's resyncs do, until the guest listens and powers off), GetDomain
//!     until Shutoff/Shutdown, then — once the notify server has the Shutoff event, as
//!     virt-handler waits for its domain informer — DeleteDomain (the launcher exits, the
//!     monitor exits 0).
//!     KubeVirt's notify server, reached through KubeVirt's notify pipe, decodes every kvrs
//!     domain event: ADDED (Paused/StartingUp), MODIFIED Running, MODIFIED ShuttingDown,
//!     MODIFIED Shutoff/Shutdown, MODIFIED NoState/NonExistent after the delete.
//!     GetGuestInfo (required): KubeVirt's client decodes the kvrs launcher's guest-agent info
//!     (the guest runs the real qemu-ga; the agent's version is reported, since it may not have
//!     connected yet when the call is made).
//! (b) kvrs client -> KubeVirt server: connect (Info / version negotiation -> v1), Ping,
//!     SyncVirtualMachine, GetDomain (Running), GetQemuVersion, GetDomainStats, GetGuestInfo,
//!     GetUsers, GetFilesystems, Pause/Unpause, SoftReboot, Reset, Shutdown (Shutoff/Shutdown),
//!     Kill (Shutoff/Destroyed), Delete (no domain); an RPC the harness's manager does not
//!     implement (Freeze) comes back as kvrs's error carrying the server's message. KubeVirt's
//!     server decodes kvrs's VMI JSON for every command (SyncVMI ... DeleteVMI reach the manager).
//!
//! Both need root (e2e: mount namespace, UID 107) and fail — never skip — when Go or the harness
//! cannot be built.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvrs_ipc::{LauncherClient, VirtualMachineOptions};
use kvrs_test_guest::pod::{
    MonitorCommand, PodDir, is_root, launcher_binaries, repo_root, run, target_dir,
};

const VMI_UID: &str = "6a1f3c2e-0000-4000-8000-00000000f1ee";

/// kvrs-mixed, built (or found in ~/.cache/kvrs) by scripts/mixed-harness.sh. Panics with the
/// script's output when Go or the build fails: the mixed-fleet tests never skip.
fn harness() -> PathBuf {
    kvrs_tests::go_harness(
        "scripts/mixed-harness.sh",
        "Go >= 1.26, the Go module proxy and libvirt-dev",
    )
}

/// A child process killed (SIGTERM, then SIGKILL) if the test ends without reaping it.
struct Reaped(Option<Child>);

impl Reaped {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The monitor as UID 107 in the pod's mount namespace (every wrapper `exec`s).
fn start_monitor(pod: &PodDir) -> Child {
    let log = std::fs::File::create(pod.log_path()).unwrap();
    MonitorCommand::new("kvrs", "mixed", VMI_UID, &pod.dir)
        .command()
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start virt-launcher-monitor through libvirt-sandbox.sh")
}

/// The e2e guest's VMI, admitted (defaults applied) as virt-handler would receive it.
fn mixed_vmi() -> kvrs_core::VirtualMachineInstance {
    let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "mixed", "namespace": "kvrs", "uid": VMI_UID},
        "spec": {
            "domain": {
                "firmware": {"kernelBoot": {
                    "kernelArgs": "console=ttyS0 panic=-1",
                    "container": {"image": "example/kernel-boot", "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initramfs.gz"}
                }},
                "resources": {"requests": {"memory": "128Mi"}},
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}]
                }
            },
            "volumes": [{"name": "rootdisk", "containerDisk": {"image": "example/disk"}}]
        }
    }))
    .unwrap();
    kvrs_core::admission::admit(vmi, &kvrs_core::ClusterConfig::default())
        .expect("the mixed-fleet VMI is admitted")
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The harness's JSON lines.
fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn kubevirt_handler_drives_kvrs_launcher() {
    assert!(
        is_root(),
        "mixed_fleet needs root (mount namespace, UID 107); run scripts/test-all.sh as root"
    );
    let harness = harness();
    launcher_binaries();
    let pod = PodDir::with_test_guest("mixed-launcher", VMI_UID);
    let vmi_file = pod.dir.with_extension("vmi.json");
    std::fs::write(&vmi_file, serde_json::to_vec(&mixed_vmi()).unwrap()).unwrap();

    let mut monitor = Reaped(Some(start_monitor(&pod)));
    let socket = pod.path("kubevirt/sockets/launcher-sock");
    wait_until("launcher-sock", Duration::from_secs(30), || socket.exists());

    let out = Command::new(&harness)
        .arg("drive-launcher")
        .arg("--socket")
        .arg(&socket)
        .arg("--vmi")
        .arg(&vmi_file)
        .arg("--notify-socket")
        .arg(pod.path("kubevirt/domain-notify-pipe.sock"))
        .args(["--notify-owner", "107:107"])
        .args(["--running-timeout", "60s", "--shutoff-timeout", "180s"])
        .stdin(Stdio::null())
        .output()
        .expect("run kvrs-mixed drive-launcher");
    let _ = std::fs::remove_file(&vmi_file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = json_lines(&stdout);

    println!("KubeVirt v1.9.0 handler (cmd client + notify server) -> kvrs launcher:");
    for l in &lines {
        if let Some(call) = l["call"].as_str() {
            let detail: Vec<String> = [
                "until",
                "status",
                "reason",
                "polls",
                "seconds",
                "version",
                "guestAgentVersion",
            ]
            .iter()
            .filter(|k| !l[**k].is_null())
            .map(|k| format!("{k}={}", l[*k]))
            .collect();
            println!(
                "  {:<32} {}{} {}",
                call,
                if l["ok"] == true { "ok" } else { "FAILED" },
                l["error"]
                    .as_str()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default(),
                detail.join(" ")
            );
        } else if let Some(ev) = l["event"].as_str() {
            println!(
                "  notify event {ev:<19} {} {}",
                l["status"].as_str().unwrap_or(""),
                l["reason"].as_str().unwrap_or("")
            );
        }
    }
    let context = || {
        format!(
            "\n--- kvrs-mixed stdout\n{stdout}\n--- kvrs-mixed stderr (last 4000 bytes)\n{}\n--- launcher log (last 6000 bytes)\n{}",
            tail(&stderr, 4000),
            tail(&pod.launcher_log(), 6000)
        )
    };
    assert!(
        out.status.success(),
        "kvrs-mixed drive-launcher exited {}{}",
        out.status,
        context()
    );
    let passed = |call: &str, until: Option<&str>| {
        lines.iter().any(|l| {
            l["call"] == call
                && l["ok"] == true
                && until.is_none_or(|u| l["until"] == u && l["status"] == u)
        })
    };
    for (call, until) in [
        ("NewClient", None),
        ("Ping", None),
        ("SyncVirtualMachine", None),
        ("GetDomain", Some("Running")),
        ("notify:Running", None),
        ("GetGuestInfo", None),
        ("SyncVirtualMachine(repeat)", None),
        ("ShutdownVirtualMachine", None),
        ("GetDomain", Some("Shutoff")),
        ("notify:Shutoff", None),
        ("DeleteDomain", None),
    ] {
        assert!(
            passed(call, until),
            "{call} {until:?} did not pass{}",
            context()
        );
    }
    let events: Vec<(String, String)> = lines
        .iter()
        .filter_map(|l| {
            Some((
                l["event"].as_str()?.to_string(),
                l["status"].as_str().unwrap_or("").to_string(),
            ))
        })
        .collect();
    for (ty, status) in [
        ("ADDED", None),
        ("MODIFIED", Some("Running")),
        ("MODIFIED", Some("Shutoff")),
    ] {
        assert!(
            events
                .iter()
                .any(|(t, s)| t == ty && status.is_none_or(|st| s == st)),
            "KubeVirt's notify server did not receive {ty} {status:?} (got {events:?}){}",
            context()
        );
    }
    assert!(
        pod.serial_log().contains(kvrs_test_guest::POWER_MARKER),
        "the guest saw the ACPI power button\n{}",
        pod.serial_log()
    );

    // DeleteDomain: the launcher exits and the monitor follows, successfully.
    let started = Instant::now();
    let exit = loop {
        if let Some(status) = monitor.child().try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "monitor did not exit after DeleteDomain\n{}",
            pod.launcher_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        exit.success(),
        "monitor exit {exit:?}\n{}",
        pod.launcher_log()
    );
}

fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `Status.Status` and `Status.Reason` of the domain JSON GetDomain returned.
fn status_of(json: &str) -> (String, String) {
    let v: serde_json::Value = serde_json::from_str(json).expect("domain JSON");
    (
        v["Status"]["Status"].as_str().unwrap_or("").to_string(),
        v["Status"]["Reason"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn kvrs_handler_drives_kubevirt_launcher() {
    let harness = harness();
    let dir = std::env::temp_dir().join(format!("kvrs-mixed-server-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("launcher-sock");
    let mut server = Reaped(Some(
        Command::new(&harness)
            .args(["serve-launcher", "--socket"])
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kvrs-mixed serve-launcher"),
    ));
    let stdout = server.child().stdout.take().unwrap();
    let manager_calls = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    wait_until(
        "KubeVirt's cmd server socket",
        Duration::from_secs(20),
        || socket.exists(),
    );

    let vmi = mixed_vmi();
    let mut table: Vec<(&str, Result<String, String>)> = Vec::new();
    let client = LauncherClient::connect(&socket).await;
    let client = match client {
        Ok(c) => {
            table.push((
                "connect (Info, version negotiation)",
                Ok(format!("v{}", c.version())),
            ));
            c
        }
        Err(e) => panic!("connect to KubeVirt's cmd server: {e}"),
    };
    let domain = async || {
        client
            .get_domain()
            .await
            .map(|d| d.map(|j| status_of(&j)))
            .map_err(|e| e.to_string())
    };
    let s =
        |r: Result<(), kvrs_ipc::IpcError>| r.map(|()| String::new()).map_err(|e| e.to_string());

    table.push(("Ping", s(client.ping().await)));
    table.push((
        "SyncVirtualMachine",
        s(client
            .sync_vmi(&vmi, VirtualMachineOptions::default())
            .await),
    ));
    let d = domain().await;
    table.push(("GetDomain", d.clone().map(|d| format!("{d:?}"))));
    assert_eq!(
        d,
        Ok(Some(("Running".to_string(), "Unknown".to_string()))),
        "GetDomain after Sync"
    );
    let version = client.get_qemu_version().await.map_err(|e| e.to_string());
    assert_eq!(version.as_deref(), Ok("9.2.0"), "GetQemuVersion");
    table.push(("GetQemuVersion", version));
    let stats = client.get_domain_stats().await.map_err(|e| e.to_string());
    let stats_name = stats
        .clone()
        .ok()
        .flatten()
        .map(|j| serde_json::from_str::<serde_json::Value>(&j).unwrap()["Name"].clone());
    assert_eq!(
        stats_name,
        Some(serde_json::json!("kvrs_mixed")),
        "GetDomainStats: {stats:?}"
    );
    table.push(("GetDomainStats", stats.map(|j| j.unwrap_or_default())));
    table.push((
        "GetGuestInfo",
        client.get_guest_info().await.map_err(|e| e.to_string()),
    ));
    table.push((
        "GetUsers",
        client.get_users().await.map_err(|e| e.to_string()),
    ));
    table.push((
        "GetFilesystems",
        client.get_filesystems().await.map_err(|e| e.to_string()),
    ));

    let mut expect_state = async |call: &'static str,
                                  r: Result<(), kvrs_ipc::IpcError>,
                                  want: Option<(&str, &str)>| {
        let r = s(r);
        let got = domain().await;
        let want = want.map(|(a, b)| (a.to_string(), b.to_string()));
        let ok = r.is_ok() && got == Ok(want.clone());
        table.push((
            call,
            if ok {
                Ok(format!("{:?}", got.unwrap()))
            } else {
                Err(format!("{r:?}, then GetDomain {got:?}, wanted {want:?}"))
            },
        ));
    };
    expect_state(
        "PauseVirtualMachine",
        client.pause(&vmi).await,
        Some(("Paused", "User")),
    )
    .await;
    expect_state(
        "UnpauseVirtualMachine",
        client.unpause(&vmi).await,
        Some(("Running", "Unknown")),
    )
    .await;
    expect_state(
        "SoftRebootVirtualMachine",
        client.soft_reboot(&vmi).await,
        Some(("Running", "Unknown")),
    )
    .await;
    expect_state(
        "ResetVirtualMachine",
        client.reset(&vmi).await,
        Some(("Running", "Unknown")),
    )
    .await;
    expect_state(
        "ShutdownVirtualMachine",
        client.shutdown(&vmi).await,
        Some(("Shutoff", "Shutdown")),
    )
    .await;
    expect_state(
        "KillVirtualMachine",
        client.kill(&vmi).await,
        Some(("Shutoff", "Destroyed")),
    )
    .await;
    expect_state("DeleteVirtualMachine", client.delete(&vmi).await, None).await;

    // A command the harness's domain manager does not implement: the server's message arrives.
    let freeze = client.freeze(&vmi, 30).await;
    let freeze_msg = freeze
        .as_ref()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    table.push((
        "FreezeVirtualMachine (expected error)",
        if freeze_msg.contains("not implemented in the harness") {
            Ok(freeze_msg.clone())
        } else {
            Err(format!("{freeze:?}"))
        },
    ));
    drop(client);
    drop(server);
    let lines = manager_calls.join().unwrap();

    println!("kvrs handler (kvrs-ipc LauncherClient) -> KubeVirt v1.9.0 cmd server:");
    for (call, r) in &table {
        match r {
            Ok(d) => println!("  {call:<40} ok {}", tail(d, 80)),
            Err(e) => println!("  {call:<40} FAILED: {e}"),
        }
    }
    let manager: Vec<String> = json_lines(&lines.join("\n"))
        .iter()
        .filter_map(|l| l["manager"].as_str().map(str::to_string))
        .collect();
    println!("  domain manager calls made by KubeVirt's server: {manager:?}");
    let failed: Vec<_> = table.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "calls failed against KubeVirt's cmd server: {failed:#?}"
    );
    for want in [
        "SyncVMI",
        "PauseVMI",
        "UnpauseVMI",
        "SignalShutdownVMI",
        "KillVMI",
        "DeleteVMI",
    ] {
        assert!(
            manager.iter().any(|m| m == want),
            "KubeVirt's server never called {want}: {manager:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The comparison harness (scripts/kvlauncher-harness.sh): its driver and KubeVirt's launcher
/// image files. Panics with the script's output when the build fails: never skips.
fn kvlauncher_harness() -> PathBuf {
    kvrs_tests::go_harness(
        "scripts/kvlauncher-harness.sh",
        "Go >= 1.26, the Go module proxy and libvirt-dev",
    )
}

/// (c) KubeVirt v1.9.0's own virt-launcher-monitor + virt-launcher (built unchanged from the
/// module) boot the kvrs-test-guest under the pod harness benches/compare-launchers.sh measures
/// both launchers with (scripts/launcher-pod-harness.sh), driven by KubeVirt's cmd client and
/// notify server: Sync -> Running, the guest's init runs, Kill -> Shutoff, Delete -> the pod
/// exits 0. This is what makes the comparison's KubeVirt side a real run, not a copied figure.
#[test]
fn kubevirt_launcher_boots_the_guest_under_the_comparison_harness() {
    assert!(
        is_root(),
        "mixed_fleet needs root (mount + PID namespaces, UID 107); run scripts/test-all.sh as root"
    );
    let dir = kvlauncher_harness();
    let work = std::env::temp_dir().join(format!("kvrs-mixed-kvlauncher-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    run(Command::new("chmod").arg("755").arg(&work));
    kvrs_test_guest::write_images(&target_dir(), &work.join("guest")).expect("guest images");
    let input: kvrs_core::VirtualMachineInstance = serde_json::from_slice(
        &std::fs::read(repo_root().join("tests/kvlauncher/vmi.json")).unwrap(),
    )
    .expect("tests/kvlauncher/vmi.json is a VMI");
    let vmi = kvrs_core::admission::admit(input, &kvrs_core::ClusterConfig::default())
        .expect("the comparison VMI is admitted");
    let vmi_file = work.join("vmi.json");
    std::fs::write(&vmi_file, serde_json::to_vec(&vmi).unwrap()).unwrap();

    let out = Command::new(dir.join("kvrs-kvlauncher"))
        .arg("measure")
        .args([
            "--kind",
            "kubevirt",
            "--monitor",
            "/usr/bin/virt-launcher-monitor",
        ])
        .arg("--kubevirt-root")
        .arg(dir.join("kubevirt-root"))
        .arg("--pod-script")
        .arg(repo_root().join("scripts/launcher-pod-harness.sh"))
        .arg("--guest")
        .arg(work.join("guest"))
        .arg("--vmi")
        .arg(&vmi_file)
        .arg("--work")
        .arg(&work)
        .stdin(Stdio::null())
        .output()
        .expect("run kvrs-kvlauncher measure");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = json_lines(&stdout);
    let context = || {
        let log = lines
            .iter()
            .find_map(|l| l["log"].as_str())
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        format!(
            "\n--- driver stdout\n{}\n--- driver stderr\n{}\n--- pod log (last 6000 bytes)\n{}",
            tail(&stdout, 6000),
            String::from_utf8_lossy(&out.stderr),
            tail(&log, 6000)
        )
    };
    assert!(
        out.status.success(),
        "the driver exited {}{}",
        out.status,
        context()
    );
    let figures = lines
        .iter()
        .find_map(|l| l.get("figures"))
        .unwrap_or_else(|| panic!("no figures line{}", context()));
    println!("KubeVirt v1.9.0 launcher under the comparison harness: {figures}");
    // The monitor and the launcher were found and measured while the guest ran.
    for key in [
        "rss_monitor_kib",
        "rss_launcher_kib",
        "rss_libvirtd_kib",
        "rss_qemu_kib",
    ] {
        assert!(
            figures[key].as_u64().is_some_and(|v| v > 0),
            "{key} = {} (a process of the pod was not found){}",
            figures[key],
            context()
        );
    }
    let statuses: Vec<(&str, &str)> = lines
        .iter()
        .filter_map(|l| Some((l["event"].as_str()?, l["status"].as_str()?)))
        .collect();
    for (ty, status) in [
        ("ADDED", None),
        ("MODIFIED", Some("Running")),
        ("MODIFIED", Some("Shutoff")),
    ] {
        assert!(
            statuses
                .iter()
                .any(|(t, s)| *t == ty && status.is_none_or(|st| *s == st)),
            "KubeVirt's notify server did not receive {ty} {status:?} from KubeVirt's launcher \
             (got {statuses:?}){}",
            context()
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
