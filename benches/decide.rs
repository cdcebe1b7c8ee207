//! Decisions per second of the VM and VMI controller decisions on oracle scenarios: how many
//! reconciles one core can decide when the caches are warm (no IO, no allocation of clients).

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use kvrs_core::decide::scenario::Scenario;
use kvrs_core::decide::vm::decide_vm;
use kvrs_core::decide::vmi::decide_vmi;
use std::hint::black_box;

fn scenario(name: &str) -> Option<Scenario> {
    let path = kvrs_corpus::shared_dir("oracle-vm").join(name);
    let text = std::fs::read_to_string(&path).ok()?;
    Scenario::from_value(serde_json::from_str(&text).ok()?).ok()
}

fn bench_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    for name in [
        "vm-always-absent.json",
        "vm-always-running-steady.json",
        "vm-always-failed-early.json",
    ] {
        let Some(s) = scenario(name) else {
            eprintln!("note: ../shared/oracle-vm/{name} not found; skipped");
            continue;
        };
        let config = s.config();
        let extra = s.vmi_from_list();
        let world = s.vm_world(&config, &extra).expect("vm world");
        group.bench_function(format!("vm/{name}"), |b| {
            b.iter(|| black_box(decide_vm(black_box(&world))))
        });
    }
    for name in [
        "vmi-scheduling-pod-running.json",
        "vmi-running-pod-ready.json",
    ] {
        let Some(s) = scenario(name) else { continue };
        let config = s.config();
        let world = s.vmi_world(&config).expect("vmi world");
        // The pod already exists in these scenarios: the renderer is never called.
        let render = |_: &kvrs_core::VirtualMachineInstance| {
            Err::<serde_json::Value, String>("unused".into())
        };
        group.bench_function(format!("vmi/{name}"), |b| {
            b.iter(|| black_box(decide_vmi(black_box(&world), &render, "00000")))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
