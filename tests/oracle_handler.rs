//! virt-handler's sync choice against KubeVirt v1.9.0 itself (`../shared/oracle-handler`).
//!
//! Per scenario we compare the decision, the launcher commands in order, the API writes, the
//! events, the queue operations, the error, whether the status was written and the status written,
//! as one document path by path; every difference is checked against
//! `tests/deliberate-differences.json`. KubeVirt writes the VMI with a full update; kvrs patches
//! `/status`, so a write is compared by verb (an update may be a patch), resource, subresource and
//! name, and the resulting status is what counts. Statuses are compared in Go's `omitempty` view: a
//! missing field, `null`, `[]` and `{}` are equal.

use std::path::Path;

use kvrs_core::decide::handler::scenario::HandlerScenario;
use kvrs_core::decide::handler::status::prune_empty;
use kvrs_tests::deliberate::json_differences;
use kvrs_tests::{Deliberate, Difference};
use serde_json::{Value, json};

/// The one comparison of this corpus (see `tests/deliberate-differences.json`).
const TEST: &str = "handler-sync";

fn pruned(v: Option<&Value>) -> Value {
    let mut v = v.cloned().unwrap_or(Value::Null);
    prune_empty(&mut v);
    v
}

fn queue_ops(v: &Value) -> Vec<Value> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|op| {
            let mut m = serde_json::Map::new();
            m.insert("op".into(), op["op"].clone());
            if let Some(d) = op.get("delaySeconds") {
                m.insert("delaySeconds".into(), d.clone());
            }
            Value::Object(m)
        })
        .collect()
}

fn events(v: &Value) -> Vec<Value> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|e| json!({"type": e["type"], "reason": e["reason"], "message": e["message"]}))
        .collect()
}

/// The API writes as `verb resource[/subresource] name`. An update may be sent as a patch (kvrs
/// patches `/status` where KubeVirt updates the whole VMI): a semantic normalization, not tied to
/// any scenario, so it stays code.
fn writes(v: &Value) -> Vec<Value> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let verb = match a["verb"].as_str().unwrap_or_default() {
                "update" => "patch",
                v => v,
            };
            let sub = a["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            json!(format!(
                "{verb} {}{sub} {}",
                a["resource"].as_str().unwrap_or_default(),
                a["name"].as_str().unwrap_or_default()
            ))
        })
        .collect()
}

/// The parts of an output (kvrs's or KubeVirt's) that are compared.
fn compared(out: &Value) -> Value {
    json!({
        "decision": out["decision"],
        "launcherCalls": out["launcherCalls"],
        "writes": writes(&out["actions"]),
        "events": events(&out["events"]),
        "queue": queue_ops(&out["queue"]),
        "error": pruned(out.get("error")),
        "statusUpdated": out["statusUpdated"],
        "vmiStatus": pruned(out.get("vmiStatus")),
    })
}

/// Every difference between our output and KubeVirt's for one scenario.
fn compare(dir: &Path, name: &str) -> Vec<Difference> {
    let scenario_json = kvrs_tests::read_json(&dir.join(format!("{name}.json")));
    let want = kvrs_tests::read_json(&dir.join(format!("{name}.out.json")));
    compare_values(&scenario_json, &want)
}

fn compare_values(scenario_json: &Value, want: &Value) -> Vec<Difference> {
    let scenario = match HandlerScenario::from_json(scenario_json) {
        Ok(s) => s,
        Err(e) => {
            return vec![Difference::new(
                TEST,
                "",
                "a scenario",
                format!("does not parse it: {e}"),
            )];
        }
    };
    let got = scenario.to_oracle_json(&scenario.decide());
    json_differences(TEST, "", &compared(want), &compared(&got))
}

#[test]
fn handler_scenarios_match_kubevirt() {
    let dir = kvrs_tests::shared_dir("oracle-handler");
    let cases = kvrs_tests::cases_with(&dir, "out.json");
    assert!(!cases.is_empty(), "no scenarios in {}", dir.display());
    let mut deliberate = Deliberate::load("oracle-handler", &[TEST]);
    let mut matched = 0;
    let mut failures = Vec::new();
    for name in &cases {
        let diffs = deliberate.unexpected(name, compare(&dir, name));
        if diffs.is_empty() {
            matched += 1;
        } else {
            let lines: Vec<String> = diffs.iter().map(ToString::to_string).collect();
            failures.push(format!("{name}:\n  {}", lines.join("\n  ")));
        }
    }
    println!("{matched}/{} scenarios match", cases.len());
    println!("{}", deliberate.summary());
    assert!(
        failures.is_empty(),
        "{} scenario(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    deliberate.finish();
}

#[test]
fn plan_converts_to_the_shared_plan_shape() {
    let dir = kvrs_tests::shared_dir("oracle-handler");
    let s = HandlerScenario::from_json(&kvrs_tests::read_json(
        &dir.join("deleting-domain-running-first-signal.json"),
    ))
    .expect("scenario");
    let plan = s.decide();
    let shared = &plan.plan;
    let writes = shared.write_list();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].op.verb(), "patch");
    assert_eq!(shared.events.len(), 1);
    assert_eq!(
        shared.queue,
        kvrs_core::decide::Requeue::after(std::time::Duration::from_secs(5))
    );
    // The launcher call comes before the status write, in one ordered list.
    let labels: Vec<String> = shared.actions.iter().map(|a| a.label()).collect();
    assert_eq!(
        labels.last().map(String::as_str),
        Some("patch virtualmachineinstances")
    );
}

/// The comparison must notice a changed world: the same scenario with an unresponsive launcher or
/// a guest OS name differs from KubeVirt's output for the original.
#[test]
fn comparison_is_not_vacuous() {
    let dir = kvrs_tests::shared_dir("oracle-handler");
    let mut scenario = kvrs_tests::read_json(&dir.join("running-domain-running.json"));
    let want = kvrs_tests::read_json(&dir.join("running-domain-running.out.json"));
    assert!(compare_values(&scenario, &want).is_empty());
    scenario["extra"]["launcher"] = json!({"unresponsive": true});
    let diffs = compare_values(&scenario, &want);
    assert!(
        diffs.iter().any(|d| d.path.starts_with("/launcherCalls")),
        "{diffs:?}"
    );
    assert!(
        diffs.iter().any(|d| d.path.starts_with("/vmiStatus")),
        "{diffs:?}"
    );

    let mut scenario = kvrs_tests::read_json(&dir.join("running-domain-running.json"));
    scenario["domain"]["Status"]["OSInfo"]["Name"] = json!("Fedora");
    let diffs = compare_values(&scenario, &want);
    assert!(!diffs.is_empty());
    assert!(
        diffs
            .iter()
            .all(|d| d.path.starts_with("/vmiStatus/guestOSInfo")),
        "{diffs:?}"
    );
}
