//! Live differential test: kvrs against KubeVirt v1.9.0's own Go code on generated VMIs.
//!
//! `scripts/diff-harness.sh` builds `kvrs-diff-go` (tests/diff), which runs KubeVirt's mutating
//! and validating webhooks, converter, overhead calculator and `RenderLaunchManifest` with the
//! oracle corpus's set-up. Before it is trusted, [`harness_reproduces_the_oracle_corpus`] feeds
//! it every oracle input and checks it gives back the stored outputs, byte for byte.
//!
//! [`generated_vmis_agree_with_kubevirt`] then generates `KVRS_DIFF_COUNT` VMIs (default
//! [`DEFAULT_COUNT`]) from `KVRS_DIFF_SEED` (default [`DEFAULT_SEED`]) with `differential/vmigen.rs`,
//! runs kvrs's functions (the ones the oracle tests use) and the harness on each, and compares
//! per area: admission (both admit, or both reject with KubeVirt's cause fields among kvrs's),
//! the defaulted VMI (JSON), the domain XML (as trees), the overhead summary and the launcher pod.
//! kvrs's converter, overhead and pod get KubeVirt's defaulted VMI, so each area is compared on
//! its own. Differences are checked against `tests/deliberate-differences.json` (corpus
//! `differential`). A failure lists every diverging input with its first unexpected difference
//! per area, and saves the input under the target directory for reproduction.
//!
//! A long run is one command:
//!
//! ```sh
//! KVRS_DIFF_COUNT=100000 KVRS_DIFF_SEED=7 cargo test -p kvrs-tests --test differential -- --nocapture
//! ```
//!
//! `fixtures/differential/NAME.vmi.json` (+ optional `NAME.featuregates.txt`) are minimised
//! inputs of divergences found this way; [`fixtures_agree_with_kubevirt`] runs them through
//! both sides too. An optional `NAME.bindings.json` is the cluster's network binding plugins
//! (a KubeVirt CR's `network.binding`): the harness puts it in its KubeVirt CR, kvrs reads it as
//! `kvrs --kubevirt-cr` does (the `binding-plugin-*` cases: the user guide's passt, slirp and
//! macvtap plugins, a `managedTap` plugin, and an interface naming an unregistered plugin).

#[path = "differential/vmigen.rs"]
mod vmigen;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use kvrs_admission::kubevirt_cr::read_kubevirt_cr;
use kvrs_converter::{ConverterContext, convert, domain_attachment_by_interface_name, xmltree};
use kvrs_core::admission::admit_created;
use kvrs_core::pod::{NetworkBindingPlugin, PodInputs, PvcInfo, render_launcher_pod};
use kvrs_core::resources::ResourceReport;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::deliberate::json_differences;
use kvrs_tests::{Deliberate, Difference, cases_with, read_json, shared_dir};
use serde_json::{Value, json};

/// Inputs per default run: a few minutes on 2 cores.
const DEFAULT_COUNT: u64 = 5000;
/// The seed CI runs.
const DEFAULT_SEED: u64 = 18;
/// The corpus name of this test's entries in tests/deliberate-differences.json.
const CORPUS: &str = "differential";
/// The areas, in the order the counts print.
const AREAS: [&str; 5] = ["admit", "defaulted", "domain", "overhead", "pod"];
/// The corpus writes KubeVirt's random qemu timeout as this literal (the harness does too).
const JITTER_LITERAL: &str = "QEMU_TIMEOUT_WITH_JITTER";
/// kvrs renders the timeout with this jitter: 240 s + 37 s.
const JITTER_SECONDS: u32 = 37;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds (or finds in the cache) kvrs-diff-go; the script prints its path last.
fn harness_binary() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/diff-harness.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/diff-harness.sh");
    assert!(
        out.status.success(),
        "scripts/diff-harness.sh failed ({}): KubeVirt's harness is needed for this test",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        path.is_file(),
        "diff-harness.sh printed no binary path: {stdout}"
    );
    path
}

/// One input for both sides.
#[derive(Clone)]
struct Case {
    id: String,
    vmi: Value,
    gates: Vec<String>,
    /// The cluster's network binding plugins (`network.binding` of the KubeVirt CR; `Null`:
    /// none).
    bindings: Value,
}

/// Runs the harness on `cases`, calling `each(case, answer)` as the answers stream back (the
/// caller's work on one answer overlaps KubeVirt's on the next).
fn with_answers(bin: &Path, cases: &[Case], mut each: impl FnMut(&Case, Value)) {
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let mut stdin = child.stdin.take().unwrap();
    let requests: Vec<String> = cases
        .iter()
        .map(|c| {
            let mut r = json!({"id": c.id, "vmi": c.vmi, "featureGates": c.gates});
            if !c.bindings.is_null() {
                r["networkBindings"] = c.bindings.clone();
            }
            r.to_string()
        })
        .collect();
    let writer = std::thread::spawn(move || {
        for r in requests {
            if writeln!(stdin, "{r}").is_err() {
                return;
            }
        }
    });
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::sync_channel::<Value>(64);
    let reader = std::thread::spawn(move || {
        for line in stdout.lines() {
            let line = line.expect("reading kvrs-diff-go's answers");
            let v: Value = serde_json::from_str(&line).expect("kvrs-diff-go wrote a non-JSON line");
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    for case in cases {
        let answer = rx
            .recv()
            .unwrap_or_else(|_| panic!("kvrs-diff-go stopped before answering {}", case.id));
        assert_eq!(answer["id"], case.id.as_str(), "answers out of order");
        each(case, answer);
    }
    writer.join().unwrap();
    reader.join().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "kvrs-diff-go exited with {status}");
}

/// error.txt's text for a rejection, once per stage as the corpus writes it.
fn rejection_text(r: &Value) -> String {
    let mut one = format!(
        "rejected by {} webhook: {}\n",
        r["webhook"].as_str().unwrap_or_default(),
        r["message"].as_str().unwrap_or_default()
    );
    for c in r["causes"].as_array().into_iter().flatten() {
        one += &format!(
            "  cause: field={} type={} message={}\n",
            c["field"].as_str().unwrap_or_default(),
            c["type"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        );
    }
    ["convert", "overhead", "pod"]
        .iter()
        .map(|stage| format!("{stage}:\n{one}"))
        .collect()
}

fn oracle_cases() -> Vec<Case> {
    let dir = shared_dir("oracle");
    cases_with(&dir, "vmi.json")
        .into_iter()
        .map(|name| {
            let gates = std::fs::read_to_string(dir.join(format!("{name}.featuregates.txt")))
                .unwrap_or_default();
            Case {
                vmi: read_json(&dir.join(format!("{name}.vmi.json"))),
                gates: split_gates(&gates),
                bindings: Value::Null,
                id: name,
            }
        })
        .collect()
}

fn split_gates(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect()
}

/// The harness must give back the oracle's files for the oracle's inputs; otherwise its
/// set-up is not the oracle's and its answers prove nothing.
#[test]
fn harness_reproduces_the_oracle_corpus() {
    let dir = shared_dir("oracle");
    let bin = harness_binary();
    let cases = oracle_cases();
    let mut checked = BTreeMap::<&str, usize>::new();
    let mut failures = Vec::new();
    with_answers(&bin, &cases, |case, a| {
        let name = &case.id;
        let file =
            |suffix: &str| std::fs::read_to_string(dir.join(format!("{name}.{suffix}"))).ok();
        let mut check = |what: &'static str, same: bool| {
            *checked.entry(what).or_default() += 1;
            if !same {
                failures.push(format!("{name}: {what} differs from the oracle's"));
            }
        };
        if let Some(e) = a["error"].as_str() {
            failures.push(format!("{name}: harness error {e}"));
            return;
        }
        if let Some(expected) = file("error.txt") {
            let got = a.get("rejected").map(rejection_text).unwrap_or_default();
            check("error.txt", got == expected);
            return;
        }
        let text = |key: &str| a[key].as_str().unwrap_or_default().to_string();
        // The oracle leaves out the webhook's phase transition timestamps (they hold the time
        // it ran); the harness shows them at a fixed instant for the generated comparison.
        let mut defaulted = a["defaulted"].clone();
        if let Some(status) = defaulted.get_mut("status").and_then(Value::as_object_mut) {
            // `shift_remove`: the other keys keep their order (the comparison is textual).
            status.shift_remove("phaseTransitionTimestamps");
        }
        check(
            "defaulted.json",
            Some(serde_json::to_string_pretty(&defaulted).unwrap() + "\n")
                == file("defaulted.json"),
        );
        check("domain.xml", Some(text("domainXml")) == file("domain.xml"));
        check(
            "overhead.txt",
            Some(text("overhead")) == file("overhead.txt"),
        );
        // Go's encoder escapes <, > and & in pod.json; compare the pod as JSON.
        let pod = file("pod.json").map(|t| serde_json::from_str::<Value>(&t).unwrap());
        check("pod.json", pod.as_ref() == Some(&a["pod"]));
    });
    for (what, n) in &checked {
        println!("harness: {n} {what} reproduced ({} cases)", cases.len());
    }
    assert!(
        failures.is_empty(),
        "kvrs-diff-go does not reproduce the oracle corpus:\n  {}",
        failures.join("\n  ")
    );
    assert_eq!(checked.values().sum::<usize>(), {
        let n = cases_with(&dir, "error.txt").len();
        n + 4 * (cases.len() - n)
    });
}

/// A cause's field (`spec.domain.devices.disks[2].cdrom`) as a pointer under `/causes`
/// (`/causes/spec/domain/devices/disks/2/cdrom`), so deliberate entries can cover a subtree.
fn cause_path(field: &str) -> String {
    let mut out = String::from("/causes");
    for part in field.split('.') {
        for seg in part.split(['[', ']']).filter(|s| !s.is_empty()) {
            out.push('/');
            out.push_str(seg);
        }
    }
    out
}

/// What kvrs answers for one case, in the harness's terms.
struct Kvrs {
    admitted: Result<Value, kvrs_core::admission::AdmissionError>,
}

/// The domain XML differences from `xmltree::diff`'s `PATH: what` lines.
fn domain_differences(kubevirt: &str, kvrs: &str) -> Vec<Difference> {
    let lines = match xmltree::diff(kubevirt, kvrs, usize::MAX) {
        Ok(l) => l,
        Err(e) => return vec![Difference::new("domain", "", "parsable XML", e)],
    };
    lines
        .into_iter()
        .map(|line| {
            let (path, what) = line.split_once(": ").unwrap_or(("", line.as_str()));
            Difference::new("domain", path, "see path", what.to_string())
        })
        .collect()
}

fn overhead_differences(kubevirt: &str, kvrs: &str) -> Vec<Difference> {
    let (k, r): (Vec<&str>, Vec<&str>) = (
        kubevirt.trim_end().lines().collect(),
        kvrs.trim_end().lines().collect(),
    );
    let key = |l: &str| l.split_once(": ").map_or(l, |(k, _)| k).to_string();
    (0..k.len().max(r.len()))
        .filter(|&i| k.get(i) != r.get(i))
        .map(|i| {
            let (kl, rl) = (k.get(i).copied(), r.get(i).copied());
            let shown = |l: Option<&str>| l.unwrap_or("absent").to_string();
            Difference::new(
                "overhead",
                key(kl.or(rl).unwrap_or_default()),
                shown(kl),
                shown(rl),
            )
        })
        .collect()
}

/// Replaces kvrs's `--qemu-timeout` value by the literal the harness writes.
fn normalize_jitter(pod: &mut Value) {
    let want = format!("{}s", 240 + JITTER_SECONDS);
    if let Some(cmd) = pod
        .pointer_mut("/spec/containers/0/command")
        .and_then(Value::as_array_mut)
        && let Some(i) = cmd.iter().position(|v| v == "--qemu-timeout")
        && cmd.get(i + 1).and_then(Value::as_str) == Some(want.as_str())
    {
        cmd[i + 1] = json!(JITTER_LITERAL);
    }
}

/// The instant tests/diff/harness.go shows the webhook's `Pending` transition at.
fn webhook_clock() -> kvrs_core::time::Now {
    kvrs_core::time::Now::parse("2026-01-01T00:00:00Z").expect("a timestamp")
}

/// Every difference between kvrs and KubeVirt on one case, by area (empty: the area agrees;
/// absent: the area was not compared, e.g. after a rejection).
fn compare(case: &Case, kubevirt: &Value) -> BTreeMap<&'static str, Vec<Difference>> {
    let mut out = BTreeMap::new();
    if let Some(e) = kubevirt["error"].as_str() {
        out.insert(
            "admit",
            vec![Difference::new("admit", "(harness)", e, "not compared")],
        );
        return out;
    }
    let config = ClusterConfig::with_feature_gates(&case.gates.join(","));
    let input: Result<VirtualMachineInstance, _> = serde_json::from_value(case.vmi.clone());
    let ours = Kvrs {
        admitted: match input {
            Ok(vmi) => admit_created(vmi, &config, webhook_clock())
                .map(|v| serde_json::to_value(v).unwrap()),
            Err(e) => {
                out.insert(
                    "admit",
                    vec![Difference::new("admit", "(input)", "parsed", e.to_string())],
                );
                return out;
            }
        },
    };
    let rejected = kubevirt.get("rejected");
    match (&ours.admitted, rejected) {
        (Ok(_), Some(r)) => {
            out.insert(
                "admit",
                vec![Difference::new(
                    "admit",
                    "",
                    format!("rejected: {}", r["message"]),
                    "admitted",
                )],
            );
            return out;
        }
        (Err(e), None) => {
            out.insert(
                "admit",
                vec![Difference::new(
                    "admit",
                    "",
                    "admitted",
                    format!("rejected: {e}"),
                )],
            );
            return out;
        }
        (Err(e), Some(r)) => {
            let ours: Vec<&str> = e.causes().iter().map(|c| c.field.as_str()).collect();
            // A kvrs cause on KubeVirt's field or inside it (`interfaces[1].macvtap` for
            // `interfaces[1]`) names the same problem.
            let named = |field: &str| {
                ours.iter().any(|o| {
                    o.strip_prefix(field)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
                })
            };
            let missing: Vec<Difference> = r["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| !named(c["field"].as_str().unwrap_or_default()))
                .map(|c| {
                    Difference::new(
                        "admit",
                        cause_path(c["field"].as_str().unwrap_or_default()),
                        c["message"].as_str().unwrap_or_default(),
                        format!("rejected on other fields: {e}"),
                    )
                })
                .collect();
            out.insert("admit", missing);
            return out;
        }
        (Ok(_), None) => {
            out.insert("admit", Vec::new());
        }
    }
    let Ok(ours_defaulted) = &ours.admitted else {
        unreachable!()
    };
    let theirs = &kubevirt["defaulted"];
    out.insert(
        "defaulted",
        json_differences("defaulted", "", theirs, ours_defaulted),
    );

    // The other areas start from KubeVirt's defaulted VMI, so each is compared on its own.
    let vmi: VirtualMachineInstance = match serde_json::from_value(theirs.clone()) {
        Ok(v) => v,
        Err(e) => {
            out.insert(
                "domain",
                vec![Difference::new(
                    "domain",
                    "(defaulted vmi)",
                    "parsed",
                    e.to_string(),
                )],
            );
            return out;
        }
    };
    let plugins = binding_plugins(&case.bindings);
    // What virt-handler tells the launcher from the cluster's plugins (the harness does the
    // same); without plugins the converter's derived rule gives the same map.
    let ctx = ConverterContext {
        domain_attachment_by_interface_name: domain_attachment_by_interface_name(
            vmi.spec
                .domain
                .devices
                .interfaces
                .as_deref()
                .unwrap_or_default(),
            |name| {
                plugins
                    .get(name)
                    .and_then(|p| p.domain_attachment_type.as_deref())
            },
        ),
        ..ConverterContext::default()
    };
    let domain = match (convert(&vmi, &ctx), kubevirt.get("domainXml")) {
        (Ok(d), Some(x)) => match d.to_xml() {
            Ok(ours) => domain_differences(x.as_str().unwrap_or_default(), &ours),
            Err(e) => vec![Difference::new("domain", "(xml)", "xml", e.to_string())],
        },
        (Err(_), None) => Vec::new(),
        (Ok(_), None) => vec![Difference::new(
            "domain",
            "(conversion)",
            format!("fails: {}", kubevirt["domainError"]),
            "converts",
        )],
        (Err(e), Some(_)) => vec![Difference::new(
            "domain",
            "(conversion)",
            "converts",
            format!("fails: {e}"),
        )],
    };
    out.insert("domain", domain);

    // Without a pod (KubeVirt could not render it) the harness has only the overhead lines,
    // not the compute container's: compare those.
    let pod_failed = kubevirt["overheadError"]
        .as_str()
        .is_some_and(|e| e.starts_with("pod:"));
    let overhead = match (ResourceReport::new(&vmi, &config), kubevirt.get("overhead")) {
        (Ok(r), Some(t)) if kubevirt.get("overheadError").is_none() => {
            overhead_differences(t.as_str().unwrap_or_default(), &r.to_lines())
        }
        (Ok(r), Some(t)) if pod_failed => {
            let ours: String = r
                .to_lines()
                .lines()
                .take(2)
                .map(|l| format!("{l}\n"))
                .collect();
            overhead_differences(t.as_str().unwrap_or_default(), &ours)
        }
        (Err(_), _) if kubevirt.get("overheadError").is_some() => Vec::new(),
        (Ok(_), _) => vec![Difference::new(
            "overhead",
            "(report)",
            format!("fails: {}", kubevirt["overheadError"]),
            "computes",
        )],
        (Err(e), _) => vec![Difference::new(
            "overhead",
            "(report)",
            "computes",
            format!("fails: {e}"),
        )],
    };
    out.insert("overhead", overhead);

    let inputs = PodInputs {
        qemu_timeout_jitter_seconds: JITTER_SECONDS,
        pvcs: claims_of(&vmi),
        network_bindings: plugins,
        ..PodInputs::default()
    };
    let pod = match (
        render_launcher_pod(&vmi, &config, &inputs),
        kubevirt.get("pod"),
    ) {
        (Ok(p), Some(want)) => {
            let mut got = serde_json::to_value(&p).unwrap();
            normalize_jitter(&mut got);
            json_differences("pod", "", want, &got)
        }
        (Err(_), None) => Vec::new(),
        (Ok(_), None) => vec![Difference::new(
            "pod",
            "(render)",
            format!("fails: {}", kubevirt["podError"]),
            "renders",
        )],
        (Err(e), Some(_)) => vec![Difference::new(
            "pod",
            "(render)",
            "renders",
            format!("fails: {e}"),
        )],
    };
    out.insert("pod", pod);
    out
}

/// The binding plugins of a case, read as kvrs reads a KubeVirt CR's `network.binding`.
fn binding_plugins(bindings: &Value) -> BTreeMap<String, NetworkBindingPlugin> {
    if bindings.is_null() {
        return BTreeMap::new();
    }
    let cr = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"network": {"binding": bindings}}},
    });
    read_kubevirt_cr(&cr)
        .unwrap_or_else(|e| panic!("bindings {bindings}: {e}"))
        .network_bindings
}

/// The claims the harness creates for a VMI, as kvrs's pod inputs: filesystem RWO volumes
/// with the UID `uid-of-<name>` (tests/diff/harness.go, pvcUID).
fn claims_of(vmi: &VirtualMachineInstance) -> BTreeMap<String, PvcInfo> {
    let v = serde_json::to_value(&vmi.spec.volumes).unwrap_or_default();
    let mut out = BTreeMap::new();
    for vol in v.as_array().into_iter().flatten() {
        let name = vol
            .pointer("/persistentVolumeClaim/claimName")
            .or_else(|| vol.pointer("/dataVolume/name"))
            .or_else(|| vol.pointer("/ephemeral/persistentVolumeClaim/claimName"))
            .and_then(Value::as_str);
        if let Some(name) = name {
            let info = PvcInfo {
                uid: Some(format!("uid-of-{name}")),
                ..PvcInfo::default()
            };
            out.insert(name.to_string(), info);
        }
    }
    out
}

/// Per-area agreement counts and the failures of a run.
#[derive(Default)]
struct Tally {
    compared: BTreeMap<&'static str, usize>,
    agree: BTreeMap<&'static str, usize>,
    /// Inputs whose only differences are deliberate, per area.
    deliberate: BTreeMap<&'static str, usize>,
    rejected_by_both: usize,
    failures: Vec<String>,
    /// Unexpected differences grouped by area and path with indices as `*`: how many, the
    /// first input and the first difference.
    classes: BTreeMap<(String, String), (usize, String, String)>,
}

/// A difference's path with every numeric segment (array index) as `*`, to group divergences.
fn class_path(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            if !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit()) {
                "*"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl Tally {
    fn record(
        &mut self,
        case: &Case,
        diffs: BTreeMap<&'static str, Vec<Difference>>,
        deliberate: &mut Deliberate,
        save_dir: &Path,
    ) {
        let mut lines = Vec::new();
        for (area, found) in diffs {
            *self.compared.entry(area).or_default() += 1;
            let any = !found.is_empty();
            let unexpected = deliberate.unexpected(&case.id, found);
            if unexpected.is_empty() {
                *self.agree.entry(area).or_default() += 1;
                if any {
                    *self.deliberate.entry(area).or_default() += 1;
                }
            } else {
                for d in &unexpected {
                    let e = self
                        .classes
                        .entry((d.test.clone(), class_path(&d.path)))
                        .or_insert_with(|| (0, case.id.clone(), d.to_string()));
                    e.0 += 1;
                }
                let more = if unexpected.len() > 1 {
                    format!(" (+{} more)", unexpected.len() - 1)
                } else {
                    String::new()
                };
                lines.push(format!("{}{more}", unexpected[0]));
            }
        }
        if lines.is_empty() {
            return;
        }
        std::fs::create_dir_all(save_dir).unwrap();
        let saved = save_dir.join(format!("{}.json", case.id));
        let body = json!({"id": case.id, "vmi": case.vmi, "featureGates": case.gates});
        std::fs::write(&saved, serde_json::to_string_pretty(&body).unwrap()).unwrap();
        self.failures.push(format!(
            "{} (input: {}):\n    {}",
            case.id,
            saved.display(),
            lines.join("\n    ")
        ));
    }

    fn print(&self, what: &str) {
        for area in AREAS {
            let n = self.compared.get(area).copied().unwrap_or(0);
            let ok = self.agree.get(area).copied().unwrap_or(0);
            let d = self.deliberate.get(area).copied().unwrap_or(0);
            let through = if d > 0 {
                format!(" ({d} only through deliberate differences)")
            } else {
                String::new()
            };
            println!("{what} {area}: {ok}/{n} agree{through}");
        }
        println!("{what}: {} inputs rejected by both", self.rejected_by_both);
        if !self.classes.is_empty() {
            println!("{what}: unexpected differences by area and path (count, first input):");
            for ((area, path), (n, first, example)) in &self.classes {
                println!("  {area} {path}: {n}x, first {first}: {example}");
            }
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: not a number")),
        Err(_) => default,
    }
}

fn save_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("differential")
        .join(sub)
}

fn run(bin: &Path, cases: &[Case], deliberate: &mut Deliberate, save: &Path) -> Tally {
    let mut tally = Tally::default();
    with_answers(bin, cases, |case, answer| {
        if answer.get("rejected").is_some() {
            tally.rejected_by_both += 1;
        }
        let diffs = compare(case, &answer);
        if answer.get("rejected").is_some() && !diffs["admit"].is_empty() {
            tally.rejected_by_both -= 1;
        }
        tally.record(case, diffs, deliberate, save);
    });
    tally
}

#[test]
fn generated_vmis_agree_with_kubevirt() {
    let count = env_u64("KVRS_DIFF_COUNT", DEFAULT_COUNT);
    let seed = env_u64("KVRS_DIFF_SEED", DEFAULT_SEED);
    assert!(count > 0, "KVRS_DIFF_COUNT must be positive");
    let bin = harness_binary();
    let cases: Vec<Case> = (0..count)
        .map(|i| {
            let g = vmigen::generate(seed, i);
            Case {
                id: format!("seed{seed}-{i}"),
                vmi: g.vmi,
                gates: g.feature_gates,
                bindings: Value::Null,
            }
        })
        .collect();
    let mut deliberate = Deliberate::load(CORPUS, &AREAS);
    let save = save_dir(&format!("seed{seed}"));
    let _ = std::fs::remove_dir_all(&save);
    let tally = run(&bin, &cases, &mut deliberate, &save);
    println!("differential: {count} generated VMIs, seed {seed}");
    tally.print("differential");
    println!("{}", deliberate.summary());
    assert!(
        tally.compared.get("domain").copied().unwrap_or(0) as u64 * 2 > count,
        "fewer than half of the generated VMIs were admitted by both: the generator is off"
    );
    assert!(
        tally.failures.is_empty(),
        "{} of {count} generated VMIs diverge from KubeVirt (seed {seed}); first unexpected \
         difference per area:\n  {}",
        tally.failures.len(),
        tally.failures.join("\n  ")
    );
    // An entry nothing matched is stale, but a short run may simply not reach it.
    if count >= DEFAULT_COUNT {
        deliberate.finish();
    }
}

#[test]
fn fixtures_agree_with_kubevirt() {
    let dir = repo_root().join("fixtures/differential");
    let cases: Vec<Case> = cases_with(&dir, "vmi.json")
        .into_iter()
        .map(|name| {
            let gates = std::fs::read_to_string(dir.join(format!("{name}.featuregates.txt")))
                .unwrap_or_default();
            // NAME.bindings.json: the cluster's network binding plugins, as in a KubeVirt CR's
            // spec.configuration.network.binding.
            let bindings = dir.join(format!("{name}.bindings.json"));
            Case {
                vmi: read_json(&dir.join(format!("{name}.vmi.json"))),
                gates: split_gates(&gates),
                bindings: if bindings.is_file() {
                    read_json(&bindings)
                } else {
                    Value::Null
                },
                id: name,
            }
        })
        .collect();
    let bin = harness_binary();
    let mut deliberate = Deliberate::load(CORPUS, &AREAS);
    let tally = run(&bin, &cases, &mut deliberate, &save_dir("fixtures"));
    tally.print("fixtures");
    assert!(
        tally.failures.is_empty(),
        "fixtures diverge from KubeVirt:\n  {}",
        tally.failures.join("\n  ")
    );
}

/// `kvrs-diff-go bench-convert-serve`, the KubeVirt side of `benches/compare-kubevirt.sh`:
/// each line `N` times N conversions of the Fedora example and answers the median and the
/// allocations per conversion; a line that is no count ends it with an error naming the line.
#[test]
fn kubevirt_bench_server_answers_each_window() {
    let bin = harness_binary();
    let file = shared_dir("oracle").join("example-vmi-fedora.defaulted.json");
    assert!(file.is_file(), "missing {}", file.display());
    let mut child = Command::new(&bin)
        .arg("bench-convert-serve")
        .arg(&file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut answers = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    for n in [3, 1] {
        writeln!(stdin, "{n}").expect("writing a window");
        let line = answers
            .next()
            .expect("an answer per window")
            .expect("reading an answer");
        let fields: Vec<u64> = line
            .split_whitespace()
            .map(|f| {
                f.parse()
                    .unwrap_or_else(|_| panic!("not a number in {line:?}"))
            })
            .collect();
        assert_eq!(fields.len(), 2, "MEDIAN_NS ALLOCS, got {line:?}");
        assert!(fields[0] > 0, "a conversion takes time: {line:?}");
        // KubeVirt's converter allocates a few hundred times per conversion of this VMI.
        assert!(fields[1] > 100, "allocations per conversion: {line:?}");
    }
    writeln!(stdin, "many").expect("writing a bad window");
    drop(stdin);
    let out = child.wait_with_output().expect("waiting for the server");
    assert!(
        !out.status.success(),
        "a bad line must end the server with an error"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"many\""), "the error names the line: {err}");
}
