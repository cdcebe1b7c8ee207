//! kvrs-overhead: the memory overhead and the CPU request KubeVirt v1.9.0 gives a virt-launcher
//! pod, computed from plain numbers.
//!
//! virt-controller reserves memory on top of the guest's RAM for everything else that lives in the
//! virt-launcher pod: the launcher processes, QEMU itself, page tables, per-vCPU state, video RAM
//! and a handful of optional helpers. This crate reproduces that estimate byte for byte from plain
//! facts about one VMI ([`OverheadInputs`]), and the CPU request of a VMI without dedicated CPUs
//! ([`cpu_request_text`]).
//!
//! # Why plain numbers
//!
//! The estimate is arithmetic with a few Go quirks (kilobyte rounding, float truncation, the
//! format a Kubernetes quantity sum ends up with), and those quirks are what decide whether a pod
//! matches KubeVirt's to the byte. Kept apart from the KubeVirt types, the arithmetic can be
//! checked term by term and by property tests (`tests/monotonic.rs`). Reading a VMI and the
//! cluster configuration into [`OverheadInputs`] is kvrs-pod's job (`core/pod`,
//! `kvrs_pod::resources::overhead_inputs`), which renders the launcher pod around the result.
//!
//! # Example
//!
//! A VMI with 2 vCPUs, 2 GiB of memory requested and the default VNC display:
//!
//! ```
//! use kvrs_overhead::{Format, OverheadInputs, cpu_request_text, memory_overhead};
//!
//! let inputs = OverheadInputs {
//!     memory_request: Some(2 << 30),
//!     vcpus: 2,
//!     graphics: true,
//!     ..OverheadInputs::default()
//! };
//! let overhead = memory_overhead(&inputs);
//! assert_eq!(overhead.bytes, 280 << 20);
//! // The page-table term is decimal, so the sum is too: Kubernetes prints `293601280`, not `280Mi`.
//! assert_eq!(overhead.format, Format::DecimalSI);
//!
//! // Its CPU request at the default `cpuAllocationRatio` of 10: a fifth of a CPU.
//! assert_eq!(cpu_request_text(2, 10).unwrap().as_deref(), Some("200m"));
//! ```
//!
//! # Formats
//!
//! Kubernetes quantities remember a *format* (binary `Mi` or decimal `M`) that decides how the sum
//! prints (`268Mi` versus `283115520`). [`Amount`] tracks the format the Go computation ends up
//! with, following the rule of Kubernetes' `Quantity.Add`: a sum takes the format of the first
//! non-zero term.

#![warn(unreachable_pub)]

mod cpu;
mod sum;

pub use cpu::{CpuRequestError, cpu_request_text};
pub use sum::{Amount, Format};

const MI: i64 = 1024 * 1024;

/// RSS of `virt-launcher-monitor`, as measured by KubeVirt.
pub const VIRT_LAUNCHER_MONITOR: i64 = 25 * MI;
/// RSS of the `virt-launcher` process.
pub const VIRT_LAUNCHER: i64 = 100 * MI;
/// RSS of `virtlogd`.
pub const VIRTLOGD: i64 = 25 * MI;
/// RSS of `virtqemud`.
pub const VIRTQEMUD: i64 = 40 * MI;
/// RSS of QEMU minus guest RAM and page tables.
pub const QEMU: i64 = 30 * MI;
/// Per vCPU (and the one static IO thread).
pub const PER_VCPU: i64 = 8 * MI;
/// The static IO thread.
pub const IO_THREAD: i64 = 8 * MI;
/// Video RAM of the auto-attached graphics device.
pub const GRAPHICS: i64 = 32 * MI;
/// Two 64 MiB pflash devices QEMU creates for UEFI on arm64.
pub const ARM64_PFLASH: i64 = 128 * MI;
/// VFIO locks guest RAM plus MMIO space (typically 1 GiB on x86).
pub const VFIO: i64 = 1024 * MI;
/// The memory-backed emptyDir of a downward-metrics disk.
pub const DOWNWARD_METRICS_DISK: i64 = MI;
/// Each exec probe (liveness, readiness).
pub const EXEC_PROBE: i64 = 10 * MI;
/// Once, when any exec probe exists (the `virt-probe` binary).
pub const EXEC_PROBE_BINARY: i64 = 100 * MI;
/// SEV / SEV-ES / SEV-SNP guests.
pub const SEV: i64 = 256 * MI;
/// The `swtpm` process of an emulated TPM.
pub const TPM: i64 = 53 * MI;
/// Dedicated CPUs or QoS guaranteed.
pub const DEDICATED: i64 = 100 * MI;
/// The `passt` process of the core passt binding, sized for all ports forwarded.
pub const PASST_BINDING: i64 = 250 * MI;

/// Everything the overhead estimate depends on, as plain facts about one VMI.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OverheadInputs {
    /// `spec.domain.resources.requests.memory` in bytes (rounded up), or `None` when unset.
    /// Page tables are sized from the *request*, not from the guest memory: a VMI that only sets
    /// `memory.guest` gets no page-table term, exactly as KubeVirt computes it.
    pub memory_request: Option<i64>,
    /// Number of vCPUs (sockets x cores x threads; see [`OverheadInputs::vcpus_or_one`]).
    pub vcpus: i64,
    /// Whether a graphics device is attached (`autoattachGraphicsDevice` unset or true).
    pub graphics: bool,
    /// Guest architecture is arm64 (UEFI pflash devices).
    pub arm64: bool,
    /// Host devices, GPUs or SR-IOV interfaces are present.
    pub vfio: bool,
    /// A downward-metrics volume exists.
    pub downward_metrics_disk: bool,
    /// The liveness probe is an exec probe.
    pub exec_liveness_probe: bool,
    /// The readiness probe is an exec probe.
    pub exec_readiness_probe: bool,
    /// SEV, SEV-ES or SEV-SNP launch security.
    pub sev: bool,
    /// An enabled TPM device.
    pub tpm: bool,
    /// Dedicated CPU placement, or requests equal limits (QoS guaranteed).
    pub dedicated_or_guaranteed: bool,
    /// `spec.domain.memory.reservedOverhead.addedOverhead`, with the format it was written in.
    pub reserved_overhead: Option<Amount>,
    /// Memory the network bindings need: [`PASST_BINDING`] for the core passt binding plus what
    /// binding plugins ask for (`computeResourceOverhead`), with its format. Added after the
    /// ratio, as KubeVirt adds it outside the hypervisor estimate.
    pub network_binding_overhead: Option<Amount>,
    /// The cluster's `additionalGuestMemoryOverheadRatio`, already parsed.
    pub additional_overhead_ratio: Option<f64>,
}

impl OverheadInputs {
    /// KubeVirt counts at least one vCPU when the topology says nothing.
    pub fn vcpus_or_one(&self) -> i64 {
        self.vcpus.max(1)
    }
}

/// Go's `ScaledValue(Kilo)`: thousands, rounded up.
fn ceil_kilo(bytes: i64) -> i64 {
    bytes.div_euclid(1000) + i64::from(bytes.rem_euclid(1000) != 0)
}

/// Page tables: one byte per 512 bytes of requested memory. KubeVirt first rounds the request up
/// to whole kilobytes, which is why 4Gi gives 8388609 and not 8388608.
pub fn page_tables(memory_request: i64) -> i64 {
    // In 128 bits: a request near `i64::MAX` rounds up past it (the result fits again).
    let bytes = i128::from(ceil_kilo(memory_request)) * 1000 / 512;
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// The memory overhead virt-controller adds to the compute container, with its print format.
pub fn memory_overhead(inputs: &OverheadInputs) -> Amount {
    // The sum starts as a zero decimal quantity; the page-table term is decimal too, so a VMI with
    // a memory request ends up decimal and one without takes the binary format of the fixed terms.
    let mut total = Amount::zero(Format::DecimalSI);
    total.add(Amount::decimal(
        inputs.memory_request.map(page_tables).unwrap_or(0),
    ));
    for fixed in [
        VIRT_LAUNCHER_MONITOR,
        VIRT_LAUNCHER,
        VIRTLOGD,
        VIRTQEMUD,
        QEMU,
    ] {
        total.add(Amount::binary(fixed));
    }
    total.add(Amount::binary(
        PER_VCPU.saturating_mul(inputs.vcpus_or_one()),
    ));
    total.add(Amount::binary(IO_THREAD));
    let flags = [
        (inputs.graphics, GRAPHICS),
        (inputs.arm64, ARM64_PFLASH),
        (inputs.vfio, VFIO),
        (inputs.downward_metrics_disk, DOWNWARD_METRICS_DISK),
        (inputs.exec_liveness_probe, EXEC_PROBE),
        (inputs.exec_readiness_probe, EXEC_PROBE),
        (
            inputs.exec_liveness_probe || inputs.exec_readiness_probe,
            EXEC_PROBE_BINARY,
        ),
        (inputs.sev, SEV),
        (inputs.tpm, TPM),
        (inputs.dedicated_or_guaranteed, DEDICATED),
    ];
    for (on, bytes) in flags {
        if on {
            total.add(Amount::binary(bytes));
        }
    }
    if let Some(reserved) = inputs.reserved_overhead {
        total.add(reserved);
    }
    if let Some(ratio) = inputs.additional_overhead_ratio {
        total = multiply(total, ratio);
    }
    // Network binding plugins are added by the caller of the hypervisor estimate, after the ratio.
    if let Some(net) = inputs.network_binding_overhead {
        total.add(net);
    }
    total
}

/// Go's `int64(f)`: truncation toward zero. Out-of-range values (undefined in Go) saturate.
#[expect(
    clippy::cast_possible_truncation,
    reason = "KubeVirt's float-to-int conversion"
)]
fn go_trunc(f: f64) -> i64 {
    f as i64
}

/// Scales an amount by `ratio` the way KubeVirt does: the *extra* part is computed in whole
/// kilobytes (rounded up first, truncated after the float multiplication) and added back.
fn multiply(amount: Amount, ratio: f64) -> Amount {
    let extra = ceil_kilo(amount.bytes) as f64 * (ratio - 1.0);
    let mut out = amount;
    out.add(Amount::decimal(go_trunc(extra).saturating_mul(1000)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1024 * MI;

    fn vm(vcpus: i64, memory: i64) -> OverheadInputs {
        OverheadInputs {
            memory_request: Some(memory),
            vcpus,
            graphics: true,
            ..Default::default()
        }
    }

    #[test]
    fn seed_measurements_from_the_issue() {
        assert_eq!(memory_overhead(&vm(2, 2 * GI)).bytes, 280 * MI);
        assert_eq!(memory_overhead(&vm(8, 8 * GI)).bytes, 340 * MI);
    }

    #[test]
    fn page_tables_round_the_request_up_to_kilobytes_first() {
        assert_eq!(page_tables(GI), 2 * MI);
        assert_eq!(page_tables(4 * GI), 8_388_609);
        assert_eq!(page_tables(1_000_000_000), 1_953_125);
    }

    #[test]
    fn format_is_binary_only_without_a_memory_request() {
        let mut inputs = vm(1, GI);
        inputs.memory_request = None;
        let o = memory_overhead(&inputs);
        assert_eq!((o.bytes, o.format), (268 * MI, Format::BinarySI));
        let o = memory_overhead(&vm(1, GI));
        assert_eq!((o.bytes, o.format), (270 * MI, Format::DecimalSI));
    }

    #[test]
    fn every_optional_term_adds_its_amount() {
        let base = memory_overhead(&vm(1, GI)).bytes;
        let with = |f: fn(&mut OverheadInputs)| {
            let mut i = vm(1, GI);
            f(&mut i);
            memory_overhead(&i).bytes - base
        };
        assert_eq!(with(|i| i.arm64 = true), 128 * MI);
        assert_eq!(with(|i| i.vfio = true), GI);
        assert_eq!(with(|i| i.downward_metrics_disk = true), MI);
        assert_eq!(with(|i| i.exec_liveness_probe = true), 110 * MI);
        assert_eq!(
            with(|i| {
                i.exec_liveness_probe = true;
                i.exec_readiness_probe = true
            }),
            120 * MI
        );
        assert_eq!(with(|i| i.sev = true), 256 * MI);
        assert_eq!(with(|i| i.tpm = true), 53 * MI);
        assert_eq!(with(|i| i.dedicated_or_guaranteed = true), 100 * MI);
        assert_eq!(with(|i| i.graphics = false), -32 * MI);
        assert_eq!(
            with(|i| i.reserved_overhead = Some(Amount::binary(5 * MI))),
            5 * MI
        );
    }

    #[test]
    fn zero_vcpus_count_as_one() {
        assert_eq!(
            memory_overhead(&vm(0, GI)).bytes,
            memory_overhead(&vm(1, GI)).bytes
        );
    }

    #[test]
    fn extreme_inputs_saturate_instead_of_overflowing() {
        // issue 17: `ceil_kilo(i64::MAX) * 1000` and `PER_VCPU * vcpus` overflowed (a panic in
        // debug builds, a wrapped negative overhead in release).
        assert_eq!(page_tables(i64::MAX), 18_014_398_509_481_984);
        assert_eq!(memory_overhead(&vm(i64::MAX, GI)).bytes, i64::MAX);
    }

    #[test]
    fn ratio_multiplies_in_whole_kilobytes() {
        let base = memory_overhead(&vm(1, GI));
        let mut inputs = vm(1, GI);
        inputs.additional_overhead_ratio = Some(1.5);
        let scaled = memory_overhead(&inputs);
        let extra = ((base.bytes + 999) / 1000) as f64 * 0.5;
        assert_eq!(scaled.bytes, base.bytes + go_trunc(extra) * 1000);
        assert_eq!(scaled.format, base.format);
        inputs.additional_overhead_ratio = Some(1.0);
        assert_eq!(memory_overhead(&inputs).bytes, base.bytes);
    }
}
