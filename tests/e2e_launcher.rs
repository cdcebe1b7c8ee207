//! End to end: kvrs's virt-launcher-monitor + virt-launcher with real libvirt 11 and QEMU (TCG),
//! as UID 107 in a pod-like mount namespace, booting a Debian kernel + busybox initramfs.
//!
//! The pod: a temp directory bound over `/run` inside a private mount namespace
//! (`scripts/libvirt-sandbox.sh`), so `/var/run/kubevirt`, `/var/run/kubevirt-private`,
//! `/var/run/libvirt`, ... are the test's directories, exactly where KubeVirt's paths point.
//! The test plays virt-handler: it serves the notify socket, talks to `launcher-sock` with
//! kvrs-ipc's client, and checks the guest's serial console log.
//!
//! The guest comes from Debian packages fetched with `apt-get download` (nothing is installed on
//! the host): `linux-image-*-cloud-amd64` and `busybox-static`, unpacked with `dpkg-deb -x` into
//! an initramfs whose `/init` prints marker lines, reads the cloud-init NoCloud disk and powers off
//! on the ACPI power button.
//!
//! With `KVRS_E2E_FIGURES=1` the test prints the launcher's figures (benches/launcher-figures.sh).

#[path = "common/kernel_boot.rs"]
mod kernel_boot;
#[path = "common/notify.rs"]
#[allow(dead_code)] // each test reads the events its own way
mod notify;
#[path = "common/wait.rs"]
mod wait;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kvrs_ipc::{LauncherClient, VirtualMachineOptions};

const VMI_UID: &str = "6a1f3c2e-0000-4000-8000-00000000e2e0";
use kernel_boot::kernel_boot_vmi;
use kvrs_test_guest::pod::{PodDir, RunningMonitor, is_root, launcher_binaries, run};
use kvrs_test_guest::{AGENT_REBOOT_MARKER, BOOT_MARKER, POWER_MARKER};
use notify::serve_recorder;
use wait::wait_for;
const CLOUD_INIT_MARKER: &str = "KVRS-E2E: cloud-init user-data seen";
/// The guest's initramfs has no filesystem the agent can freeze: the guest formats its
/// (scratch) container disk as ext2, mounted with the built-in ext4 driver, so a freeze has a
/// filesystem to freeze.
const DATA_MOUNT: &str = "KVRS-RUN: mke2fs -q /dev/vda && mkdir -p /data && mount -t ext4 /dev/vda /data && echo KVRS-E2E: data mounted";
const DATA_MOUNTED_MARKER: &str = "KVRS-E2E: data mounted";

/// Starts the monitor as UID 107 in the pod's mount namespace.
fn start_monitor(pod: &PodDir, qemu_timeout: &str) -> RunningMonitor {
    pod.start_monitor("kvrs", "e2e", |m| m.qemu_timeout = qemu_timeout.into())
}

async fn domain_status(client: &LauncherClient) -> Option<(String, String)> {
    let json = client.get_domain().await.expect("GetDomain")?;
    let v: serde_json::Value = serde_json::from_str(&json).expect("domain JSON");
    Some((
        v["Status"]["Status"].as_str()?.to_string(),
        v["Status"]["Reason"].as_str().unwrap_or("").to_string(),
    ))
}

fn e2e_vmi() -> kvrs_core::VirtualMachineInstance {
    let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_value(kernel_boot_vmi(
        "e2e",
        VMI_UID,
        &[CLOUD_INIT_MARKER, DATA_MOUNT],
    ))
    .unwrap();
    kvrs_core::admission::admit(vmi, &kvrs_core::ClusterConfig::default())
        .expect("the e2e VMI is admitted")
}

/// VmRSS of a process in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        })
        .unwrap_or(false)
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test(flavor = "current_thread")]
async fn launcher_boots_a_guest_and_cleans_up() {
    assert!(
        is_root(),
        "e2e_launcher needs root (mount namespace, UID 107); run scripts/test-all.sh as root"
    );
    let figures = std::env::var_os("KVRS_E2E_FIGURES").is_some();
    launcher_binaries();
    let pod = PodDir::with_test_guest("e2e-boot", VMI_UID);

    let (recorder, notify) = serve_recorder(pod.path("kubevirt/domain-notify-pipe.sock")).await;

    let started = Instant::now();
    let mut monitor = start_monitor(&pod, "60s");
    let monitor_pid = monitor.id();
    let socket = pod.path("kubevirt/sockets/launcher-sock");
    wait_for("launcher-sock", Duration::from_secs(30), async || {
        socket.exists().then_some(())
    })
    .await;
    let ready = started.elapsed();
    let client = LauncherClient::connect(&socket)
        .await
        .expect("connect to launcher-sock");
    client.ping().await.expect("Ping");

    // SyncVirtualMachine -> Running.
    let vmi = e2e_vmi();
    let sync_started = Instant::now();
    client
        .sync_vmi(&vmi, VirtualMachineOptions::default())
        .await
        .unwrap_or_else(|e| panic!("SyncVirtualMachine: {e}\n{}", pod.launcher_log()));
    let sync_returned = sync_started.elapsed();
    // The handler heard that the domain runs before the sync's reply: a reply that overtook
    // that news left a handler with a started VMI beside a "Shutoff" domain (its ADDED
    // notification), which KubeVirt's rules delete.
    let told = recorder.seen();
    assert!(
        told.iter()
            .any(|(t, s, _)| t == "MODIFIED" && s == "Running"),
        "SyncVirtualMachine replied before the handler was told the domain runs: {told:?}"
    );
    wait_for("domain Running", Duration::from_secs(30), async || {
        (domain_status(&client).await?.0 == "Running").then_some(())
    })
    .await;
    let sync_to_running = sync_started.elapsed();

    // The guest boots and reads its cloud-init disk.
    wait_for(
        "the guest's serial console markers",
        Duration::from_secs(120),
        async || {
            let log = pod.serial_log();
            (log.contains(BOOT_MARKER) && log.contains(CLOUD_INIT_MARKER)).then_some(())
        },
    )
    .await;

    // The handler's notify server saw the domain defined (ADDED) and started (Running).
    wait_for("domain events", Duration::from_secs(10), async || {
        let seen = recorder.seen();
        (seen.iter().any(|(t, _, _)| t == "ADDED")
            && seen
                .iter()
                .any(|(t, s, _)| t == "MODIFIED" && s == "Running"))
        .then_some(())
    })
    .await;

    // A repeated sync of the running VMI changes nothing.
    client
        .sync_vmi(&vmi, VirtualMachineOptions::default())
        .await
        .expect("repeated SyncVirtualMachine");
    assert_eq!(domain_status(&client).await.unwrap().0, "Running");

    // Basic counters, QEMU version, an unimplemented RPC named in its error.
    let stats: serde_json::Value =
        serde_json::from_str(&client.get_domain_stats().await.unwrap().unwrap()).unwrap();
    assert_eq!(stats["Name"], "kvrs_e2e");
    assert!(stats["Cpu"]["Time"].as_u64().unwrap() > 0);
    let version = client.get_qemu_version().await.expect("GetQemuVersion");
    assert!(
        version.split('.').count() == 3 && !version.starts_with("0."),
        "{version}"
    );
    // The guest agent's info in KubeVirt's JSON shape (its content depends on whether the
    // guest's qemu-ga has connected yet: virt-handler's e2e checks that).
    let info: serde_json::Value =
        serde_json::from_str(&client.get_guest_info().await.expect("GetGuestInfo")).unwrap();
    assert!(
        info["os"].is_object() && info["fsInfo"].is_object(),
        "{info}"
    );
    // Freeze and unfreeze through the guest's real qemu-ga, as KubeVirt's snapshot controller
    // asks for them: the first freeze that succeeds needs the agent connected.
    let fs_freeze_status = async || -> Option<String> {
        let info: serde_json::Value =
            serde_json::from_str(&client.get_guest_info().await.ok()?).ok()?;
        info["fsFreezeStatus"].as_str().map(str::to_string)
    };
    wait_for(
        "the guest's ext2 data disk mounted",
        Duration::from_secs(60),
        async || pod.serial_log().contains(DATA_MOUNTED_MARKER).then_some(()),
    )
    .await;
    wait_for(
        "a freeze once the guest agent answers",
        Duration::from_secs(90),
        async || client.freeze(&vmi, 0).await.ok(),
    )
    .await;
    // The agent poller reads the state every 5 s, as KubeVirt's does.
    wait_for(
        "fsFreezeStatus frozen",
        Duration::from_secs(20),
        async || (fs_freeze_status().await? == "frozen").then_some(()),
    )
    .await;
    client
        .freeze(&vmi, 0)
        .await
        .expect("a second freeze of a frozen guest is a no-op");
    client.unfreeze(&vmi).await.expect("UnfreezeVirtualMachine");
    wait_for(
        "fsFreezeStatus thawed",
        Duration::from_secs(20),
        async || (fs_freeze_status().await? == "thawed").then_some(()),
    )
    .await;
    client
        .unfreeze(&vmi)
        .await
        .expect("an unfreeze of a thawed guest is a no-op");
    // A caller that never unfreezes: the launcher thaws the guest after the timeout.
    let frozen_at = Instant::now();
    client
        .freeze(&vmi, 12)
        .await
        .expect("a freeze with a 12 s unfreeze timeout (the poller reads the state every 5 s)");
    wait_for(
        "frozen for the timeout",
        Duration::from_secs(10),
        async || (fs_freeze_status().await? == "frozen").then_some(()),
    )
    .await;
    wait_for(
        "thawed by the launcher after the timeout, with no unfreeze",
        Duration::from_secs(30),
        async || (fs_freeze_status().await? == "thawed").then_some(()),
    )
    .await;
    assert!(
        frozen_at.elapsed() >= Duration::from_secs(11),
        "thawed after {:?}, before the 12 s timeout",
        frozen_at.elapsed()
    );

    // Soft reboot through the guest agent (KubeVirt's choice when the VMI says the agent is
    // connected): qemu-ga runs the guest's `/sbin/shutdown -r`, the guest reboots in the same
    // QEMU and boots again; the domain stays Running.
    let boots_before = pod.serial_log().matches(BOOT_MARKER).count();
    let mut with_agent = vmi.clone();
    with_agent.status.get_or_insert_default().conditions = Some(vec![
        serde_json::from_value(serde_json::json!({"type": "AgentConnected", "status": "True"}))
            .unwrap(),
    ]);
    client
        .soft_reboot(&with_agent)
        .await
        .unwrap_or_else(|e| panic!("SoftRebootVirtualMachine: {e}\n{}", pod.launcher_log()));
    wait_for(
        "the guest rebooted by its agent and booted again",
        Duration::from_secs(120),
        async || {
            let log = pod.serial_log();
            (log.contains(AGENT_REBOOT_MARKER) && log.matches(BOOT_MARKER).count() > boots_before)
                .then_some(())
        },
    )
    .await;
    assert_eq!(domain_status(&client).await.unwrap().0, "Running");
    // Neither the agent nor ACPI: KubeVirt's refusal, and the guest is not touched.
    let mut no_way = vmi.clone();
    no_way.spec.domain.features =
        Some(serde_json::from_value(serde_json::json!({"acpi": {"enabled": false}})).unwrap());
    let err = client
        .soft_reboot(&no_way)
        .await
        .expect_err("a soft reboot without agent or ACPI");
    assert!(
        err.to_string()
            .contains("VMI neither have the agent connected nor the ACPI feature enabled"),
        "{err}"
    );

    let err = client
        .get_sev_info()
        .await
        .expect_err("GetSEVInfo is not implemented");
    assert!(err.to_string().contains("SEV"), "{err}");

    // Memory while the domain runs: monitor + launcher.
    let launcher_pid = children_of(monitor_pid).into_iter().find(|p| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .is_ok_and(|c| c.trim() == "virt-launcher")
    });
    let launcher_pid = launcher_pid.expect("virt-launcher is the monitor's child");
    let (rss_monitor, rss_launcher) = (rss_kib(monitor_pid), rss_kib(launcher_pid));
    let qemu_pid = read_pid(&pod.path("libvirt/qemu/run/kvrs_e2e.pid")).expect("QEMU's PID file");
    let daemon_pids: Vec<u32> = ["libvirt/libvirtd.pid", "libvirt/virtlogd.pid"]
        .iter()
        .filter_map(|p| read_pid(&pod.path(p)))
        .collect();
    assert!(alive(qemu_pid));

    // Shutdown (ACPI): the guest powers off.
    client.shutdown(&vmi).await.expect("ShutdownVirtualMachine");
    wait_for(
        "Shutoff after Shutdown",
        Duration::from_secs(60),
        async || (domain_status(&client).await?.0 == "Shutoff").then_some(()),
    )
    .await;
    assert!(
        pod.serial_log().contains(POWER_MARKER),
        "the guest saw the power button"
    );
    assert!(!alive(qemu_pid), "QEMU exited after the guest powered off");

    // Sync again: the stopped domain starts again (new QEMU).
    client
        .sync_vmi(&vmi, VirtualMachineOptions::default())
        .await
        .expect("SyncVirtualMachine after shutdown");
    wait_for("Running again", Duration::from_secs(30), async || {
        (domain_status(&client).await?.0 == "Running").then_some(())
    })
    .await;
    let qemu_pid = read_pid(&pod.path("libvirt/qemu/run/kvrs_e2e.pid")).expect("QEMU's PID file");

    // Kill: destroyed at once.
    let kill_started = Instant::now();
    client.kill(&vmi).await.expect("KillVirtualMachine");
    let (status, reason) = domain_status(&client).await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("Shutoff", "Destroyed"));
    // Delete: the launcher exits, the monitor follows with the launcher's status.
    client.delete(&vmi).await.expect("DeleteVirtualMachine");
    let exit = loop {
        if let Some(status) = monitor.try_wait().unwrap() {
            break status;
        }
        assert!(
            kill_started.elapsed() < Duration::from_secs(20),
            "monitor did not exit after Kill+Delete\n{}",
            pod.launcher_log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let kill_to_exit = kill_started.elapsed();
    assert!(
        exit.success(),
        "monitor exit {exit:?}\n{}",
        pod.launcher_log()
    );
    for pid in [launcher_pid, qemu_pid].into_iter().chain(daemon_pids) {
        assert!(!alive(pid), "process {pid} outlived the monitor");
    }
    assert!(!socket.exists(), "launcher-sock removed on exit");
    let seen = recorder.seen();
    assert!(
        seen.iter()
            .any(|(_, s, r)| s == "Shutoff" && r == "Destroyed"),
        "Kill reached the notify server: {seen:?}"
    );
    drop(notify);

    // libvirt's own share of the sync (define + start), as the launcher logged it.
    let log = pod.launcher_log();
    let timing = |key: &str| -> f64 {
        log.split(key)
            .nth(1)
            .and_then(|r| {
                r.split(|c: char| c != '.' && !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(f64::NAN)
    };
    let libvirt_ms = timing("define_ms=") + timing("start_ms=");
    println!(
        "launcher figures: ready_s={:.3} sync_return_s={:.3} sync_to_running_s={:.3} libvirt_define_start_s={:.3} prepare_s={:.3} kill_to_monitor_exit_s={:.3} rss_monitor_kib={rss_monitor} rss_launcher_kib={rss_launcher}",
        ready.as_secs_f64(),
        sync_returned.as_secs_f64(),
        sync_to_running.as_secs_f64(),
        libvirt_ms / 1000.0,
        timing("prepare_ms=") / 1000.0,
        kill_to_exit.as_secs_f64()
    );
    if !figures {
        assert!(
            kill_to_exit < Duration::from_secs(10),
            "Kill+Delete -> monitor exit took {kill_to_exit:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn no_sync_within_qemu_timeout_fails_clearly() {
    assert!(
        is_root(),
        "e2e_launcher needs root (mount namespace, UID 107); run scripts/test-all.sh as root"
    );
    launcher_binaries();
    let pod = PodDir::new("e2e-timeout", VMI_UID);
    pod.hand_to_qemu_user();
    let started = Instant::now();
    let mut monitor = start_monitor(&pod, "2s");
    let exit = loop {
        if let Some(status) = monitor.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "monitor still running 30s after a 2s qemu timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(!exit.success(), "a launcher without a domain must fail");
    let log = pod.launcher_log();
    assert!(
        log.contains("waiting for a domain to be defined"),
        "clear message expected in:\n{log}"
    );
    assert!(!pod.path("kubevirt/sockets/launcher-sock").exists());
}

#[tokio::test(flavor = "current_thread")]
async fn monitor_cleans_up_after_a_killed_launcher() {
    assert!(
        is_root(),
        "e2e_launcher needs root (mount namespace, UID 107); run scripts/test-all.sh as root"
    );
    launcher_binaries();
    let pod = PodDir::with_test_guest("e2e-crash", VMI_UID);
    let mut monitor = start_monitor(&pod, "60s");
    let socket = pod.path("kubevirt/sockets/launcher-sock");
    wait_for("launcher-sock", Duration::from_secs(30), async || {
        socket.exists().then_some(())
    })
    .await;
    let client = LauncherClient::connect(&socket)
        .await
        .expect("connect to launcher-sock");
    client
        .sync_vmi(&e2e_vmi(), VirtualMachineOptions::default())
        .await
        .unwrap_or_else(|e| panic!("SyncVirtualMachine: {e}\n{}", pod.launcher_log()));
    let qemu_pid = wait_for("QEMU's PID file", Duration::from_secs(30), async || {
        read_pid(&pod.path("libvirt/qemu/run/kvrs_e2e.pid"))
    })
    .await;
    let daemon_pids: Vec<u32> = ["libvirt/libvirtd.pid", "libvirt/virtlogd.pid"]
        .iter()
        .filter_map(|p| read_pid(&pod.path(p)))
        .collect();
    assert_eq!(daemon_pids.len(), 2, "libvirt reported both daemons");
    let launcher_pid = children_of(monitor.id())
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "virt-launcher")
        })
        .expect("virt-launcher is the monitor's child");

    // The launcher dies without cleaning up: QEMU and the daemons are left to the monitor.
    run(Command::new("kill")
        .arg("-KILL")
        .arg(launcher_pid.to_string()));
    let started = Instant::now();
    let exit = loop {
        if let Some(status) = monitor.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "monitor did not exit after its launcher was killed\n{}",
            pod.launcher_log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        exit.code(),
        Some(137),
        "the monitor exits with the launcher's status"
    );
    for pid in [launcher_pid, qemu_pid].into_iter().chain(daemon_pids) {
        assert!(
            !alive(pid),
            "process {pid} outlived the monitor\n{}",
            pod.launcher_log()
        );
    }
}
