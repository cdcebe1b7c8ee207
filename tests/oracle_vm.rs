//! KubeVirt v1.9.0's VM and VMI controllers against kvrs's decisions, one reconcile per scenario
//! of `../shared/oracle-vm`.
//!
//! Each scenario's decision is executed against an in-memory API server seeded with the
//! scenario's objects; the test then compares with KubeVirt's NAME.out.json: the writes
//! (resource, subresource, name, in order; an update may be a patch), the created VMI and
//! ControllerRevision, the VM status written, the objects as the server holds them afterwards,
//! the events, the queue outcome and the error. Every difference is checked against
//! `tests/deliberate-differences.json`; a scenario matches when all of its differences are listed
//! there. Objects are compared as written, without dropping zero values: the scenario's VMs and
//! VMIs are first shaped as KubeVirt's Go structs hold them (`as_go_holds_it`), and kvrs writes
//! what Go writes.

use kvrs_core::ClusterConfig;
use kvrs_core::decide::scenario::Scenario;
use kvrs_core::decide::vm::{MAX_DELAY_SECONDS, decide_vm, jitter_for_extra_seconds};
use kvrs_core::decide::vmi::decide_vmi;
use kvrs_core::decide::{Plan, Requeue, WriteOp};
use kvrs_decide_test_support::ObjectStore;
use kvrs_tests::deliberate::{align, json_differences, json_differences_opt};
use kvrs_tests::go_json::GoRules;
use kvrs_tests::{Deliberate, Difference};
use serde_json::{Value, json};

/// The comparisons of each scenario, as `tests/deliberate-differences.json` names them.
const COMPARISONS: &[&str] = &[
    "vm-writes",
    "vm-created",
    "vm-status",
    "vm-final",
    "vm-events",
    "vm-queue",
    "vm-error",
];

fn oracle_dir() -> std::path::PathBuf {
    kvrs_tests::shared_dir("oracle-vm")
}

/// The scenario with its VMs and VMIs as KubeVirt's fake API server and informers hold them: Go
/// structs, written as Go writes them (an empty `labels: {}` of a scenario file is gone), which
/// is also how a real API server returns their metadata.
fn as_go_holds_it(raw: &Value) -> Value {
    static GO: std::sync::LazyLock<GoRules> = std::sync::LazyLock::new(GoRules::load);
    let mut raw = raw.clone();
    for (key, ty) in [
        ("vm", "v1.VirtualMachine"),
        ("vmi", "v1.VirtualMachineInstance"),
        ("vms", "v1.VirtualMachine"),
        ("vmis", "v1.VirtualMachineInstance"),
    ] {
        match raw.get_mut(key) {
            Some(Value::Array(items)) => {
                for o in items {
                    *o = GO.marshal(ty, o);
                }
            }
            Some(o) if o.is_object() => *o = GO.marshal(ty, o),
            _ => {}
        }
    }
    raw
}

fn seed_store(s: &Scenario, raw: &Value) -> ObjectStore {
    let mut st = ObjectStore::new();
    if let Some(vm) = raw.get("vm").filter(|v| !v.is_null()) {
        st.insert("virtualmachines", vm.clone());
    }
    if let Some(vmi) = raw.get("vmi").filter(|v| !v.is_null()) {
        st.insert("virtualmachineinstances", vmi.clone());
    }
    for (k, r) in [
        ("vms", "virtualmachines"),
        ("vmis", "virtualmachineinstances"),
        ("pods", "pods"),
        ("controllerRevisions", "controllerrevisions"),
    ] {
        for o in raw.get(k).and_then(Value::as_array).into_iter().flatten() {
            st.insert(r, o.clone());
        }
    }
    let _ = s;
    st
}

fn meta_view(o: &Value) -> Value {
    let m = &o["metadata"];
    let mut out = serde_json::Map::new();
    for k in [
        "name",
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "deletionTimestamp",
    ] {
        if let Some(x) = m.get(k) {
            out.insert(k.into(), x.clone());
        }
    }
    Value::Object(out)
}

fn object_view(resource: &str, o: &Value) -> Value {
    if resource == "pods" {
        return json!({"metadata": meta_view(o), "conditions": o.pointer("/status/conditions").cloned().unwrap_or(Value::Null)});
    }
    let mut status = o["status"].clone();
    if status == json!({}) {
        status = Value::Null;
    }
    json!({"metadata": meta_view(o), "spec": o["spec"], "status": status})
}

fn queue_json(q: Requeue, key: &str) -> Value {
    q.to_json(key)
}

struct Outcome {
    diffs: Vec<Difference>,
}

/// One API write as compared: verb, resource, subresource, name, and a delete's UID precondition.
#[derive(Debug)]
struct Write {
    verb: String,
    resource: String,
    subresource: String,
    name: String,
    precondition_uid: Option<String>,
    /// Sent together with the write before it (`ApiWrite::alongside_previous`); KubeVirt's
    /// writes always go one after another.
    alongside_previous: bool,
}

impl Write {
    /// The same write, where an update may be sent as a patch (kvrs patches where KubeVirt
    /// updates): a semantic normalization, not tied to any scenario, so it stays code.
    fn same(&self, other: &Write) -> bool {
        let verb = |w: &Write| match w.verb.as_str() {
            "update" => "patch".to_string(),
            v => v.to_string(),
        };
        verb(self) == verb(other)
            && (&self.resource, &self.subresource, &self.name)
                == (&other.resource, &other.subresource, &other.name)
    }

    /// What `tests/deliberate-differences.json` calls it: `VERB RESOURCE[/SUBRESOURCE]`.
    fn selector(&self) -> String {
        match self.subresource.as_str() {
            "" => format!("{} {}", self.verb, self.resource),
            sub => format!("{} {}/{sub}", self.verb, self.resource),
        }
    }
}

fn uid_shown(uid: &Option<String>) -> String {
    uid.as_ref()
        .map_or_else(|| "absent".to_string(), |u| format!("{u:?}"))
}

fn compare_case(dir: &std::path::Path, name: &str) -> Outcome {
    let raw = as_go_holds_it(&kvrs_tests::read_json(&dir.join(format!("{name}.json"))));
    let oracle = kvrs_tests::read_json(&dir.join(format!("{name}.out.json")));
    let mut s = Scenario::from_value(raw.clone()).expect("scenario parses");
    let config: ClusterConfig = s.config();
    let key = s.key();
    let mut diffs = Vec::new();

    // Replay the oracle's jitter draw (the jitter is an input of the decision).
    if let (Some(d), Some(count)) = (
        oracle.get("derived"),
        oracle
            .pointer("/vmStatus/startFailure/consecutiveFailCount")
            .and_then(Value::as_i64),
    ) {
        let extra = d["startFailureJitterSeconds"].as_i64().unwrap_or(0);
        s.jitter = Some(jitter_for_extra_seconds(count, MAX_DELAY_SECONDS, extra));
    }

    let (plan, status): (Plan, Option<Value>) = if name.starts_with("vm-") {
        let extra_vmi = s.vmi_from_list();
        let world = s.vm_world(&config, &extra_vmi).expect("vm world");
        let d = decide_vm(&world);
        (d.plan, d.status)
    } else {
        let world = s.vmi_world(&config).expect("vmi world");
        let inputs = kvrs_core::pod::PodInputs::default();
        let render = kvrs_core::decide::vmi::launcher_renderer(&config, &inputs);
        let d = decide_vmi(&world, &render, "00000");
        (d.plan, None)
    };

    let mut store = seed_store(&s, &raw);
    let now = s.now_unix().expect("now");
    let (queue, error) = store.execute(&plan, now);
    // Writes that never happened because an earlier one failed are not compared.
    let sent = match &error {
        Some(_) if queue == Requeue::rate_limited() && plan.error.is_none() => {
            let mut probe = seed_store(&s, &raw);
            plan.writes()
                .take_while(|w| probe.apply(w, now).is_ok())
                .count()
                + 1
        }
        _ => plan.writes().count(),
    };

    // Writes: resource, subresource, name, in order (see `Write::same`). A write only one side
    // sends differs at its selector; a delete's precondition at `SELECTOR /preconditions/uid`;
    // a write sent together with the one before it at `SELECTOR /alongside_previous`.
    let ours: Vec<Write> = plan
        .writes()
        .take(sent)
        .map(|w| Write {
            verb: w.op.verb().to_string(),
            resource: w.resource.clone(),
            subresource: w.subresource.clone().unwrap_or_default(),
            name: w.name.clone(),
            precondition_uid: match &w.op {
                WriteOp::Delete { precondition_uid } => precondition_uid.clone(),
                _ => None,
            },
            alongside_previous: w.alongside_previous,
        })
        .collect();
    let theirs: Vec<Write> = oracle["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["verb"] != "get")
        .map(|a| Write {
            verb: a["verb"].as_str().unwrap().to_string(),
            resource: a["resource"].as_str().unwrap().to_string(),
            subresource: a["subresource"].as_str().unwrap_or_default().to_string(),
            name: a["name"].as_str().unwrap_or_default().to_string(),
            precondition_uid: a
                .pointer("/DeleteOptions/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            alongside_previous: false,
        })
        .collect();
    for pair in align(&theirs, &ours, Write::same) {
        let test = "vm-writes";
        match (pair.0.map(|i| &theirs[i]), pair.1.map(|j| &ours[j])) {
            (Some(t), Some(o)) if t.precondition_uid != o.precondition_uid => {
                diffs.push(Difference::new(
                    test,
                    format!("{} /preconditions/uid", t.selector()),
                    uid_shown(&t.precondition_uid),
                    uid_shown(&o.precondition_uid),
                ))
            }
            (Some(t), Some(o)) if t.alongside_previous != o.alongside_previous => {
                let order = |together: bool| {
                    if together {
                        "together with the write before it"
                    } else {
                        "after the write before it is answered"
                    }
                };
                diffs.push(Difference::new(
                    test,
                    format!("{} /alongside_previous", t.selector()),
                    order(t.alongside_previous),
                    order(o.alongside_previous),
                ))
            }
            (Some(t), None) => {
                diffs.push(Difference::new(
                    test,
                    t.selector(),
                    format!("sends {} {}", t.selector(), t.name),
                    "absent",
                ));
            }
            (None, Some(o)) => {
                diffs.push(Difference::new(
                    test,
                    o.selector(),
                    "absent",
                    format!("sends {} {}", o.selector(), o.name),
                ));
            }
            _ => {}
        }
    }

    // Created VMIs and ControllerRevisions: the object sent.
    for a in oracle["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["verb"] == "create")
    {
        let res = a["resource"].as_str().unwrap();
        if res == "pods" {
            continue; // rendered by crate::pod, compared by its own oracle test
        }
        let mine = plan.created(res);
        let path = format!("/{res}");
        match mine {
            Some(m) => diffs.extend(json_differences("vm-created", &path, &a["object"], m)),
            None => diffs.push(Difference::new("vm-created", path, "creates it", "absent")),
        }
    }

    // The VM status written.
    if oracle.get("statusUpdated") == Some(&json!(true)) || status.is_some() {
        let theirs = oracle.get("vmStatus").cloned();
        let mine = status.clone();
        diffs.extend(json_differences_opt(
            "vm-status",
            "",
            theirs.as_ref(),
            mine.as_ref(),
        ));
    }

    // The objects as the server holds them afterwards.
    let fin = &oracle["final"];
    let ns_name = |o: &Value| {
        (
            o.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string(),
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        )
    };
    for (k, res) in [
        ("vm", "virtualmachines"),
        ("vmi", "virtualmachineinstances"),
    ] {
        let theirs = fin.get(k).filter(|v| !v.is_null());
        let subject = raw.get(k).filter(|v| !v.is_null()).or(theirs);
        let Some(subject) = subject else { continue };
        let (ns, n) = ns_name(subject);
        let mine = store.get(res, &ns, &n);
        let (t, m) = (
            theirs.map(|o| object_view(res, o)),
            mine.map(|o| object_view(res, o)),
        );
        diffs.extend(json_differences_opt(
            "vm-final",
            &format!("/{k}"),
            t.as_ref(),
            m.as_ref(),
        ));
    }
    let their_pods: Vec<Value> = fin
        .get("pods")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| object_view("pods", p))
        .collect();
    let my_pods: Vec<Value> = store.list("pods").map(|p| object_view("pods", p)).collect();
    diffs.extend(json_differences(
        "vm-final",
        "/pods",
        &Value::Array(their_pods),
        &Value::Array(my_pods),
    ));

    // Events, queue, error.
    let my_events: Vec<Value> = plan.events.iter().map(|e| e.to_json()).collect();
    diffs.extend(json_differences(
        "vm-events",
        "",
        &oracle["events"],
        &Value::Array(my_events),
    ));
    let q = queue_json(queue, &key);
    diffs.extend(json_differences("vm-queue", "", &oracle["queue"], &q));
    if error.as_deref() != oracle.get("error").and_then(Value::as_str) {
        diffs.push(Difference::new(
            "vm-error",
            "",
            format!("{:?}", oracle.get("error")),
            format!("{error:?}"),
        ));
    }
    Outcome { diffs }
}

#[test]
fn oracle_vm_scenarios_match_kubevirt() {
    let dir = oracle_dir();
    let cases = kvrs_tests::cases_with(&dir, "out.json");
    assert!(!cases.is_empty(), "no scenarios in {}", dir.display());
    let mut deliberate = Deliberate::load("oracle-vm", COMPARISONS);
    let mut failed = Vec::new();
    for c in &cases {
        let o = compare_case(&dir, c);
        let diffs = deliberate.unexpected(c, o.diffs);
        if !diffs.is_empty() {
            let lines: Vec<String> = diffs.iter().map(|d| format!("  {d}")).collect();
            failed.push(format!("--- {c}\n{}", lines.join("\n")));
        }
    }
    println!(
        "{}/{} scenarios match",
        cases.len() - failed.len(),
        cases.len()
    );
    println!("{}", deliberate.summary());
    assert!(
        failed.is_empty(),
        "{}/{} scenarios differ:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
    deliberate.finish();
}

/// Issue 18 class 6. A VMI being deleted while its pod still runs: KubeVirt deletes the pod and,
/// in the same reconcile, still syncs the paused condition and labels to it — exactly the writes
/// it makes for a pod it finds already terminating (oracle case `vmi-deleting-pod-terminating`).
/// kvrs now does the same: its writes for the running-pod variant of that case are the pod's
/// delete followed by its writes for the terminating case, which match KubeVirt's.
#[test]
fn a_vmi_deleted_with_its_pod_running_syncs_the_pod_as_kubevirt_syncs_a_terminating_one() {
    let dir = oracle_dir();
    let name = "vmi-deleting-pod-terminating";
    let raw = kvrs_tests::read_json(&dir.join(format!("{name}.json")));
    let oracle = kvrs_tests::read_json(&dir.join(format!("{name}.out.json")));
    let mut running = raw.clone();
    for pod in running["pods"].as_array_mut().expect("the case has pods") {
        let meta = pod["metadata"].as_object_mut().unwrap();
        assert!(
            meta.remove("deletionTimestamp").is_some(),
            "the pod is terminating in the case"
        );
        meta.remove("deletionGracePeriodSeconds");
    }
    let writes = |scenario: &Value| -> Vec<Value> {
        let s = Scenario::from_value(scenario.clone()).expect("scenario parses");
        let config: ClusterConfig = s.config();
        let world = s.vmi_world(&config).expect("vmi world");
        let inputs = kvrs_core::pod::PodInputs::default();
        let render = kvrs_core::decide::vmi::launcher_renderer(&config, &inputs);
        decide_vmi(&world, &render, "00000")
            .plan
            .writes()
            .map(|w| {
                json!({"verb": w.op.verb(), "resource": w.resource,
                       "subresource": w.subresource.clone().unwrap_or_default(),
                       "name": w.name, "op": format!("{:?}", w.op)})
            })
            .collect()
    };
    let terminating = writes(&raw);
    let kubevirt: Vec<(String, String, String)> = oracle["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["verb"] != "get")
        .map(|a| {
            (
                a["verb"].as_str().unwrap().to_string(),
                a["resource"].as_str().unwrap().to_string(),
                a["subresource"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let ours: Vec<(String, String, String)> = terminating
        .iter()
        .map(|w| {
            (
                w["verb"].as_str().unwrap().to_string(),
                w["resource"].as_str().unwrap().to_string(),
                w["subresource"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        ours, kubevirt,
        "the terminating case's writes are KubeVirt's"
    );
    let with_running_pod = writes(&running);
    assert_eq!(
        with_running_pod[0]["verb"], "delete",
        "{with_running_pod:?}"
    );
    assert_eq!(with_running_pod[0]["resource"], "pods");
    // The pod writes are those of the terminating case; the VMI's status then follows the
    // cached pod (still running, so Ready rather than PodTerminating), as KubeVirt's does.
    let pod_writes = |w: &[Value]| -> Vec<Value> {
        w.iter()
            .filter(|w| w["resource"] == "pods")
            .cloned()
            .collect()
    };
    assert_eq!(
        pod_writes(&with_running_pod[1..]),
        pod_writes(&terminating),
        "after the delete, the same pod writes as for a terminating pod"
    );
    assert_eq!(
        pod_writes(&terminating).len(),
        2,
        "paused condition + metadata"
    );
    assert_eq!(
        with_running_pod.last().unwrap()["resource"],
        "virtualmachineinstances"
    );
}
