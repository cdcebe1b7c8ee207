//! The options the source handler sends with `MigrateVirtualMachine`, built from the VMI's
//! `status.migrationState.migrationConfiguration` (what the migration controller resolved from the
//! KubeVirt CR and the matching MigrationPolicy) or, when the VMI carries none, the cluster's.
//!
//! The JSON shape is KubeVirt's `cmdclient.MigrationOptions` (Go field names, no tags; nil
//! pointers as `null`), because virt-launcher reads exactly that.

use serde::{Deserialize, Serialize};

use crate::api::VirtualMachineInstance;
use crate::api::{StallDetectorOptions as ApiStallDetector, VMIMConfigurationOptions};
use kvrs_api::Quantity;

/// Multifd channels a migration uses when the guest's CPUs are neither limited nor dedicated
/// (KubeVirt's `parallelMultifdMigrationThreads`).
pub const PARALLEL_MIGRATION_THREADS: u32 = 8;
/// Default bandwidth cap (none).
pub const DEFAULT_BANDWIDTH: &str = "0Mi";
/// Default seconds without progress before the migration is aborted.
pub const DEFAULT_PROGRESS_TIMEOUT: i64 = 150;
/// Default seconds per GiB of guest memory before the migration is aborted.
pub const DEFAULT_COMPLETION_TIMEOUT_PER_GIB: i64 = 150;
/// Default tolerated downtime at switch-over.
pub const DEFAULT_MAX_DOWNTIME_MS: u64 = 900;
/// Feature gate that turns the stall detector on.
pub const STALL_DETECTION_GATE: &str = "MigrationStallDetection";
/// Decimal places a stall-detector factor may have.
const FACTOR_PRECISION: i32 = 3;

/// `cmdclient.MigrationOptions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrationOptions {
    /// Bandwidth cap per migration (a quantity in its canonical form; `0` is unlimited).
    #[serde(rename = "Bandwidth")]
    pub bandwidth: String,
    /// Seconds without progress before aborting.
    #[serde(rename = "ProgressTimeout")]
    pub progress_timeout: i64,
    /// Seconds per GiB before aborting (or switching to post-copy).
    #[serde(rename = "CompletionTimeoutPerGiB")]
    pub completion_timeout_per_gib: i64,
    /// Tolerated downtime at switch-over.
    #[serde(rename = "MaxDowntimeMs")]
    pub max_downtime_ms: u64,
    /// Migrate even when libvirt deems it unsafe (e.g. disk caches).
    #[serde(rename = "UnsafeMigration")]
    pub unsafe_migration: bool,
    /// Let QEMU throttle the guest's vCPUs to converge.
    #[serde(rename = "AllowAutoConverge")]
    pub allow_auto_converge: bool,
    /// Allow switching to post-copy.
    #[serde(rename = "AllowPostCopy")]
    pub allow_post_copy: bool,
    /// Multifd channels, when the guest's CPUs leave room for them.
    #[serde(rename = "ParallelMigrationThreads")]
    pub parallel_migration_threads: Option<u32>,
    /// Allow disrupting the workload (pausing it) to finish.
    #[serde(rename = "AllowWorkloadDisruption")]
    pub allow_workload_disruption: bool,
    /// Stall detector settings (feature gate `MigrationStallDetection`).
    #[serde(rename = "StallDetectorOptions")]
    pub stall_detector_options: Option<StallDetectorOptions>,
    /// Migration stream compression.
    #[serde(rename = "Compression")]
    pub compression: Option<String>,
}

impl MigrationOptions {
    /// The JSON virt-launcher's `MigrateVirtualMachine` takes (`MigrationRequest.options`).
    pub fn to_json(&self) -> Vec<u8> {
        // Plain data (strings, numbers, booleans): serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// `cmdclient.StallDetectorOptions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StallDetectorOptions {
    /// Margin as a fraction (the API's percent / 100).
    #[serde(rename = "StallMargin")]
    pub stall_margin: f64,
    /// Seconds without progress before a stall is declared.
    #[serde(rename = "StallProgressTimeout")]
    pub stall_progress_timeout: u64,
    /// Seconds the switch-over may take.
    #[serde(rename = "SwitchoverTimeout")]
    pub switchover_timeout: u64,
    /// Smoothing factor of the dirty-rate average.
    #[serde(rename = "EwmaAlpha")]
    pub ewma_alpha: f64,
    /// How much faster than dirtying the transfer must be for pre-copy to be possible.
    #[serde(rename = "PrecopyPossibleFactor")]
    pub precopy_possible_factor: f64,
    /// Decay of the patience window.
    #[serde(rename = "PatienceWindowDecayFactor")]
    pub patience_window_decay_factor: f64,
    /// Look for a local minimum of the remaining data before switching over.
    #[serde(rename = "SearchLocalMinima")]
    pub search_local_minima: bool,
    /// Factor on the completion timeout.
    #[serde(rename = "CompletionTimeoutFactor")]
    pub completion_timeout_factor: f64,
}

/// Why the options cannot be built; names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A setting the migration controller always resolves is missing.
    #[error("{0} is not set")]
    Missing(&'static str),
    /// A value does not parse.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Field path.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The cluster's migration configuration with KubeVirt's defaults filled in (what
/// `clusterConfig.GetMigrationConfiguration()` returns), used when the VMI carries none.
pub fn cluster_defaults(cluster: Option<&VMIMConfigurationOptions>) -> VMIMConfigurationOptions {
    let mut c = cluster.cloned().unwrap_or_default();
    c.bandwidth_per_migration
        .get_or_insert_with(|| Quantity::new(DEFAULT_BANDWIDTH));
    // (the defaults below are KubeVirt's `virtconfig` constants)
    c.progress_timeout.get_or_insert(DEFAULT_PROGRESS_TIMEOUT);
    c.completion_timeout_per_gi_b
        .get_or_insert(DEFAULT_COMPLETION_TIMEOUT_PER_GIB);
    c.unsafe_migration_override.get_or_insert(false);
    c.allow_auto_converge.get_or_insert(false);
    c.allow_post_copy.get_or_insert(false);
    c
}

/// Builds the options as `migrateVMI` does. `cluster` is the cluster configuration (defaults
/// applied by [`cluster_defaults`]); `stall_detection` is the feature gate.
pub fn build(
    vmi: &VirtualMachineInstance,
    cluster: Option<&VMIMConfigurationOptions>,
    stall_detection: bool,
) -> Result<MigrationOptions, OptionsError> {
    let from_vmi = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|m| m.migration_configuration.clone());
    let cfg = from_vmi.unwrap_or_else(|| cluster_defaults(cluster));
    let allow_post_copy = cfg.allow_post_copy.ok_or(OptionsError::Missing(
        "status.migrationState.migrationConfiguration.allowPostCopy",
    ))?;
    let bandwidth = cfg
        .bandwidth_per_migration
        .as_ref()
        .ok_or(OptionsError::Missing(
            "status.migrationState.migrationConfiguration.bandwidthPerMigration",
        ))?;
    let bandwidth = bandwidth
        .canonical()
        .map_err(|e| OptionsError::Invalid {
            field: "status.migrationState.migrationConfiguration.bandwidthPerMigration",
            reason: e.to_string(),
        })?
        .as_str()
        .to_string();
    let max_downtime_ms = match cfg.max_downtime_ms {
        None => DEFAULT_MAX_DOWNTIME_MS,
        Some(v) => u64::try_from(v).map_err(|_| OptionsError::Invalid {
            field: "status.migrationState.migrationConfiguration.maxDowntimeMs",
            reason: format!("{v} is negative"),
        })?,
    };
    let mut options = MigrationOptions {
        bandwidth,
        progress_timeout: cfg.progress_timeout.ok_or(OptionsError::Missing(
            "status.migrationState.migrationConfiguration.progressTimeout",
        ))?,
        completion_timeout_per_gib: cfg.completion_timeout_per_gi_b.ok_or(
            OptionsError::Missing(
                "status.migrationState.migrationConfiguration.completionTimeoutPerGiB",
            ),
        )?,
        max_downtime_ms,
        unsafe_migration: cfg.unsafe_migration_override.ok_or(OptionsError::Missing(
            "status.migrationState.migrationConfiguration.unsafeMigrationOverride",
        ))?,
        allow_auto_converge: cfg.allow_auto_converge.ok_or(OptionsError::Missing(
            "status.migrationState.migrationConfiguration.allowAutoConverge",
        ))?,
        allow_post_copy,
        parallel_migration_threads: None,
        // Older controllers left it unset: it then follows allowPostCopy.
        allow_workload_disruption: cfg.allow_workload_disruption.unwrap_or(allow_post_copy),
        stall_detector_options: None,
        compression: None,
    };
    let experimental = cfg.experimental.as_ref();
    if stall_detection {
        let sd = experimental
            .and_then(|e| e.stall_detector.clone())
            .unwrap_or_default();
        options.stall_detector_options = Some(stall_detector(&sd)?);
    }
    if let Some(c) = experimental.and_then(|e| e.compression.clone()) {
        options.compression = Some(c);
    }
    options.parallel_migration_threads = parallel_threads(vmi);
    Ok(options)
}

/// `configureParallelMigrationThreads`: none when the CPU is limited (the threads would choke
/// the compute container) or dedicated (every vCPU is fully used).
fn parallel_threads(vmi: &VirtualMachineInstance) -> Option<u32> {
    let limited = vmi
        .spec
        .domain
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("cpu"))
        .is_some_and(|q| !matches!(q.milli_value(), Ok(0)));
    let dedicated = vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.dedicated_cpu_placement)
        .unwrap_or(false);
    (!limited && !dedicated).then_some(PARALLEL_MIGRATION_THREADS)
}

/// The stall detector with KubeVirt's defaults for every unset field.
fn stall_detector(sd: &ApiStallDetector) -> Result<StallDetectorOptions, OptionsError> {
    let unsigned = |v: Option<i64>, default: u64, field: &'static str| match v {
        None => Ok(default),
        Some(v) => u64::try_from(v).map_err(|_| OptionsError::Invalid {
            field,
            reason: format!("{v} is negative"),
        }),
    };
    Ok(StallDetectorOptions {
        stall_margin: sd.stall_margin.unwrap_or(4) as f64 / 100.0,
        stall_progress_timeout: unsigned(
            sd.stall_progress_timeout,
            40,
            "status.migrationState.migrationConfiguration.experimental.stallDetector.stallProgressTimeout",
        )?,
        switchover_timeout: unsigned(
            sd.switchover_timeout,
            60,
            "status.migrationState.migrationConfiguration.experimental.stallDetector.switchoverTimeout",
        )?,
        ewma_alpha: parse_factor(
            sd.ewma_alpha.as_deref().unwrap_or("0.4"),
            "status.migrationState.migrationConfiguration.experimental.stallDetector.ewmaAlpha",
        )?,
        precopy_possible_factor: parse_factor(
            sd.precopy_possible_factor.as_deref().unwrap_or("1.5"),
            "status.migrationState.migrationConfiguration.experimental.stallDetector.precopyPossibleFactor",
        )?,
        patience_window_decay_factor: parse_factor(
            sd.patience_window_decay_factor.as_deref().unwrap_or("0.5"),
            "status.migrationState.migrationConfiguration.experimental.stallDetector.patienceWindowDecayFactor",
        )?,
        search_local_minima: sd.search_local_minima.unwrap_or(true),
        completion_timeout_factor: parse_factor(
            sd.completion_timeout_factor.as_deref().unwrap_or("2"),
            "status.migrationState.migrationConfiguration.experimental.stallDetector.completionTimeoutFactor",
        )?,
    })
}

/// `ParseFactor`: a finite decimal with at most three decimal places.
pub fn parse_factor(s: &str, field: &'static str) -> Result<f64, OptionsError> {
    let invalid = |reason: String| OptionsError::Invalid { field, reason };
    let t = s.trim();
    if t.is_empty() {
        return Err(invalid(format!("invalid factor {s:?}")));
    }
    let v: f64 = t
        .parse()
        .map_err(|e| invalid(format!("invalid factor {s:?}: {e}")))?;
    if !v.is_finite() {
        return Err(invalid(format!("invalid factor {s:?}")));
    }
    let scale = 10f64.powi(FACTOR_PRECISION);
    let scaled = v * scale;
    if (scaled - scaled.round()).abs() > 1e-9 * scale.max(scaled.abs()) {
        return Err(invalid(format!(
            "invalid factor {s:?}: more than {FACTOR_PRECISION} decimal places"
        )));
    }
    Ok(v)
}
