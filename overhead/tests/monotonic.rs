//! Properties of the overhead estimate: adding memory, vCPUs or devices never lowers it.

use kvrs_overhead::{Amount, OverheadInputs, memory_overhead};
use proptest::prelude::*;

fn inputs() -> impl Strategy<Value = OverheadInputs> {
    (
        proptest::option::of(0i64..(1 << 42)),
        0i64..512,
        proptest::collection::vec(any::<bool>(), 10),
        proptest::option::of(0i64..(1 << 32)),
        proptest::option::of(1.0f64..4.0),
    )
        .prop_map(|(memory, vcpus, f, reserved, ratio)| OverheadInputs {
            memory_request: memory,
            vcpus,
            graphics: f[0],
            arm64: f[1],
            vfio: f[2],
            downward_metrics_disk: f[3],
            exec_liveness_probe: f[4],
            exec_readiness_probe: f[5],
            sev: f[6],
            tpm: f[7],
            dedicated_or_guaranteed: f[8],
            reserved_overhead: reserved.filter(|_| f[9]).map(Amount::binary),
            network_binding_overhead: None,
            additional_overhead_ratio: ratio,
        })
}

proptest! {
    #[test]
    fn more_memory_never_lowers_the_overhead(i in inputs(), extra in 0i64..(1 << 40)) {
        let mut more = i.clone();
        more.memory_request = Some(i.memory_request.unwrap_or(0) + extra);
        prop_assert!(memory_overhead(&more).bytes >= memory_overhead(&i).bytes);
    }

    #[test]
    fn more_vcpus_never_lower_the_overhead(i in inputs(), extra in 0i64..64) {
        let mut more = i.clone();
        more.vcpus += extra;
        prop_assert!(memory_overhead(&more).bytes >= memory_overhead(&i).bytes);
    }

    #[test]
    fn adding_a_device_never_lowers_the_overhead(i in inputs(), which in 0usize..9) {
        let mut more = i.clone();
        match which {
            0 => more.graphics = true,
            1 => more.arm64 = true,
            2 => more.vfio = true,
            3 => more.downward_metrics_disk = true,
            4 => more.exec_liveness_probe = true,
            5 => more.exec_readiness_probe = true,
            6 => more.sev = true,
            7 => more.tpm = true,
            _ => more.dedicated_or_guaranteed = true,
        }
        prop_assert!(memory_overhead(&more).bytes >= memory_overhead(&i).bytes);
    }

    #[test]
    fn overhead_is_at_least_the_fixed_processes(i in inputs()) {
        prop_assert!(memory_overhead(&i).bytes >= 220 * 1024 * 1024);
    }
}
