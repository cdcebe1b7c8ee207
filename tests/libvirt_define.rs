//! Defines every oracle domain XML (KubeVirt's own, type switched to `qemu`) and every domain kvrs's
//! converter writes (oracle VMIs and our fixtures, on a node without usable KVM) in a real libvirt
//! daemon, then undefines it again.
//!
//! The daemon is a private session `libvirtd` as UID 107 started by `scripts/libvirtd-session.sh`
//! (libvirt 11.x from bookworm-backports, installed by `scripts/install-test-deps.sh`). libvirt is
//! driven through `virsh`, so no libvirt binding enters the workspace.
//!
//! A refusal is accepted only where it is a limit of this host that also refuses KubeVirt's own XML
//! (no block device for `lun`, no RHEL machine types; swtpm is installed, so TPM 2.0 must define);
//! a converted domain may be refused only if libvirt refused the oracle's XML for the same case.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Messages of host limits under which libvirt refuses KubeVirt's own domains here.
const HOST_LIMITS: &[&str] = &[
    "disk device='lun' is only valid for block type disk source",
    "does not support machine type",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A private libvirtd for the duration of the test; stopped on drop.
struct Session {
    dir: tempdir::Dir,
    uri: String,
}

mod tempdir {
    //! A world-traversable temp directory (UID 107 must reach the daemon's files), removed on drop.
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let base = std::env::temp_dir().join(format!("kvrs-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(&base).unwrap();
            std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
            Dir(base)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Session {
    fn start() -> Session {
        assert!(
            is_root(),
            "libvirt_define needs root (mount namespace, runs libvirtd as UID 107); run scripts/test-all.sh as root"
        );
        let dir = tempdir::Dir::new("libvirt-define");
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/libvirtd-session.sh"))
            .arg("start")
            .arg(dir.path().join("libvirt"))
            .output()
            .expect("run libvirtd-session.sh (did scripts/install-test-deps.sh run?)");
        assert!(
            out.status.success(),
            "libvirtd-session.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let uri = String::from_utf8(out.stdout).unwrap().trim().to_string();
        Session { dir, uri }
    }

    /// Defines the XML and undefines the domain again; `Err` carries libvirt's message.
    fn define_undefine(&self, name: &str, xml: &str) -> Result<(), String> {
        let file = self.dir.path().join("domain.xml");
        std::fs::write(&file, xml).unwrap();
        let out = self.virsh(&["define".as_ref(), file.as_os_str()]);
        if !out.status.success() {
            return Err(libvirt_message(&out.stderr));
        }
        let undefine = self.virsh(&["undefine".as_ref(), "--nvram".as_ref(), name.as_ref()]);
        let undefine = if undefine.status.success() {
            undefine
        } else {
            self.virsh(&["undefine".as_ref(), name.as_ref()])
        };
        assert!(
            undefine.status.success(),
            "undefine {name}: {}",
            libvirt_message(&undefine.stderr)
        );
        Ok(())
    }

    fn virsh(&self, args: &[&std::ffi::OsStr]) -> std::process::Output {
        Command::new("virsh")
            .arg("-q")
            .arg("-c")
            .arg(&self.uri)
            .args(args)
            .output()
            .expect("run virsh")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/libvirtd-session.sh"))
            .arg("stop")
            .arg(self.dir.path().join("libvirt"))
            .status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// libvirt's own message without virsh's "error: Failed to define domain from FILE" preamble.
fn libvirt_message(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim_start_matches("error: "))
        .filter(|l| !l.is_empty())
        .collect();
    lines.last().copied().unwrap_or("(no message)").to_string()
}

fn domain_name(xml: &str) -> String {
    let start = xml.find("<name>").expect("<name>") + "<name>".len();
    let end = xml[start..].find("</name>").expect("</name>") + start;
    xml[start..end].to_string()
}

fn is_host_limit(msg: &str) -> bool {
    HOST_LIMITS.iter().any(|l| msg.contains(l))
}

/// The context of a node like the test machine: no usable KVM, emulation allowed.
fn tcg_context() -> kvrs_converter::ConverterContext {
    kvrs_converter::ConverterContext {
        hypervisor_device_available: false,
        allow_emulation: true,
        ..Default::default()
    }
}

#[test]
fn domains_define_in_real_libvirt() {
    let oracle = kvrs_tests::shared_dir("oracle");
    let session = Session::start();

    // 1. KubeVirt's own XML, type switched to qemu (TCG).
    let mut oracle_refused: BTreeMap<String, String> = BTreeMap::new();
    let names = kvrs_tests::cases_with(&oracle, "domain.xml");
    assert!(!names.is_empty());
    let mut oracle_ok = 0;
    for name in &names {
        let xml = std::fs::read_to_string(oracle.join(format!("{name}.domain.xml"))).unwrap();
        let xml = xml.replacen("<domain type=\"kvm\"", "<domain type=\"qemu\"", 1);
        match session.define_undefine(&domain_name(&xml), &xml) {
            Ok(()) => oracle_ok += 1,
            Err(msg) => {
                oracle_refused.insert(name.clone(), msg);
            }
        }
    }

    // 2. kvrs's converter on the same (defaulted) VMIs, for a node without usable KVM.
    let ctx = tcg_context();
    let mut converted_ok = 0;
    let mut converted_refused: BTreeMap<String, String> = BTreeMap::new();
    let mut convert_errors = Vec::new();
    for name in &names {
        let text = std::fs::read_to_string(oracle.join(format!("{name}.defaulted.json"))).unwrap();
        let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_str(&text).unwrap();
        let xml = match kvrs_converter::convert_to_xml(&vmi, &ctx) {
            Ok(x) => x,
            Err(e) => {
                convert_errors.push(format!("{name}: {e}"));
                continue;
            }
        };
        assert!(
            xml.contains("type=\"qemu\""),
            "{name}: no usable KVM must give domain type qemu"
        );
        match session.define_undefine(&domain_name(&xml), &xml) {
            Ok(()) => converted_ok += 1,
            Err(msg) => {
                converted_refused.insert(name.clone(), msg);
            }
        }
    }

    // 3. Our own fixtures (VMs turned into VMIs and admitted like the cluster does).
    let mut fixtures_ok = 0;
    let mut fixture_failures = Vec::new();
    let fixtures = repo_root().join("fixtures");
    let config = kvrs_core::ClusterConfig::default();
    for sub in ["vm", "vmi"] {
        let Ok(entries) = std::fs::read_dir(fixtures.join(sub)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for file in files
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
        {
            let text = std::fs::read_to_string(&file).unwrap();
            let value: serde_json::Value = serde_norway::from_str(&text).unwrap();
            let vmi = if value["kind"] == "VirtualMachine" {
                let vm: kvrs_core::VirtualMachine = serde_json::from_value(value).unwrap();
                kvrs_core::template::vmi_from_vm(&vm).unwrap()
            } else {
                serde_json::from_value(value).unwrap()
            };
            let label = file
                .strip_prefix(repo_root())
                .unwrap_or(&file)
                .display()
                .to_string();
            // Defaulted like the mutating webhook does; validation (feature gates) is not what this
            // test is about.
            let mut vmi = vmi;
            kvrs_core::defaults::default_namespace(&mut vmi);
            kvrs_core::defaults::apply_defaults(&mut vmi, &config);
            if vmi
                .spec
                .architecture
                .as_deref()
                .is_some_and(|a| a != "amd64")
            {
                println!(
                    "  {label}: {} guest, not definable with this x86_64 host's QEMU",
                    vmi.spec.architecture.as_deref().unwrap_or("")
                );
                continue;
            }
            match kvrs_converter::convert_to_xml(&vmi, &ctx) {
                Ok(xml) => match session.define_undefine(&domain_name(&xml), &xml) {
                    Ok(()) => fixtures_ok += 1,
                    Err(msg) if is_host_limit(&msg) => {
                        println!("  {label}: refused for a host limit: {msg}")
                    }
                    Err(msg) => fixture_failures.push(format!("{label}: libvirt refused: {msg}")),
                },
                Err(e) => fixture_failures.push(format!("{label}: convert error: {e}")),
            }
        }
    }

    println!("oracle XML: {oracle_ok}/{} defined in libvirt", names.len());
    for (n, m) in &oracle_refused {
        println!("  refused (KubeVirt's own XML): {n}: {m}");
    }
    println!(
        "converted: {converted_ok}/{} defined in libvirt",
        names.len()
    );
    for (n, m) in &converted_refused {
        println!("  refused (kvrs): {n}: {m}");
    }
    for e in &convert_errors {
        println!("  convert error: {e}");
    }
    println!("fixtures: {fixtures_ok} defined");
    for f in &fixture_failures {
        println!("  {f}");
    }

    let unexplained_oracle: Vec<_> = oracle_refused
        .iter()
        .filter(|(_, m)| !is_host_limit(m))
        .collect();
    assert!(
        unexplained_oracle.is_empty(),
        "libvirt refused KubeVirt's XML for a reason that is not a known host limit: {unexplained_oracle:?}"
    );
    let unexplained_converted: Vec<_> = converted_refused
        .keys()
        .filter(|n| !oracle_refused.contains_key(*n))
        .collect();
    assert!(
        unexplained_converted.is_empty(),
        "libvirt refused kvrs's XML where it accepts KubeVirt's: {:?}",
        unexplained_converted
            .iter()
            .map(|n| (n, &converted_refused[*n]))
            .collect::<Vec<_>>()
    );
    assert!(convert_errors.is_empty(), "{convert_errors:?}");
    assert!(fixture_failures.is_empty(), "{fixture_failures:?}");
    assert!(oracle_ok > 0 && converted_ok > 0, "nothing was defined");
}
