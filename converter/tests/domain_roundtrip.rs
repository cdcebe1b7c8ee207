//! Every oracle domain XML parses into `Domain` and serializes back to the same tree.

use kvrs_converter::domain::Domain;
use kvrs_converter::xmltree;
use std::path::PathBuf;

fn oracle_dir() -> PathBuf {
    kvrs_corpus::shared_dir("oracle")
}

#[test]
fn oracle_domains_round_trip() {
    let dir = oracle_dir();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".domain.xml").map(str::to_string))
        .collect();
    names.sort();
    assert!(!names.is_empty());
    let mut failures = Vec::new();
    for name in &names {
        let xml = std::fs::read_to_string(dir.join(format!("{name}.domain.xml"))).unwrap();
        let domain = match Domain::from_xml(&xml) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{name}: parse: {e}"));
                continue;
            }
        };
        let back = domain.to_xml().unwrap();
        let diffs = xmltree::diff(&xml, &back, 5).unwrap();
        if !diffs.is_empty() {
            failures.push(format!("{name}: {}", diffs.join("; ")));
            continue;
        }
        // And the value survives a second trip unchanged.
        assert_eq!(Domain::from_xml(&back).unwrap(), domain, "{name}");
    }
    println!(
        "{}/{} oracle domains round-trip",
        names.len() - failures.len(),
        names.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
