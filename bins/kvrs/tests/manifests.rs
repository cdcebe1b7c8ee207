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
fn a_network_binding_plugin_is_an_error_naming_the_field() {
    let out = kvrs(&["convert", &manifest("vm-passt-binding.yaml")]);
    let err = stderr(&out, "passt binding");
    assert!(err.contains("vm-passt-binding.yaml: "), "{err}");
    assert!(
        err.contains(
            r#"spec.domain.devices.interfaces[0].binding: network binding plugin "passt" is not supported by kvrs convert yet"#
        ),
        "{err}"
    );
}

#[test]
fn an_sriov_interface_is_an_error_naming_the_field() {
    let out = kvrs(&["convert", &manifest("vmi-sriov.yaml")]);
    let err = stderr(&out, "sriov");
    assert!(
        err.contains(
            r#"spec.domain.devices.interfaces[1].sriov: SR-IOV interface "fast" is not supported by kvrs convert yet"#
        ),
        "{err}"
    );
}
