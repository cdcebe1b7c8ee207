//! The domain as Go JSON against KubeVirt's own: for every oracle case, the domain parsed from
//! `NAME.domain.xml` must marshal to exactly `NAME.domain.json` (values and Go's key order), and
//! `NAME.domain.json` must read back into a domain whose XML is the same tree as `NAME.domain.xml`.

use kvrs_converter::gojson::{
    DomainEnvelope, from_go_json, from_go_json_slice, to_go_json, to_go_json_pretty, to_go_json_vec,
};
use kvrs_converter::{Domain, xmltree};
use serde_json::Value;
use std::path::PathBuf;

fn oracle_dir() -> PathBuf {
    kvrs_corpus::shared_dir("oracle")
}

fn cases(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".domain.json").map(str::to_string))
        .collect();
    names.sort();
    names
}

/// The first places where two JSON values differ, as `path: expected vs found`.
fn json_diff(expected: &Value, found: &Value, at: &str, out: &mut Vec<String>) {
    if out.len() >= 5 {
        return;
    }
    match (expected, found) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                match b.get(k) {
                    Some(vb) => json_diff(va, vb, &format!("{at}.{k}"), out),
                    None => out.push(format!("{at}.{k}: missing")),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{at}.{k}: unexpected"));
            }
            let (ka, kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
            if out.is_empty() && ka != kb {
                out.push(format!("{at}: key order {ka:?} vs {kb:?}"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                json_diff(va, vb, &format!("{at}[{i}]"), out);
            }
        }
        _ if expected != found => out.push(format!("{at}: expected {expected}, found {found}")),
        _ => {}
    }
}

/// The VMI's name and namespace, which the launcher puts into the domain's object meta.
fn vmi_name(dir: &std::path::Path, name: &str) -> (String, String) {
    let text = std::fs::read_to_string(dir.join(format!("{name}.defaulted.json"))).unwrap();
    let vmi: Value = serde_json::from_str(&text).unwrap();
    let meta = &vmi["metadata"];
    (
        meta["namespace"].as_str().unwrap().to_string(),
        meta["name"].as_str().unwrap().to_string(),
    )
}

#[test]
fn xml_to_go_json_matches_kubevirt() {
    let dir = oracle_dir();
    let names = cases(&dir);
    assert!(
        names.len() >= 90,
        "expected the full corpus, found {} cases",
        names.len()
    );
    let mut failures = Vec::new();
    for name in &names {
        let expected_text =
            std::fs::read_to_string(dir.join(format!("{name}.domain.json"))).unwrap();
        let expected: Value = serde_json::from_str(&expected_text).unwrap();
        let xml = std::fs::read_to_string(dir.join(format!("{name}.domain.xml"))).unwrap();
        let spec = Domain::from_xml(&xml).unwrap();
        let (namespace, vmi) = vmi_name(&dir, name);
        let env = DomainEnvelope::new(&namespace, &vmi, spec);
        let got = to_go_json(&env);
        let mut diffs = Vec::new();
        json_diff(&expected, &got, "", &mut diffs);
        // Byte equality also pins Go's field order everywhere.
        if diffs.is_empty()
            && serde_json::to_string(&expected).unwrap() != serde_json::to_string(&got).unwrap()
        {
            diffs.push("same values, different key order".into());
        }
        // The corpus files are Go's `json.MarshalIndent(.., "", "  ")` plus a newline.
        let mut pretty = to_go_json_pretty(&env);
        pretty.push(b'\n');
        if diffs.is_empty() && pretty != expected_text.as_bytes() {
            diffs.push("same JSON, different bytes than Go's MarshalIndent".into());
        }
        if !diffs.is_empty() {
            failures.push(format!("{name}: {}", diffs.join(" | ")));
        }
    }
    println!(
        "{}/{} cases match byte for byte (domain XML -> Go JSON)",
        names.len() - failures.len(),
        names.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty(), "{} cases differ", failures.len());
}

#[test]
fn go_json_to_xml_matches_kubevirt() {
    let dir = oracle_dir();
    let names = cases(&dir);
    let mut failures = Vec::new();
    for name in &names {
        let bytes = std::fs::read(dir.join(format!("{name}.domain.json"))).unwrap();
        let env = match from_go_json_slice(&bytes) {
            Ok(e) => e,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let (namespace, vmi) = vmi_name(&dir, name);
        assert_eq!(
            (env.meta.namespace.as_str(), env.meta.name.as_str()),
            (namespace.as_str(), vmi.as_str()),
            "{name}"
        );
        let expected = std::fs::read_to_string(dir.join(format!("{name}.domain.xml"))).unwrap();
        let diffs = xmltree::diff(&expected, &env.spec.to_xml().unwrap(), 3).unwrap();
        if !diffs.is_empty() {
            failures.push(format!("{name}: {}", diffs.join(" | ")));
        } else if env.spec != Domain::from_xml(&expected).unwrap() {
            failures.push(format!(
                "{name}: same XML, but the model differs from the one parsed from XML"
            ));
        }
    }
    println!(
        "{}/{} cases match (Go JSON -> domain XML)",
        names.len() - failures.len(),
        names.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty(), "{} cases differ", failures.len());
}

#[test]
fn go_json_round_trips_unchanged() {
    let dir = oracle_dir();
    let names = cases(&dir);
    let mut failures = Vec::new();
    for name in &names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.domain.json"))).unwrap();
        let expected: Value = serde_json::from_str(&text).unwrap();
        let env = from_go_json(&expected).unwrap();
        let again = to_go_json_vec(&env);
        if again != serde_json::to_vec(&expected).unwrap() {
            let mut diffs = Vec::new();
            json_diff(
                &expected,
                &serde_json::from_slice(&again).unwrap(),
                "",
                &mut diffs,
            );
            failures.push(format!("{name}: {}", diffs.join(" | ")));
        }
    }
    println!(
        "{}/{} cases round-trip (Go JSON -> model -> Go JSON)",
        names.len() - failures.len(),
        names.len()
    );
    // A rough figure only (this is usually an unoptimised test build).
    let docs: Vec<Value> = names
        .iter()
        .map(|n| {
            serde_json::from_str(
                &std::fs::read_to_string(dir.join(format!("{n}.domain.json"))).unwrap(),
            )
            .unwrap()
        })
        .collect();
    let start = std::time::Instant::now();
    for doc in &docs {
        let env = from_go_json(doc).unwrap();
        std::hint::black_box(to_go_json_vec(&env));
    }
    println!(
        "decode+encode: {:.1} us per domain",
        start.elapsed().as_secs_f64() * 1e6 / docs.len() as f64
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty(), "{} cases differ", failures.len());
}
