//! `<features>` (`api.Features`, `api.FeatureHyperv`, ...).

use super::go_struct;
use crate::domain::{
    Empty, FeatureHyperv, FeatureKvm, FeatureSpinlocks, FeatureState, FeatureVendorId, Features,
    SynicTimer, TlbFlush,
};

// Go's field-less structs (`FeatureEnabled`, `ReadOnly`, `BandWidth`, ...) are `{}`.
go_struct!(Empty {});

go_struct!(Features {
    "ACPI" => acpi,
    "APIC" => apic,
    "Hyperv" => hyperv,
    "SMM" => smm,
    "KVM" => kvm,
    "PVSpinlock" => pvspinlock,
    "PMU" => pmu,
    "VMPort" => vmport,
});

go_struct!(FeatureState {
    "State" => state as omit,
});

go_struct!(FeatureHyperv {
    "Mode" => mode as omit,
    "Relaxed" => relaxed,
    "VAPIC" => vapic,
    "Spinlocks" => spinlocks,
    "VPIndex" => vpindex,
    "Runtime" => runtime,
    "SyNIC" => synic,
    "SyNICTimer" => stimer,
    "Reset" => reset,
    "VendorID" => vendor_id,
    "Frequencies" => frequencies,
    "Reenlightenment" => reenlightenment,
    "TLBFlush" => tlbflush,
    "IPI" => ipi,
    "EVMCS" => evmcs,
});

go_struct!(FeatureSpinlocks {
    "State" => state as omit,
    "Retries" => retries,
});

go_struct!(SynicTimer {
    "Direct" => direct,
    "State" => state as omit,
});

go_struct!(TlbFlush {
    "Direct" => direct,
    "Extended" => extended,
    "State" => state as omit,
});

go_struct!(FeatureVendorId {
    "State" => state as omit,
    "Value" => value as omit,
});

go_struct!(FeatureKvm {
    "Hidden" => hidden,
    "HintDedicated" => hint_dedicated,
});
