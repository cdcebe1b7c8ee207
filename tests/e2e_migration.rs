//! End to end: a live migration between two kvrs launchers on this machine, each in its own
//! pod-like mount namespace with its own libvirt daemon and QEMU (TCG: the pods' UID 107 cannot
//! open the host's root-only /dev/kvm), as KubeVirt v1.9.0 does it between two nodes.
//!
//! The test plays both virt-handlers. KubeVirt's handlers connect the pods through their
//! migration proxy: the source pod's `/var/run/kubevirt/migrationproxy/<uid>-source.sock`
//! (libvirt's peer-to-peer connection), `<uid>-49152-source.sock` (QEMU's memory stream) and
//! `<uid>-49153-source.sock` (the disks' NBD stream) reach, on the target, its libvirt socket and
//! the sockets its QEMU listens on at the same paths. Here virt-handler's own proxy does it
//! (`kvrs_virt_handler::migration_proxy`): a target manager listening on TCP with mutual TLS
//! (certificates from virt-api's CA code) in front of the target pod's sockets, and a source
//! manager binding the three sockets in the source pod, given the target's published ports —
//! the two handlers' halves, on loopback.
//!
//! Proof the guest moved with its memory: a shell loop in the guest prints a counter, the
//! kernel's boot id and a random pattern it keeps in RAM every second; the target's serial
//! console (a new file, written by the target's virtlogd) continues the count with the same boot
//! id and pattern, and never shows a boot.

#[path = "common/kernel_boot.rs"]
mod kernel_boot;
#[path = "common/notify.rs"]
#[allow(dead_code)] // each test reads the events its own way
mod notify;
#[path = "common/wait.rs"]
mod wait;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kernel_boot::kernel_boot_vmi;
use kvrs_ipc::{LauncherClient, VirtualMachineOptions};
use kvrs_test_guest::pod::{PodDir, RunningMonitor, is_root, launcher_binaries};
use kvrs_test_guest::ticks::{TICK_LOOP, assert_continues, ticks};
use kvrs_virt_handler::migration_proxy::{
    MigrationTls, ProxyManager, TargetSocket, migration_ports, proxy_key,
};
use notify::{Recorder, serve_recorder};
use wait::wait_for;

const VMI_UID: &str = "6a1f3c2e-0000-4000-8000-0000000e2e3a";

/// One migration at a time: each runs two guests under TCG on a small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// virt-handler's migration proxies of a migration from `src` to `tgt`: the target's listener
/// in front of its libvirt socket and QEMU's two incoming sockets, the source's three sockets
/// forwarding to the ports it published (mutual TLS between them).
async fn migration_proxies(src: &PodDir, tgt: &PodDir) -> (ProxyManager, ProxyManager) {
    let tls = migration_tls();
    let target = ProxyManager::new(tls.clone(), None);
    let mut sockets = vec![TargetSocket {
        root: tgt.dir.clone(),
        relative: "libvirt/virtqemud-sock".into(),
    }];
    for port in migration_ports(true) {
        sockets.push(TargetSocket {
            root: tgt.dir.clone(),
            relative: PathBuf::from("kubevirt/migrationproxy")
                .join(format!("{}-source.sock", proxy_key(VMI_UID, port))),
        });
    }
    target
        .start_target_listener(VMI_UID, sockets)
        .await
        .expect("the target's proxy");
    let ports = target.target_listener_ports(VMI_UID);
    assert_eq!(ports.len(), 3, "{ports:?}");
    // The source pod's libvirt and QEMU run as 107.
    let source = ProxyManager::new(tls, Some((107, 107)));
    source
        .start_source_listener(VMI_UID, "127.0.0.1", &ports, &src.path("kubevirt"))
        .await
        .expect("the source's proxy");
    (source, target)
}

/// One CA's serving and client certificates for both handlers.
fn migration_tls() -> MigrationTls {
    use kvrs_virt_handler::migration_proxy::tls::PemPair;
    let pki = kvrs_virt_api::certs::throwaway_pki("kvrs-virt-handler").expect("certificates");
    let (ca, serving, client) = (pki.ca, pki.serving, pki.client);
    MigrationTls::new(
        PemPair {
            cert: serving.0.as_bytes(),
            key: serving.1.as_bytes(),
        },
        PemPair {
            cert: client.0.as_bytes(),
            key: client.1.as_bytes(),
        },
        ca.as_bytes(),
    )
    .expect("the migration TLS configurations")
}

/// The figure settings of benches/migration-figures.sh, read from the environment; all unset
/// is the test's own default (128 MiB, idle guest, nothing printed).
struct FigureSettings {
    print: bool,
    memory: Option<String>,
    dirty_mib: u32,
}

fn figure_settings() -> FigureSettings {
    let memory = std::env::var("KVRS_E2E_MIGRATION_MEMORY").ok();
    if let Some(m) = &memory {
        // A typo must not silently measure the default guest.
        let digits = m.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        assert!(
            digits.parse::<u64>().is_ok_and(|n| n > 0) && matches!(&m[digits.len()..], "Mi" | "Gi"),
            "KVRS_E2E_MIGRATION_MEMORY={m:?}: not a memory quantity such as 256Mi"
        );
    }
    let dirty_mib = match std::env::var("KVRS_E2E_MIGRATION_DIRTY_MIB") {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            panic!("KVRS_E2E_MIGRATION_DIRTY_MIB={v:?}: not a whole number of MiB")
        }),
        Err(_) => 0,
    };
    FigureSettings {
        print: std::env::var_os("KVRS_E2E_MIGRATION_FIGURES").is_some(),
        memory,
        dirty_mib,
    }
}

/// The guest loop dirtying memory: 1 MiB of random bytes drawn once (so QEMU cannot send zero
/// pages), then a `mib` MiB file in the guest's RAM-backed root rewritten from it without end,
/// in the background so the tick loop after it still runs.
fn dirty_loop(mib: u32) -> String {
    format!(
        "KVRS-RUN: (head -c 1048576 /dev/urandom >/dirty-src; while true; do n=0; while [ $n -lt {mib} ]; do cat /dirty-src; n=$((n+1)); done >/dirty; done) &"
    )
}

fn vmi(with_migration: Option<&str>) -> kvrs_core::VirtualMachineInstance {
    let settings = figure_settings();
    let dirty = dirty_loop(settings.dirty_mib);
    let mut lines = Vec::new();
    if settings.dirty_mib > 0 {
        lines.push(dirty.as_str());
    }
    lines.push(TICK_LOOP);
    let mut v = kernel_boot_vmi("mig", VMI_UID, &lines);
    if let Some(memory) = settings.memory {
        v["spec"]["domain"]["resources"]["requests"]["memory"] = memory.into();
    }
    let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_value(v).unwrap();
    let vmi = kvrs_core::admission::admit(vmi, &kvrs_core::ClusterConfig::default())
        .expect("the migration VMI is admitted");
    let Some(uid) = with_migration else {
        return vmi;
    };
    // What the handlers have recorded once a migration is under way: container disks and
    // cloud-init make it a block migration over Unix sockets.
    let mut v = serde_json::to_value(&vmi).unwrap();
    v["status"] = serde_json::json!({
        "migrationMethod": "BlockMigration",
        "migrationTransport": "Unix",
        "migrationState": {
            "migrationUid": uid,
            "sourceState": {"migrationUID": uid},
            "targetState": {"migrationUID": uid}
        }
    });
    serde_json::from_value(v).unwrap()
}

/// `(Status, Reason, Spec.Metadata.KubeVirt.Migration)` of the launcher's domain.
async fn domain(client: &LauncherClient) -> Option<(String, String, serde_json::Value)> {
    let json = client.get_domain().await.expect("GetDomain")?;
    let v: serde_json::Value = serde_json::from_str(&json).expect("domain JSON");
    Some((
        v["Status"]["Status"].as_str()?.to_string(),
        v["Status"]["Reason"].as_str().unwrap_or("").to_string(),
        v["Spec"]["Metadata"]["KubeVirt"]["Migration"].clone(),
    ))
}

struct Side {
    pod: PodDir,
    monitor: RunningMonitor,
    client: LauncherClient,
    recorder: Arc<Recorder>,
    _notify: kvrs_ipc::ServerHandle,
}

async fn start_side(tag: &str, qemu_timeout: &str) -> Side {
    let pod = PodDir::with_test_guest(&format!("e2e-mig-{tag}"), VMI_UID);
    let (recorder, notify) = serve_recorder(pod.path("kubevirt/domain-notify-pipe.sock")).await;
    let monitor = pod.start_monitor("kvrs", "mig", |m| m.qemu_timeout = qemu_timeout.into());
    let socket = pod.path("kubevirt/sockets/launcher-sock");
    wait_for("launcher-sock", Duration::from_secs(60), async || {
        socket.exists().then_some(())
    })
    .await;
    let client = LauncherClient::connect(&socket)
        .await
        .expect("connect to launcher-sock");
    Side {
        pod,
        monitor,
        client,
        recorder,
        _notify: notify,
    }
}

impl Side {
    /// Kill + Delete, as the handler ends a pod's domain; the monitor then exits.
    async fn stop(mut self) {
        let vmi = vmi(None);
        let _ = self.client.kill(&vmi).await;
        let _ = self.client.delete(&vmi).await;
        let started = Instant::now();
        while matches!(self.monitor.0.try_wait(), Ok(None))
            && started.elapsed() < Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Whatever is left, Monitor's drop ends.
    }
}

/// A source with a booted guest whose counter runs.
async fn booted_source() -> Side {
    let src = start_side("src", "60s").await;
    src.client
        .sync_vmi(&vmi(None), VirtualMachineOptions::default())
        .await
        .unwrap_or_else(|e| panic!("SyncVirtualMachine: {e}\n{}", src.pod.launcher_log()));
    wait_for(
        "the guest's counter",
        Duration::from_secs(180),
        async || (ticks(&src.pod.serial_log()).len() >= 3).then_some(()),
    )
    .await;
    src
}

/// A migration ready to start: a source with a booted guest, a target pod (waiting longer for
/// its domain: it arrives by migration) prepared by `SyncMigrationTarget`, the proxies between.
struct Prepared {
    _one: tokio::sync::MutexGuard<'static, ()>,
    src: Side,
    tgt: Side,
    source_proxy: ProxyManager,
    target_proxy: ProxyManager,
    migrating: kvrs_core::VirtualMachineInstance,
}

async fn prepared(target_tag: &str, migration_uid: &str) -> Prepared {
    assert!(
        is_root(),
        "e2e_migration needs root (mount namespaces, UID 107)"
    );
    let one = SERIAL.lock().await;
    launcher_binaries();
    let src = booted_source().await;
    let tgt = start_side(target_tag, "600s").await;
    let (source_proxy, target_proxy) = migration_proxies(&src.pod, &tgt.pod).await;
    let migrating = vmi(Some(migration_uid));
    tgt.client
        .sync_migration_target(&migrating, VirtualMachineOptions::default())
        .await
        .unwrap_or_else(|e| panic!("SyncMigrationTarget: {e}\n{}", tgt.pod.launcher_log()));
    Prepared {
        _one: one,
        src,
        tgt,
        source_proxy,
        target_proxy,
        migrating,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_running_guest_moves_to_the_target_with_its_memory() {
    let Prepared {
        _one,
        src,
        tgt,
        source_proxy,
        target_proxy,
        migrating,
    } = prepared("tgt", "mig-e2e-1").await;
    assert!(
        tgt.pod.path("kubevirt/migrationproxy").is_dir(),
        "the target made its migration socket directory"
    );
    let before = ticks(&src.pod.serial_log());
    let settings = figure_settings();
    let migrate_called = Instant::now();
    let options = br#"{"Bandwidth":"0","ProgressTimeout":150,"CompletionTimeoutPerGiB":800,"MaxDowntimeMs":300,"UnsafeMigration":false,"AllowAutoConverge":false,"AllowPostCopy":false,"ParallelMigrationThreads":null,"AllowWorkloadDisruption":false,"StallDetectorOptions":null,"Compression":null}"#;
    src.client
        .migrate(&migrating, options.to_vec())
        .await
        .unwrap_or_else(|e| panic!("MigrateVirtualMachine: {e}\n{}", src.pod.launcher_log()));
    // A repeated request for the running migration is accepted and changes nothing.
    src.client
        .migrate(&migrating, options.to_vec())
        .await
        .expect("a repeated MigrateVirtualMachine");

    // The source reports the result in its domain's migration metadata.
    let migration = wait_for(
        "the source's migration result",
        Duration::from_secs(300),
        async || {
            let (_, _, m) = domain(&src.client).await?;
            m["EndTimestamp"].is_string().then_some(m)
        },
    )
    .await;
    let to_result = migrate_called.elapsed();
    // Read while the source's daemon still runs (the launcher exits 30 s after the migration).
    let job = settings.print.then(|| completed_job(&src.pod));
    assert!(
        migration["Failed"].as_bool() != Some(true),
        "migration failed: {migration}\nsource:\n{}\ntarget:\n{}",
        src.pod.launcher_log(),
        tgt.pod.launcher_log()
    );
    assert_eq!(migration["UID"], "mig-e2e-1");
    assert!(migration["StartTimestamp"].is_string());
    // The source's domain stopped because it migrated.
    let (status, reason, _) = domain(&src.client).await.expect("the source domain");
    assert_eq!((status.as_str(), reason.as_str()), ("Shutoff", "Migrated"));
    // (The source launcher exits 30 s after its domain stopped without a delete: ask now.)
    // A second migration with the same UID is refused, as in KubeVirt.
    let again = src
        .client
        .migrate(&migrating, options.to_vec())
        .await
        .expect_err("a finished migration does not run twice");
    assert!(again.to_string().contains("already executed"), "{again}");
    // The handler heard it through a domain event carrying the result.
    wait_for(
        "the result in a domain event to the source's handler",
        Duration::from_secs(10),
        async || {
            src.recorder
                .domains()
                .iter()
                .any(|d| d["Spec"]["Metadata"]["KubeVirt"]["Migration"]["EndTimestamp"].is_string())
                .then_some(())
        },
    )
    .await;

    // The target runs the guest, its metadata says the incoming migration ended.
    let target_meta = wait_for(
        "the target's migration end",
        Duration::from_secs(30),
        async || {
            let (status, _, m) = domain(&tgt.client).await?;
            (status == "Running" && m["EndTimestamp"].is_string()).then_some(m)
        },
    )
    .await;
    assert_eq!(target_meta["UID"], "mig-e2e-1");
    assert!(target_meta["Failed"].as_bool() != Some(true));
    assert!(
        tgt.recorder
            .domains()
            .iter()
            .any(|d| d["Status"]["Status"] == "Running"),
        "the target's handler heard the domain run"
    );
    tgt.client
        .finalize_migration(&migrating, VirtualMachineOptions::default())
        .await
        .expect("FinalizeVirtualMachineMigration");

    // The guest kept its memory: the counter goes on on the target's console with the same boot.
    let after = wait_for(
        "the counter on the target's console",
        Duration::from_secs(60),
        async || {
            let t = ticks(&tgt.pod.serial_log());
            (t.len() >= 3).then_some(t)
        },
    )
    .await;
    assert_continues(&before, &after, &tgt.pod.serial_log());
    if let Some(job) = job {
        let memory = settings.memory.as_deref().unwrap_or("128Mi");
        println!(
            "migration figures: memory={memory} dirty_mib={} migrate_to_result_s={:.3} libvirt_elapsed_s={:.3} downtime_ms={} iterations={} memory_sent_mib={:.1} bandwidth_mib_s={:.1}",
            settings.dirty_mib,
            to_result.as_secs_f64(),
            job.elapsed_ms as f64 / 1000.0,
            job.downtime_ms,
            job.iterations,
            job.memory_processed_mib,
            job.bandwidth_mib_s,
        );
    }

    source_proxy.stop_source_listener(VMI_UID);
    target_proxy.stop_target_listener(VMI_UID);
    src.stop().await;
    tgt.stop().await;
}

/// libvirt's statistics of the source's completed outgoing migration.
struct CompletedJob {
    elapsed_ms: u64,
    downtime_ms: u64,
    iterations: u64,
    /// Guest memory sent, every pass included: more than the guest's size when it dirties.
    memory_processed_mib: f64,
    bandwidth_mib_s: f64,
}

/// `virsh domjobinfo --completed` against the source pod's own daemon: libvirt keeps the
/// finished job's statistics (QEMU's measured downtime among them) on the source domain, so
/// the figure is the hypervisor's, not a guess from the guest's once-a-second counter.
fn completed_job(src: &PodDir) -> CompletedJob {
    let socket = src.path("libvirt/virtqemud-sock");
    let uri = format!("qemu+unix:///session?socket={}", socket.display());
    let out = Command::new("virsh")
        .args(["-c", &uri, "domjobinfo", "--completed", "kvrs_mig"])
        .output()
        .expect("run virsh (libvirt-clients)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "virsh domjobinfo --completed: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `<label> <number> [<unit>]`
    let words = |label: &str| -> (&str, &str) {
        text.lines()
            .find_map(|l| l.strip_prefix(label))
            .and_then(|rest| {
                let mut w = rest.split_whitespace();
                Some((w.next()?, w.next().unwrap_or("")))
            })
            .unwrap_or_else(|| panic!("no {label:?} in the completed job:\n{text}"))
    };
    let number = |label: &str, n: &str| -> f64 {
        n.parse()
            .unwrap_or_else(|_| panic!("{label} {n:?} is not a number:\n{text}"))
    };
    let field = |label: &str| -> u64 {
        let n = words(label).0;
        n.parse()
            .unwrap_or_else(|_| panic!("{label} {n:?} is not a whole number:\n{text}"))
    };
    // virsh prints sizes with a binary unit of its choosing ("210.423 MiB", "1.2 GiB").
    let mib = |label: &str| -> f64 {
        let (n, unit) = words(label);
        let n = number(label, n);
        let scale = match unit.trim_end_matches("/s") {
            "B" => 1.0 / 1048576.0,
            "KiB" => 1.0 / 1024.0,
            "MiB" => 1.0,
            "GiB" => 1024.0,
            other => panic!("{label} in an unknown unit {other:?}:\n{text}"),
        };
        n * scale
    };
    CompletedJob {
        elapsed_ms: field("Time elapsed:"),
        downtime_ms: field("Total downtime:"),
        iterations: field("Iteration:"),
        memory_processed_mib: mib("Memory processed:"),
        bandwidth_mib_s: mib("Memory bandwidth:"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_migration_leaves_the_guest_on_the_source() {
    let Prepared {
        _one,
        src,
        tgt,
        source_proxy,
        target_proxy,
        migrating,
    } = prepared("tgtc", "mig-e2e-2").await;
    // 1 MiB/s: 128 MiB of guest memory take minutes, the cancel comes long before.
    let options = br#"{"Bandwidth":"1Mi","ProgressTimeout":0,"CompletionTimeoutPerGiB":0}"#;
    src.client
        .migrate(&migrating, options.to_vec())
        .await
        .unwrap_or_else(|e| panic!("MigrateVirtualMachine: {e}\n{}", src.pod.launcher_log()));
    // Wait until the migration runs: the target's QEMU was started for the incoming guest and
    // the source's monitor has logged the job's progress.
    wait_for(
        "the incoming QEMU on the target and the job on the source",
        Duration::from_secs(120),
        async || {
            (tgt.pod.path("libvirt/qemu/run/kvrs_mig.pid").exists()
                && src.pod.launcher_log().contains("migration info:"))
            .then_some(())
        },
    )
    .await;
    src.client
        .cancel_migration(&migrating)
        .await
        .expect("CancelVirtualMachineMigration");
    let migration = wait_for(
        "the source's migration result",
        Duration::from_secs(60),
        async || {
            let (_, _, m) = domain(&src.client).await?;
            m["EndTimestamp"].is_string().then_some(m)
        },
    )
    .await;
    assert_eq!(migration["Failed"], true, "{migration}");
    assert_eq!(
        migration["FailureReason"],
        "Live migration has been aborted"
    );
    assert_eq!(migration["AbortStatus"], "Succeeded");
    // A second cancel of the finished migration is accepted and ignored.
    src.client
        .cancel_migration(&migrating)
        .await
        .expect("a repeated cancel");
    // The guest still runs on the source and keeps counting; nothing is left on the target.
    let (status, _, _) = domain(&src.client).await.expect("the source domain");
    assert_eq!(status, "Running");
    let count = ticks(&src.pod.serial_log()).len();
    wait_for(
        "the source's counter going on",
        Duration::from_secs(20),
        async || (ticks(&src.pod.serial_log()).len() >= count + 2).then_some(()),
    )
    .await;
    wait_for(
        "no domain on the target",
        Duration::from_secs(30),
        async || domain(&tgt.client).await.is_none().then_some(()),
    )
    .await;
    assert!(
        ticks(&tgt.pod.serial_log()).is_empty(),
        "the guest never ran on the target"
    );
    source_proxy.stop_source_listener(VMI_UID);
    target_proxy.stop_target_listener(VMI_UID);
    src.stop().await;
    tgt.stop().await;
}
