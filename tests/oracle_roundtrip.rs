//! Every VMI in the oracle corpus, before and after KubeVirt's defaulting, read into kvrs-core's
//! API types and written back, comes out as KubeVirt's Go types write it:
//!
//! - a defaulted VMI (written by KubeVirt's Go code) comes back unchanged;
//! - an input VMI (written by hand) comes back as `json.Unmarshal` + `json.Marshal` over
//!   kubevirt.io/api's structs return it (`kvrs-gotags remarshal`): Go's zero values added where
//!   Go always writes them (`status.runtimeUser: 0`, `devices: {}`, ...), empty values dropped
//!   where Go's `omitempty` drops them.
//!
//! Differences from Go's output are checked against `tests/deliberate-differences.json`
//! (comparison `roundtrip`, cases named by file, JSON pointers into the VMI).

use kvrs_core::VirtualMachineInstance;
use kvrs_tests::deliberate::json_differences;
use kvrs_tests::go_json::go_remarshal;
use kvrs_tests::{Deliberate, cases_with, read_json, shared_dir};

#[test]
fn every_oracle_vmi_round_trips_as_go_writes_it() {
    let dir = shared_dir("oracle");
    let mut documents = Vec::new();
    for suffix in ["vmi.json", "defaulted.json"] {
        for name in cases_with(&dir, suffix) {
            let original = read_json(&dir.join(format!("{name}.{suffix}")));
            documents.push((format!("{name}.{suffix}"), suffix, original));
        }
    }
    let originals: Vec<_> = documents.iter().map(|(_, _, d)| d.clone()).collect();
    let go = go_remarshal(&originals);
    let mut compared = 0;
    let mut changed_by_go = 0;
    let mut failures = Vec::new();
    let mut deliberate = Deliberate::load("oracle", &["roundtrip"]);
    for ((file, suffix, original), go) in documents.iter().zip(&go) {
        let typed: VirtualMachineInstance = match serde_json::from_value(original.clone()) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{file}: {e}"));
                continue;
            }
        };
        let back = serde_json::to_value(&typed).unwrap();
        compared += 1;
        if *suffix == "defaulted.json" && back != *original {
            failures.push(format!(
                "{file}: KubeVirt's own output changed in a round trip"
            ));
        }
        let diffs = json_differences("roundtrip", "", go, &back);
        if let Some(diff) = deliberate.unexpected(file, diffs).first() {
            failures.push(format!(
                "{file}: {diff}\n  kvrs writes {back}\n  KubeVirt's Go types write {go}"
            ));
        }
        if go != original {
            changed_by_go += 1;
        }
    }
    println!(
        "{compared} oracle VMI documents round-tripped as Go writes them ({changed_by_go} of \
         them not as they were written)"
    );
    println!("{}", deliberate.summary());
    assert!(compared > 0, "no oracle case compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    deliberate.finish();
}
