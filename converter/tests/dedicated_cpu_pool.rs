//! Dedicated CPUs are pinned only to CPUs the node has (KubeVirt builds its CPU pool from the
//! pod's CPU set as the node topology lists it). Found by tests/differential.rs: 16 dedicated
//! vCPUs with an isolated emulator thread on the oracle's 16-CPU node convert in kvrs only.

use kvrs_converter::{ConverterContext, convert};
use serde_json::json;

fn dedicated(cores: u32, isolate: bool) -> Result<Vec<String>, String> {
    let vmi = serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {"domain": {"devices": {}, "memory": {"guest": "1Gi"},
            "cpu": {"cores": cores, "dedicatedCpuPlacement": true, "isolateEmulatorThread": isolate}}}
    }))
    .unwrap();
    let domain = convert(&vmi, &ConverterContext::default()).map_err(|e| e.to_string())?;
    let tune = domain.cputune.unwrap_or_default();
    let mut pins: Vec<String> = tune.vcpupin.iter().map(|p| p.cpuset.to_string()).collect();
    pins.extend(tune.emulatorpin.map(|e| format!("emulator {}", e.cpuset)));
    Ok(pins)
}

#[test]
fn the_emulator_thread_needs_a_cpu_the_node_has() {
    // 15 vCPUs + the emulator thread fit the oracle node's 16 CPUs...
    let pins = dedicated(15, true).unwrap();
    assert_eq!(pins.len(), 16);
    assert_eq!(pins.last().map(String::as_str), Some("emulator 15"));
    // ...16 + 1 do not (KubeVirt: "no CPU allocated for the emulation thread").
    let err = dedicated(16, true).unwrap_err();
    assert!(err.contains("isolateEmulatorThread"), "{err}");
    // Without the emulator thread 16 vCPUs still fit.
    assert_eq!(dedicated(16, false).unwrap().len(), 16);
}

#[test]
fn without_a_node_topology_the_pod_cpu_set_is_used_as_is() {
    let vmi = serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {"domain": {"devices": {}, "memory": {"guest": "1Gi"},
            "cpu": {"cores": 16, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true}}}
    }))
    .unwrap();
    let ctx = ConverterContext {
        topology: None,
        ..ConverterContext::default()
    };
    let domain = convert(&vmi, &ctx).unwrap();
    let emu = domain.cputune.unwrap().emulatorpin.unwrap();
    assert_eq!(emu.cpuset, "16");
}
