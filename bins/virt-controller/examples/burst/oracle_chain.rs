//! KubeVirt's API writes for the reconciles that take a new VM to a VMI and a launcher pod,
//! counted from KubeVirt v1.9.0's own recorded reconciles (`../shared/oracle-vm`), next to what
//! kvrs's decisions write for the very same scenarios.
//!
//! The cluster figure of the benchmark counts every write of a whole burst; this table says how
//! many of them KubeVirt's controllers would have sent for the same steps, so the two numbers
//! can be read side by side. The corpus is read at run time; without it the benchmark fails.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kvrs_decide::scenario::Scenario;
use kvrs_decide::vm::decide_vm;
use kvrs_decide::vmi::{decide_vmi, launcher_renderer};
use serde_json::Value;

/// The chain, in the order a burst VM goes through it, with what each step is. The benchmark's
/// VM is created bare (no API-version annotations, no finalizer, no firmware UUID, no VMI), so
/// each of these steps happens to it once. KubeVirt's VM controller creates the VMI without the
/// API-version annotations (its recorded VMI create in `vm-always-absent` has none, and no
/// webhook adds them), so its VMI controller's first reconcile writes them
/// (`vmi-new-no-api-annotations`); kvrs's VM controller creates the VMI with them, and that step
/// is counted as 0 for kvrs when its VMI create of `vm-always-absent` carries both.
pub const CHAIN: &[(&str, &str)] = &[
    (
        "vm-new-no-api-annotations",
        "VM: the API-version annotations",
    ),
    ("vm-new-add-finalizer", "VM: the controller finalizer"),
    ("vm-no-firmware-uuid", "VM: the firmware UUID"),
    ("vm-always-absent", "VM: start (revision + VMI)"),
    (VMI_ANNOTATIONS_STEP, "VMI: the API-version annotations"),
    ("vmi-new-pending", "VMI: launcher pod, Scheduling"),
];

/// The step kvrs skips when its VM controller creates the VMI with the annotations.
const VMI_ANNOTATIONS_STEP: &str = "vmi-new-no-api-annotations";

/// One step's writes and events, KubeVirt's and kvrs's.
#[derive(Debug)]
pub struct Step {
    /// The scenario's name.
    pub name: &'static str,
    /// What the step is.
    pub what: &'static str,
    /// KubeVirt's API writes (every recorded call but get/list/watch).
    pub kubevirt_writes: usize,
    /// KubeVirt's events (each is one more POST in a cluster).
    pub kubevirt_events: usize,
    /// kvrs's decision's API writes for the same scenario.
    pub kvrs_writes: usize,
    /// kvrs's decision's events.
    pub kvrs_events: usize,
    /// kvrs never reaches this step in a cluster (see [`CHAIN`]).
    pub kvrs_skips: bool,
}

/// Whether a plan creates a VMI carrying both API-version annotations.
fn creates_annotated_vmi(plan: &kvrs_decide::Plan) -> bool {
    plan.writes().any(|w| {
        w.resource == "virtualmachineinstances"
            && matches!(&w.op, kvrs_decide::WriteOp::Create { object }
                if [kvrs_decide::meta::LATEST_OBSERVED_API_VERSION,
                    kvrs_decide::meta::STORAGE_OBSERVED_API_VERSION]
                    .iter()
                    .all(|a| object["metadata"]["annotations"][a] == "v1"))
    })
}

/// The corpus directory, or a clear error naming where it was looked for.
pub fn corpus_dir() -> Result<PathBuf> {
    kvrs_corpus::find_shared_dir("oracle-vm").map_err(|looked| {
        anyhow::anyhow!(
            "KubeVirt's oracle-vm corpus is missing (looked in: {}); it lives in ../shared \
             beside the checkout, or set {}",
            looked
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            kvrs_corpus::SHARED_DIR_ENV
        )
    })
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    serde_json::from_str(&text).with_context(|| path.display().to_string())
}

fn is_read(verb: &str) -> bool {
    matches!(verb, "get" | "list" | "watch")
}

/// Counts every step of [`CHAIN`] in `dir`.
pub fn count(dir: &Path) -> Result<Vec<Step>> {
    let mut out = Vec::new();
    let mut vmi_created_annotated = false;
    for &(name, what) in CHAIN {
        let oracle = read_json(&dir.join(format!("{name}.out.json")))?;
        let Some(actions) = oracle.get("actions").and_then(Value::as_array) else {
            bail!("{name}.out.json has no `actions` list");
        };
        let mut kubevirt_writes = 0;
        for a in actions {
            let Some(verb) = a.get("verb").and_then(Value::as_str) else {
                bail!("{name}.out.json: an action without a verb: {a}");
            };
            if !is_read(verb) {
                kubevirt_writes += 1;
            }
        }
        let kubevirt_events = oracle
            .get("events")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);

        let scenario = Scenario::from_value(read_json(&dir.join(format!("{name}.json")))?)
            .map_err(|e| anyhow::anyhow!("{name}.json: {e}"))?;
        let config = scenario.config();
        let plan = if name.starts_with("vm-") {
            let extra = scenario.vmi_from_list();
            let world = scenario
                .vm_world(&config, &extra)
                .map_err(|e| anyhow::anyhow!("{name}.json: {e}"))?;
            let plan = decide_vm(&world).plan;
            vmi_created_annotated |= creates_annotated_vmi(&plan);
            plan
        } else {
            let world = scenario
                .vmi_world(&config)
                .map_err(|e| anyhow::anyhow!("{name}.json: {e}"))?;
            let inputs = kvrs_pod::PodInputs::default();
            let render = launcher_renderer(&config, &inputs);
            decide_vmi(&world, &render, "00000").plan
        };
        let kvrs_skips = name == VMI_ANNOTATIONS_STEP && vmi_created_annotated;
        out.push(Step {
            name,
            what,
            kubevirt_writes,
            kubevirt_events,
            kvrs_writes: if kvrs_skips { 0 } else { plan.writes().count() },
            kvrs_events: if kvrs_skips { 0 } else { plan.events.len() },
            kvrs_skips,
        });
    }
    Ok(out)
}

/// Prints the table (and the caveats that make it readable).
pub fn print(steps: &[Step], dir: &Path) {
    println!();
    println!(
        "KubeVirt v1.9.0 vs kvrs, one reconcile of each step a burst VM goes through\n\
         (scenarios and KubeVirt's recorded calls from {}; kvrs: its decision on the same scenario)",
        dir.display()
    );
    println!(
        "{:<27} {:<32} {:>9} {:>7} {:>9} {:>7}",
        "scenario", "step", "KubeVirt", "events", "kvrs", "events"
    );
    let (mut kw, mut ke, mut vw, mut ve) = (0, 0, 0, 0);
    for s in steps {
        let skipped = if s.kvrs_skips { " (*)" } else { "" };
        println!(
            "{:<27} {:<32} {:>9} {:>7} {:>9} {:>7}{skipped}",
            s.name, s.what, s.kubevirt_writes, s.kubevirt_events, s.kvrs_writes, s.kvrs_events
        );
        kw += s.kubevirt_writes;
        ke += s.kubevirt_events;
        vw += s.kvrs_writes;
        ve += s.kvrs_events;
    }
    println!(
        "{:<60} {:>9} {:>7} {:>9} {:>7}",
        "total (API writes, events)", kw, ke, vw, ve
    );
    println!(
        "{:<60} {:>9} {:>17}",
        "total writes incl. event POSTs",
        kw + ke,
        vw + ve
    );
    if steps.iter().any(|s| s.kvrs_skips) {
        println!(
            "(*) not reached by kvrs: its VM controller creates the VMI with the API-version\n\
             annotations (KubeVirt's VMI controller writes them in a reconcile of their own)."
        );
    }
    println!(
        "Each scenario is one reconcile in isolation: the finalizer and firmware steps each bring\n\
         their own VM status write, which KubeVirt folds into the start reconcile when the steps\n\
         meet in one; the status writes that follow the VMI's later changes have no scenario."
    );
}
