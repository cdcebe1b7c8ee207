//! Converter conformance: every oracle case's defaulted VMI converts to the same domain XML tree
//! as KubeVirt v1.9.0's converter produced. Prints `N/M oracle cases match` and the first
//! differences of each failing case. Every difference is checked against
//! `tests/deliberate-differences.json` (comparison `domain`, paths as `xmltree::diff` names them,
//! e.g. `/domain/devices[4]/disk[0]/@type`).

use kvrs_converter::{ConverterContext, convert, xmltree};
use kvrs_tests::{Deliberate, Difference, cases_with, shared_dir};

/// The differences of one domain, from `xmltree::diff`'s `PATH: what` lines (what KubeVirt's
/// converter wrote is "expected", what kvrs's wrote is "found").
fn differences(expected: &str, xml: &str) -> Vec<Difference> {
    xmltree::diff(expected, xml, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|line| {
            let (path, what) = line.split_once(": ").unwrap_or(("", line.as_str()));
            let (kubevirt, kvrs) = if let Some(x) = what.strip_prefix("missing ") {
                (x.to_string(), "absent".to_string())
            } else if let Some(x) = what.strip_prefix("unexpected ") {
                ("absent".to_string(), x.to_string())
            } else if let Some((k, r)) = what
                .strip_prefix("element ")
                .and_then(|x| x.split_once(" expected, "))
            {
                (k.to_string(), r.trim_end_matches(" found").to_string())
            } else if let Some((k, r)) = what
                .trim_start_matches("text ")
                .strip_prefix("expected ")
                .and_then(|x| x.split_once(", found "))
            {
                (k.to_string(), r.to_string())
            } else {
                (what.to_string(), "differs".to_string())
            };
            Difference::new("domain", path, kubevirt, kvrs)
        })
        .collect()
}

#[test]
fn oracle_domains_match() {
    let dir = shared_dir("oracle");
    let names = cases_with(&dir, "domain.xml");
    let rejected = cases_with(&dir, "error.txt").len();
    assert!(!names.is_empty(), "no oracle domain cases found");
    let ctx = ConverterContext::default();
    let mut deliberate = Deliberate::load("oracle", &["domain"]);
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
        let diffs = deliberate.unexpected(name, differences(&expected, &xml));
        if !diffs.is_empty() {
            let first: Vec<String> = diffs.iter().take(3).map(ToString::to_string).collect();
            failures.push(format!("{name}: {}", first.join(" | ")));
        }
    }
    println!(
        "{}/{} oracle cases match ({rejected} expected-reject cases skipped: validation rejects them)",
        names.len() - failures.len(),
        names.len()
    );
    println!("{}", deliberate.summary());
    for f in &failures {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} oracle cases differ",
        failures.len(),
        names.len()
    );
    deliberate.finish();
}

#[test]
fn differences_name_the_path_and_both_sides() {
    let kubevirt = r#"<domain type="kvm"><name>a</name><devices><disk/></devices></domain>"#;
    let kvrs = r#"<domain type="qemu"><name>b</name><devices/><memory/></domain>"#;
    let shown: Vec<String> = differences(kubevirt, kvrs)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        shown,
        [
            r#"domain /domain/@type: kubevirt Some("kvm"), kvrs Some("qemu")"#,
            r#"domain /domain/name[0]: kubevirt "a", kvrs "b""#,
            "domain /domain/devices[1]: kubevirt <disk> at position 0, kvrs absent",
            "domain /domain: kubevirt absent, kvrs <memory> at position 2",
        ]
    );
}
