//! The virt-launcher pod kvrs renders for every oracle case with a `NAME.pod.json`, compared
//! field by field with the pod KubeVirt v1.9.0's `RenderLaunchManifest` produced.
//!
//! Each case is rendered twice: with KubeVirt's assumption that the nodes offer `/dev/vhost-net`
//! (comparison `pod`), and for a cluster whose nodes do not (`pod-without-vhost-net`: what that
//! fact changes beyond the `pod` differences, each listed in `tests/deliberate-differences.json`).

use kvrs_core::pod::{PodInputs, render_launcher_pod};
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::deliberate::json_differences;
use kvrs_tests::{Deliberate, cases_with, read_json, shared_dir};
use serde_json::Value;

/// The corpus prints KubeVirt's random qemu timeout as this literal.
const JITTER_LITERAL: &str = "QEMU_TIMEOUT_WITH_JITTER";

/// Replaces the rendered `--qemu-timeout` value (which must be base + jitter) by the literal: the
/// corpus's way of writing a random value, not a difference.
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
    let without_vhost_net = PodInputs {
        vhost_net_available: false,
        ..inputs.clone()
    };
    let mut deliberate = Deliberate::load("oracle", &["pod", "pod-without-vhost-net"]);
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
        // Every field that differs, checked against the deliberate differences.
        let base = json_differences("pod", "", &want, &got);
        let mut diffs = deliberate.unexpected(name, base.clone());
        // Without vhost-net on the nodes: what differs from KubeVirt beyond the above.
        match render_launcher_pod(&vmi, &config, &without_vhost_net) {
            Ok(pod) => {
                let mut got = serde_json::to_value(&pod).unwrap();
                let _ = normalize_jitter(&mut got, "277s");
                let more: Vec<_> = json_differences("pod-without-vhost-net", "", &want, &got)
                    .into_iter()
                    .filter(|d| !base.iter().any(|b| b.path == d.path))
                    .collect();
                diffs.extend(deliberate.unexpected(name, more));
            }
            Err(e) => failures.push(format!("{name} without vhost-net: error {e}")),
        }
        if diffs.is_empty() {
            matched += 1;
        } else {
            let lines: Vec<String> = diffs.iter().map(ToString::to_string).collect();
            failures.push(format!("{name}:\n  {}", lines.join("\n  ")));
        }
    }
    println!(
        "launcher pods: {matched}/{} match field by field",
        cases.len()
    );
    println!("{}", deliberate.summary());
    assert!(!cases.is_empty(), "no oracle case compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    deliberate.finish();
}
