//! Converter time against the number of disks: VMIs with 256 (admission's limit) and 1024 disks
//! and as many volumes, converted through the library without admission, as a library caller
//! may (issue 17: conversion used to grow with the cube of the disk count).
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvrs_converter::{ConverterContext, convert};
use kvrs_core::VirtualMachineInstance;
use serde_json::json;
use std::hint::black_box;

/// `n` disks on virtio / sata / scsi in turn, each with its own emptyDisk or containerDisk
/// volume.
fn vmi(n: usize) -> VirtualMachineInstance {
    let buses = ["virtio", "sata", "scsi"];
    let disks: Vec<_> = (0..n)
        .map(|i| json!({"name": format!("d{i}"), "disk": {"bus": buses[i % 3]}}))
        .collect();
    let volumes: Vec<_> = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                json!({"name": format!("d{i}"), "emptyDisk": {"capacity": "1Gi"}})
            } else {
                json!({"name": format!("d{i}"), "containerDisk": {"image": "img"}})
            }
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {
            "domain": {
                "devices": {"disks": disks},
                "resources": {"requests": {"memory": "64Mi"}}
            },
            "volumes": volumes
        }
    }))
    .expect("vmi")
}

fn bench(c: &mut Criterion) {
    let ctx = ConverterContext::default();
    let mut group = c.benchmark_group("convert_many_disks");
    for n in [256usize, 1024] {
        let v = vmi(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("domain+xml", n), &v, |b, v| {
            b.iter(|| {
                convert(black_box(v), &ctx)
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
