//! Every VMI in the oracle corpus, before and after KubeVirt's defaulting, survives
//! deserialize -> serialize through kvrs-core's API types unchanged.

use kvrs_core::VirtualMachineInstance;
use kvrs_tests::{cases_with, read_json, shared_dir};

#[test]
fn every_oracle_vmi_round_trips_losslessly() {
    let dir = shared_dir("oracle");
    let mut compared = 0;
    let mut failures = Vec::new();
    for suffix in ["vmi.json", "defaulted.json"] {
        for name in cases_with(&dir, suffix) {
            let original = read_json(&dir.join(format!("{name}.{suffix}")));
            let typed: VirtualMachineInstance = match serde_json::from_value(original.clone()) {
                Ok(v) => v,
                Err(e) => {
                    failures.push(format!("{name}.{suffix}: {e}"));
                    continue;
                }
            };
            let back = serde_json::to_value(&typed).unwrap();
            compared += 1;
            if back != original {
                failures.push(format!("{name}.{suffix}: round trip differs"));
            }
        }
    }
    println!("{compared} oracle VMI documents round-tripped");
    assert!(compared > 0, "no oracle case compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
