//! `--instancetype` / `--preference`: VMs that reference instancetypes and preferences are
//! expanded in `defaults`, `convert`, `overhead` and `pod`, or refused naming the VM field.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(path: &str) -> String {
    root()
        .join("fixtures/instancetype")
        .join(path)
        .display()
        .to_string()
}

fn kvrs(args: &[&str]) -> Output {
    Command::new(KVRS).args(args).output().expect("run kvrs")
}

fn with_objects(sub: &str, vm: &str) -> Output {
    kvrs(&[
        sub,
        &fixture(&format!("vms/{vm}.yaml")),
        "--instancetype",
        &fixture("instancetypes"),
        "--preference",
        &fixture("preferences"),
    ])
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

fn refusal(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn a_vm_is_sized_by_its_instancetype_and_shaped_by_its_preference() {
    let vmi = json_of(&with_objects("defaults", "windows-u1-large"));
    let domain = &vmi["spec"]["domain"];
    assert_eq!(domain["cpu"]["threads"], 2, "windows.11 prefers threads");
    assert_eq!(domain["cpu"]["sockets"], 1);
    assert_eq!(domain["memory"]["guest"], "8Gi");
    assert_eq!(domain["devices"]["disks"][0]["disk"]["bus"], "sata");
    assert_eq!(domain["devices"]["disks"][1]["cdrom"]["bus"], "sata");
    assert_eq!(
        domain["devices"]["inputs"][0]["bus"], "usb",
        "auto-attached, then preferred"
    );
    assert_eq!(domain["devices"]["inputs"][0]["type"], "tablet");
    assert_eq!(domain["devices"]["sound"]["model"], "ich9");
    assert!(domain["devices"]["tpm"].is_object());
    assert_eq!(domain["firmware"]["bootloader"]["efi"]["persistent"], true);
    assert_eq!(domain["features"]["hyperv"]["spinlocks"]["spinlocks"], 8191);
    assert_eq!(vmi["spec"]["terminationGracePeriodSeconds"], 3600);
    let annotations = &vmi["metadata"]["annotations"];
    assert_eq!(
        annotations["kubevirt.io/cluster-instancetype-name"],
        "u1.large"
    );
    assert_eq!(
        annotations["kubevirt.io/cluster-preference-name"],
        "windows.11"
    );
    assert_eq!(
        annotations["kubevirt.io/os"], "windows",
        "the preference's annotation"
    );
}

#[test]
fn every_fixture_vm_is_expanded_or_refused_with_kubevirts_reason() {
    let refused = [
        (
            "conflict-annotation",
            "VM field(s) annotations.team.example.com/cost-center conflicts with selected instance type",
        ),
        (
            "conflict-cpu-memory",
            "spec.template.spec.domain.cpu.sockets: VM field(s) spec.template.spec.domain.cpu.sockets conflicts",
        ),
        (
            "conflict-gpu-nodeselector",
            "spec.template.spec.domain.devices.gpus",
        ),
        (
            "spread-indivisible",
            "instancetype.spec.cpu.guest: 3 vCPUs provided by the instance type are not divisible",
        ),
        (
            "requirements-unmet",
            "spec.instancetype: failure checking preference requirements: insufficient CPU resources of 1 vCPU provided by instance type, preference requires 2 vCPU",
        ),
    ];
    let mut vms: Vec<String> = std::fs::read_dir(root().join("fixtures/instancetype/vms"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .to_string()
        })
        .collect();
    vms.sort();
    for vm in &vms {
        let out = with_objects("defaults", vm);
        match refused.iter().find(|(name, _)| name == vm) {
            Some((_, reason)) => {
                let err = refusal(&out);
                assert!(
                    err.contains("rejected by validating webhook: ") && err.contains(reason),
                    "{vm}: {err}"
                );
            }
            None => {
                let vmi = json_of(&out);
                assert!(
                    vmi["spec"]["domain"]["memory"]["guest"].is_string(),
                    "{vm}: memory is set"
                );
            }
        }
    }
    assert!(vms.len() > refused.len() + 5);
}

#[test]
fn the_other_subcommands_expand_the_same_way() {
    let xml = with_objects("convert", "cx1-dedicated");
    assert!(
        xml.status.success(),
        "{}",
        String::from_utf8_lossy(&xml.stderr)
    );
    let xml = String::from_utf8_lossy(&xml.stdout);
    assert!(
        xml.contains(r#"<page size="2097152" unit="b""#),
        "hugepages from cx1.large: {xml}"
    );
    let pod = json_of(&kvrs(&[
        "pod",
        &fixture("vms/o1-overcommit.yaml"),
        "--instancetype",
        &fixture("instancetypes/o1.yaml"),
        "-o",
        "json",
    ]));
    let compute = &pod["spec"]["containers"][0];
    assert_eq!(compute["name"], "compute");
    let memory = compute["resources"]["requests"]["memory"].as_str().unwrap();
    let bytes: u64 = memory.parse().expect("a byte count");
    assert!(
        bytes < 8 << 30,
        "o1.large overcommits 10% of 8Gi: the pod asks less ({bytes})"
    );
    let overhead = with_objects("overhead", "rt1-realtime");
    assert!(
        overhead.status.success(),
        "{}",
        String::from_utf8_lossy(&overhead.stderr)
    );
}

#[test]
fn a_missing_object_or_flag_names_the_vm_field() {
    let err = refusal_any(&kvrs(&[
        "defaults",
        &fixture("vms/fedora-u1-medium.yaml"),
        "--instancetype",
        &fixture("instancetypes/o1.yaml"),
        "--preference",
        &fixture("preferences"),
    ]));
    assert!(
        err.contains(r#"spec.instancetype.name: VirtualMachineClusterInstancetype "u1.medium" not found (in --instancetype)"#),
        "{err}"
    );
    let err = refusal_any(&kvrs(&[
        "defaults",
        &fixture("vms/team-namespaced.yaml"),
        "--instancetype",
        &fixture("instancetypes"),
    ]));
    assert!(
        err.contains(r#"spec.preference: references VirtualMachineClusterPreference "fedora"; pass it with --preference FILE|DIR"#),
        "{err}"
    );
    let err = refusal_any(&kvrs(&[
        "defaults",
        &fixture("vms/fedora-u1-medium.yaml"),
        "--instancetype",
        &fixture("preferences/linux.yaml"),
    ]));
    assert!(
        err.contains(
            "no VirtualMachineInstancetype or VirtualMachineClusterInstancetype in the file"
        ),
        "{err}"
    );
}

fn refusal_any(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn a_revision_name_expands_from_the_stored_controller_revision() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rev.yaml"),
        "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata:\n  name: pinned\n  namespace: default\n\
         data:\n  apiVersion: instancetype.kubevirt.io/v1beta1\n  kind: VirtualMachineClusterInstancetype\n\
         \x20 metadata: {name: u1.medium}\n  spec: {cpu: {guest: 6}, memory: {guest: 6Gi}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("vm.yaml"),
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: pinned}\nspec:\n  runStrategy: Always\n\
         \x20 instancetype: {name: u1.medium, revisionName: pinned}\n  template:\n    spec:\n      domain: {devices: {}}\n",
    )
    .unwrap();
    let vm = dir.path().join("vm.yaml");
    let vmi = json_of(&kvrs(&[
        "defaults",
        vm.to_str().unwrap(),
        "--instancetype",
        dir.path().to_str().unwrap(),
    ]));
    assert_eq!(
        vmi["spec"]["domain"]["cpu"]["sockets"], 6,
        "the revision's spec, not u1.medium's"
    );
    assert_eq!(vmi["spec"]["domain"]["memory"]["guest"], "6Gi");
}
