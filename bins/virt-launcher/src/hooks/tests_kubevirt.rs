//! Wire compatibility with KubeVirt's own hook sidecar: its `sidecar-shim` (cmd/sidecars) and
//! SMBIOS example hook (cmd/sidecars/smbios as the shim's `onDefineDomain`), built unchanged from
//! kubevirt.io/kubevirt v1.9.0 by `scripts/hooks-harness.sh`, serve each Callbacks version; kvrs's
//! hook client finds the shim, does the handshake, and the launcher's define path puts the base
//! board manufacturer of the VMI's annotation into the domain a real libvirt holds; the shim's
//! PreCloudInitIso (a test script as its `preCloudInitIso`) rewrites kvrs's cloud-init data; for
//! v1alpha3, `Shutdown` makes the shim exit.
//!
//! The shim always listens under `/var/run/kubevirt-hooks`: it runs in a mount namespace where
//! that is the test's `hook-sidecar-0` directory, as the pod's subPath mount makes it. Needs
//! root, Go and the Go module proxy (or a warm module cache).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvrs_converter::Domain;
use kvrs_ipc::hooks::{CallbacksVersion, ON_DEFINE_DOMAIN, PRE_CLOUD_INIT_ISO, SHUTDOWN};

use super::cloud_init::{self, CloudInitFiles};
use super::tests_libvirt::{Session, converted, defined_base_board, is_root, vmi};
use super::*;
use crate::libvirt::Libvirt;

/// Builds (or finds) the harness; its directory.
fn harness() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/hooks-harness.sh");
    let out = Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/hooks-harness.sh");
    assert!(
        out.status.success(),
        "scripts/hooks-harness.sh failed (Go >= 1.26 and the Go module proxy are needed)"
    );
    let dir = String::from_utf8(out.stdout).unwrap();
    let dir = PathBuf::from(dir.lines().last().expect("the harness directory").trim());
    assert!(dir.join("sidecar-shim").is_file() && dir.join("bin/onDefineDomain").is_file());
    dir
}

/// A `preCloudInitIso` for KubeVirt's shim (which runs it with `--vmi JSON --cloud-init JSON` and
/// answers its stdout): checks it got kvrs's NoCloud data, answers new user data and metadata.
const PRE_CLOUD_INIT_ISO_SCRIPT: &str = r###"#!/bin/sh
case "$4" in
  *'"DataSource":"noCloud"'*'"UserData":"#cloud-config\n"'*) ;;
  *) echo "unexpected cloud-init data: $4" >&2; exit 1 ;;
esac
printf '%s' '{"DataSource":"noCloud","NoCloudMetaData":{"instance-id":"from-shim"},"UserData":"#cloud-config\n# edited by the shim\n","NetworkData":""}'
"###;

/// A directory with [`PRE_CLOUD_INIT_ISO_SCRIPT`] as `preCloudInitIso`.
fn scripts() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("preCloudInitIso");
    std::fs::write(&script, PRE_CLOUD_INIT_ISO_SCRIPT).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// KubeVirt's shim serving `version`, its `/var/run/kubevirt-hooks` being `socket_dir`; killed
/// on drop unless it exited.
struct Shim(Child);

impl Shim {
    fn start(harness: &Path, scripts: &Path, socket_dir: &Path, version: CallbacksVersion) -> Shim {
        std::fs::create_dir_all(socket_dir).unwrap();
        let path = format!(
            "{}:{}:{}",
            harness.join("bin").display(),
            scripts.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-euc"])
            .arg(
                "mount -t tmpfs kvrs-hooks /run && mkdir /run/kubevirt-hooks && \
                 mount --bind \"$1\" /run/kubevirt-hooks && shift && exec \"$@\"",
            )
            .arg("sh")
            .arg(socket_dir)
            .arg(harness.join("sidecar-shim"))
            .args(["--version", version.as_str()])
            .env("PATH", path)
            .stdout(Stdio::null())
            .spawn()
            .expect("start KubeVirt's sidecar-shim under unshare");
        Shim(child)
    }

    /// Whether it exited within `within`.
    fn exits(&mut self, within: Duration) -> bool {
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

impl Drop for Shim {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[tokio::test]
async fn kubevirts_smbios_sidecar_edits_the_domain_kvrs_defines() {
    assert!(
        is_root(),
        "this test needs root (mount namespaces, libvirtd as UID 107)"
    );
    let harness = harness();
    let session = Session::start("kubevirt-shim");
    let vmi = vmi("Radical Edward");
    let wanted = converted(&vmi);
    let scripts = scripts();

    for version in CallbacksVersion::NEWEST_FIRST {
        let hooks_dir = tempfile::tempdir().unwrap();
        let mut shim = Shim::start(
            &harness,
            scripts.path(),
            &hooks_dir.path().join("hook-sidecar-0"),
            version,
        );

        // The handshake: KubeVirt's shim names itself "shim" and offers exactly the version
        // it was started with; OnDefineDomain because `onDefineDomain` is on its PATH.
        let hooks = collect(
            hooks_dir.path(),
            1,
            Duration::from_secs(20),
            Timeouts::default(),
            "ns/vm",
        )
        .await
        .unwrap_or_else(|e| panic!("{version}: {e}"));
        let sidecar = &hooks.registry().callbacks(ON_DEFINE_DOMAIN)[0];
        assert_eq!(sidecar.hook.name, "shim", "{version}");
        assert_eq!(sidecar.version, version);
        assert!(
            sidecar.hook.socket.starts_with("hook-sidecar-0/shim-"),
            "{:?}",
            sidecar.hook
        );
        assert_eq!(
            hooks.registry().callbacks(SHUTDOWN).len(),
            usize::from(version == CallbacksVersion::V1alpha3),
            "{version}: the shim subscribes to Shutdown from v1alpha3 on"
        );

        // The define path: the SMBIOS hook's domain is what libvirt holds.
        let (conn, launcher) = session.launcher(hooks.clone()).await;
        let started = Instant::now();
        let (dom, sent) = launcher
            .define(&vmi, &wanted)
            .await
            .unwrap_or_else(|e| panic!("{version}: define through KubeVirt's hook: {e:?}"));
        println!(
            "{version}: KubeVirt's shim + SMBIOS hook took {:?} before the define was sent",
            sent - started
        );
        assert_eq!(
            defined_base_board(&conn, "ns_vm").await,
            [("manufacturer".to_string(), "Radical Edward".to_string())],
            "{version}"
        );
        let xml = conn.xml_desc(&dom).await.unwrap();
        let defined = Domain::from_xml(&xml).unwrap();
        assert_eq!(
            defined.os.smbios.as_ref().map(|s| s.mode.to_string()),
            Some("sysinfo".to_string()),
            "{version}"
        );
        // The rest of kvrs's domain survived the Go round trip.
        assert_eq!(
            defined.memory.value * unit_bytes(&defined.memory.unit),
            128 << 20
        );
        assert_eq!(
            defined.devices.serials.len(),
            wanted.devices.serials.len(),
            "{version}"
        );
        conn.undefine(&dom).await.unwrap();

        // PreCloudInitIso: from v1alpha2 on, the shim's `preCloudInitIso` rewrites the data; a
        // v1alpha1 sidecar has no such RPC and is skipped, as KubeVirt skips it.
        assert_eq!(
            hooks.registry().callbacks(PRE_CLOUD_INIT_ISO).len(),
            1,
            "{version}"
        );
        let files = CloudInitFiles {
            user_data: "#cloud-config\n".into(),
            network_data: None,
            meta_data: serde_json::json!({"instance-id": "vm.ns", "local-hostname": "vm"}),
        };
        let out =
            cloud_init::pre_cloud_init_iso(&hooks, &vmi, "cloudinitdisk", true, files.clone())
                .await
                .unwrap_or_else(|e| {
                    panic!("{version}: PreCloudInitIso through KubeVirt's shim: {e}")
                });
        if version == CallbacksVersion::V1alpha1 {
            assert_eq!(out, files);
        } else {
            assert_eq!(
                out.user_data, "#cloud-config\n# edited by the shim\n",
                "{version}"
            );
            assert_eq!(out.meta_data["instance-id"], "from-shim", "{version}");
            assert_eq!(out.network_data, None, "{version}");
        }

        // Shutdown: a v1alpha3 shim exits when told; older ones keep serving (KubeVirt's pod
        // ends them with the pod).
        hooks.shutdown().await;
        if version == CallbacksVersion::V1alpha3 {
            assert!(
                shim.exits(Duration::from_secs(10)),
                "the v1alpha3 shim exits on Shutdown"
            );
        } else {
            assert!(
                !shim.exits(Duration::from_millis(300)),
                "{version}: no Shutdown to obey"
            );
        }
    }
}

fn unit_bytes(unit: &str) -> u64 {
    match unit {
        "b" | "bytes" => 1,
        "KiB" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        other => panic!("unexpected memory unit {other}"),
    }
}
