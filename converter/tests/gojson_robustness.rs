//! Reading damaged Go JSON never panics, and a refusal points at the damaged place: one member of a
//! real KubeVirt domain (from the oracle corpus) at a time is replaced by a value of another type.

use kvrs_converter::gojson::{from_go_json, to_go_json};
use proptest::prelude::*;
use serde_json::{Value, json};

fn corpus_doc() -> Value {
    // A case with disks, interfaces, channels, controllers, serials, graphics and a balloon.
    kvrs_corpus::read_json(
        &kvrs_corpus::shared_dir("oracle").join("example-vmi-fedora.domain.json"),
    )
}

/// Every member and element position in the document, rendered like `GoJsonError::path`.
fn positions(v: &Value, at: &str, out: &mut Vec<(Vec<Step>, String)>, steps: &mut Vec<Step>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                steps.push(Step::Key(k.clone()));
                out.push((steps.clone(), here.clone()));
                positions(x, &here, out, steps);
                steps.pop();
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                let here = format!("{at}[{i}]");
                steps.push(Step::Index(i));
                out.push((steps.clone(), here.clone()));
                positions(x, &here, out, steps);
                steps.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn slot<'v>(v: &'v mut Value, steps: &[Step]) -> &'v mut Value {
    steps.iter().fold(v, |v, s| match s {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

fn junk() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(true)),
        Just(json!(-1)),
        Just(json!(1.5)),
        Just(json!(u64::MAX)),
        Just(json!("text")),
        Just(json!("")),
        Just(json!([])),
        Just(json!([1, "a"])),
        Just(json!({})),
        Just(json!({"Unknown": 1})),
    ]
}

#[test]
fn every_position_is_reachable() {
    let doc = corpus_doc();
    let mut out = Vec::new();
    positions(&doc, "", &mut out, &mut Vec::new());
    assert!(out.len() > 300, "{} positions", out.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damaged_documents_are_refused_at_the_damage_or_read_consistently(pick in any::<prop::sample::Index>(), value in junk()) {
        let mut doc = corpus_doc();
        let mut all = Vec::new();
        positions(&doc, "", &mut all, &mut Vec::new());
        let (steps, path) = all[pick.index(all.len())].clone();
        *slot(&mut doc, &steps) = value;
        match from_go_json(&doc) {
            Err(e) => prop_assert!(
                e.path() == path || e.path().starts_with(&format!("{path}.")) || e.path().starts_with(&format!("{path}[")),
                "damage at {path}, error at {e}"
            ),
            Ok(env) => {
                // Whatever was accepted is a fixed point of encode/decode.
                let again = from_go_json(&to_go_json(&env)).unwrap();
                prop_assert_eq!(again, env);
            }
        }
    }
}
