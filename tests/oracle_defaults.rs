//! kvrs's admission (namespace default -> defaulting -> validation) against KubeVirt v1.9.0's
//! own mutating and validating webhooks, on every case of the oracle corpus:
//!
//! - every `NAME.vmi.json` with a `NAME.defaulted.json` is admitted (with the feature gates of
//!   `NAME.featuregates.txt`) and comes out equal to KubeVirt's defaulted VMI;
//! - every case with `NAME.error.txt` is rejected, with a cause on the field KubeVirt names;
//! - cases that need feature gates are rejected without them;
//! - defaulting is idempotent on every case.
//!
//! Every difference of an admitted VMI from KubeVirt's is checked against
//! `tests/deliberate-differences.json` (comparison `defaulted`, JSON pointers into the VMI).

use std::fs;
use std::path::Path;

use kvrs_core::admission::admit;
use kvrs_core::defaults::apply_defaults;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::deliberate::json_differences;
use kvrs_tests::go_json::GoRules;
use kvrs_tests::{Deliberate, cases_with, read_json, shared_dir};

fn config_for(dir: &Path, name: &str) -> ClusterConfig {
    let gates =
        fs::read_to_string(dir.join(format!("{name}.featuregates.txt"))).unwrap_or_default();
    ClusterConfig::with_feature_gates(&gates)
}

fn input(dir: &Path, name: &str) -> VirtualMachineInstance {
    serde_json::from_value(read_json(&dir.join(format!("{name}.vmi.json"))))
        .unwrap_or_else(|e| panic!("{name}.vmi.json: {e}"))
}

/// The first differing JSON path between two documents, for a readable failure.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value::{Array, Object};
    match (a, b) {
        (Object(x), Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    None => return Some(format!("{path}.{k}: only in kvrs ({v})")),
                    Some(w) => {
                        if let Some(d) = first_difference(v, w, &format!("{path}.{k}")) {
                            return Some(d);
                        }
                    }
                }
            }
            y.iter()
                .find(|(k, _)| !x.contains_key(*k))
                .map(|(k, v)| format!("{path}.{k}: only in KubeVirt ({v})"))
        }
        (Array(x), Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: kvrs {a} != KubeVirt {b}")),
    }
}

#[test]
fn admitted_vmis_equal_kubevirts_defaulted_vmis() {
    let dir = shared_dir("oracle");
    let cases = cases_with(&dir, "defaulted.json");
    let mut deliberate = Deliberate::load("oracle", &["defaulted"]);
    let mut failures = Vec::new();
    for name in &cases {
        let expected = read_json(&dir.join(format!("{name}.defaulted.json")));
        match admit(input(&dir, name), &config_for(&dir, name)) {
            Ok(vmi) => {
                let got = serde_json::to_value(&vmi).unwrap();
                let diffs = json_differences("defaulted", "", &expected, &got);
                if let Some(diff) = deliberate.unexpected(name, diffs).first() {
                    failures.push(format!("{name}: {diff}"));
                }
            }
            Err(e) => failures.push(format!("{name}: rejected: {e}")),
        }
    }
    println!(
        "{}/{} cases match",
        cases.len() - failures.len(),
        cases.len()
    );
    println!("{}", deliberate.summary());
    assert!(!cases.is_empty(), "no oracle case found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    deliberate.finish();
}

#[test]
fn cases_kubevirt_rejects_are_rejected_on_the_same_field() {
    let dir = shared_dir("oracle");
    let cases = cases_with(&dir, "error.txt");
    assert!(!cases.is_empty(), "no expected-reject case found");
    for name in &cases {
        let text = fs::read_to_string(dir.join(format!("{name}.error.txt"))).unwrap();
        // KubeVirt's causes: "  cause: field=F type=T message=M".
        let fields: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("cause: field="))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(!fields.is_empty(), "{name}: no cause in error.txt");
        let err = admit(input(&dir, name), &config_for(&dir, name))
            .expect_err(&format!("{name}: KubeVirt rejects it, kvrs admitted it"));
        let ours: Vec<&str> = err.causes().iter().map(|c| c.field.as_str()).collect();
        for field in fields {
            assert!(
                ours.contains(&field),
                "{name}: no cause on {field}; kvrs said: {err}"
            );
        }
        println!("{name}: rejected: {err}");
    }
}

#[test]
fn cases_needing_feature_gates_are_rejected_without_them() {
    let dir = shared_dir("oracle");
    let cases = cases_with(&dir, "featuregates.txt");
    assert!(!cases.is_empty(), "no case with feature gates found");
    for name in &cases {
        let gates = fs::read_to_string(dir.join(format!("{name}.featuregates.txt"))).unwrap();
        let err = admit(input(&dir, name), &ClusterConfig::default()).expect_err(&format!(
            "{name}: admitted without the {} gate(s)",
            gates.trim()
        ));
        let named = |gate: &str| err.causes().iter().any(|c| c.message.contains(gate));
        assert!(
            gates.split(',').map(str::trim).any(named),
            "{name}: no cause names the gate {}: {err}",
            gates.trim()
        );
    }
    println!("{} gated cases rejected without their gates", cases.len());
}

#[test]
fn defaulting_is_idempotent_on_every_case() {
    let dir = shared_dir("oracle");
    let cases = cases_with(&dir, "vmi.json");
    for name in &cases {
        let config = config_for(&dir, name);
        let mut once = input(&dir, name);
        apply_defaults(&mut once, &config);
        let mut twice = once.clone();
        apply_defaults(&mut twice, &config);
        assert_eq!(once, twice, "{name}: a second defaulting changed the VMI");
    }
    println!("{} cases defaulted idempotently", cases.len());
}

/// The VM examples of the corpus were turned into VMIs the way KubeVirt's VM controller does.
/// Wrapping each such VMI back into a VM (template = its spec, labels and annotations; the
/// firmware UUID left out when it is the name-derived one) and running `vmi_from_vm` must give
/// the same VMI (apart from the corpus's fixed `metadata.uid`), as Go's types write it.
#[test]
fn vm_examples_turn_into_the_corpus_vmis() {
    use kvrs_core::VirtualMachine;
    use kvrs_core::template::{firmware_uuid_for_vm, vmi_from_vm};
    let dir = shared_dir("oracle");
    let cases: Vec<String> = cases_with(&dir, "vmi.json")
        .into_iter()
        .filter(|n| n.starts_with("example-vm-"))
        .collect();
    assert!(!cases.is_empty(), "no VM example in the corpus");
    let mut derived = 0;
    let go = GoRules::load();
    for name in &cases {
        let mut expected = read_json(&dir.join(format!("{name}.vmi.json")));
        let meta = expected["metadata"].as_object_mut().unwrap();
        meta.remove("uid");
        let vm_name = meta["name"].as_str().unwrap().to_string();
        let mut template_spec = expected["spec"].clone();
        let uuid = &template_spec["domain"]["firmware"]["uuid"];
        if uuid.as_str() == Some(firmware_uuid_for_vm(&vm_name).as_str()) {
            template_spec["domain"]
                .as_object_mut()
                .unwrap()
                .remove("firmware");
            derived += 1;
        }
        let vm: VirtualMachine = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": vm_name, "namespace": expected["metadata"]["namespace"]},
            "spec": {"runStrategy": "Always", "template": {
                "metadata": {
                    "labels": expected["metadata"].get("labels").cloned().unwrap_or_default(),
                    "annotations": expected["metadata"].get("annotations").cloned().unwrap_or_default(),
                },
                "spec": template_spec}}
        }))
        .unwrap();
        let mut got = serde_json::to_value(vmi_from_vm(&vm).unwrap()).unwrap();
        // Empty label/annotation maps of the rebuilt VM are not in the corpus.
        for key in ["labels", "annotations"] {
            if got["metadata"][key] == serde_json::json!({}) {
                got["metadata"].as_object_mut().unwrap().remove(key);
            }
        }
        // KubeVirt's VM controller gives every volume without a disk a plain disk; the corpus
        // skipped that step (the webhook adds the same disks later), so add them here.
        add_bare_volume_disks(&mut expected);
        // The corpus VMIs are written by hand; kvrs writes what Go writes (its zero values).
        let expected = go.marshal("v1.VirtualMachineInstance", &expected);
        if let Some(diff) = first_difference(&got, &expected, "") {
            panic!("{name}: {diff}");
        }
    }
    println!(
        "{} VM examples rebuilt, {derived} with the name-derived firmware UUID",
        cases.len()
    );
    assert!(
        derived >= cases.len() - 1,
        "the firmware UUID derivation disagrees with KubeVirt"
    );
}

fn add_bare_volume_disks(vmi: &mut serde_json::Value) {
    let names: Vec<String> = vmi["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect();
    let devices = &mut vmi["spec"]["domain"]["devices"];
    let has = |devices: &serde_json::Value, key: &str, n: &str| {
        devices[key]
            .as_array()
            .into_iter()
            .flatten()
            .any(|d| d["name"] == n)
    };
    let missing: Vec<String> = names
        .into_iter()
        .filter(|n| !has(devices, "disks", n) && !has(devices, "filesystems", n))
        .collect();
    if missing.is_empty() {
        return;
    }
    if devices.get("disks").is_none() {
        devices["disks"] = serde_json::json!([]);
    }
    let disks = devices["disks"].as_array_mut().unwrap();
    disks.extend(missing.into_iter().map(|n| serde_json::json!({"name": n})));
}

/// KubeVirt's VM controller created these VMIs from these VMs (`oracle-vm`, cases that start a
/// VM): `vmi_from_vm` gives the same name, namespace, labels, owner and spec. The controller's own
/// additions (revision status, generation annotation, its finalizer, default pod network) belong to
/// the VM controller decision and are left out of the comparison.
#[test]
fn vmi_from_vm_matches_the_vm_controllers_created_vmis() {
    use kvrs_core::VirtualMachine;
    use kvrs_core::template::vmi_from_vm;
    let dir = shared_dir("oracle-vm");
    let mut compared = 0;
    for name in cases_with(&dir, "out.json") {
        let out = read_json(&dir.join(format!("{name}.out.json")));
        let Some(created) = out["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["verb"] == "create" && a["resource"] == "virtualmachineinstances")
        else {
            continue;
        };
        let scenario = read_json(&dir.join(format!("{name}.json")));
        let vm: VirtualMachine = serde_json::from_value(scenario["vm"].clone()).unwrap();
        let got = serde_json::to_value(vmi_from_vm(&vm).unwrap()).unwrap();
        let sent = &created["object"];
        for key in ["name", "namespace", "labels", "ownerReferences"] {
            assert_eq!(
                got["metadata"][key], sent["metadata"][key],
                "{name}: metadata.{key}"
            );
        }
        let strip = |v: &serde_json::Value| {
            let mut spec = v["spec"].clone();
            let spec_obj = spec.as_object_mut().unwrap();
            spec_obj.remove("networks");
            spec_obj["domain"]["devices"]
                .as_object_mut()
                .unwrap()
                .remove("interfaces");
            spec
        };
        if let Some(diff) = first_difference(&strip(&got), &strip(sent), "spec") {
            panic!("{name}: {diff}");
        }
        compared += 1;
    }
    println!("{compared} VMIs created by KubeVirt's VM controller compared");
    assert!(compared > 0, "no VMI creation in oracle-vm");
}
