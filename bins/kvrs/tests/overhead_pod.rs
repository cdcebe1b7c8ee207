//! `kvrs overhead` and `kvrs pod` end to end: raw oracle VMIs in (admitted by the CLI), KubeVirt's
//! own overhead summaries and launcher pods out; bad input gives a one-line error and exit 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn oracle() -> PathBuf {
    kvrs_corpus::shared_dir("oracle")
}

fn kvrs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvrs"))
        .args(args)
        .output()
        .expect("run kvrs")
}

fn cases(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(suffix).map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// `kvrs <sub> NAME.vmi.json [--feature-gates ..] extra..`
fn run_case(dir: &Path, name: &str, sub: &str, extra: &[&str]) -> Output {
    let input = dir.join(format!("{name}.vmi.json"));
    let gates =
        std::fs::read_to_string(dir.join(format!("{name}.featuregates.txt"))).unwrap_or_default();
    let mut args = vec![sub, input.to_str().unwrap()];
    if !gates.trim().is_empty() {
        args.extend(["--feature-gates", gates.trim()]);
    }
    args.extend(extra);
    kvrs(&args)
}

#[test]
fn overhead_of_every_raw_oracle_vmi_matches_kubevirt() {
    let dir = oracle();
    let names = cases(&dir, ".overhead.txt");
    let mut failures = Vec::new();
    for name in &names {
        let out = run_case(&dir, name, "overhead", &[]);
        let want = std::fs::read_to_string(dir.join(format!("{name}.overhead.txt"))).unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || got != want {
            failures.push(format!(
                "{name}: {}\n{got}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    println!(
        "kvrs overhead: {}/{} match",
        names.len() - failures.len(),
        names.len()
    );
    assert!(!names.is_empty());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn pod_json_of_every_raw_oracle_vmi_matches_kubevirt() {
    let dir = oracle();
    let names = cases(&dir, ".pod.json");
    let mut failures = Vec::new();
    for name in &names {
        let out = run_case(
            &dir,
            name,
            "pod",
            &["-o", "json", "--qemu-timeout-jitter", "5"],
        );
        let mut got: serde_json::Value = match serde_json::from_slice(&out.stdout) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!(
                    "{name}: {e}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
                continue;
            }
        };
        // Type meta is always written by k8s-openapi (KubeVirt leaves it to the API server).
        assert_eq!(got["apiVersion"], "v1");
        assert_eq!(got["kind"], "Pod");
        let obj = got.as_object_mut().unwrap();
        obj.remove("apiVersion");
        obj.remove("kind");
        let timeout = &mut got["spec"]["containers"][0]["command"][2];
        assert_eq!(timeout, "245s", "{name}: jitter 5 on top of 240 s");
        *timeout = "QEMU_TIMEOUT_WITH_JITTER".into();
        let want: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.pod.json"))).unwrap(),
        )
        .unwrap();
        if got != want {
            failures.push(name.clone());
        }
    }
    println!(
        "kvrs pod: {}/{} match",
        names.len() - failures.len(),
        names.len()
    );
    assert!(!names.is_empty());
    assert!(failures.is_empty(), "differ: {}", failures.join(", "));
}

fn write_temp(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("kvrs-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

const SMALL_VMI: &str = r#"
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: small
  uid: 11111111-2222-3333-4444-555555555555
spec:
  domain:
    cpu: {cores: 2}
    memory: {guest: 2Gi}
    resources:
      requests: {memory: 2Gi}
    devices:
      disks:
      - name: root
        disk: {bus: virtio}
  volumes:
  - name: root
    containerDisk: {image: quay.io/containerdisks/fedora:41}
"#;

#[test]
fn pod_yaml_uses_the_image_and_jitter_options() {
    let file = write_temp("small.yaml", SMALL_VMI);
    let out = kvrs(&[
        "pod",
        file.to_str().unwrap(),
        "--launcher-image",
        "example.com/launcher:test",
        "--qemu-timeout-jitter",
        "119",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod: serde_json::Value = serde_norway::from_slice(&out.stdout).unwrap();
    let compute = &pod["spec"]["containers"][0];
    assert_eq!(compute["image"], "example.com/launcher:test");
    assert_eq!(compute["command"][2], "359s");
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 60);
    assert_eq!(pod["metadata"]["generateName"], "virt-launcher-small-");
    // A 2 vCPU / 2 GiB VM: 280 Mi of overhead on top of the guest memory.
    assert_eq!(compute["resources"]["requests"]["memory"], "2328Mi");
    assert_eq!(compute["resources"]["requests"]["cpu"], "200m");
    let _ = std::fs::remove_file(file);
}

#[test]
fn overhead_prints_the_seed_measurement() {
    let file = write_temp("seed.yaml", SMALL_VMI);
    let out = kvrs(&["overhead", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().next(), Some("memoryOverheadBytes: 293601280"));
    let _ = std::fs::remove_file(file);
}

#[test]
fn out_of_range_jitter_is_refused() {
    let file = write_temp("jitter.yaml", SMALL_VMI);
    let out = kvrs(&[
        "pod",
        file.to_str().unwrap(),
        "--qemu-timeout-jitter",
        "120",
    ]);
    assert!(!out.status.success());
    let _ = std::fs::remove_file(file);
}

#[test]
fn bad_quantity_names_the_field_and_exits_2() {
    let file = write_temp(
        "badq.yaml",
        &SMALL_VMI.replace("memory: {guest: 2Gi}", "memory: {guest: two-gigs}"),
    );
    for sub in ["overhead", "pod"] {
        let out = kvrs(&[sub, file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("spec.domain.memory.guest"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let _ = std::fs::remove_file(file);
}

#[test]
fn rejected_vmis_exit_2_with_the_webhook_message() {
    let dir = oracle();
    for name in cases(&dir, ".error.txt") {
        let out = run_case(&dir, &name, "pod", &[]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(out.stdout.is_empty(), "{name}");
    }
}
