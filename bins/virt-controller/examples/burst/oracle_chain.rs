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
/// is counted as 0 for kvrs when its VMI create carries both. Likewise kvrs's VM controller
/// goes on after the API-version annotations (a JSON patch carries no resourceVersion to
/// conflict with): its first reconcile of a new VM adds the finalizer in the same patch and
/// starts the VM, so the finalizer and start steps count 0 for kvrs when an earlier step's
/// decision already did them.
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
/// The step kvrs skips when an earlier reconcile already added the finalizer.
const FINALIZER_STEP: &str = "vm-new-add-finalizer";
/// The step kvrs skips when an earlier reconcile already created the VMI.
const START_STEP: &str = "vm-always-absent";

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

/// Whether a plan creates a VMI.
fn creates_vmi(plan: &kvrs_decide::Plan) -> bool {
    plan.writes().any(|w| {
        w.resource == "virtualmachineinstances"
            && matches!(&w.op, kvrs_decide::WriteOp::Create { .. })
    })
}

/// Whether a plan patches the VM's finalizers.
fn patches_finalizers(plan: &kvrs_decide::Plan) -> bool {
    plan.writes().any(|w| {
        w.resource == "virtualmachines"
            && w.subresource.is_none()
            && matches!(&w.op, kvrs_decide::WriteOp::Patch { patch: Value::Array(ops), .. }
                if ops.iter().any(|op| op["path"] == "/metadata/finalizers"))
    })
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
    let (mut vmi_created, mut finalizer_added) = (false, false);
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
        // Decided before this step's own plan counts: a step is skipped for what an earlier
        // step's decision did.
        let kvrs_skips = (name == VMI_ANNOTATIONS_STEP && vmi_created_annotated)
            || (name == FINALIZER_STEP && finalizer_added)
            || (name == START_STEP && vmi_created);
        let plan = if name.starts_with("vm-") {
            let extra = scenario.vmi_from_list();
            let world = scenario
                .vm_world(&config, &extra)
                .map_err(|e| anyhow::anyhow!("{name}.json: {e}"))?;
            let plan = decide_vm(&world).plan;
            if !kvrs_skips {
                vmi_created_annotated |= creates_annotated_vmi(&plan);
                vmi_created |= creates_vmi(&plan);
                finalizer_added |= patches_finalizers(&plan);
            }
            plan
        } else {
            let world = scenario
                .vmi_world(&config)
                .map_err(|e| anyhow::anyhow!("{name}.json: {e}"))?;
            let inputs = kvrs_pod::PodInputs::default();
            let render = launcher_renderer(&config, &inputs);
            decide_vmi(&world, &render, "00000").plan
        };
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
            "(*) not reached by kvrs: its VM controller's first reconcile of a new VM adds the\n\
             API-version annotations and the finalizer in one patch and starts the VM (KubeVirt ends\n\
             that reconcile after the annotations), and it creates the VMI with the API-version\n\
             annotations (KubeVirt's VMI controller writes them in a reconcile of their own)."
        );
    }
    println!(
        "Each scenario is one reconcile in isolation: the finalizer and firmware steps each bring\n\
         their own VM status write, which KubeVirt folds into the start reconcile when the steps\n\
         meet in one; the status writes that follow the VMI's later changes have no scenario."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On KubeVirt's own scenarios, kvrs's first reconcile of a new VM does the finalizer and
    /// the start steps too, and its VMI needs no annotation step: exactly those three are
    /// skipped, and the chain costs kvrs fewer writes than KubeVirt.
    #[test]
    fn the_chain_skips_what_kvrs_folds_into_earlier_reconciles() {
        let dir = corpus_dir().expect("the oracle-vm corpus");
        let steps = count(&dir).expect("every scenario of the chain decides");
        let skipped: Vec<&str> = steps
            .iter()
            .filter(|s| s.kvrs_skips)
            .map(|s| s.name)
            .collect();
        assert_eq!(skipped, [FINALIZER_STEP, START_STEP, VMI_ANNOTATIONS_STEP]);
        let first = &steps[0];
        assert_eq!(first.name, "vm-new-no-api-annotations");
        assert!(first.kvrs_writes > first.kubevirt_writes, "{first:?}");
        let total = |f: fn(&Step) -> usize| steps.iter().map(f).sum::<usize>();
        let kubevirt = total(|s| s.kubevirt_writes + s.kubevirt_events);
        let kvrs = total(|s| s.kvrs_writes + s.kvrs_events);
        assert!(kvrs < kubevirt, "kvrs {kvrs} vs KubeVirt {kubevirt}");
    }
}
