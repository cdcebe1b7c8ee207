//! What the controller oracles share (`tests/migration_oracle.rs`, `tests/vmistorage_oracle.rs`):
//! each runs a Go harness built on `tests/oracleharness` that executes one KubeVirt v1.9.0
//! controller reconcile per scenario and records its API calls, events and queue operations,
//! and compares them with the [`Plan`] of kvrs's decision for the same scenario. Each test file
//! keeps its scenarios, how kvrs decides them, and what each write changes (its `effect`); the
//! normalisation, the comparison and the verdict over all scenarios live here, so the oracles
//! judge alike.
//!
//! Included by path (`#[path = "controller_oracle/mod.rs"] mod controller_oracle;`): it needs
//! kvrs-core's decision types, which the `kvrs_tests` support library does not depend on.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kvrs_core::decide::patch::apply_json_patch;
use kvrs_core::decide::{Plan, QueueOp, WriteOp};
use kvrs_tests::deliberate::{align, json_differences};
use kvrs_tests::{Deliberate, Difference};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The scenarios' clock (the Go harnesses' default `now` too).
pub const NOW: &str = "2026-01-01T00:00:00Z";
/// [`NOW`] in seconds since the epoch, for kvrs's decisions.
pub const NOW_UNIX: i64 = 1_767_225_600;

/// A difference an oracle found that is to be fixed in kvrs's decision, not kept:
/// `(scenario, comparison, path prefix, what KubeVirt does)`. Printed as OPEN on every run and
/// never counted as agreement; one that stops occurring fails the test until it is taken off
/// the list, so the list cannot hide a later regression.
pub type ExpectedToClose = (&'static str, &'static str, &'static str, &'static str);

/// One controller oracle.
pub struct Oracle {
    /// Its corpus in `tests/deliberate-differences.json`, also the prefix of its comparisons
    /// (`migration-writes`, `-content`, `-events`, `-queue`).
    pub corpus: &'static str,
    /// The script that builds its Go harness (`scripts/migration-harness.sh`).
    pub script: &'static str,
    /// The variable naming a scenario (or `all`) whose two sides are printed as compared.
    pub trace_var: &'static str,
}

/// Which side of the comparison a write is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    KubeVirt,
    Kvrs,
}

impl Oracle {
    /// The comparison named `what` (`writes`, `content`, `events`, `queue`).
    fn comparison(&self, what: &str) -> String {
        format!("{}-{what}", self.corpus)
    }

    /// Runs the Go harness on the scenarios (as the harness reads them, each with its `name`)
    /// and returns its answers, one a scenario, in order.
    pub fn answers(&self, inputs: &[Value]) -> Vec<Value> {
        let bin = kvrs_tests::go_harness(self.script, "Go and the module proxy");
        let answers: Vec<Value> = kvrs_tests::run_json(&bin, &[], &Value::Array(inputs.to_vec()));
        assert_eq!(answers.len(), inputs.len());
        for (input, go) in inputs.iter().zip(&answers) {
            assert_eq!(go["name"], input["name"]);
        }
        answers
    }

    /// Whether scenario `name`'s two sides are to be printed.
    pub fn traces(&self, name: &str) -> bool {
        std::env::var(self.trace_var).is_ok_and(|t| t == "all" || t == name)
    }

    /// The differences between KubeVirt's answer `go` and kvrs's `plan` for scenario `name`:
    /// the writes aligned by verb (an update may be a patch), resource, subresource and name,
    /// each pair's UID precondition and `effect` (what the write changes, as the test file
    /// defines it), then the events and the queue operations on the key.
    pub fn compare(
        &self,
        name: &str,
        go: &Value,
        plan: &Plan,
        effect: impl Fn(&Write, Side) -> Value,
    ) -> Vec<Difference> {
        let (writes, content) = (self.comparison("writes"), self.comparison("content"));
        let trace = self.traces(name);
        let mut diffs = Vec::new();
        let theirs = kubevirt_writes(go);
        let ours = kvrs_writes(plan);
        for (i, j) in align(&theirs, &ours, Write::same) {
            match (i.map(|i| &theirs[i]), j.map(|j| &ours[j])) {
                (Some(t), Some(o)) => {
                    if t.precondition_uid != o.precondition_uid {
                        let shown =
                            |u: &Option<String>| u.clone().unwrap_or_else(|| "absent".into());
                        diffs.push(Difference::new(
                            &writes,
                            format!("{} /preconditions/uid", t.selector()),
                            shown(&t.precondition_uid),
                            shown(&o.precondition_uid),
                        ));
                    }
                    let prefix = format!("{} {}", o.selector(), o.name);
                    let (theirs, ours) = (effect(t, Side::KubeVirt), effect(o, Side::Kvrs));
                    if trace {
                        eprintln!(
                            "{name} {prefix}\n  kubevirt: {theirs}\n  kvrs:     {ours}\n  sent by kubevirt: {}\n  sent by kvrs:     {}",
                            t.body, o.body
                        );
                    }
                    diffs.extend(json_differences(&content, &prefix, &theirs, &ours));
                }
                (Some(t), None) => {
                    if trace {
                        eprintln!("{name} kubevirt only: {} {}", t.selector(), t.body);
                    }
                    diffs.push(Difference::new(
                        &writes,
                        t.selector(),
                        format!("sends {} {}", t.selector(), t.name),
                        "absent",
                    ))
                }
                (None, Some(o)) => {
                    if trace {
                        eprintln!("{name} kvrs only: {} {}", o.selector(), o.body);
                    }
                    diffs.push(Difference::new(
                        &writes,
                        o.selector(),
                        "absent",
                        format!("sends {} {}", o.selector(), o.name),
                    ))
                }
                (None, None) => {}
            }
        }
        let events = Value::Array(plan.events.iter().map(|e| e.to_json()).collect());
        let (their_queue, our_queue) = (kubevirt_queue(go), kvrs_queue(plan));
        if trace {
            eprintln!(
                "{name} events\n  kubevirt: {}\n  kvrs:     {events}\n{name} queue\n  kubevirt: {their_queue}\n  kvrs:     {our_queue}",
                go["events"],
            );
        }
        diffs.extend(json_differences(
            &self.comparison("events"),
            "",
            &go["events"],
            &events,
        ));
        diffs.extend(json_differences(
            &self.comparison("queue"),
            "",
            &their_queue,
            &our_queue,
        ));
        diffs
    }

    /// The verdict over all scenarios: each scenario's differences (`(name, differences)`)
    /// less those `tests/deliberate-differences.json` keeps and those `expected_to_close`
    /// lists. Prints how many scenarios agree, the deliberate differences' summary and the
    /// OPEN ones; fails when a scenario differs otherwise, when an expected-to-close difference
    /// no longer occurs, or when a deliberate entry is stale.
    pub fn verdict<'s>(
        &self,
        results: impl IntoIterator<Item = (&'s str, Vec<Difference>)>,
        expected_to_close: &[ExpectedToClose],
    ) {
        let names = ["writes", "content", "events", "queue"].map(|w| self.comparison(w));
        let mut deliberate = Deliberate::load(self.corpus, &names.each_ref().map(String::as_str));
        let (mut total, mut agree, mut failed, mut open) = (0, 0, Vec::new(), Vec::new());
        for (name, diffs) in results {
            total += 1;
            let diffs = deliberate.unexpected(name, diffs);
            let (gaps, diffs): (Vec<_>, Vec<_>) = diffs.into_iter().partition(|d| {
                expected_to_close.iter().any(|(c, test, path, _)| {
                    *c == name && *test == d.test && d.path.starts_with(path)
                })
            });
            open.extend(gaps.iter().map(|d| format!("{name}: {d}")));
            if diffs.is_empty() && gaps.is_empty() {
                agree += 1;
            } else if !diffs.is_empty() {
                let lines: Vec<String> = diffs.iter().map(|d| format!("  {d}")).collect();
                failed.push(format!("--- {name}\n{}", lines.join("\n")));
            }
        }
        println!("{agree}/{total} scenarios agree");
        println!("{}", deliberate.summary());
        if !open.is_empty() {
            println!(
                "{} differences expected to close (EXPECTED_TO_CLOSE), NOT agreement:",
                open.len()
            );
            for g in &open {
                println!("  OPEN {g}");
            }
        }
        let closed: Vec<String> = expected_to_close
            .iter()
            .filter(|(case, test, path, _)| {
                !open
                    .iter()
                    .any(|g| g.starts_with(&format!("{case}: {test} {path}")))
            })
            .map(|(case, test, path, kubevirt)| {
                format!("  {case}: {test} {path} (KubeVirt: {kubevirt})")
            })
            .collect();
        assert!(
            failed.is_empty(),
            "{}/{total} scenarios differ:\n{}",
            failed.len(),
            failed.join("\n")
        );
        assert!(
            closed.is_empty(),
            "these differences no longer occur: remove them from EXPECTED_TO_CLOSE\n{}",
            closed.join("\n")
        );
        deliberate.finish();
    }
}

/// One write as compared.
#[derive(Debug, Clone)]
pub struct Write {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub precondition_uid: Option<String>,
    /// An update's or a create's object, or a patch document.
    pub body: Value,
}

impl Write {
    /// The same write, where an update may be sent as a patch.
    fn same(&self, other: &Write) -> bool {
        let verb = |w: &Write| match w.verb.as_str() {
            "update" => "patch".to_string(),
            v => v.to_string(),
        };
        verb(self) == verb(other)
            && (&self.resource, &self.subresource, &self.name)
                == (&other.resource, &other.subresource, &other.name)
    }

    /// `VERB RESOURCE[/SUBRESOURCE]`, as differences and `tests/deliberate-differences.json`
    /// name a write.
    pub fn selector(&self) -> String {
        match self.subresource.as_str() {
            "" => format!("{} {}", self.verb, self.resource),
            sub => format!("{} {}/{sub}", self.verb, self.resource),
        }
    }
}

/// kvrs's writes, in order.
fn kvrs_writes(plan: &Plan) -> Vec<Write> {
    plan.writes()
        .map(|w| {
            let (body, precondition_uid) = match &w.op {
                WriteOp::Create { object } | WriteOp::Update { object } => (object.clone(), None),
                WriteOp::Patch { patch, .. } => (patch.clone(), None),
                WriteOp::Delete { precondition_uid } => (Value::Null, precondition_uid.clone()),
            };
            Write {
                verb: w.op.verb().to_string(),
                resource: w.resource.clone(),
                subresource: w.subresource.clone().unwrap_or_default(),
                name: w.name.clone(),
                precondition_uid,
                body,
            }
        })
        .collect()
}

/// KubeVirt's writes, in order: the API calls of its answer less the reads.
pub fn kubevirt_writes(go: &Value) -> Vec<Write> {
    go["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["verb"] != "get" && a["verb"] != "list" && a["verb"] != "watch")
        .map(|a| Write {
            verb: a["verb"].as_str().unwrap().to_string(),
            resource: a["resource"].as_str().unwrap().to_string(),
            subresource: a["subresource"].as_str().unwrap_or_default().to_string(),
            name: a["name"].as_str().unwrap_or_default().to_string(),
            precondition_uid: a
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            body: if a["verb"] == "patch" {
                a["patch"].clone()
            } else {
                a["object"].clone()
            },
        })
        .collect()
}

/// How many times KubeVirt's answers make each write, keyed by `key` (what a test's coverage
/// check names).
pub fn kubevirt_writes_seen(
    answers: &[Value],
    key: impl Fn(&Write) -> String,
) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for w in answers.iter().flat_map(kubevirt_writes) {
        *seen.entry(key(&w)).or_default() += 1;
    }
    seen
}

/// The queue operations on the reconciled key, in the oracle's shape.
fn kubevirt_queue(go: &Value) -> Value {
    let key = go["key"].as_str().unwrap();
    Value::Array(
        go["queue"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["key"] == key)
            .map(|q| match q["op"].as_str().unwrap() {
                "AddAfter" => json!({"op": "AddAfter", "delaySeconds": q["delaySeconds"]}),
                op => json!({ "op": op }),
            })
            .collect(),
    )
}

fn kvrs_queue(plan: &Plan) -> Value {
    Value::Array(
        plan.queue
            .0
            .iter()
            .map(|op| match op {
                QueueOp::AddAfter { delay_seconds } => {
                    json!({"op": "AddAfter", "delaySeconds": delay_seconds})
                }
                QueueOp::AddRateLimited => json!({"op": "AddRateLimited"}),
                QueueOp::Forget => json!({"op": "Forget"}),
            })
            .collect(),
    )
}

/// Drops what Go leaves out of its JSON and kvrs may write explicitly: nulls, empty maps and
/// empty lists (Go's `omitempty`), recursively.
pub fn strip_empty(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), strip_empty(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_empty).collect()),
        v => v.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The object named `name` among `objects`.
pub fn by_name<'v>(objects: impl IntoIterator<Item = &'v Value>, name: &str) -> Option<&'v Value> {
    objects
        .into_iter()
        .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
}

/// `object` after a JSON patch with its `test` operations left out (kvrs's preconditions differ
/// from KubeVirt's on purpose), or why it does not apply.
pub fn patched(object: &Value, patch: &Value) -> Value {
    let without_tests = Value::Array(
        patch
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["op"] != "test")
            .cloned()
            .collect(),
    );
    let mut o = object.clone();
    match apply_json_patch(&mut o, &without_tests) {
        Ok(()) => o,
        Err(e) => json!({"patch does not apply": e.to_string()}),
    }
}

/// The scenario documents `docs` as `T`s, for kvrs's decision; `what` names them when one does
/// not decode.
pub fn typed<T: DeserializeOwned>(docs: &[Value], what: &str) -> Vec<T> {
    docs.iter()
        .map(|d| serde_json::from_value(d.clone()).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect()
}

/// virt-controller's pod cache: the pods labelled kubevirt.io (launcher and attachment pods),
/// as the Go harnesses fill theirs.
pub fn pod_cache(pods: &[Value]) -> Vec<Pod> {
    let labelled: Vec<Value> = pods
        .iter()
        .filter(|p| p.pointer("/metadata/labels/kubevirt.io").is_some())
        .cloned()
        .collect();
    typed(&labelled, "pod")
}
