//! Converts every oracle case's defaulted VMI and compares the domain XML with KubeVirt's as trees.

use kvrs_converter::{ConverterContext, convert, xmltree};
use std::path::PathBuf;

fn oracle_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/oracle"));
    if dir.is_dir() {
        return Some(dir);
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "oracle corpus missing under CI"
    );
    None
}

#[test]
fn oracle_cases_convert_identically() {
    let Some(dir) = oracle_dir() else { return };
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".domain.xml").map(str::to_string))
        .collect();
    names.sort();
    let rejected = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".error.txt"))
        .count();
    let mut failures = Vec::new();
    for name in &names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.defaulted.json"))).unwrap();
        let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_str(&text).unwrap();
        let expected = std::fs::read_to_string(dir.join(format!("{name}.domain.xml"))).unwrap();
        let got = match convert(&vmi, &ConverterContext::default()) {
            Ok(d) => d.to_xml().unwrap(),
            Err(e) => {
                failures.push(format!("{name}: convert error: {e}"));
                continue;
            }
        };
        let diffs = xmltree::diff(&expected, &got, 3).unwrap();
        if !diffs.is_empty() {
            failures.push(format!("{name}: {}", diffs.join(" | ")));
        }
    }
    println!(
        "{}/{} oracle cases match ({rejected} expected-reject cases are validation's)",
        names.len() - failures.len(),
        names.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} oracle cases differ",
        failures.len()
    );
}
