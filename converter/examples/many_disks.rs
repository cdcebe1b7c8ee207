//! Times `convert` on a VMI with N disks and N volumes, skipping admission (library callers may).
//!
//! `cargo run --release -p kvrs-converter --example many_disks -- 500 1000 2000 4000`

use kvrs_converter::{ConverterContext, convert};
use std::time::Instant;

/// A VMI with `n` disks (virtio, sata and scsi buses in turn) and `n` volumes.
fn vmi(n: usize) -> kvrs_api::VirtualMachineInstance {
    let buses = ["virtio", "sata", "scsi"];
    let disks: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"name": format!("d{i}"), "disk": {"bus": buses[i % 3]}}))
        .collect();
    let volumes: Vec<_> = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                serde_json::json!({"name": format!("d{i}"), "emptyDisk": {"capacity": "1Gi"}})
            } else {
                serde_json::json!({"name": format!("d{i}"), "containerDisk": {"image": "img"}})
            }
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {
            "domain": {"devices": {"disks": disks}, "resources": {"requests": {"memory": "64Mi"}}},
            "volumes": volumes
        }
    }))
    .expect("vmi")
}

fn main() {
    let ctx = ConverterContext::default();
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    for n in if sizes.is_empty() {
        vec![256, 1024, 2048]
    } else {
        sizes
    } {
        let v = vmi(n);
        let mut times: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let xml = convert(&v, &ctx).expect("convert").to_xml().expect("xml");
                std::hint::black_box(xml);
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "{n} disks: median {:.2} ms, min {:.2} ms (5 runs)",
            times[2], times[0]
        );
    }
}
