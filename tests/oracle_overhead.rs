//! KubeVirt's memory overhead and compute-container resources for every oracle case with a
//! `NAME.overhead.txt`: the overhead must match to the byte, and the whole summary line by line.
//! Every difference is checked against `tests/deliberate-differences.json` (comparison
//! `overhead`; the path is the summary line's key, e.g. `compute.requests.memory`).

use kvrs_core::resources::ResourceReport;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::{Deliberate, Difference, cases_with, read_json, shared_dir};

/// The summary lines that differ, line by line; the path is the line's key (before `: `).
fn summary_differences(kubevirt: &str, kvrs: &str) -> Vec<Difference> {
    let (k, r): (Vec<&str>, Vec<&str>) = (
        kubevirt.trim_end().lines().collect(),
        kvrs.trim_end().lines().collect(),
    );
    let key = |l: &str| l.split_once(": ").map_or(l, |(k, _)| k).to_string();
    (0..k.len().max(r.len()))
        .filter(|&i| k.get(i) != r.get(i))
        .map(|i| {
            let (kl, rl) = (k.get(i).copied(), r.get(i).copied());
            let path = key(kl.or(rl).unwrap_or_default());
            let shown = |l: Option<&str>| l.unwrap_or("absent").to_string();
            Difference::new("overhead", path, shown(kl), shown(rl))
        })
        .collect()
}

fn config_for(dir: &std::path::Path, name: &str) -> ClusterConfig {
    let gates =
        std::fs::read_to_string(dir.join(format!("{name}.featuregates.txt"))).unwrap_or_default();
    ClusterConfig::with_feature_gates(&gates)
}

#[test]
fn overhead_matches_kubevirt_for_every_oracle_case() {
    let dir = shared_dir("oracle");
    let cases = cases_with(&dir, "overhead.txt");
    let mut deliberate = Deliberate::load("oracle", &["overhead"]);
    let mut bytes_match = 0;
    let mut report_match = 0;
    let mut failures = Vec::new();
    for name in &cases {
        let vmi: VirtualMachineInstance =
            serde_json::from_value(read_json(&dir.join(format!("{name}.defaulted.json"))))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = std::fs::read_to_string(dir.join(format!("{name}.overhead.txt"))).unwrap();
        let report = match ResourceReport::new(&vmi, &config_for(&dir, name)) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: error {e}"));
                continue;
            }
        };
        let expected_bytes: i64 = expected
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("memoryOverheadBytes: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name}: no memoryOverheadBytes line"));
        let bytes = Difference::new(
            "overhead",
            "memoryOverheadBytes",
            expected_bytes.to_string(),
            report.overhead.bytes.to_string(),
        );
        if report.overhead.bytes == expected_bytes || deliberate.check(name, &bytes).is_some() {
            bytes_match += 1;
        } else {
            failures.push(format!(
                "{name}: overhead {} != {expected_bytes}",
                report.overhead.bytes
            ));
        }
        let got = report.to_lines();
        if deliberate
            .unexpected(name, summary_differences(&expected, &got))
            .is_empty()
        {
            report_match += 1;
        } else {
            failures.push(format!(
                "{name}: summary differs\n--- kvrs\n{got}--- kubevirt\n{expected}"
            ));
        }
    }
    println!("overhead bytes: {bytes_match}/{} match", cases.len());
    println!("overhead summaries: {report_match}/{} match", cases.len());
    println!("{}", deliberate.summary());
    assert!(!cases.is_empty(), "no oracle case compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    deliberate.finish();
}
