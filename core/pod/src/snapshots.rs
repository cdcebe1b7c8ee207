//! Reviewed snapshots of the launcher pods of kvrs's own fixtures (`fixtures/`), admitted first
//! exactly as `kvrs pod` does. A change in any of them is a behaviour change to review.

use std::path::Path;

use kvrs_admission::ClusterConfig;
use kvrs_admission::admit;
use kvrs_admission::template::vmi_from_vm;
use kvrs_api::{VirtualMachine, VirtualMachineInstance};

use super::{PodInputs, render_launcher_pod};

fn fixture(rel: &str, config: &ClusterConfig) -> VirtualMachineInstance {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let doc: serde_json::Value = serde_norway::from_str(&text).unwrap();
    let vmi = if doc["kind"] == "VirtualMachine" {
        let vm: VirtualMachine = serde_json::from_value(doc).unwrap();
        vmi_from_vm(&vm).unwrap()
    } else {
        serde_json::from_value(doc).unwrap()
    };
    admit(vmi, config).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn pod_yaml(rel: &str) -> String {
    pod_yaml_with(rel, &ClusterConfig::default())
}

fn pod_yaml_with(rel: &str, config: &ClusterConfig) -> String {
    let vmi = fixture(rel, config);
    let inputs = PodInputs {
        qemu_timeout_jitter_seconds: 42,
        ..PodInputs::default()
    };
    let pod = render_launcher_pod(&vmi, config, &inputs).unwrap();
    serde_norway::to_string(&pod).unwrap()
}

#[test]
fn minimal_vmi_pod() {
    insta::assert_snapshot!(pod_yaml("vmi/minimal.yaml"));
}

#[test]
fn dedicated_hugepages_vmi_pod() {
    insta::assert_snapshot!(pod_yaml("vmi/dedicated-hugepages.yaml"));
}

#[test]
fn storage_mix_vmi_pod() {
    insta::assert_snapshot!(pod_yaml("vmi/storage-mix.yaml"));
}

#[test]
fn fedora_always_vm_pod() {
    insta::assert_snapshot!(pod_yaml("vm/fedora-always.yaml"));
}

#[test]
fn arm64_manual_vm_pod() {
    insta::assert_snapshot!(pod_yaml("vm/arm64-manual.yaml"));
}

#[test]
fn windows_efi_hyperv_vmi_pod() {
    insta::assert_snapshot!(pod_yaml("vmi/windows-efi-hyperv.yaml"));
}

#[test]
fn all_devices_vmi_pod_with_gates() {
    let config =
        ClusterConfig::with_feature_gates("ExperimentalIgnitionSupport,DownwardMetrics,VSOCK");
    insta::assert_snapshot!(pod_yaml_with("vmi/conv-all-devices.yaml", &config));
}
