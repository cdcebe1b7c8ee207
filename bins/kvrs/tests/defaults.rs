//! `kvrs defaults` as a user runs it: files and standard input, VMIs and VMs, YAML and JSON,
//! every oracle input, and one test per class of bad input (exit code 2, one line, no panic).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");

fn oracle_dir() -> PathBuf {
    kvrs_corpus::shared_dir("oracle")
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(KVRS)
        .arg("defaults")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kvrs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn stdout_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "kvrs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// A bad input: exit code 2, nothing on stdout, exactly one line on stderr, no panic.
fn assert_one_line_error(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(out.stdout.is_empty());
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    err
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvrs-defaults-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const FEDORA_VMI_YAML: &str = r#"
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: fedora
spec:
  domain:
    resources:
      requests:
        memory: 2Gi
    devices:
      disks:
        - name: root
          disk: {bus: virtio}
  volumes:
    - name: root
      containerDisk:
        image: quay.io/containerdisks/fedora:41
"#;

#[test]
fn every_oracle_input_defaults_to_kubevirts_answer() {
    let dir = oracle_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(".defaulted.json").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for name in &names {
        let input = dir.join(format!("{name}.vmi.json"));
        let gates = std::fs::read_to_string(dir.join(format!("{name}.featuregates.txt")))
            .unwrap_or_default();
        let mut args = vec![input.to_str().unwrap().to_string()];
        if !gates.trim().is_empty() {
            args.extend(["--feature-gates".to_string(), gates.trim().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = stdout_json(&run(&args, None));
        let text = std::fs::read_to_string(dir.join(format!("{name}.defaulted.json"))).unwrap();
        let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(got, expected, "{name}");
    }
    println!("{} oracle inputs defaulted by the CLI", names.len());
}

#[test]
fn oracle_rejections_exit_2_naming_the_field() {
    let dir = oracle_dir();
    let cases = [
        (
            "reject-bad-disk-bus",
            "spec.domain.devices.disks[0].disk.bus",
        ),
        (
            "reject-dedicated-cpu-fractional",
            "spec.domain.resources.requests.cpu",
        ),
        ("reject-hostdisk-without-gate", "spec.volumes[1]"),
    ];
    for (name, field) in cases {
        let input = dir.join(format!("{name}.vmi.json"));
        let err = assert_one_line_error(&run(&[input.to_str().unwrap()], None));
        assert!(err.contains(field), "{name}: {err}");
        assert!(err.contains("rejected"), "{name}: {err}");
    }
    // The same host disk passes once the gate is on.
    let input = dir.join("reject-hostdisk-without-gate.vmi.json");
    let ok = run(
        &[input.to_str().unwrap(), "--feature-gates", "HostDisk"],
        None,
    );
    assert_eq!(stdout_json(&ok)["status"]["phase"], "Pending");
}

#[test]
fn a_vmi_from_standard_input_in_yaml() {
    let out = stdout_json(&run(&["-"], Some(FEDORA_VMI_YAML)));
    assert_eq!(
        out["metadata"]["namespace"], "default",
        "empty namespace becomes default"
    );
    assert_eq!(
        out["spec"]["domain"]["memory"],
        serde_json::json!({"guest": "2Gi", "maxGuest": "8Gi"})
    );
    assert_eq!(
        out["spec"]["volumes"][0]["containerDisk"]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(out["status"]["runtimeUser"], 107);
}

#[test]
fn a_vm_yaml_file_is_turned_into_its_vmi_first() {
    let vm = r#"
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: web
  namespace: shop
  uid: 0b7f4a1e-1111-2222-3333-444455556666
spec:
  runStrategy: Always
  template:
    metadata:
      labels: {app: web}
    spec:
      domain:
        memory: {guest: 1Gi}
        devices:
          interfaces: [{name: default, masquerade: {}}]
      networks: [{name: default, pod: {}}]
      volumes:
        - name: root
          containerDisk: {image: quay.io/containerdisks/fedora:41}
"#;
    let path = temp_file("vm.yaml", vm);
    let out = stdout_json(&run(&[path.to_str().unwrap()], None));
    assert_eq!(out["kind"], "VirtualMachineInstance");
    assert_eq!(out["metadata"]["name"], "web");
    assert_eq!(out["metadata"]["namespace"], "shop");
    assert_eq!(out["metadata"]["labels"]["app"], "web");
    assert_eq!(
        out["metadata"]["ownerReferences"][0]["kind"],
        "VirtualMachine"
    );
    assert_eq!(
        out["spec"]["domain"]["firmware"]["uuid"],
        kvrs_core::template::firmware_uuid_for_vm("web")
    );
    assert_eq!(
        out["spec"]["domain"]["devices"]["disks"],
        serde_json::json!([{"name": "root", "disk": {"bus": "sata"}}]),
        "bare volume: disk from the VM controller, bus from the webhook"
    );
}

#[test]
fn feature_gates_are_taken_from_the_flag() {
    let vsock =
        FEDORA_VMI_YAML.replace("      disks:", "      autoattachVSOCK: true\n      disks:");
    let err = assert_one_line_error(&run(&["-"], Some(&vsock)));
    assert!(err.contains("spec.domain.devices.autoattachVSOCK"), "{err}");
    let out = stdout_json(&run(
        &["-", "--feature-gates", "VSOCK,Sidecar"],
        Some(&vsock),
    ));
    assert_eq!(out["spec"]["domain"]["devices"]["autoattachVSOCK"], true);
}

#[test]
fn text_that_is_neither_yaml_nor_json_is_one_line_exit_2() {
    let err = assert_one_line_error(&run(&["-"], Some("{ this is: [not json")));
    assert!(err.contains("not valid"), "{err}");
    let err = assert_one_line_error(&run(&["-"], Some("key: [unclosed\n  - x: :")));
    assert!(err.contains("not valid YAML or JSON"), "{err}");
}

#[test]
fn a_wrong_kind_is_one_line_exit_2() {
    let err = assert_one_line_error(&run(
        &["-"],
        Some("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"),
    ));
    assert!(err.contains("Pod"), "{err}");
    let err = assert_one_line_error(&run(&["-"], Some("metadata: {name: p}\n")));
    assert!(err.contains("kind"), "{err}");
    let err = assert_one_line_error(&run(&["-"], Some("- just\n- a list\n")));
    assert!(err.contains("VirtualMachineInstance"), "{err}");
}

#[test]
fn a_wrong_field_type_names_the_field() {
    let bad = FEDORA_VMI_YAML.replace("memory: 2Gi", "memory: [2, Gi]");
    let err = assert_one_line_error(&run(&["-"], Some(&bad)));
    assert!(
        err.contains("spec.domain.resources.requests.memory"),
        "{err}"
    );
    let bad = FEDORA_VMI_YAML.replace(
        "disk: {bus: virtio}",
        "disk: {bus: virtio}\n          bootOrder: first",
    );
    let err = assert_one_line_error(&run(&["-"], Some(&bad)));
    assert!(
        err.contains("spec.domain.devices.disks[0].bootOrder"),
        "{err}"
    );
}

#[test]
fn a_missing_required_field_names_the_field() {
    let bad = FEDORA_VMI_YAML.replace(
        "      containerDisk:\n        image: quay.io/containerdisks/fedora:41\n",
        "      containerDisk: {}\n",
    );
    let err = assert_one_line_error(&run(&["-"], Some(&bad)));
    assert!(
        err.contains("spec.volumes[0].containerDisk") && err.contains("image"),
        "{err}"
    );
    let no_spec = "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: x}\n";
    let err = assert_one_line_error(&run(&["-"], Some(no_spec)));
    assert!(err.contains("spec"), "{err}");
    let vm_without_template = "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: x}\nspec:\n  template: {}\n";
    let err = assert_one_line_error(&run(&["-"], Some(vm_without_template)));
    assert!(err.contains("spec.template.spec"), "{err}");
}

#[test]
fn a_missing_file_is_one_line_exit_2() {
    let err = assert_one_line_error(&run(&["/nonexistent/vmi.yaml"], None));
    assert!(err.contains("/nonexistent/vmi.yaml"), "{err}");
}

#[test]
fn a_rejected_vmi_lists_every_cause_on_one_line() {
    let bad = FEDORA_VMI_YAML
        .replace("disk: {bus: virtio}", "disk: {bus: ide}")
        .replace(
            "requests:\n        memory: 2Gi",
            "requests:\n        memory: 2Gi\n      limits:\n        memory: 1Gi",
        );
    let err = assert_one_line_error(&run(&["-"], Some(&bad)));
    assert!(
        err.contains("spec.domain.devices.disks[0].disk.bus: IDE bus is not supported"),
        "{err}"
    );
    assert!(
        err.contains("spec.domain.resources.requests.memory"),
        "{err}"
    );
}

#[test]
fn a_vm_with_an_unknown_run_strategy_is_rejected() {
    let vm = "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: x}\nspec:\n  runStrategy: Sometimes\n  template:\n    spec:\n      domain:\n        memory: {guest: 1Gi}\n        devices: {}\n";
    let err = assert_one_line_error(&run(&["-"], Some(vm)));
    assert!(
        err.contains("spec.runStrategy") && err.contains("Invalid RunStrategy (Sometimes)"),
        "{err}"
    );
}
