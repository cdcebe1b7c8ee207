//! KubeVirt's memory overhead and compute-container resources for every oracle case with a
//! `NAME.overhead.txt`: the overhead must match to the byte, and the whole summary line by line.

use kvrs_core::resources::ResourceReport;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::{cases_with, read_json, shared_dir};

fn config_for(dir: &std::path::Path, name: &str) -> ClusterConfig {
    let gates =
        std::fs::read_to_string(dir.join(format!("{name}.featuregates.txt"))).unwrap_or_default();
    ClusterConfig::with_feature_gates(&gates)
}

#[test]
fn overhead_matches_kubevirt_for_every_oracle_case() {
    let dir = shared_dir("oracle");
    let cases = cases_with(&dir, "overhead.txt");
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
        if report.overhead.bytes == expected_bytes {
            bytes_match += 1;
        } else {
            failures.push(format!(
                "{name}: overhead {} != {expected_bytes}",
                report.overhead.bytes
            ));
        }
        let got = report.to_lines();
        if got.trim_end() == expected.trim_end() {
            report_match += 1;
        } else {
            failures.push(format!(
                "{name}: summary differs\n--- kvrs\n{got}--- kubevirt\n{expected}"
            ));
        }
    }
    println!("overhead bytes: {bytes_match}/{} match", cases.len());
    println!("overhead summaries: {report_match}/{} match", cases.len());
    assert!(!cases.is_empty(), "no oracle case compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
