//! Properties of the compute container's resources over generated VMIs.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::config::ClusterConfig;

const MI: i64 = 1024 * 1024;

/// A VMI with `mib` MiB of guest memory, `vcpus` cores, an optional request/limit above the
/// guest size (in MiB), and a set of optional devices.
fn vmi(mib: i64, vcpus: i64, extra_request: Option<i64>, limit: bool, devices: [bool; 6]) -> Value {
    let mut resources = json!({});
    if let Some(extra) = extra_request {
        resources["requests"] = json!({"memory": format!("{}Mi", mib + extra)});
        if limit {
            resources["limits"] = json!({"memory": format!("{}Mi", mib + extra)});
        }
    }
    let mut v = json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "domain": {
                "cpu": {"cores": vcpus},
                "memory": {"guest": format!("{mib}Mi")},
                "resources": resources,
                "devices": {}
            }
        }
    });
    let d = &mut v["spec"]["domain"]["devices"];
    if devices[0] {
        d["tpm"] = json!({});
    }
    if devices[1] {
        d["gpus"] = json!([{"name": "g", "deviceName": "nvidia.com/X"}]);
    }
    if !devices[2] {
        d["autoattachGraphicsDevice"] = json!(false);
    }
    if devices[3] {
        v["spec"]["volumes"] = json!([{"name": "m", "downwardMetrics": {}}]);
    }
    if devices[4] {
        v["spec"]["livenessProbe"] = json!({"exec": {"command": ["true"]}});
    }
    if devices[5] {
        v["spec"]["domain"]["launchSecurity"] = json!({"sev": {}});
    }
    v
}

fn report(v: &Value) -> ResourceReport {
    let vmi: VirtualMachineInstance = serde_json::from_value(v.clone()).unwrap();
    ResourceReport::new(&vmi, &ClusterConfig::default()).unwrap()
}

fn request_bytes(r: &ResourceReport) -> i64 {
    r.compute.requests["memory"].value().unwrap()
}

proptest! {
    #[test]
    fn memory_request_is_never_below_guest_memory(
        mib in 1i64..65536,
        vcpus in 1i64..64,
        extra in proptest::option::of(0i64..4096),
        limit in any::<bool>(),
        devices in any::<[bool; 6]>(),
    ) {
        let r = report(&vmi(mib, vcpus, extra, limit, devices));
        let guest = mib * MI;
        prop_assert!(request_bytes(&r) >= guest);
        prop_assert!(request_bytes(&r) >= guest + r.overhead.bytes);
        if let Some(l) = r.compute.limits.get("memory") {
            prop_assert!(l.value().unwrap() >= request_bytes(&r));
        }
    }

    #[test]
    fn overhead_never_decreases_with_more_memory_vcpus_or_devices(
        mib in 1i64..65536,
        vcpus in 1i64..64,
        more_mib in 0i64..65536,
        more_vcpus in 0i64..64,
        devices in any::<[bool; 6]>(),
        add in 0usize..6,
    ) {
        let base = report(&vmi(mib, vcpus, Some(0), false, devices)).overhead.bytes;
        let bigger = report(&vmi(mib + more_mib, vcpus, Some(0), false, devices)).overhead.bytes;
        prop_assert!(bigger >= base);
        let wider = report(&vmi(mib, vcpus + more_vcpus, Some(0), false, devices)).overhead.bytes;
        prop_assert!(wider >= base);
        let mut with = devices;
        with[add] = true;
        let equipped = report(&vmi(mib, vcpus, Some(0), false, with)).overhead.bytes;
        prop_assert!(equipped >= base);
    }
}

#[test]
fn cpu_request_divides_vcpus_by_the_allocation_ratio() {
    let v = vmi(1024, 15, None, false, [false; 6]);
    assert_eq!(report(&v).compute.requests["cpu"].as_str(), "1500m");
    let vmi: VirtualMachineInstance = serde_json::from_value(v).unwrap();
    let config = ClusterConfig {
        cpu_allocation_ratio: 1,
        ..ClusterConfig::default()
    };
    let r = ResourceReport::new(&vmi, &config).unwrap();
    assert_eq!(r.compute.requests["cpu"].as_str(), "15");
}

#[test]
fn memory_overcommit_lowers_the_request_below_the_guest() {
    let v = vmi(1000, 1, None, false, [false; 6]);
    let vmi: VirtualMachineInstance = serde_json::from_value(v).unwrap();
    let config = ClusterConfig {
        memory_overcommit_percent: 200,
        ..ClusterConfig::default()
    };
    let r = ResourceReport::new(&vmi, &config).unwrap();
    assert_eq!(
        request_bytes(&r),
        500 * MI + r.overhead.bytes,
        "half the guest plus the overhead"
    );
}

#[test]
fn gpus_from_device_plugins_are_requested_and_limited() {
    let r = report(&vmi(
        1024,
        1,
        None,
        false,
        [false, true, true, false, false, false],
    ));
    assert_eq!(r.compute.requests["nvidia.com/X"].as_str(), "1");
    assert_eq!(r.compute.limits["nvidia.com/X"].as_str(), "1");
    // VFIO locks guest memory: 1 GiB more overhead.
    let without = report(&vmi(
        1024,
        1,
        None,
        false,
        [false, false, true, false, false, false],
    ));
    assert_eq!(r.overhead.bytes - without.overhead.bytes, 1024 * MI);
}

#[test]
fn passt_binding_adds_its_process_after_the_ratio() {
    let mut v = vmi(1024, 1, Some(0), false, [false; 6]);
    let base = report(&v).overhead.bytes;
    v["spec"]["domain"]["devices"]["interfaces"] = json!([{"name": "default", "passtBinding": {}}]);
    assert_eq!(report(&v).overhead.bytes - base, 250 * MI);

    let vmi: VirtualMachineInstance = serde_json::from_value(v).unwrap();
    let config = ClusterConfig {
        additional_guest_memory_overhead_ratio: Some("2".into()),
        ..ClusterConfig::default()
    };
    let doubled = memory_overhead(&vmi, &config).unwrap().bytes;
    let kilo = (base + 999) / 1000;
    assert_eq!(doubled, base + kilo * 1000 + 250 * MI);
}
