//! virt-handler's sync choice against KubeVirt v1.9.0 itself (`../shared/oracle-handler`).
//!
//! Per scenario we compare the decision, the launcher commands in order, the events, the queue
//! operations, the error, whether the status was written and the status written. KubeVirt writes
//! the VMI with a full update; kvrs patches `/status`, so the resulting status is what counts.
//! Statuses are compared in Go's `omitempty` view: a missing field, `null`, `[]` and `{}` are equal.

use std::path::Path;

use kvrs_core::decide::handler::scenario::HandlerScenario;
use kvrs_core::decide::handler::status::prune_empty;
use serde_json::{Value, json};

/// Differences kept on purpose, by scenario name (none so far).
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[];

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

/// Every difference between our output and KubeVirt's for one scenario.
fn compare(dir: &Path, name: &str) -> Vec<String> {
    let scenario_json = kvrs_tests::read_json(&dir.join(format!("{name}.json")));
    let want = kvrs_tests::read_json(&dir.join(format!("{name}.out.json")));
    compare_values(&scenario_json, &want)
}

fn compare_values(scenario_json: &Value, want: &Value) -> Vec<String> {
    let scenario = match HandlerScenario::from_json(scenario_json) {
        Ok(s) => s,
        Err(e) => return vec![format!("scenario does not parse: {e}")],
    };
    let got = scenario.to_oracle_json(&scenario.decide());
    let mut diffs = Vec::new();
    let mut check = |what: &str, a: Value, b: Value| {
        if a != b {
            diffs.push(format!("{what}: kvrs {a} != kubevirt {b}"));
        }
    };
    check(
        "decision",
        got["decision"].clone(),
        want["decision"].clone(),
    );
    check(
        "launcherCalls",
        got["launcherCalls"].clone(),
        want["launcherCalls"].clone(),
    );
    check(
        "events",
        json!(events(&got["events"])),
        json!(events(&want["events"])),
    );
    check(
        "queue",
        json!(queue_ops(&got["queue"])),
        json!(queue_ops(&want["queue"])),
    );
    check("error", pruned(got.get("error")), pruned(want.get("error")));
    check(
        "statusUpdated",
        got["statusUpdated"].clone(),
        want["statusUpdated"].clone(),
    );
    check(
        "vmiStatus",
        pruned(got.get("vmiStatus")),
        pruned(want.get("vmiStatus")),
    );
    diffs
}

#[test]
fn handler_scenarios_match_kubevirt() {
    let dir = kvrs_tests::shared_dir("oracle-handler");
    let cases = kvrs_tests::cases_with(&dir, "out.json");
    assert!(!cases.is_empty(), "no scenarios in {}", dir.display());
    let mut matched = 0;
    let mut failures = Vec::new();
    for name in &cases {
        let diffs = compare(&dir, name);
        if diffs.is_empty() {
            matched += 1;
        } else if let Some((_, why)) = KNOWN_DIFFERENCES.iter().find(|(n, _)| n == name) {
            println!("{name}: differs on purpose: {why}");
        } else {
            failures.push(format!("{name}:\n  {}", diffs.join("\n  ")));
        }
    }
    println!("{matched}/{} scenarios match", cases.len());
    assert!(
        failures.is_empty(),
        "{} scenario(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
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
        diffs.iter().any(|d| d.starts_with("launcherCalls")),
        "{diffs:?}"
    );
    assert!(
        diffs.iter().any(|d| d.starts_with("vmiStatus")),
        "{diffs:?}"
    );

    let mut scenario = kvrs_tests::read_json(&dir.join("running-domain-running.json"));
    scenario["domain"]["Status"]["OSInfo"]["Name"] = json!("Fedora");
    let diffs = compare_values(&scenario, &want);
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(diffs[0].contains("guestOSInfo"), "{diffs:?}");
}
