//! The simulator driving kvrs's VM, VMI and handler decisions through whole VM lifecycles.

use kvrs_core::sim::{Sim, SimConfig};

fn running(sim: &Sim, key: &str) -> bool {
    sim.vmi_phase(key) == Some("Running")
}

#[test]
fn always_vm_reaches_running() {
    let mut sim = Sim::new(SimConfig::default());
    sim.create_vm(&Sim::vm("vm1", "Always"));
    assert!(sim.run_until(|s| running(s, "default/vm1"), 120), "unconverged: {:?}", sim.unconverged());
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[test]
fn halting_stops_the_vmi_and_deleting_cleans_everything_up() {
    let mut sim = Sim::new(SimConfig::default());
    sim.create_vm(&Sim::vm("vm1", "Always"));
    assert!(sim.run_until(|s| running(s, "default/vm1"), 120));
    sim.set_run_strategy("default/vm1", "Halted");
    assert!(sim.run_until(|s| s.unconverged().is_empty(), 300), "{:?}\n{:?}", sim.unconverged(), sim.leftovers());
    sim.set_run_strategy("default/vm1", "Always");
    assert!(sim.run_until(|s| running(s, "default/vm1"), 300), "{:?}", sim.leftovers());
    sim.delete_vm("default/vm1");
    assert!(sim.run_until(|s| s.leftovers().is_empty(), 300), "{:?}", sim.leftovers());
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[test]
fn hundred_vms_on_ten_nodes_report() {
    let mut sim = Sim::new(SimConfig { nodes: 10, ..SimConfig::default() });
    for i in 0..100 {
        sim.create_vm(&Sim::vm(&format!("vm{i}"), "Always"));
    }
    assert!(sim.run_until(|s| s.unconverged().is_empty(), 600), "{:?}", sim.unconverged());
    println!("converged after {:?} virtual; {:?}; store {:?}", sim.elapsed(), sim.stats, sim.api.stats);
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}
