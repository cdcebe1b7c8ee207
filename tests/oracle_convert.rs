//! Converter conformance: every oracle case's defaulted VMI converts to the same domain XML tree
//! as KubeVirt v1.9.0's converter produced. Prints `N/M oracle cases match` and the first
//! differences of each failing case.

use kvrs_converter::{ConverterContext, convert, xmltree};
use kvrs_tests::{cases_with, shared_dir};

#[test]
fn oracle_domains_match() {
    let dir = shared_dir("oracle");
    let names = cases_with(&dir, "domain.xml");
    let rejected = cases_with(&dir, "error.txt").len();
    assert!(!names.is_empty(), "no oracle domain cases found");
    let ctx = ConverterContext::default();
    let mut failures = Vec::new();
    for name in &names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.defaulted.json"))).unwrap();
        let vmi: kvrs_core::VirtualMachineInstance =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = std::fs::read_to_string(dir.join(format!("{name}.domain.xml"))).unwrap();
        let xml = match convert(&vmi, &ctx) {
            Ok(domain) => domain.to_xml().unwrap(),
            Err(e) => {
                failures.push(format!("{name}: conversion failed: {e}"));
                continue;
            }
        };
        let diffs = xmltree::diff(&expected, &xml, 3).unwrap();
        if !diffs.is_empty() {
            failures.push(format!("{name}: {}", diffs.join(" | ")));
        }
    }
    println!(
        "{}/{} oracle cases match ({rejected} expected-reject cases skipped: validation rejects them)",
        names.len() - failures.len(),
        names.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} oracle cases differ",
        failures.len(),
        names.len()
    );
}
