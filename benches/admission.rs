#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! Admission throughput: a VMI as read -> namespace default, defaulting, validation, per second.
//! Run: `cargo bench -p kvrs-benches --bench admission -- --warm-up-time 1 --measurement-time 3`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvrs_core::admission::admit;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use std::hint::black_box;

fn fixture(text: &str) -> VirtualMachineInstance {
    serde_norway::from_str(text).expect("fixture")
}

fn oracle(name: &str) -> Option<VirtualMachineInstance> {
    let dir = kvrs_corpus::shared_dir("oracle");
    let text = std::fs::read_to_string(dir.join(format!("{name}.vmi.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

fn bench(c: &mut Criterion) {
    let config = ClusterConfig::default();
    let mut group = c.benchmark_group("admit");
    group.throughput(Throughput::Elements(1));
    let mut cases = vec![
        (
            "fedora-cloudinit",
            fixture(include_str!("../fixtures/vmi/fedora-cloudinit.yaml")),
        ),
        (
            "windows-efi-hyperv",
            fixture(include_str!("../fixtures/vmi/windows-efi-hyperv.yaml")),
        ),
    ];
    for name in ["example-vmi-fedora", "windows-like"] {
        if let Some(vmi) = oracle(name) {
            cases.push((name, vmi));
        }
    }
    for (name, vmi) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| admit(black_box(vmi.clone()), &config).expect("admitted"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
