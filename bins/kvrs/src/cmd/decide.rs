//! `kvrs decide vm|vmi|handler SCENARIO`: one reconcile of KubeVirt's VM or VMI controller (or
//! one virt-handler sync) on a scenario, YAML or JSON, printed as the plan in the oracles' field
//! names: `actions` (ordered API writes), `events`, `queue`, `error`, `vmStatus`/`vmiStatus`.
//! The scenario format is described in `kvrs decide --help` ([`SCENARIO_FORMAT`]).
//!
//! Time comes from the scenario's `now`, never the wall clock; the start-failure jitter from its
//! `jitter` field (default 0.5). Each mode is one function below, so another controller is one
//! more enum variant and match arm.

use std::path::PathBuf;

use clap::ValueEnum;
use kvrs_core::ClusterConfig;
use kvrs_core::decide::scenario::Scenario;
use kvrs_core::decide::{vm, vmi};

use crate::cmd::cluster::ClusterArgs;
use crate::input::{CliError, parse_document, read_text};

/// The scenario format and examples, shown by `kvrs decide --help` (the examples are run by
/// `tests/help_examples.rs`). Kept in step with `kvrs_core::decide::scenario::Scenario` and
/// `kvrs_core::decide::handler::scenario::HandlerScenario`.
const SCENARIO_FORMAT: &str = "\
A scenario is the world one reconcile sees, as a YAML or JSON map. Every field is optional
except the object the mode reconciles.

Scenario fields for `vm` and `vmi`:
  vm              the VirtualMachine (required for `vm`)
  vmi             the VirtualMachineInstance as virt-api stored it, i.e. defaulted (required for
                  `vmi`; for `vm`, the VM's VMI when it exists)
  now             RFC 3339 virtual clock (default 2026-01-01T00:00:00Z); never the machine's clock
  key             queue key, namespace/name (default: that of `vm`, else of `vmi`)
  description     free text
  vms, vmis, pods, controllerRevisions, dataVolumes, pvcs, migrations, nodes
                  other objects in the controller's caches, as lists; the VMI controller sees only
                  pods labelled kubevirt.io
  featureGates    \"A,B\" or a list; added to --kubevirt-cr and --feature-gates
  expectations    {creations: N, deletions: N} still outstanding for the key (default none)
  jitter          the start-failure backoff's random draw in [0, 1) (default 0.5)
  seed            accepted for KubeVirt's scenarios and unused (kvrs takes `jitter` instead)
Objects without a namespace are in `default`. The VMI controller goes past its first step only
for VMIs annotated kubevirt.io/latest-observed-api-version and
kubevirt.io/storage-observed-api-version (v1, as virt-api sets them); without them the plan is
the update that adds them. The VM controller adds them to a VM in a patch (testing the VM's UID)
and goes on in the same reconcile; KubeVirt's ends there.

Scenario fields for `handler` (virt-handler's sync of one VMI on one node):
  vmi             the VMI as stored (absent: deleted)
  domain          the domain the launcher reports, in KubeVirt's api.Domain JSON shape
  now, key        as above (key defaults to the VMI's, else the domain's)
  node            the handler's node (default node01)
  hostCpuModel    the node's host CPU model
  featureGates    as above; kubevirtConfiguration: its developerConfiguration.featureGates and
                  evictionStrategy
  extra           node-side facts: launcher {unresponsive, notInitialized, gone, ...},
                  launcherErrors {\"SyncVirtualMachine\": \"message\"}, guestInfo,
                  containerDisksReady, podInterfaceCache, ...

Output: a JSON plan: actions, events, queue, error and vmStatus (vm) or vmiStatus (vmi); the
handler's adds decision, launcherCalls and nodeSteps.

Examples (paths relative to a kvrs checkout):
  # A VM to start: creates its ControllerRevision and VMI
  kvrs decide vm fixtures/scenarios/vm-start.yaml
  # A new VMI: creates its virt-launcher pod, phase Scheduling
  kvrs decide vmi fixtures/scenarios/vmi-new.yaml
  # The same on a cluster without KVM (the pod gets --allow-emulation)
  kvrs decide vmi fixtures/scenarios/vmi-new.yaml --kubevirt-cr fixtures/kubevirt-cr/emulation.yaml
  # virt-handler, VMI deleted: delete the domain and clean up
  kvrs decide handler fixtures/scenarios/handler-vmi-gone.yaml";

/// The short help's pointer to the long one.
const SCENARIO_SHORT: &str = "\
See `kvrs decide --help` for the scenario format.

Examples (paths relative to a kvrs checkout):
  kvrs decide vm fixtures/scenarios/vm-start.yaml
  kvrs decide vmi fixtures/scenarios/vmi-new.yaml";

/// Which controller decides.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Mode {
    /// The VM controller (run strategies, start/stop, VM status).
    Vm,
    /// The VMI controller (launcher pod, Pending -> Scheduling -> Scheduled).
    Vmi,
    /// virt-handler's sync of one VMI and its domain on a node.
    Handler,
}

/// Arguments of `kvrs decide`.
#[derive(clap::Args)]
#[command(after_help = SCENARIO_SHORT, after_long_help = SCENARIO_FORMAT)]
pub struct Args {
    /// Which controller's decision to compute.
    #[arg(value_enum)]
    pub mode: Mode,
    /// Scenario file (YAML or JSON), `-` for standard input.
    pub scenario: PathBuf,
    /// The cluster's configuration; the scenario's `featureGates` are added to it.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Runs `kvrs decide`.
pub fn run(args: Args) -> Result<(), CliError> {
    let cluster = args.cluster.load()?.config;
    let origin = args.scenario.display().to_string();
    let doc = parse_document(&read_text(&args.scenario)?, &origin)?;
    if let Mode::Handler = args.mode {
        let out = decide_handler(&doc, &cluster)
            .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
        let text =
            serde_json::to_string_pretty(&out).map_err(|e| CliError::Failed(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    let scenario =
        Scenario::from_value(doc).map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
    let mut config = cluster;
    config.feature_gates.extend(scenario.config().feature_gates);
    let out = match args.mode {
        Mode::Vm => decide_vm(&scenario, &config),
        // `Handler` returned above.
        Mode::Vmi | Mode::Handler => decide_vmi(&scenario, &config),
    }
    .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
    let text = serde_json::to_string_pretty(&out).map_err(|e| CliError::Failed(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn decide_vm(s: &Scenario, config: &ClusterConfig) -> Result<serde_json::Value, String> {
    let extra = s.vmi_from_list();
    let world = s.vm_world(config, &extra).map_err(|e| e.to_string())?;
    Ok(vm::decide_vm(&world).to_json(&s.key()))
}

fn decide_vmi(s: &Scenario, config: &ClusterConfig) -> Result<serde_json::Value, String> {
    let world = s.vmi_world(config).map_err(|e| e.to_string())?;
    let inputs = kvrs_core::pod::PodInputs::default();
    let render = vmi::launcher_renderer(config, &inputs);
    // The API server's generateName suffix; fixed so the output is reproducible.
    Ok(vmi::decide_vmi(&world, &render, "00000").to_json(&s.key()))
}

/// The handler's plan: `decision`, ordered `launcherCalls`, `actions` (the status patch), `events`,
/// `queue`, `error`, `statusUpdated`, `vmiStatus`, plus `nodeSteps`. The handler's
/// configuration takes the cluster's feature gates; the rest of it comes from the scenario.
fn decide_handler(
    doc: &serde_json::Value,
    cluster: &ClusterConfig,
) -> Result<serde_json::Value, String> {
    let mut s = kvrs_core::decide::handler::scenario::HandlerScenario::from_json(doc)
        .map_err(|e| e.to_string())?;
    for gate in &cluster.feature_gates {
        if !s.config.feature_gates.contains(gate) {
            s.config.feature_gates.push(gate.clone());
        }
    }
    Ok(s.to_oracle_json(&s.decide()))
}
