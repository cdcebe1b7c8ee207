//! kvrs's admission (namespace default -> defaulting -> validation) against KubeVirt v1.9.0's
//! own mutating and validating webhooks, on every case of the oracle corpus:
//!
//! - every `NAME.vmi.json` with a `NAME.defaulted.json` is admitted (with the feature gates of
//!   `NAME.featuregates.txt`) and comes out equal to KubeVirt's defaulted VMI;
//! - every case with `NAME.error.txt` is rejected, with a cause on the field KubeVirt names;
//! - cases that need feature gates are rejected without them;
//! - defaulting is idempotent on every case.

use std::fs;
use std::path::Path;

use kvrs_core::admission::admit;
use kvrs_core::defaults::apply_defaults;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::{cases_with, read_json, shared_dir};

fn config_for(dir: &Path, name: &str) -> ClusterConfig {
    let gates = fs::read_to_string(dir.join(format!("{name}.featuregates.txt"))).unwrap_or_default();
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
    let Some(dir) = shared_dir("oracle") else { return };
    let cases = cases_with(&dir, "defaulted.json");
    let mut failures = Vec::new();
    for name in &cases {
        let expected = read_json(&dir.join(format!("{name}.defaulted.json")));
        match admit(input(&dir, name), &config_for(&dir, name)) {
            Ok(vmi) => {
                let got = serde_json::to_value(&vmi).unwrap();
                if let Some(diff) = first_difference(&got, &expected, "") {
                    failures.push(format!("{name}: {diff}"));
                }
            }
            Err(e) => failures.push(format!("{name}: rejected: {e}")),
        }
    }
    println!("{}/{} cases match", cases.len() - failures.len(), cases.len());
    assert!(!cases.is_empty(), "no oracle case found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn cases_kubevirt_rejects_are_rejected_on_the_same_field() {
    let Some(dir) = shared_dir("oracle") else { return };
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
            assert!(ours.contains(&field), "{name}: no cause on {field}; kvrs said: {err}");
        }
        println!("{name}: rejected: {err}");
    }
}

#[test]
fn cases_needing_feature_gates_are_rejected_without_them() {
    let Some(dir) = shared_dir("oracle") else { return };
    let cases = cases_with(&dir, "featuregates.txt");
    assert!(!cases.is_empty(), "no case with feature gates found");
    for name in &cases {
        let gates = fs::read_to_string(dir.join(format!("{name}.featuregates.txt"))).unwrap();
        let err = admit(input(&dir, name), &ClusterConfig::default())
            .expect_err(&format!("{name}: admitted without the {} gate(s)", gates.trim()));
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
    let Some(dir) = shared_dir("oracle") else { return };
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
