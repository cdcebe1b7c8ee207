//! Handler sync decisions per second: `kvrs_core::decide::handler::decide` over the oracle-handler
//! scenarios (a running VMI refreshed, a first start, a graceful shutdown, a crashed domain, a VMI
//! of another node), each one decision per iteration. Inputs are parsed once, outside the timing.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvrs_core::decide::handler::decide;
use kvrs_core::decide::handler::scenario::HandlerScenario;

const CASES: [&str; 5] = [
    "running-domain-running",
    "first-sync-scheduled-no-domain",
    "deleting-domain-running-grace-pending",
    "domain-crashed",
    "other-node",
];

fn handler(c: &mut Criterion) {
    let dir = kvrs_corpus::shared_dir("oracle-handler");
    let mut group = c.benchmark_group("handler_decide");
    group.throughput(Throughput::Elements(1));
    for name in CASES {
        let Ok(text) = std::fs::read_to_string(dir.join(format!("{name}.json"))) else {
            eprintln!("note: {} missing; skipped", dir.display());
            return;
        };
        let doc: serde_json::Value = serde_json::from_str(&text).expect("scenario JSON");
        let scenario = HandlerScenario::from_json(&doc).expect("scenario");
        group.bench_with_input(BenchmarkId::from_parameter(name), &scenario, |b, s| {
            let world = s.world();
            b.iter(|| black_box(decide(black_box(&world))));
        });
    }
    group.finish();
}

criterion_group!(benches, handler);
criterion_main!(benches);
