//! The virt-launcher pod kvrs renders for every oracle case with a `NAME.pod.json`, compared
//! field by field with the pod KubeVirt v1.9.0's `RenderLaunchManifest` produced.

use kvrs_core::pod::{PodInputs, render_launcher_pod};
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::{cases_with, read_json, shared_dir};
use serde_json::Value;

/// Fields where kvrs differs on purpose, with the reason. Each entry is a path prefix.
const INTENTIONAL: &[(&str, &str)] = &[
    (
        "/apiVersion:",
        "k8s-openapi always serializes a Pod's type meta; KubeVirt's Go struct leaves it empty \
         and the API server fills in the same v1",
    ),
    (
        "/kind:",
        "k8s-openapi always serializes a Pod's type meta; the API server fills in the same Pod",
    ),
];

/// The corpus prints KubeVirt's random qemu timeout as this literal.
const JITTER_LITERAL: &str = "QEMU_TIMEOUT_WITH_JITTER";

/// Paths (JSON-pointer style) where `got` and `want` differ.
fn diff(path: &str, got: &Value, want: &Value, out: &mut Vec<String>) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, wv) in w {
                let p = format!("{path}/{k}");
                match g.get(k) {
                    Some(gv) => diff(&p, gv, wv, out),
                    None => out.push(format!("{p}: missing (want {wv})")),
                }
            }
            for (k, gv) in g {
                if !w.contains_key(k) {
                    out.push(format!("{path}/{k}: unexpected {gv}"));
                }
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            for (i, wv) in w.iter().enumerate() {
                let p = format!("{path}/{i}");
                match g.get(i) {
                    Some(gv) => diff(&p, gv, wv, out),
                    None => out.push(format!("{p}: missing (want {wv})")),
                }
            }
            for (i, gv) in g.iter().enumerate().skip(w.len()) {
                out.push(format!("{path}/{i}: unexpected {gv}"));
            }
        }
        _ if got == want => {}
        _ => out.push(format!("{path}: got {got}, want {want}")),
    }
}

/// Replaces the rendered `--qemu-timeout` value (which must be base + jitter) by the literal.
fn normalize_jitter(pod: &mut Value, expected: &str) -> Result<(), String> {
    let Some(cmd) = pod
        .pointer_mut("/spec/containers/0/command")
        .and_then(Value::as_array_mut)
    else {
        return Err("compute container has no command".into());
    };
    let Some(i) = cmd.iter().position(|v| v == "--qemu-timeout") else {
        return Err("no --qemu-timeout flag".into());
    };
    match cmd.get_mut(i + 1) {
        Some(v) if v == expected => {
            *v = Value::String(JITTER_LITERAL.into());
            Ok(())
        }
        other => Err(format!("--qemu-timeout is {other:?}, want {expected}")),
    }
}

#[test]
fn launcher_pod_matches_kubevirt_for_every_oracle_case() {
    let dir = shared_dir("oracle");
    let cases = cases_with(&dir, "pod.json");
    let inputs = PodInputs {
        qemu_timeout_jitter_seconds: 37,
        ..PodInputs::default()
    };
    let mut matched = 0;
    let mut failures = Vec::new();
    for name in &cases {
        let vmi: VirtualMachineInstance =
            serde_json::from_value(read_json(&dir.join(format!("{name}.defaulted.json"))))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let gates = std::fs::read_to_string(dir.join(format!("{name}.featuregates.txt")))
            .unwrap_or_default();
        let config = ClusterConfig::with_feature_gates(&gates);
        let want = read_json(&dir.join(format!("{name}.pod.json")));
        let pod = match render_launcher_pod(&vmi, &config, &inputs) {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{name}: error {e}"));
                continue;
            }
        };
        let mut got = serde_json::to_value(&pod).unwrap();
        if let Err(e) = normalize_jitter(&mut got, "277s") {
            failures.push(format!("{name}: {e}"));
            continue;
        }
        let mut diffs = Vec::new();
        diff("", &got, &want, &mut diffs);
        diffs.retain(|d| !INTENTIONAL.iter().any(|(p, _)| d.starts_with(p)));
        if diffs.is_empty() {
            matched += 1;
        } else {
            failures.push(format!("{name}:\n  {}", diffs.join("\n  ")));
        }
    }
    println!(
        "launcher pods: {matched}/{} match field by field",
        cases.len()
    );
    for (path, reason) in INTENTIONAL {
        println!(
            "  intentionally different: {} ({reason})",
            path.trim_end_matches(':')
        );
    }
    assert!(!cases.is_empty(), "no oracle case compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
