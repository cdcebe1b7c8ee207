//! The `kvrs` binary over the small, real-looking manifests of `fixtures/manifests/`: each one
//! either succeeds with a specific property or fails with a specific message — never an output
//! with something silently left out.

use std::path::PathBuf;
use std::process::{Command, Output};

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");

fn manifest(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/manifests")
        .join(name)
        .display()
        .to_string()
}

fn kvrs(args: &[&str]) -> Output {
    Command::new(KVRS).args(args).output().expect("run kvrs")
}

fn stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A refused input: exit code 2, nothing on stdout, one line on stderr.
fn stderr(out: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: no partial output");
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    err
}

fn temp_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("kvrs-manifests-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn an_arm64_vm_converts_to_an_aarch64_domain() {
    let xml = stdout(&kvrs(&["convert", &manifest("vm-arm64.yaml")]), "arm64");
    assert!(
        xml.contains(r#"<type arch="aarch64" machine="virt">hvm</type>"#),
        "{xml}"
    );
    assert!(!xml.contains("x86_64"), "{xml}");
}

#[test]
fn a_context_architecture_overrides_spec_architecture() {
    let ctx = temp_file("amd64-context.json", r#"{"architecture": "amd64"}"#);
    let out = kvrs(&["convert", &manifest("vm-arm64.yaml"), "--context", &ctx]);
    let xml = stdout(&out, "arm64 with amd64 context");
    assert!(xml.contains(r#"arch="x86_64""#), "{xml}");
    // A context without `architecture` keeps following the VMI.
    let ctx = temp_file("no-arch-context.yaml", "allowEmulation: true\n");
    let out = kvrs(&["convert", &manifest("vm-arm64.yaml"), "--context", &ctx]);
    assert!(stdout(&out, "arm64, context without architecture").contains(r#"arch="aarch64""#));
}

#[test]
fn an_unregistered_network_binding_plugin_is_an_error_naming_the_field() {
    let out = kvrs(&["convert", &manifest("vm-passt-binding.yaml")]);
    let err = stderr(&out, "passt binding");
    assert!(err.contains("vm-passt-binding.yaml: "), "{err}");
    assert!(
        err.contains(
            "spec.domain.devices.interfaces[0].binding: couldn't find configuration for network binding: passt"
        ),
        "{err}"
    );
}

#[test]
fn an_sriov_interface_without_its_device_is_converted_as_kubevirt_does_with_a_warning() {
    let out = kvrs(&["convert", &manifest("vmi-sriov.yaml")]);
    let xml = stdout(&out, "sriov");
    assert!(xml.contains("<name>"), "{xml}");
    assert!(!xml.contains("<hostdev"), "{xml}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            r#"warning: spec.domain.devices.interfaces[1].sriov: SR-IOV interface "fast" is not rendered without its device"#
        ),
        "{err}"
    );
}

/// The objects of a `---`-separated output (the part before the first `---` is empty).
fn documents(text: &str) -> Vec<String> {
    let mut docs: Vec<String> = text.split("---\n").map(str::to_string).collect();
    assert_eq!(docs.remove(0), "", "output starts with ---: {text}");
    docs
}

#[test]
fn a_list_of_two_vmis_gives_two_domains() {
    let xml = stdout(&kvrs(&["convert", &manifest("vmi-list.yaml")]), "list");
    let docs = documents(&xml);
    assert_eq!(docs.len(), 2, "{xml}");
    assert!(
        docs[0].contains("<name>default_first</name>"),
        "{}",
        docs[0]
    );
    assert!(
        docs[1].contains("<name>default_second</name>"),
        "{}",
        docs[1]
    );
}

#[test]
fn a_multi_document_file_gives_one_output_per_document_in_every_subcommand() {
    let file = manifest("multi-document.yaml");
    let defaults = stdout(&kvrs(&["defaults", &file]), "defaults");
    let names: Vec<String> = documents(&defaults)
        .iter()
        .map(|d| {
            let v: serde_json::Value = serde_json::from_str(d).expect("each document is JSON");
            v["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(names, ["doc-vm", "doc-vmi"]);

    let overhead = stdout(&kvrs(&["overhead", &file]), "overhead");
    let docs = documents(&overhead);
    assert_eq!(docs.len(), 2, "{overhead}");
    assert!(
        docs[0].contains("compute.requests.memory: 1292Mi"),
        "{}",
        docs[0]
    );
    assert!(
        docs[1].contains("compute.requests.memory: 780Mi"),
        "{}",
        docs[1]
    );

    let pods = stdout(&kvrs(&["pod", "-o", "json", &file]), "pod -o json");
    let pods: serde_json::Value = serde_json::from_str(&pods).expect("a JSON array");
    let names: Vec<&str> = pods
        .as_array()
        .expect("array")
        .iter()
        .map(|p| p["metadata"]["generateName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["virt-launcher-doc-vm-", "virt-launcher-doc-vmi-"]);

    let yaml = stdout(&kvrs(&["pod", &file]), "pod yaml");
    assert_eq!(documents(&yaml).len(), 2, "{yaml}");
    let xml = stdout(&kvrs(&["convert", &file]), "convert");
    assert_eq!(documents(&xml).len(), 2, "{xml}");
}

#[test]
fn an_error_in_a_later_document_names_the_file_and_the_document() {
    for sub in ["defaults", "convert", "overhead", "pod"] {
        let out = kvrs(&[sub, &manifest("multi-document-bad-second.yaml")]);
        let err = stderr(&out, sub);
        assert!(
            err.starts_with("kvrs: ")
                && err.contains("multi-document-bad-second.yaml (document 1): ")
                && err.contains("spec.runStrategy: Invalid RunStrategy (Sometimes)"),
            "{sub}: {err}"
        );
    }
}

#[test]
fn a_single_object_output_is_unchanged() {
    let out = stdout(&kvrs(&["defaults", &manifest("vm-running.yaml")]), "one");
    assert!(out.starts_with('{'), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["metadata"]["name"], "legacy-running");
}

#[test]
fn an_unknown_context_field_is_refused_with_the_known_ones() {
    let ctx = temp_file("typo-context.yaml", "architecure: arm64\n");
    let out = kvrs(&["convert", &manifest("vm-arm64.yaml"), "--context", &ctx]);
    let err = stderr(&out, "typo in context");
    assert!(
        err.contains(
            "typo-context.yaml: unknown converter context field(s) architecure; known fields: "
        ) && err.contains("allowEmulation")
            && err.contains("architecture"),
        "{err}"
    );
}

#[test]
fn an_instancetype_reference_is_a_clear_error_in_every_subcommand() {
    for sub in ["defaults", "convert", "overhead", "pod"] {
        let out = kvrs(&[sub, &manifest("vm-instancetype.yaml")]);
        let err = stderr(&out, sub);
        assert!(
            err.contains(
                r#"vm-instancetype.yaml: spec.instancetype: references VirtualMachineClusterInstancetype "u1.medium"; pass it with --instancetype FILE|DIR"#
            ),
            "{sub}: {err}"
        );
        assert!(
            !err.contains("spec.domain"),
            "{sub}: not a misleading memory error: {err}"
        );
    }
}

/// Every manifest of the folder, with what `kvrs convert` must do with it: `Ok(text in the
/// output)` or `Err(text in the one-line error)`. A new manifest must be added here.
const EXPECTED: &[(&str, Result<&str, &str>)] = &[
    ("vm-arm64.yaml", Ok(r#"arch="aarch64""#)),
    ("vm-running.yaml", Ok("<name>demo_legacy-running</name>")),
    ("vmi-list.yaml", Ok("<name>default_second</name>")),
    ("multi-document.yaml", Ok("<name>default_doc-vmi</name>")),
    (
        "vm-passt-binding.yaml",
        Err("interfaces[0].binding: couldn't find configuration for network binding: passt"),
    ),
    ("vmi-sriov.yaml", Ok("<name>default_sriov-box</name>")),
    (
        "vm-instancetype.yaml",
        Err("spec.instancetype: references VirtualMachineClusterInstancetype \"u1.medium\""),
    ),
    (
        "vm-running-and-runstrategy.yaml",
        Err("Running and RunStrategy are mutually exclusive"),
    ),
    (
        "vm-unreferenced-dvt.yaml",
        Err("spec.dataVolumeTemplate[0]: DataVolumeTemplate entry"),
    ),
    (
        "multi-document-bad-second.yaml",
        Err("(document 1): rejected by validating webhook: spec.runStrategy"),
    ),
];

#[test]
fn every_manifest_converts_or_fails_as_expected() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/manifests");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    let mut listed: Vec<String> = EXPECTED.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every manifest has an expected outcome");
    for (file, expected) in EXPECTED {
        let out = kvrs(&["convert", &manifest(file)]);
        match expected {
            Ok(needle) => assert!(stdout(&out, file).contains(needle), "{file}: {needle}"),
            Err(needle) => {
                let err = stderr(&out, file);
                assert!(
                    err.starts_with(&format!("kvrs: {}", manifest(file))),
                    "{err}"
                );
                assert!(err.contains(needle), "{file}: {err}");
            }
        }
    }
}
