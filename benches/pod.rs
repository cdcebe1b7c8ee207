//! Launcher pod rendering and memory-overhead throughput, per second, on an admitted fixture VMI.
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvrs_core::pod::{PodInputs, render_launcher_pod};
use kvrs_core::resources::{ResourceReport, memory_overhead};
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use std::hint::black_box;

fn fedora() -> VirtualMachineInstance {
    let text = include_str!("../fixtures/vmi/conv-fedora-two-nics.yaml");
    let vmi: VirtualMachineInstance = serde_norway::from_str(text).expect("fixture");
    kvrs_core::admission::admit(vmi, &ClusterConfig::default()).expect("fixture admitted")
}

fn bench(c: &mut Criterion) {
    let vmi = fedora();
    let config = ClusterConfig::default();
    let inputs = PodInputs::default();
    let mut group = c.benchmark_group("pod");
    group.throughput(Throughput::Elements(1));
    group.bench_function("memory_overhead", |b| {
        b.iter(|| memory_overhead(black_box(&vmi), &config).unwrap())
    });
    group.bench_function("resources", |b| {
        b.iter(|| ResourceReport::new(black_box(&vmi), &config).unwrap())
    });
    group.bench_function("render_launcher_pod", |b| {
        b.iter(|| render_launcher_pod(black_box(&vmi), &config, &inputs).unwrap())
    });
    group.bench_function("render_launcher_pod+json", |b| {
        b.iter(|| {
            serde_json::to_vec(&render_launcher_pod(black_box(&vmi), &config, &inputs).unwrap())
                .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
