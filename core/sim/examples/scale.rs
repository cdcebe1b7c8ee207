//! Profiling harness: `SIM_VMS` VMs with `runStrategy: Always` on `SIM_NODES` nodes until every
//! VMI is Running, as the `many_vms_reach_running` scenario test runs them, without the test
//! harness (`cargo run --release -p kvrs-sim --example scale`; under `valgrind --tool=callgrind`
//! with a small `SIM_VMS` and `SIM_ONE_THREAD=1` for an instruction profile). Prints the same
//! figures as the test.

use kvrs_sim::store::res;
use kvrs_sim::{Sim, SimConfig};

/// As in the scale scenario test: the run is allocation-bound (every write and decision builds
/// and drops JSON trees), and with mimalloc a 300-VM run executes about 30% fewer instructions (callgrind).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system) of this thread and of the whole process, from `/proc` (Linux;
/// clock ticks of 10 ms). The run's wall time is bounded by the simulator's thread, so its CPU
/// time is the steadier figure to compare two builds by on a machine whose speed drifts.
fn cpu_seconds() -> Option<(f64, f64)> {
    fn ticks(path: &str) -> Option<f64> {
        let stat = std::fs::read_to_string(path).ok()?;
        // Fields after the command name (which is in parentheses and may hold spaces).
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        let user: f64 = fields.get(11)?.parse().ok()?;
        let system: f64 = fields.get(12)?.parse().ok()?;
        Some((user + system) / 100.0)
    }
    Some((ticks("/proc/thread-self/stat")?, ticks("/proc/self/stat")?))
}

fn main() {
    let vms = env("SIM_VMS", 1000);
    let nodes = env("SIM_NODES", 10);
    let started = std::time::Instant::now();
    // SIM_ONE_THREAD: everything on the simulator's thread (an instruction profile then counts
    // no polling, and shows the decisions where they run).
    let mut sim = Sim::new(SimConfig {
        nodes,
        second_thread: std::env::var_os("SIM_ONE_THREAD").is_none(),
        ..SimConfig::default()
    });
    sim.trace = std::env::var("SIM_TRACE").ok();
    for i in 0..vms {
        sim.create_vm(&Sim::vm(&format!("vm{i}"), "Always"));
    }
    let converged = sim.run_until(|s| s.running_vmis() == vms, 3600);
    println!(
        "{vms} VMs on {nodes} nodes all Running: {converged} after {:?} virtual, {:?} wall; {}",
        sim.elapsed(),
        started.elapsed(),
        sim.work_summary()
    );
    if let Some((sim_thread, all)) = cpu_seconds() {
        println!("CPU: simulator thread {sim_thread:.2} s, process {all:.2} s");
    }
    println!(
        "size of a stored object: {} bytes",
        std::mem::size_of::<kvrs_sim::store::Obj>()
    );
    println!("events by writer and resource: {:?}", sim.api.events_by);
    if std::env::var_os("SIM_DUMP").is_some()
        && let Some(v) = sim.api.get(res::VMIS, "default/vm0")
    {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
}
