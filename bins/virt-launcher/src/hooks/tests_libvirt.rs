//! The launcher's define path ([`Launcher::define`]) with hook sidecars, against a real libvirt:
//! what a sidecar returns is what libvirt holds, and a failing sidecar leaves no domain behind.
//!
//! libvirt is a private session daemon as UID 107 (`scripts/libvirtd-session.sh`, as
//! tests/libvirt_define.rs uses it); the sidecars are the Rust test sidecar of
//! [`super::test_sidecar`] on Unix sockets in a temp hooks directory. Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use kvrs_converter::Domain;

use super::test_sidecar::{TestSidecar, serve};
use super::*;
use crate::agent::AgentStore;
use crate::flags::Flags;
use crate::libvirt::{Connection, Libvirt};
use crate::service::Launcher;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(super) fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// A private libvirtd (session mode, UID 107) for one test; stopped on drop.
pub(crate) struct Session {
    dir: PathBuf,
}

impl Session {
    pub(crate) fn start(tag: &str) -> Session {
        assert!(
            is_root(),
            "this test needs root (libvirtd-session.sh runs libvirtd as UID 107 in a mount namespace)"
        );
        let dir = std::env::temp_dir().join(format!("kvrs-hooks-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Command::new("chmod").arg("755").arg(&dir).status().unwrap();
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/libvirtd-session.sh"))
            .arg("start")
            .arg(dir.join("libvirt"))
            .output()
            .expect("run libvirtd-session.sh (did scripts/install-test-deps.sh run?)");
        assert!(
            out.status.success(),
            "libvirtd-session.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Session { dir }
    }

    pub(crate) fn socket(&self) -> PathBuf {
        self.dir.join("libvirt/run/libvirt/libvirt-sock")
    }

    /// A launcher for `ns/vm` on this daemon, with these hook sidecars.
    pub(super) async fn launcher(&self, hooks: HookSidecars) -> (Arc<Connection>, Launcher) {
        let (conn, _events) = Connection::open(&self.socket(), "qemu:///session")
            .await
            .expect("connect to the session libvirtd");
        let flags = Flags::parse_from(["virt-launcher", "--namespace", "ns", "--name", "vm"]);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let agent = Arc::new(AgentStore::new(tx));
        let launcher = Launcher::new(conn.clone(), flags, agent, Arc::new(hooks));
        (conn, launcher)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/libvirtd-session.sh"))
            .arg("stop")
            .arg(self.dir.join("libvirt"))
            .status();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `ns/vm`, annotated for KubeVirt's SMBIOS example hook.
pub(super) fn vmi(manufacturer: &str) -> kvrs_api::VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": "vm", "namespace": "ns", "uid": "0e5a7d52-0000-4000-8000-00000000f00d",
            "annotations": {"smbios.vm.kubevirt.io/baseBoardManufacturer": manufacturer}
        },
        "spec": {"domain": {
            "devices": {"autoattachPodInterface": false},
            "resources": {"requests": {"memory": "128Mi"}}
        }}
    }))
    .unwrap()
}

/// The domain kvrs's converter makes of it on a node without usable KVM.
pub(super) fn converted(vmi: &kvrs_api::VirtualMachineInstance) -> Domain {
    let ctx = kvrs_converter::ConverterContext {
        hypervisor_device_available: false,
        allow_emulation: true,
        ..Default::default()
    };
    kvrs_converter::convert(vmi, &ctx).unwrap()
}

/// The base board entries of the domain libvirt holds.
pub(super) async fn defined_base_board(conn: &Connection, name: &str) -> Vec<(String, String)> {
    let dom = conn.lookup(name).await.expect("the domain is defined");
    let xml = conn.xml_desc(&dom).await.unwrap();
    let d = Domain::from_xml(&xml).unwrap();
    d.sysinfo
        .map(|s| {
            s.base_board
                .entries
                .into_iter()
                .map(|e| (e.name.to_string(), e.value.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The message a failed define answers the handler with.
fn failure<T>(result: kvrs_ipc::CmdResult<T>) -> String {
    match result {
        Ok(_) => panic!("the define succeeded"),
        Err(kvrs_ipc::CmdError::Failed(m)) => m,
        Err(other) => panic!("not a plain failure: {other:?}"),
    }
}

fn fast() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(1),
        info: Duration::from_secs(1),
        call: Duration::from_millis(800),
        scan_interval: Duration::from_millis(20),
    }
}

/// A sidecar doing what KubeVirt's SMBIOS example does: the manufacturer from the VMI's
/// annotation into `<sysinfo><baseBoard>` and `<os><smbios mode="sysinfo"/>`.
fn smbios_sidecar(calls: &Arc<Mutex<Vec<String>>>) -> TestSidecar {
    let mut s = TestSidecar::new("smbios", calls);
    s.on_define = Arc::new(|xml, vmi| {
        let manufacturer =
            vmi["metadata"]["annotations"]["smbios.vm.kubevirt.io/baseBoardManufacturer"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        let mut d =
            Domain::from_xml(xml).map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        d.os.smbios = Some(kvrs_converter::domain::SmBios {
            mode: "sysinfo".into(),
        });
        let sys = d.sysinfo.get_or_insert_with(Default::default);
        sys.kind = "smbios".into();
        sys.base_board.entries = vec![kvrs_converter::domain::Entry {
            name: "manufacturer".into(),
            value: manufacturer.into(),
        }];
        Ok(d.to_xml().unwrap().into_bytes())
    });
    s
}

#[tokio::test]
async fn the_define_path_defines_what_the_sidecar_returned_and_nothing_when_it_fails() {
    let session = Session::start("define");
    let hooks_dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let vmi = vmi("kvrs hooks test");
    let wanted = converted(&vmi);
    assert_eq!(wanted.name, "ns_vm");

    // 1. The SMBIOS edit reaches libvirt.
    let sidecar = serve(
        &hooks_dir.path().join("hook-sidecar-0/smbios.sock"),
        smbios_sidecar(&calls),
    );
    let hooks = collect(hooks_dir.path(), 1, Duration::from_secs(5), fast(), "ns/vm")
        .await
        .unwrap();
    let (conn, launcher) = session.launcher(hooks).await;
    let (dom, _) = launcher
        .define(&vmi, &wanted)
        .await
        .expect("define with the hook");
    assert_eq!(dom.name, "ns_vm");
    assert_eq!(
        defined_base_board(&conn, "ns_vm").await,
        [("manufacturer".to_string(), "kvrs hooks test".to_string())]
    );
    assert!(
        calls
            .lock()
            .unwrap()
            .contains(&"smbios:OnDefineDomain/v1alpha3".to_string())
    );
    conn.undefine(&dom).await.unwrap();
    drop(sidecar);

    // 2. Failing sidecars: the sync's error names the hook, libvirt holds no domain, no hang.
    type Setup = fn(&mut TestSidecar);
    let cases: [(&str, Setup); 3] = [
        ("malformed_domain", |s| {
            s.on_define =
                Arc::new(|_, _| Ok(b"<domain type='qemu'><name>ns_vm</name><devices>".to_vec()))
        }),
        ("hook_timeout", |s| s.define_hangs = true),
        ("hook_failed", |s| {
            s.on_define = Arc::new(|_, _| Err(tonic::Status::unknown("exit status 1")))
        }),
    ];
    for (i, (label, setup)) in cases.into_iter().enumerate() {
        let dir = hooks_dir.path().join(format!("case-{i}"));
        let mut bad = TestSidecar::new("bad", &calls);
        setup(&mut bad);
        let _s = serve(&dir.join("hook-sidecar-0/bad.sock"), bad);
        let hooks = collect(&dir, 1, Duration::from_secs(5), fast(), "ns/vm")
            .await
            .unwrap();
        let (conn, launcher) = session.launcher(hooks).await;
        let t = Instant::now();
        let err = failure(launcher.define(&vmi, &wanted).await);
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{label}: {:?}",
            t.elapsed()
        );
        assert!(
            err.contains(&format!("OnDefineDomain hook ({label})"))
                && err.contains("hook-sidecar-0/bad.sock (\"bad\")"),
            "{label}: {err}"
        );
        let lookup = conn.lookup("ns_vm").await;
        assert!(
            lookup.as_ref().is_err_and(|e| e.is_not_found()),
            "{label}: a domain was defined after the hook failed: {lookup:?}"
        );
    }

    // 3. A sidecar that exited after the handshake.
    let dir = hooks_dir.path().join("exited");
    let gone = serve(
        &dir.join("hook-sidecar-0/gone.sock"),
        TestSidecar::new("gone", &calls),
    );
    let hooks = collect(&dir, 1, Duration::from_secs(5), fast(), "ns/vm")
        .await
        .unwrap();
    drop(gone);
    let (conn, launcher) = session.launcher(hooks).await;
    let err = failure(launcher.define(&vmi, &wanted).await);
    assert!(
        err.contains("(hook_unreachable)") && err.contains("gone.sock"),
        "{err}"
    );
    assert!(conn.lookup("ns_vm").await.is_err_and(|e| e.is_not_found()));
}
