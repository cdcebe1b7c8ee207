//! End to end: KubeVirt v1.9.0's own hook sidecar (its `sidecar-shim` with the SMBIOS example
//! hook as `onDefineDomain`, built unchanged from the module by `scripts/hooks-harness.sh`) in a
//! pod with kvrs's virt-launcher-monitor + virt-launcher (real libvirt and QEMU, UID 107, the
//! pod's `/run` bound as in e2e_launcher.rs).
//!
//! The pod asks for one sidecar (`--hook-sidecars 1`); the sidecar's `/var/run/kubevirt-hooks`
//! is the pod's `kubevirt-hooks/hook-sidecar-0`, as KubeVirt's subPath mount makes it. The test
//! plays virt-handler: after `SyncVirtualMachine` the domain the launcher reports carries the
//! base board manufacturer of the VMI's annotation, which only the sidecar puts there; when the
//! launcher ends it calls `Shutdown` and the (v1alpha3) shim exits.
//!
//! Needs root, Go (or a built harness) and libvirt + QEMU.

#[path = "common/wait.rs"]
mod wait;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvrs_ipc::{DomainEvent, LauncherClient, NotifyService, ServeOptions, VirtualMachineOptions};
use kvrs_test_guest::pod::{MonitorCommand, is_root, launcher_binaries, run};
use wait::wait_for;

const VMI_UID: &str = "6a1f3c2e-0000-4000-8000-0000000e2e0c";
const MANUFACTURER: &str = "Radical Edward";

/// A process killed (and reaped) on drop unless it exited.
struct Process(Child);

impl Process {
    fn exited_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            // SIGTERM first, so a failed test's launcher still stops libvirt and QEMU.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.0.id().to_string())
                .status();
            if !self.exited_within(Duration::from_secs(30)) {
                let _ = self.0.kill();
            }
            let _ = self.0.wait();
        }
    }
}

/// The pod's `/run`, owned by 107 like a pod's emptyDirs; removed on drop unless the test failed.
struct Pod {
    dir: PathBuf,
}

impl Pod {
    fn new() -> Pod {
        let dir = std::env::temp_dir().join(format!("kvrs-e2e-hooks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in [
            "kubevirt/sockets",
            "kubevirt-private",
            "kubevirt-ephemeral-disks",
            "kubevirt-hooks/hook-sidecar-0",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        run(Command::new("chown").arg("-R").arg("107:107").arg(&dir));
        run(Command::new("chmod").arg("755").arg(&dir));
        Pod { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.with_extension(name)).unwrap_or_default()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
            for ext in ["launcher.log", "shim.log"] {
                let _ = std::fs::remove_file(self.dir.with_extension(ext));
            }
            let _ = std::fs::remove_dir_all(self.dir.with_extension("sandbox"));
        }
    }
}

/// KubeVirt's shim as UID 107, its `/var/run/kubevirt-hooks` being `socket_dir`; its binaries
/// are copied to `bin` first (the sidecar's image: UID 107 may not reach the Go cache).
fn start_shim(harness: &Path, bin: &Path, socket_dir: &Path, log: std::fs::File) -> Process {
    std::fs::create_dir_all(bin).unwrap();
    std::fs::copy(harness.join("sidecar-shim"), bin.join("sidecar-shim")).unwrap();
    std::fs::copy(
        harness.join("bin/onDefineDomain"),
        bin.join("onDefineDomain"),
    )
    .unwrap();
    run(Command::new("chmod").arg("-R").arg("a+rX").arg(bin));
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-euc"])
        .arg(
            "mount -t tmpfs kvrs-hooks /run && mkdir /run/kubevirt-hooks && \
             mount --bind \"$1\" /run/kubevirt-hooks && shift && \
             exec setpriv --reuid 107 --regid 107 --clear-groups \"$@\"",
        )
        .arg("sh")
        .arg(socket_dir)
        .arg(bin.join("sidecar-shim"))
        .args(["--version", "v1alpha3"])
        .env("PATH", path)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start KubeVirt's sidecar-shim");
    Process(child)
}

/// The notify server the handler would run (the launcher reports domain events there).
struct Ignore;

#[tonic::async_trait]
impl NotifyService for Ignore {
    async fn handle_domain_event(&self, _: DomainEvent) -> kvrs_ipc::CmdResult {
        Ok(())
    }
}

fn vmi() -> kvrs_core::VirtualMachineInstance {
    let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": "hooks", "namespace": "kvrs", "uid": VMI_UID,
            "annotations": {
                "hooks.kubevirt.io/hookSidecars": "[{\"args\": [\"--version\", \"v1alpha3\"]}]",
                "smbios.vm.kubevirt.io/baseBoardManufacturer": MANUFACTURER
            }
        },
        "spec": {"domain": {
            "resources": {"requests": {"memory": "64Mi"}},
            "devices": {"autoattachPodInterface": false}
        }}
    }))
    .unwrap();
    kvrs_core::admission::admit(
        vmi,
        &kvrs_core::ClusterConfig::with_feature_gates("Sidecar"),
    )
    .expect("the VMI is admitted")
}

#[tokio::test(flavor = "current_thread")]
async fn kubevirts_sidecar_edits_the_domain_kvrs_launcher_runs() {
    assert!(
        is_root(),
        "e2e_hooks needs root (mount namespaces, UID 107)"
    );
    let harness = kvrs_test_guest::hooks_harness();
    launcher_binaries();
    let pod = Pod::new();
    let mut shim = start_shim(
        &harness,
        &pod.path("hook-bin"),
        &pod.path("kubevirt-hooks/hook-sidecar-0"),
        std::fs::File::create(pod.dir.with_extension("shim.log")).unwrap(),
    );

    let _notify = kvrs_ipc::serve_notify(
        pod.path("kubevirt/domain-notify-pipe.sock"),
        Arc::new(Ignore),
        ServeOptions {
            owner: Some((107, 107)),
            ..ServeOptions::default()
        },
    )
    .await
    .expect("notify server");

    let mut monitor = MonitorCommand::new("kvrs", "hooks", VMI_UID, &pod.dir);
    monitor.hook_sidecars = 1;
    let log = std::fs::File::create(pod.dir.with_extension("launcher.log")).unwrap();
    let mut monitor = Process(
        monitor
            .command()
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start virt-launcher-monitor"),
    );

    let socket = pod.path("kubevirt/sockets/launcher-sock");
    wait_for("launcher-sock", Duration::from_secs(30), async || {
        socket.exists().then_some(())
    })
    .await;
    let launcher_log = pod.log("launcher.log");
    assert!(
        launcher_log.contains("collected all 1 requested hook sidecars"),
        "the launcher served before it collected its sidecar:\n{launcher_log}"
    );
    let client = LauncherClient::connect(&socket)
        .await
        .expect("connect to launcher-sock");
    client
        .sync_vmi(&vmi(), VirtualMachineOptions::default())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "SyncVirtualMachine: {e}\nlauncher:\n{}\nshim:\n{}",
                pod.log("launcher.log"),
                pod.log("shim.log")
            )
        });

    // The domain the launcher reports (libvirt's) has the sidecar's base board.
    let domain = client
        .get_domain()
        .await
        .expect("GetDomain")
        .expect("a domain");
    let domain: serde_json::Value = serde_json::from_str(&domain).unwrap();
    // KubeVirt's domain JSON: `SysInfo.BaseBoard` is the entry list.
    let base_board = &domain["Spec"]["SysInfo"]["BaseBoard"];
    assert_eq!(
        *base_board,
        serde_json::json!([{"Name": "manufacturer", "Value": MANUFACTURER}]),
        "no base board manufacturer from the hook: {}",
        domain["Spec"]["SysInfo"]
    );
    assert!(
        pod.log("shim.log")
            .contains("OnDefineDomain method has been called"),
        "{}",
        pod.log("shim.log")
    );

    // The launcher ends (SIGTERM, as the kubelet stops the pod): it tells the sidecar, which
    // exits.
    run(Command::new("kill")
        .arg("-TERM")
        .arg(monitor.0.id().to_string()));
    assert!(
        monitor.exited_within(Duration::from_secs(60)),
        "the launcher did not exit:\n{}",
        pod.log("launcher.log")
    );
    assert!(
        shim.exited_within(Duration::from_secs(10)),
        "the shim did not exit after the launcher's Shutdown:\nlauncher:\n{}\nshim:\n{}",
        pod.log("launcher.log"),
        pod.log("shim.log")
    );
    assert!(
        pod.log("shim.log")
            .contains("Hook's Shutdown callback method has been called")
    );
}
