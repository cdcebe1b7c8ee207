//! End to end: a VMI with a persistent TPM keeps its TPM across launcher pods, its state on the
//! backend-storage volume (issue 45, Deliver 2), through kvrs's virt-launcher, real libvirt,
//! swtpm and QEMU (TCG).
//!
//! The test plays virt-handler and the kubelet (as `e2e_launcher` does, in the same pod-like
//! sandbox): a directory of its own plays the backend-storage claim, and each launcher "pod"
//! gets its sub-directories mounted where virt-controller's pod mounts the claim's sub-paths for
//! a non-root launcher (core/pod/src/backend_storage.rs): `swtpm` at
//! `/var/run/kubevirt-private/libvirt/qemu/swtpm`, `swtpm-localca` at
//! `/var/run/kubevirt-private/var/lib/swtpm-localca`, `nvram` at
//! `/var/run/kubevirt-private/libvirt/qemu/nvram`, `meta` at
//! `/run/kubevirt-private/backend-storage-meta`.
//!
//! Checked: the first pod's domain has a TPM 2.0 emulator with `persistent_state="yes"` on the
//! CRB interface, the domain's swtpm holds the claim's state lock while the guest runs, and its
//! state (`<domain uuid>/tpm2/tpm2-00.permall`)
//! and the local CA that signed its EK certificate land on the claim, owned by the pod's user.
//! The pod is then ended (Kill + Delete, the launcher exits) and a second pod — fresh `/run`,
//! fresh libvirt — boots the same VMI on the same claim: its swtpm is given the same state
//! and does not manufacture a new TPM. That is shown by the TPM's identity, not by file times: the
//! EK certificate swtpm_setup stored in the TPM's NV memory (inside `tpm2-00.permall`, a DER
//! X.509 certificate issued by the claim's local CA with its own serial and EK public key) is
//! the same certificate after the second boot, and the local CA issued no further certificate
//! (its `certserial` counter is unchanged; manufacturing this TPM issued three: the RSA and ECC
//! EK certificates and the platform certificate). The second pod's swtpm holds the claim's
//! state lock too, so it ran on the claim rather than on a fresh state of its own.
//!
//! The same for persistent EFI variables (`firmware.bootloader.efi.persistent`, without secure
//! boot): the claim's `nvram` sub-path is mounted at `/var/run/kubevirt-private/libvirt/qemu/
//! nvram`; the first pod's domain keeps `<name>_VARS.fd` there, QEMU runs with it open and OVMF
//! writes its variables into it (it differs from the template afterwards); the file survives
//! the pod (KubeVirt's launcher undefines with `KEEP_NVRAM`), and the second pod's QEMU runs with
//! that same file (same inode: libvirt did not copy the template again). The pod's firmware
//! directory holds Debian's plain OVMF build only (see [`OVMF_CODE`]); it needs the `ovmf`
//! package and says so when it is missing.

#[path = "common/kernel_boot.rs"]
mod kernel_boot;
#[path = "common/notify.rs"]
#[allow(dead_code)] // each test reads the events its own way
mod notify;
#[path = "common/wait.rs"]
mod wait;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kernel_boot::kernel_boot_vmi;
use kvrs_ipc::{LauncherClient, VirtualMachineOptions};
use kvrs_test_guest::BOOT_MARKER;
use kvrs_test_guest::pod::{PodDir, is_root, launcher_binaries, run};
use notify::serve_recorder;
use wait::wait_for;

const VMI_UID: &str = "6a1f3c2e-0000-4000-8000-00000000e2e8";
/// The firmware UUID the VM controller gives a VM's VMIs (stable across its restarts); libvirt
/// takes the domain's UUID from it, and swtpm's state directory is named after that UUID.
const FIRMWARE_UUID: &str = "5b0c2f1e-45aa-4c59-9a1c-2f3e4d5c6b7a";
const NAME: &str = "tpm";
/// Where virt-controller mounts the claim's sub-paths in a non-root launcher pod (under the
/// pod's `/run`, which the sandbox binds to the pod directory).
const MOUNTS: [(&str, &str); 4] = [
    ("swtpm", "/run/kubevirt-private/libvirt/qemu/swtpm"),
    (
        "swtpm-localca",
        "/run/kubevirt-private/var/lib/swtpm-localca",
    ),
    ("nvram", "/run/kubevirt-private/libvirt/qemu/nvram"),
    ("meta", "/run/kubevirt-private/backend-storage-meta"),
];

/// VMI `kvrs/<name>` (UID `uid`), non-root as virt-controller marks it (`status.runtimeUser`),
/// with the VM's stable firmware UUID, changed by `adjust`.
fn vmi(
    name: &str,
    uid: &str,
    adjust: impl FnOnce(&mut serde_json::Value),
) -> kvrs_core::VirtualMachineInstance {
    let mut v = kernel_boot_vmi(name, uid, &[]);
    v["spec"]["domain"]["firmware"]["uuid"] = FIRMWARE_UUID.into();
    v["status"] = serde_json::json!({"runtimeUser": 107});
    adjust(&mut v);
    let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_value(v).unwrap();
    kvrs_core::admission::admit(vmi, &kvrs_core::ClusterConfig::default())
        .expect("the VMI is admitted")
}

fn tpm_vmi() -> kvrs_core::VirtualMachineInstance {
    vmi(NAME, VMI_UID, |v| {
        v["spec"]["domain"]["devices"]["tpm"] = serde_json::json!({"persistent": true});
    })
}

/// The backend-storage claim's volume: a directory with the sub-paths the pod mounts, owned by
/// the pod's user as the claim's filesystem is (fsGroup 107).
struct Claim(PathBuf);

impl Claim {
    fn new(tag: &str) -> Claim {
        let dir = std::env::temp_dir().join(format!("kvrs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (sub, _) in MOUNTS {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        run(Command::new("chown").arg("-R").arg("107:107").arg(&dir));
        Claim(dir)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The live XML of domain `kvrs_<name>`, from the pod's libvirt daemon.
fn live_xml(pod: &PodDir, name: &str) -> String {
    let socket = ["libvirt/virtqemud-sock", "libvirt/libvirt-sock"]
        .iter()
        .map(|s| pod.path(s))
        .find(|p| p.exists())
        .expect("the pod's libvirt socket");
    run(Command::new("virsh")
        .arg("-c")
        .arg(format!("qemu+unix:///session?socket={}", socket.display()))
        .args(["dumpxml", &format!("kvrs_{name}")]))
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A certificate swtpm_setup stored in the TPM's NV memory, as the TPM's identity.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Cert {
    /// `openssl x509 -serial -subject -issuer` of it.
    text: String,
    /// Its DER bytes.
    der: Vec<u8>,
}

/// The certificate's text and size: its DER bytes are compared, not printed.
impl std::fmt::Debug for Cert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} DER bytes)",
            self.text.replace('\n', ", "),
            self.der.len()
        )
    }
}

/// The X.509 certificates inside swtpm's state file: each DER `SEQUENCE` with a two-byte length
/// (`30 82 hi lo`) that openssl accepts as a certificate. swtpm_setup writes the EK and platform
/// certificates into NV indices, which libtpms keeps verbatim in `tpm2-00.permall`.
fn certificates(permall: &Path) -> Vec<Cert> {
    let bytes = std::fs::read(permall).unwrap_or_else(|e| panic!("{}: {e}", permall.display()));
    let mut out = Vec::new();
    for i in 0..bytes.len().saturating_sub(4) {
        if bytes[i] != 0x30 || bytes[i + 1] != 0x82 {
            continue;
        }
        let len = 4 + ((bytes[i + 2] as usize) << 8 | bytes[i + 3] as usize);
        let Some(der) = bytes.get(i..i + len) else {
            continue;
        };
        let mut child = Command::new("openssl")
            .args([
                "x509", "-inform", "DER", "-noout", "-serial", "-subject", "-issuer",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl");
        use std::io::Write;
        child.stdin.take().unwrap().write_all(der).unwrap();
        let out_ = child.wait_with_output().unwrap();
        if out_.status.success() {
            out.push(Cert {
                text: String::from_utf8_lossy(&out_.stdout).trim().to_string(),
                der: der.to_vec(),
            });
        }
    }
    out.sort();
    out
}

/// `(device, inode)` of `path`.
fn file_id(path: &Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.dev(), m.ino())
}

/// The processes holding `file` open, as `(pid, argv)`: `/proc/<pid>/fd/*` resolved to the
/// same device and inode, so a file reached through the pod's bind mount counts. None when
/// the file does not exist (the callers' assertions then say what is missing).
fn holders(file: &Path) -> Vec<(u32, Vec<String>)> {
    if !file.exists() {
        return Vec::new();
    }
    let want = file_id(file);
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| (m.dev(), m.ino()) == want));
        if holds {
            let argv = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let argv = argv
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            out.push((pid, argv));
        }
    }
    out
}

/// What one pod showed while its guest ran.
struct PodRun {
    /// The live domain XML.
    xml: String,
    /// The processes that held the claim's `watched` file open.
    holders: Vec<(u32, Vec<String>)>,
}

/// One launcher pod on the claim: boots `v`, records what the test checks while the guest runs
/// (the live XML, who holds the claim's file `watched` open), then ends the pod (Kill +
/// Delete; the launcher exits and nothing holds `watched` any more).
async fn boot_pod(
    claim: &Claim,
    tag: &str,
    v: &kvrs_core::VirtualMachineInstance,
    watched: &Path,
    extra_binds: &[(PathBuf, String)],
) -> PodRun {
    let name = v.metadata.name.clone().unwrap_or_default();
    let uid = v.metadata.uid.clone().unwrap_or_default();
    let pod = PodDir::with_test_guest(tag, &uid);
    for (_, dst) in MOUNTS {
        let inside = pod.path(dst.strip_prefix("/run/").unwrap());
        std::fs::create_dir_all(&inside).unwrap();
    }
    pod.hand_to_qemu_user();
    let (_recorder, notify) = serve_recorder(pod.path("kubevirt/domain-notify-pipe.sock")).await;
    let mut monitor = pod.start_monitor("kvrs", &name, |m| {
        m.qemu_timeout = "60s".into();
        for (sub, dst) in MOUNTS {
            m.binds.push((claim.path(sub), dst.to_string()));
        }
        m.binds.extend(extra_binds.iter().cloned());
    });
    let socket = pod.path("kubevirt/sockets/launcher-sock");
    wait_for("launcher-sock", Duration::from_secs(30), async || {
        socket.exists().then_some(())
    })
    .await;
    let client = LauncherClient::connect(&socket)
        .await
        .expect("connect to launcher-sock");
    client
        .sync_vmi(v, VirtualMachineOptions::default())
        .await
        .unwrap_or_else(|e| panic!("SyncVirtualMachine ({tag}): {e}\n{}", pod.launcher_log()));
    wait_for("the guest boots", Duration::from_secs(300), async || {
        pod.serial_log().contains(BOOT_MARKER).then_some(())
    })
    .await;
    let xml = live_xml(&pod, &name);
    let held = holders(watched);

    client.kill(v).await.expect("KillVirtualMachine");
    client.delete(v).await.expect("DeleteVirtualMachine");
    let exited = wait_for(
        "the launcher pod ends",
        Duration::from_secs(60),
        async || monitor.try_wait().unwrap(),
    )
    .await;
    assert!(exited.success(), "{exited}\n{}", pod.launcher_log());
    assert!(
        holders(watched).is_empty(),
        "{} is let go when the pod ends: {:?}",
        watched.display(),
        holders(watched)
    );
    drop(notify);
    PodRun { xml, holders: held }
}

/// The one `<tpm>` element of a domain XML, whitespace collapsed.
fn tpm_element(xml: &str) -> String {
    let start = xml.find("<tpm ").expect("a <tpm> in the domain XML");
    let end = start + xml[start..].find("</tpm>").expect("</tpm>") + "</tpm>".len();
    xml[start..end]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks the pod ran the persistent TPM with its state on the claim.
fn assert_tpm_on_claim(run: &PodRun, pod: &str) {
    let tpm = tpm_element(&run.xml);
    assert!(
        tpm.starts_with("<tpm model='tpm-crb'>")
            && tpm.contains("<backend type='emulator' version='2.0' persistent_state='yes'/>"),
        "{pod}: a persistent TPM 2.0 emulator on CRB: {tpm}"
    );
    assert!(
        run.holders.iter().any(
            |(_, argv)| argv.first().is_some_and(|a| a.ends_with("swtpm"))
                && argv
                    .iter()
                    .any(|a| a.contains(&format!("swtpm/{FIRMWARE_UUID}/tpm2")))
        ),
        "{pod}: the domain's swtpm held the claim's state lock while the guest ran: {:?}",
        run.holders
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_persistent_tpm_keeps_its_state_on_the_backend_storage_across_pods() {
    assert!(
        is_root(),
        "e2e_backend_storage needs root (mount namespace, UID 107); run scripts/test-all.sh as root"
    );
    launcher_binaries();
    let claim = Claim::new("backend-storage-tpm");
    let v = tpm_vmi();
    let lock = claim.path(&format!("swtpm/{FIRMWARE_UUID}/tpm2/.lock"));
    let permall = claim.path(&format!("swtpm/{FIRMWARE_UUID}/tpm2/tpm2-00.permall"));
    let certserial = claim.path("swtpm-localca/certserial");

    // First pod: libvirt manufactures the TPM (swtpm_setup) into the claim, the local CA
    // beside it, all owned by the pod's user.
    let first = boot_pod(&claim, "e2e-bs-tpm-1", &v, &lock, &[]).await;
    assert_tpm_on_claim(&first, "first pod");
    let made = files(&claim.0);
    for f in [
        format!("swtpm/{FIRMWARE_UUID}/tpm2/tpm2-00.permall"),
        "swtpm-localca/certserial".to_string(),
        "swtpm-localca/issuercert.pem".to_string(),
        "swtpm-localca/signkey.pem".to_string(),
    ] {
        assert!(made.contains(&f), "{f} on the claim: {made:?}");
        assert_eq!(
            std::fs::metadata(claim.path(&f)).unwrap().uid(),
            107,
            "{f} belongs to the pod's user"
        );
    }
    let certs = certificates(&permall);
    let subject = format!("subject=CN = kvrs_{NAME}:{FIRMWARE_UUID}");
    assert!(
        !certs.is_empty()
            && certs
                .iter()
                .all(|c| c.text.contains(&subject) && c.text.contains("issuer=CN = swtpm-localca")),
        "the TPM's certificates, issued by the claim's local CA to this VM: {:#?}",
        certs.iter().map(|c| &c.text).collect::<Vec<_>>()
    );
    let serial_after_first = std::fs::read_to_string(&certserial).unwrap();
    let ca = std::fs::read(claim.path("swtpm-localca/signkey.pem")).unwrap();

    // Second pod, fresh `/run` and libvirt, the same claim: the same TPM.
    let second = boot_pod(&claim, "e2e-bs-tpm-2", &v, &lock, &[]).await;
    assert_tpm_on_claim(&second, "second pod");
    assert_eq!(
        certificates(&permall),
        certs,
        "the TPM keeps its EK and platform certificates: its state was reused, not manufactured again"
    );
    assert_eq!(
        std::fs::read_to_string(&certserial).unwrap(),
        serial_after_first,
        "the local CA issued no new certificate"
    );
    assert_eq!(
        std::fs::read(claim.path("swtpm-localca/signkey.pem")).unwrap(),
        ca,
        "the local CA's signing key is the same"
    );
}

/// The launcher's default `--ovmf-path`, where Debian's `ovmf` package puts OVMF.
const OVMF_DIR: &str = "/usr/share/OVMF";
/// The plain (non-SMM) build and its variables template. The pod's firmware directory holds
/// only these: Debian's secure-boot build (`OVMF_CODE.secboot.fd`, SMM) does not reach the
/// guest kernel under TCG on these machines (nothing on the serial console, its variables
/// untouched after 150 s with `smm=on`), and a directory without it is one KubeVirt's launcher
/// boots non-secure EFI from with `OVMF_CODE.fd`.
const OVMF_CODE: &str = "OVMF_CODE.fd";
const OVMF_VARS: &str = "OVMF_VARS.fd";

#[tokio::test(flavor = "current_thread")]
async fn persistent_efi_variables_stay_on_the_backend_storage_across_pods() {
    assert!(
        is_root(),
        "e2e_backend_storage needs root (mount namespace, UID 107); run scripts/test-all.sh as root"
    );
    let firmware = std::env::temp_dir().join(format!("kvrs-ovmf-{}", std::process::id()));
    std::fs::create_dir_all(&firmware).unwrap();
    for f in [OVMF_CODE, OVMF_VARS] {
        let src = Path::new(OVMF_DIR).join(f);
        assert!(
            src.is_file(),
            "{} missing: persistent EFI needs OVMF (apt-get install ovmf)",
            src.display()
        );
        std::fs::copy(&src, firmware.join(f)).unwrap();
    }
    let binds = [(firmware.clone(), OVMF_DIR.to_string())];
    launcher_binaries();
    let claim = Claim::new("backend-storage-efi");
    let name = "efi";
    let v = vmi(name, "6a1f3c2e-0000-4000-8000-00000000e2e9", |v| {
        v["spec"]["domain"]["firmware"]["bootloader"] =
            serde_json::json!({"efi": {"secureBoot": false, "persistent": true}});
        // With 128 MiB, OVMF and the kernel's EFI stub end in a CPU exception on the serial
        // console before the kernel runs; 256 MiB boots.
        v["spec"]["domain"]["resources"]["requests"]["memory"] = "256Mi".into();
    });
    // KubeVirt's name for the VMI's variables file, in the non-root NVRAM directory the
    // claim's `nvram` sub-path is mounted on.
    let nvram = claim.path(&format!("nvram/{name}_VARS.fd"));
    let template = std::fs::read(firmware.join(OVMF_VARS)).unwrap();

    let first = boot_pod(&claim, "e2e-bs-efi-1", &v, &nvram, &binds).await;
    assert!(
        first.xml.contains(&format!(
            "/var/run/kubevirt-private/libvirt/qemu/nvram/{name}_VARS.fd</nvram>"
        )),
        "the domain keeps its variables in the NVRAM directory:\n{}",
        first.xml
    );
    let qemu_held = |run: &PodRun| {
        run.holders
            .iter()
            .any(|(_, argv)| argv.first().is_some_and(|a| a.contains("qemu-system")))
    };
    assert!(
        qemu_held(&first),
        "QEMU had the claim's variables file open: {:?}",
        first.holders
    );
    // The pod ended and its domain was undefined: the variables stay on the claim, as OVMF
    // left them (it records its boot options there, so they differ from the template).
    assert!(
        nvram.is_file(),
        "{} survives the pod (undefine keeps NVRAM)",
        nvram.display()
    );
    let meta = std::fs::metadata(&nvram).unwrap();
    assert_eq!(
        meta.uid(),
        107,
        "the variables file belongs to the pod's user"
    );
    let after_first = std::fs::read(&nvram).unwrap();
    assert_eq!(after_first.len(), template.len());
    assert_ne!(
        after_first, template,
        "OVMF wrote its variables into the claim's file"
    );
    let id = file_id(&nvram);

    // Second pod on the same claim: libvirt starts the domain on the same file (not a fresh
    // copy of the template), and QEMU runs with it.
    let second = boot_pod(&claim, "e2e-bs-efi-2", &v, &nvram, &binds).await;
    assert!(
        qemu_held(&second),
        "QEMU had the claim's variables file open: {:?}",
        second.holders
    );
    assert_eq!(
        file_id(&nvram),
        id,
        "the same variables file, not re-created from the template"
    );
    assert_ne!(std::fs::read(&nvram).unwrap(), template);
    let _ = std::fs::remove_dir_all(&firmware);
}
