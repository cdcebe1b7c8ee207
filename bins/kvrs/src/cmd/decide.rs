//! `kvrs decide vm|vmi SCENARIO`: one reconcile of KubeVirt's VM or VMI controller on a scenario
//! (the format of `shared/oracle-vm/*.json`, YAML or JSON), printed as the plan in the oracles'
//! field names: `actions` (ordered API writes), `events`, `queue`, `error`, `vmStatus`/`vmiStatus`.
//!
//! Time comes from the scenario's `now`, never the wall clock; the start-failure jitter from its
//! `jitter` field (default 0.5). Each mode is one function below, so another controller is one
//! more enum variant and match arm.

use std::path::PathBuf;

use clap::ValueEnum;
use kvrs_core::decide::scenario::Scenario;
use kvrs_core::decide::{vm, vmi};

use crate::input::{CliError, parse_document, read_text};

/// Which controller decides.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Mode {
    /// The VM controller (run strategies, start/stop, VM status).
    Vm,
    /// The VMI controller (launcher pod, Pending -> Scheduling -> Scheduled).
    Vmi,
    /// virt-handler's sync of one VMI/domain (scenario format of `shared/oracle-handler`).
    Handler,
}

/// Arguments of `kvrs decide`.
#[derive(clap::Args)]
pub struct Args {
    /// Which controller's decision to compute.
    #[arg(value_enum)]
    pub mode: Mode,
    /// Scenario file (YAML or JSON), `-` for standard input.
    pub scenario: PathBuf,
}

/// Runs `kvrs decide`.
pub fn run(args: Args) -> Result<(), CliError> {
    let origin = args.scenario.display().to_string();
    let doc = parse_document(&read_text(&args.scenario)?, &origin)?;
    if let Mode::Handler = args.mode {
        let out = decide_handler(&doc).map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
        let text =
            serde_json::to_string_pretty(&out).map_err(|e| CliError::Failed(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    let scenario =
        Scenario::from_value(doc).map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
    let out = match args.mode {
        Mode::Vm => decide_vm(&scenario),
        // `Handler` returned above.
        Mode::Vmi | Mode::Handler => decide_vmi(&scenario),
    }
    .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
    let text = serde_json::to_string_pretty(&out).map_err(|e| CliError::Failed(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn decide_vm(s: &Scenario) -> Result<serde_json::Value, String> {
    let config = s.config();
    let extra = s.vmi_from_list();
    let world = s.vm_world(&config, &extra).map_err(|e| e.to_string())?;
    Ok(vm::decide_vm(&world).to_json(&s.key()))
}

fn decide_vmi(s: &Scenario) -> Result<serde_json::Value, String> {
    let config = s.config();
    let world = s.vmi_world(&config).map_err(|e| e.to_string())?;
    let inputs = kvrs_core::pod::PodInputs::default();
    let render = vmi::launcher_renderer(&config, &inputs);
    // The API server's generateName suffix; fixed so the output is reproducible.
    Ok(vmi::decide_vmi(&world, &render, "00000").to_json(&s.key()))
}

/// The handler's plan: `decision`, ordered `launcherCalls`, `actions` (the status patch), `events`,
/// `queue`, `error`, `statusUpdated`, `vmiStatus`, plus `nodeSteps`.
fn decide_handler(doc: &serde_json::Value) -> Result<serde_json::Value, String> {
    let s = kvrs_core::decide::handler::scenario::HandlerScenario::from_json(doc)
        .map_err(|e| e.to_string())?;
    Ok(s.to_oracle_json(&s.decide()))
}
