//! The simulator driving kvrs's VM, VMI and handler decisions through whole VM lifecycles.

use kvrs_core::sim::{Sim, SimConfig};

/// The scale scenario is allocation-bound (every simulated write and decision builds and drops
/// JSON trees); with mimalloc a 300-VM run executes about 30% fewer instructions (callgrind). The binaries keep the
/// system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn running(sim: &Sim, key: &str) -> bool {
    sim.vmi_phase(key) == Some("Running")
}

#[test]
fn always_vm_reaches_running() {
    let mut sim = Sim::new(SimConfig::default());
    sim.create_vm(&Sim::vm("vm1", "Always"));
    assert!(
        sim.run_until(|s| running(s, "default/vm1"), 120),
        "unconverged: {:?}",
        sim.unconverged()
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

/// Once a VM runs, nothing writes any more: a decision that wants what the API server keeps
/// normalising away (the VMI controller's `launcherContainerImageVersion: ""` for a launcher
/// pod without an image) would rewrite the VMI on every sync, forever.
#[test]
fn a_running_vm_settles_without_further_writes() {
    let mut sim = Sim::new(SimConfig::default());
    sim.create_vm(&Sim::vm("vm1", "Always"));
    assert!(sim.run_until(|s| running(s, "default/vm1"), 120));
    sim.run_for(10);
    let settled = sim.api.stats.writes;
    sim.run_for(60);
    assert_eq!(sim.api.stats.writes, settled, "{:?}", sim.api.events_by);
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[test]
fn halting_stops_the_vmi_and_deleting_cleans_everything_up() {
    let mut sim = Sim::new(SimConfig::default());
    sim.create_vm(&Sim::vm("vm1", "Always"));
    assert!(sim.run_until(|s| running(s, "default/vm1"), 120));
    sim.set_run_strategy("default/vm1", "Halted");
    assert!(
        sim.run_until(|s| s.unconverged().is_empty(), 300),
        "{:?}\n{:?}",
        sim.unconverged(),
        sim.leftovers()
    );
    sim.set_run_strategy("default/vm1", "Always");
    assert!(
        sim.run_until(|s| running(s, "default/vm1"), 300),
        "{:?}",
        sim.leftovers()
    );
    sim.delete_vm("default/vm1");
    assert!(
        sim.run_until(|s| s.leftovers().is_empty(), 300),
        "{:?}",
        sim.leftovers()
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[test]
fn hundred_vms_on_ten_nodes_report() {
    let mut sim = Sim::new(SimConfig {
        nodes: 10,
        ..SimConfig::default()
    });
    for i in 0..100 {
        sim.create_vm(&Sim::vm(&format!("vm{i}"), "Always"));
    }
    assert!(
        sim.run_until(|s| s.unconverged().is_empty(), 600),
        "{:?}",
        sim.unconverged()
    );
    println!(
        "converged after {:?} virtual; {:?}; store {:?}\n{}",
        sim.elapsed(),
        sim.stats,
        sim.api.stats,
        sim.stats.failed_by
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

/// Every launcher pod's readiness gate is patched once, as KubeVirt patches it: with watches
/// that lag (each event 1-300 ms late, per process), the VMI controller's reconcile woken by
/// its own VMI status write must wait to see its pod patch before it looks at the pod again.
#[test]
fn each_launcher_pods_readiness_gate_is_patched_once_under_watch_lag() {
    let mut sim = Sim::new(SimConfig {
        nodes: 4,
        watch_lag_ms: (1, 300),
        ..SimConfig::default()
    });
    for i in 0..60 {
        sim.create_vm(&Sim::vm(&format!("vm{i}"), "Always"));
    }
    assert!(
        sim.run_until(|s| s.unconverged().is_empty(), 600),
        "{:?}",
        sim.unconverged()
    );
    assert_eq!(sim.stats.pod_status_patches, 60, "{:?}", sim.stats);
    assert_eq!(sim.stats.repeated_pod_status_patches, 0);
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

/// Heavy faults with a fixed seed: every fault kind fires, and still everything converges and is
/// cleaned up without a safety violation.
#[test]
fn heavy_faults_still_converge_and_clean_up() {
    let cfg = SimConfig {
        nodes: 4,
        seed: 7,
        watch_lag_ms: (0, 1500),
        drop_probability: 0.1,
        conflict_probability: 0.2,
        crash_probability: 0.5,
        restart_every_s: Some(15),
        relist_every_s: 10,
        faults_for_s: 180,
        ..SimConfig::default()
    };
    let mut sim = Sim::new(cfg);
    for i in 0..20 {
        let strategy = ["Always", "RerunOnFailure", "Halted"][i % 3];
        sim.create_vm(&Sim::vm(&format!("vm{i}"), strategy));
    }
    sim.run_for(60);
    for i in (0..20).step_by(4) {
        sim.set_run_strategy(&format!("default/vm{i}"), "Halted");
    }
    sim.run_for(130);
    assert!(
        sim.run_until(|s| s.unconverged().is_empty(), 1200),
        "{:?}",
        sim.unconverged()
    );
    let s = sim.stats.clone();
    assert!(
        s.restarts > 0 && s.crashes > 0 && s.dropped_events > 0,
        "{s:?}"
    );
    assert!(sim.api.stats.injected_conflicts > 0);
    let keys: Vec<String> = sim
        .api
        .list("virtualmachines")
        .map(|(k, _)| k.clone())
        .collect();
    for k in &keys {
        sim.delete_vm(k);
    }
    assert!(
        sim.run_until(|s| s.leftovers().is_empty(), 1200),
        "{:?}",
        sim.leftovers()
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

/// A run is what its seed makes it: the controller's and the handlers' syncs are decided in
/// batches on two threads, whichever is free, and garbage is dropped on the second one, yet a
/// run with every fault kind makes the same writes and ends in the same objects as the same seed
/// deciding one sync at a time on one thread, and as itself again.
#[test]
fn one_seed_makes_one_run() {
    let run = |second_thread: bool| {
        let mut sim = Sim::new(SimConfig {
            second_thread,
            nodes: 6,
            seed: 11,
            watch_lag_ms: (0, 20),
            drop_probability: 0.1,
            conflict_probability: 0.2,
            crash_probability: 0.5,
            restart_every_s: Some(15),
            relist_every_s: 10,
            faults_for_s: 60,
            ..SimConfig::default()
        });
        for i in 0..60 {
            let strategy = ["Always", "RerunOnFailure", "Halted"][i % 3];
            sim.create_vm(&Sim::vm(&format!("vm{i}"), strategy));
        }
        sim.run_for(90);
        let vmis: Vec<String> = sim
            .api
            .list("virtualmachineinstances")
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
            .iter()
            .map(|k| {
                let json = sim.api.get("virtualmachineinstances", k);
                format!("{k}: {}", json.map(|v| v.to_string()).unwrap_or_default())
            })
            .collect();
        (
            sim.api.resource_version(),
            format!("{:?}", sim.stats),
            sim.work_summary(),
            format!("{:?}", sim.api.events_by),
            vmis,
        )
    };
    let one_thread = run(false);
    assert!(
        one_thread.0 > 400,
        "the run wrote too little to compare: {one_thread:?}"
    );
    assert!(
        one_thread.4.len() >= 30,
        "most of the 40 Always and RerunOnFailure VMs have VMIs: {one_thread:?}"
    );
    assert_eq!(one_thread, run(true));
    assert_eq!(one_thread, run(true));
}

/// Scale: VMs with `runStrategy: Always` on many nodes all reach Running. `SIM_VMS` / `SIM_NODES`
/// override the size (the report's 10 000 / 100 run); the default keeps the test suite fast.
#[test]
fn many_vms_reach_running() {
    let vms: usize = std::env::var("SIM_VMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let nodes: usize = std::env::var("SIM_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let started = std::time::Instant::now();
    let mut sim = Sim::new(SimConfig {
        nodes,
        ..SimConfig::default()
    });
    for i in 0..vms {
        sim.create_vm(&Sim::vm(&format!("vm{i}"), "Always"));
    }
    // A counter kept by the API server with every write: listing every VMI at each check made
    // the wait itself O(VMs) per 100 ms of virtual time.
    let all_running = |s: &Sim| s.running_vmis() == vms;
    assert!(
        sim.run_until(all_running, 3600),
        "{} VMs not converged",
        sim.unconverged().len()
    );
    println!(
        "{vms} VMs on {nodes} nodes all Running after {:?} virtual, {:?} wall; {}",
        sim.elapsed(),
        started.elapsed(),
        sim.work_summary()
    );
    let s = &sim.stats;
    // Every refused write is in the report's classes.
    assert_eq!(s.failed_by.total(), s.failed_writes);
    // The counter agrees with a full list of the API server's VMIs.
    let listed = sim
        .api
        .list("virtualmachineinstances")
        .filter(|(k, _)| sim.vmi_phase(k) == Some("Running"))
        .count();
    assert_eq!(listed, sim.running_vmis());
    assert!(sim.unconverged().is_empty());
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}
