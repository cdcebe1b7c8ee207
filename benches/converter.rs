//! Converter throughput: defaulted VMI -> domain -> XML text, per second.
#![allow(missing_docs)] // criterion_group! generates undocumented functions
//!
//! KubeVirt v1.9.0 does ~19.7k/s on example-vmi-fedora on this class of machine
//! (`../shared/notes/performance-anchors.md`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvrs_converter::{ConverterContext, convert};
use kvrs_core::VirtualMachineInstance;
use std::hint::black_box;

fn fedora() -> VirtualMachineInstance {
    let text = include_str!("../fixtures/vmi/conv-fedora-two-nics.yaml");
    let vmi: VirtualMachineInstance = serde_norway::from_str(text).expect("fixture");
    kvrs_core::admission::admit(vmi, &kvrs_core::ClusterConfig::default())
        .expect("fixture admitted")
}

fn largest_oracle() -> Option<VirtualMachineInstance> {
    let path = kvrs_corpus::shared_dir("oracle").join("config-volumes.defaulted.json");
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn bench(c: &mut Criterion) {
    let ctx = ConverterContext::default();
    let mut group = c.benchmark_group("convert");
    group.throughput(Throughput::Elements(1));
    let mut cases = vec![("fedora-two-nics", fedora())];
    if let Some(v) = largest_oracle() {
        cases.push(("oracle-config-volumes", v));
    }
    for (name, vmi) in &cases {
        group.bench_function(format!("{name}/domain"), |b| {
            b.iter(|| convert(black_box(vmi), &ctx).unwrap())
        });
        group.bench_function(format!("{name}/domain+xml"), |b| {
            b.iter(|| {
                convert(black_box(vmi), &ctx)
                    .unwrap()
                    .to_xml_compact()
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
