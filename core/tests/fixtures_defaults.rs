//! Snapshots of kvrs's admission of our own fixtures (`fixtures/vmi/*.yaml`,
//! `fixtures/vm/*.yaml`): what `kvrs defaults` prints for each, reviewed by hand when it changes.
//! VMs are checked by `validate_vm` and go through `vmi_from_vm` first.

use std::path::{Path, PathBuf};

use kvrs_core::admission::admit;
use kvrs_core::template::vmi_from_vm;
use kvrs_core::validate::validate_vm;
use kvrs_core::{ClusterConfig, VirtualMachine, VirtualMachineInstance};

/// Our fixtures, named explicitly so that fixtures other tests add (e.g. the converter's
/// `conv-*`) do not need snapshots here.
const VMI_FIXTURES: &[&str] = &[
    "dedicated-hugepages",
    "fedora-cloudinit",
    "minimal",
    "storage-mix",
    "windows-efi-hyperv",
];
const VM_FIXTURES: &[&str] = &[
    "arm64-manual",
    "fedora-always",
    "pvc-rerun",
    "windows-halted",
];

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(kind);
    let names = if kind == "vm" {
        VM_FIXTURES
    } else {
        VMI_FIXTURES
    };
    names
        .iter()
        .map(|n| dir.join(format!("{n}.yaml")))
        .collect()
}

fn stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn vmi_fixtures_defaults() {
    let files = fixtures("vmi");
    assert!(files.len() >= 4, "expected our VMI fixtures");
    for path in files {
        let vmi: VirtualMachineInstance = read(&path);
        let admitted = admit(vmi, &ClusterConfig::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        insta::assert_yaml_snapshot!(format!("vmi-{}", stem(&path)), admitted);
    }
}

#[test]
fn vm_fixtures_defaults() {
    let files = fixtures("vm");
    assert!(files.len() >= 3, "expected our VM fixtures");
    for path in files {
        let vm: VirtualMachine = read(&path);
        validate_vm(&vm, &ClusterConfig::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let vmi = vmi_from_vm(&vm).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let admitted = admit(vmi, &ClusterConfig::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        insta::assert_yaml_snapshot!(format!("vm-{}", stem(&path)), admitted);
    }
}

#[test]
fn fixture_defaults_are_idempotent() {
    for path in fixtures("vmi") {
        let vmi: VirtualMachineInstance = read(&path);
        let once = admit(vmi, &ClusterConfig::default()).unwrap();
        let twice = admit(once.clone(), &ClusterConfig::default()).unwrap();
        assert_eq!(once, twice, "{}", path.display());
    }
}
