//! `--kubevirt-cr FILE` end to end: a KubeVirt CR's `spec.configuration` changes what
//! `defaults`, `convert`, `overhead`, `pod` and `decide` print, `--feature-gates` adds to its
//! gates, and a bad CR is a one-line error naming the file and the JSON path (exit code 2).

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo_file(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .to_str()
        .expect("utf-8 path")
        .to_string()
}

fn cr(name: &str) -> String {
    repo_file(&format!("fixtures/kubevirt-cr/{name}.yaml"))
}

fn kvrs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvrs"))
        .args(args)
        .output()
        .expect("run kvrs")
}

fn stdout(args: &[&str]) -> String {
    let out = kvrs(args);
    assert!(
        out.status.success(),
        "kvrs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The one-line error of a run that must exit 2 (after any warnings about the CR's settings
/// kvrs left out, which are not errors).
fn error(args: &[&str]) -> String {
    let out = kvrs(args);
    assert_eq!(out.status.code(), Some(2), "kvrs {args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.contains(": warning: not applied: "))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_string()
}

fn temp_cr(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn cpu_request(overhead: &str) -> &str {
    overhead
        .lines()
        .find_map(|l| l.strip_prefix("compute.requests.cpu: "))
        .expect("a cpu request line")
}

#[test]
fn cpu_allocation_ratio_changes_the_cpu_request_of_overhead_and_pod() {
    let vmi = repo_file("fixtures/vmi/minimal.yaml");
    let ratio = cr("cpu-allocation-ratio");
    assert_eq!(cpu_request(&stdout(&["overhead", &vmi])), "100m (100)");
    assert_eq!(
        cpu_request(&stdout(&["overhead", &vmi, "--kubevirt-cr", &ratio])),
        "1 (1000)"
    );
    let pod = |extra: &[&str]| {
        let mut args = vec!["pod", vmi.as_str(), "-o", "json"];
        args.extend(extra);
        let pod: serde_json::Value = serde_json::from_str(&stdout(&args)).unwrap();
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"].clone()
    };
    assert_eq!(pod(&[]), "100m");
    assert_eq!(pod(&["--kubevirt-cr", &ratio]), "1");
}

#[test]
fn use_emulation_makes_a_qemu_domain_and_a_pod_without_kvm() {
    let vmi = repo_file("fixtures/vmi/minimal.yaml");
    let emulation = cr("emulation");
    assert!(stdout(&["convert", &vmi]).starts_with(r#"<domain type="kvm""#));
    let xml = stdout(&["convert", &vmi, "--kubevirt-cr", &emulation]);
    assert!(xml.starts_with(r#"<domain type="qemu""#), "{xml}");
    // A --context that says the node has /dev/kvm wins over the CR's consequence.
    let dir = tempfile::tempdir().unwrap();
    let ctx = temp_cr(&dir, "ctx.json", r#"{"hypervisorDeviceAvailable": true}"#);
    let xml = stdout(&[
        "convert",
        &vmi,
        "--kubevirt-cr",
        &emulation,
        "--context",
        &ctx,
    ]);
    assert!(xml.starts_with(r#"<domain type="kvm""#), "{xml}");

    let pod = stdout(&["pod", &vmi]);
    assert!(pod.contains("devices.kubevirt.io/kvm"), "{pod}");
    assert!(!pod.contains("--allow-emulation"), "{pod}");
    let pod = stdout(&["pod", &vmi, "--kubevirt-cr", &emulation]);
    assert!(!pod.contains("devices.kubevirt.io/kvm"), "{pod}");
    assert!(pod.contains("--allow-emulation"), "{pod}");
}

#[test]
fn a_production_cr_changes_defaults_domain_and_overhead() {
    let vmi = repo_file("fixtures/vmi/minimal.yaml");
    let prod = cr("production");
    let admitted: serde_json::Value =
        serde_json::from_str(&stdout(&["defaults", &vmi, "--kubevirt-cr", &prod])).unwrap();
    let spec = &admitted["spec"];
    assert_eq!(
        spec["domain"]["resources"]["requests"]["cpu"], "200m",
        "{spec}"
    );
    let iface = &spec["domain"]["devices"]["interfaces"][0];
    assert!(iface["masquerade"].is_object(), "{spec}");
    let xml = stdout(&["convert", &vmi, "--kubevirt-cr", &prod]);
    assert!(
        xml.contains(r#"<entry name="manufacturer">Acme Cloud</entry>"#),
        "{xml}"
    );
    assert!(xml.contains(r#"<stats period="30"/>"#), "{xml}");
    let plain = stdout(&["overhead", &vmi]);
    let overcommitted = stdout(&["overhead", &vmi, "--kubevirt-cr", &prod]);
    assert_ne!(plain, overcommitted);
}

#[test]
fn feature_gates_on_the_command_line_add_to_the_crs() {
    let vmi = repo_file("fixtures/vmi/minimal.yaml");
    let dir = tempfile::tempdir().unwrap();
    let gates = temp_cr(
        &dir,
        "gates.yaml",
        "apiVersion: kubevirt.io/v1\nkind: KubeVirt\nspec:\n  configuration:\n    \
         developerConfiguration:\n      featureGates: [VMStatsCollector]\n",
    );
    let pod = stdout(&["pod", &vmi, "--kubevirt-cr", &gates]);
    assert!(pod.contains("--vm-stats-collector"), "{pod}");
    assert!(!pod.contains("--firmware-auto-selection"), "{pod}");
    let pod = stdout(&[
        "pod",
        &vmi,
        "--kubevirt-cr",
        &gates,
        "--feature-gates",
        "FirmwareAutoSelection",
    ]);
    assert!(pod.contains("--vm-stats-collector"), "{pod}");
    assert!(pod.contains("--firmware-auto-selection"), "{pod}");
}

#[test]
fn decide_takes_the_cluster_configuration_too() {
    let scenario = repo_file("fixtures/scenarios/vmi-new.yaml");
    assert!(!stdout(&["decide", "vmi", &scenario]).contains("--allow-emulation"));
    let plan = stdout(&[
        "decide",
        "vmi",
        &scenario,
        "--kubevirt-cr",
        &cr("emulation"),
    ]);
    assert!(plan.contains("--allow-emulation"), "{plan}");
    let plan = stdout(&[
        "decide",
        "vmi",
        &scenario,
        "--feature-gates",
        "VMStatsCollector",
    ]);
    assert!(plan.contains("--vm-stats-collector"), "{plan}");
}

#[test]
fn a_binding_plugin_renders_only_when_the_cr_registers_it() {
    let vm = repo_file("fixtures/manifests/vm-passt-binding.yaml");
    let prod = cr("production");
    let err = error(&["pod", &vm]);
    assert!(
        err.contains("couldn't find configuration for network binding: passt"),
        "{err}"
    );
    let pod = stdout(&["pod", &vm, "--kubevirt-cr", &prod]);
    assert!(
        pod.contains("image: quay.io/kubevirt/network-passt-binding:v1.9.0"),
        "{pod}"
    );
}

#[test]
fn a_bad_cr_is_one_line_naming_the_file_and_the_path() {
    let vmi = repo_file("fixtures/vmi/minimal.yaml");
    let bad = cr("bad-cpu-allocation-ratio");
    for sub in ["defaults", "convert", "overhead", "pod"] {
        let err = error(&[sub, &vmi, "--kubevirt-cr", &bad]);
        assert_eq!(
            err,
            format!(
                "kvrs: {bad}: spec.configuration.developerConfiguration.cpuAllocationRatio: expected an integer"
            ),
            "{sub}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let typo = temp_cr(
        &dir,
        "typo.json",
        r#"{"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "spec": {"configuration": {"developerConfiguration": {"featureGates": ["Sidecar", "hostdisk"]}}}}"#,
    );
    let err = error(&["defaults", &vmi, "--kubevirt-cr", &typo]);
    assert!(
        err.starts_with(&format!(
            "kvrs: {typo}: spec.configuration.developerConfiguration.featureGates[1]: unknown feature gate \"hostdisk\", did you mean \"HostDisk\"?"
        )),
        "{err}"
    );
    let err = error(&["defaults", &vmi, "--kubevirt-cr", &vmi]);
    assert_eq!(
        err,
        format!("kvrs: {vmi}: kind: \"VirtualMachineInstance\" is not KubeVirt")
    );
    let err = error(&["defaults", &vmi, "--kubevirt-cr", "/no/such/kubevirt.yaml"]);
    assert!(err.starts_with("kvrs: /no/such/kubevirt.yaml: "), "{err}");
}

#[test]
fn a_list_of_one_kubevirt_as_kubectl_prints_it_is_read() {
    let vmi = repo_file("fixtures/vmi/minimal.yaml");
    let dir = tempfile::tempdir().unwrap();
    let list = temp_cr(
        &dir,
        "list.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: kubevirt.io/v1\n  kind: KubeVirt\n  \
         spec:\n    configuration:\n      developerConfiguration:\n        cpuAllocationRatio: 2\n",
    );
    assert_eq!(
        cpu_request(&stdout(&["overhead", &vmi, "--kubevirt-cr", &list])),
        "500m (500)"
    );
    let two = temp_cr(
        &dir,
        "two.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- kind: KubeVirt\n- kind: KubeVirt\n",
    );
    let err = error(&["overhead", &vmi, "--kubevirt-cr", &two]);
    assert!(
        err.ends_with("items: a List of 2 objects; expected exactly one KubeVirt"),
        "{err}"
    );
}

#[test]
fn a_cr_understood_in_part_applies_and_each_setting_left_out_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let partial = temp_cr(
        &dir,
        "partial.yaml",
        "apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata: {name: kubevirt, namespace: kubevirt}\n\
         spec:\n  configuration:\n    developerConfiguration: {cpuAllocationRatio: 1}\n\
         \x20   migrations: {parallelMigrationsPerCluster: 2, bandwidthPerMigration: 64Mi, network: migration-net}\n",
    );
    let vmi = repo_file("fixtures/vmi/minimal.yaml");
    let out = kvrs(&["overhead", &vmi, "--kubevirt-cr", &partial]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        cpu_request(&String::from_utf8(out.stdout).unwrap()),
        "1 (1000)",
        "the part understood applies"
    );
    assert_eq!(
        String::from_utf8(out.stderr).unwrap().trim_end(),
        format!(
            "{partial}: warning: not applied: spec.configuration.migrations.network (kvrs does not act on this migration setting yet: it only reaches migrationConfiguration)"
        )
    );
}
