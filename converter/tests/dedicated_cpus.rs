//! issue 18 class 2: with dedicated CPUs, the host CPUs left after the vCPUs go to the
//! supplemental-pool IO threads first and then to the emulator thread, one at a time, in
//! KubeVirt's pool order; guest cores keep their threads on one host core.

use kvrs_converter::{ConverterContext, Domain, convert};
use serde_json::{Value, json};

fn dedicated(cpu: Value, extra: Value, annotations: Value) -> Domain {
    let mut vmi = json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234",
                     "annotations": annotations},
        "spec": {"architecture": "amd64", "domain": {
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            "cpu": cpu,
            "memory": {"guest": "1Gi"}}},
        "volumes": []
    });
    if let (Some(domain), Some(extra)) = (
        vmi["spec"]["domain"].as_object_mut(),
        extra.as_object().cloned(),
    ) {
        domain.extend(extra);
    }
    vmi["spec"]["volumes"] = json!([{"name": "root", "containerDisk": {"image": "img"}}]);
    let vmi = serde_json::from_value(vmi).unwrap();
    convert(&vmi, &ConverterContext::default()).unwrap()
}

/// `(vCPU or IO thread, host CPUs)` pairs.
type Pins = Vec<(u32, String)>;

fn pins(domain: &Domain) -> (Pins, Pins, Option<String>) {
    let tune = domain.cputune.as_ref().expect("cputune");
    (
        tune.vcpupin
            .iter()
            .map(|p| (p.vcpu, p.cpuset.to_string()))
            .collect(),
        tune.iothreadpin
            .iter()
            .map(|p| (p.iothread, p.cpuset.to_string()))
            .collect(),
        tune.emulatorpin.as_ref().map(|e| e.cpuset.to_string()),
    )
}

fn s(pairs: &[(u32, &str)]) -> Pins {
    pairs.iter().map(|(a, b)| (*a, (*b).to_string())).collect()
}

#[test]
fn supplemental_io_threads_take_the_cpus_after_the_vcpus_then_the_emulator() {
    let d = dedicated(
        json!({"cores": 2, "sockets": 1, "threads": 1, "dedicatedCpuPlacement": true,
               "isolateEmulatorThread": true}),
        json!({"ioThreadsPolicy": "supplementalPool",
               "ioThreads": {"supplementalPoolThreadCount": 2}}),
        json!({}),
    );
    let (vcpus, io, emulator) = pins(&d);
    assert_eq!(vcpus, s(&[(0, "0"), (1, "1")]));
    assert_eq!(io, s(&[(1, "2"), (2, "3")]));
    assert_eq!(emulator.as_deref(), Some("4"));
}

#[test]
fn even_parity_counts_the_supplemental_threads() {
    // 2 vCPUs + 2 IO threads pinned = 4, even: the emulator gets two CPUs.
    let d = dedicated(
        json!({"cores": 2, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true}),
        json!({"ioThreadsPolicy": "supplementalPool",
               "ioThreads": {"supplementalPoolThreadCount": 2}}),
        json!({"alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity": ""}),
    );
    let (_, io, emulator) = pins(&d);
    assert_eq!(io.len(), 2);
    assert_eq!(emulator.as_deref(), Some("4,5"));
}

#[test]
fn shared_io_threads_share_the_isolated_emulator_cpu() {
    let d = dedicated(
        json!({"cores": 2, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true}),
        json!({"ioThreadsPolicy": "shared"}),
        json!({}),
    );
    let (_, io, emulator) = pins(&d);
    assert_eq!(emulator.as_deref(), Some("2"));
    assert_eq!(io, s(&[(1, "2")]));
}

#[test]
fn smt_guest_cores_stay_on_sibling_pairs() {
    // The oracle node's siblings are (2k, 2k+1): a 2-thread guest core gets one host core.
    let d = dedicated(
        json!({"cores": 2, "threads": 2, "dedicatedCpuPlacement": true}),
        json!({}),
        json!({}),
    );
    let (vcpus, _, _) = pins(&d);
    assert_eq!(vcpus, s(&[(0, "0"), (1, "1"), (2, "2"), (3, "3")]));
}

#[test]
fn a_pod_cpu_set_too_small_is_refused_with_kubevirts_words() {
    let vmi = serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {"domain": {"devices": {},
            "cpu": {"cores": 4, "dedicatedCpuPlacement": true},
            "memory": {"guest": "1Gi"}}}
    }))
    .unwrap();
    let ctx = ConverterContext {
        cpu_set: vec![0, 1],
        ..ConverterContext::default()
    };
    let err = convert(&vmi, &ctx).unwrap_err().to_string();
    assert_eq!(
        err,
        "spec.domain.cpu.dedicatedCpuPlacement: not enough exclusive threads provided, could not \
         fit 2 core(s)"
    );
}
