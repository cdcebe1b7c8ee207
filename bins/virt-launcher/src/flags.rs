//! The flags KubeVirt's virt-controller passes to virt-launcher (through the monitor), with
//! KubeVirt's defaults. Flags kvrs accepts but does not act on are listed so a KubeVirt pod
//! template starts kvrs's launcher unchanged.

use std::path::PathBuf;
use std::time::Duration;

/// virt-launcher's command line.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "virt-launcher",
    about = "Runs libvirt and QEMU for one VMI and serves KubeVirt's cmd gRPC"
)]
pub struct Flags {
    /// How long to wait for a domain to be defined (Go duration: `240s`, `5m`, `1500ms`).
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    pub qemu_timeout: Duration,
    /// Shared directory between virt-handler and virt-launcher.
    #[arg(long, default_value = "/var/run/kubevirt")]
    pub kubevirt_share_dir: PathBuf,
    /// Base directory for ephemeral disk data.
    #[arg(long, default_value = "/var/run/kubevirt-ephemeral-disks")]
    pub ephemeral_disk_dir: PathBuf,
    /// Base directory for container disk data.
    #[arg(long, default_value = "/var/run/kubevirt/container-disks")]
    pub container_disk_dir: PathBuf,
    /// Base directory for hotplug disk data.
    #[arg(long, default_value = "/var/run/kubevirt/hotplug-disks")]
    pub hotplug_disk_dir: PathBuf,
    /// VMI name.
    #[arg(long, default_value = "")]
    pub name: String,
    /// VMI UID.
    #[arg(long, default_value = "")]
    pub uid: String,
    /// VMI namespace.
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// Grace period for the guest to shut down after SIGTERM.
    #[arg(long, default_value_t = 30)]
    pub grace_period_seconds: u64,
    /// Allow software emulation (TCG) when KVM is not usable.
    #[arg(long)]
    pub allow_emulation: bool,
    /// Allow cross-architecture emulation.
    #[arg(long)]
    pub allow_cross_arch_emulation: bool,
    /// Run libvirt as the non-root user (UID 107); kvrs runs it as whoever the launcher is.
    #[arg(long)]
    pub run_as_nonroot: bool,
    /// Container disks come from image volumes.
    #[arg(long)]
    pub image_volume: bool,
    /// Hook sidecars to wait for in `/var/run/kubevirt-hooks` before libvirt starts.
    #[arg(long, default_value_t = 0)]
    pub hook_sidecars: u32,
    /// Memory limit for disk verification (`qemu-img info`).
    #[arg(long, default_value_t = 2_097_152_000)]
    pub disk_memory_limit: i64,
    /// Directory with the EFI firmware files.
    #[arg(long, default_value = "/usr/share/OVMF")]
    pub ovmf_path: PathBuf,
    /// Hypervisor name (`kvm`).
    #[arg(long, default_value = "kvm")]
    pub hypervisor: String,
    /// Custom libvirt log filters.
    #[arg(long, default_value = "")]
    pub libvirt_log_filters: String,
    /// Accepted for compatibility (the monitor drops it).
    #[arg(long)]
    pub keep_after_failure: bool,
    /// Accepted for compatibility; no effect in kvrs.
    #[arg(long)]
    pub libvirt_hook_server_and_client: bool,
    /// Accepted for compatibility; no effect in kvrs.
    #[arg(long)]
    pub upgrade_ordinal_ifaces: bool,
    /// Accepted for compatibility; no effect in kvrs.
    #[arg(long)]
    pub vgpu_dedicated_hook: bool,
    /// Accepted for compatibility; no effect in kvrs.
    #[arg(long)]
    pub vm_stats_collector: bool,
    /// Use libvirt firmware auto-selection for EFI secure boot.
    #[arg(long)]
    pub firmware_auto_selection: bool,
    /// Guest-agent poll interval for OS, interfaces, hostname, timezone and load (120s).
    #[arg(long, value_parser = parse_duration)]
    pub qemu_agent_sys_interval: Option<Duration>,
    /// Guest-agent poll interval for filesystems (300s).
    #[arg(long, value_parser = parse_duration)]
    pub qemu_agent_file_interval: Option<Duration>,
    /// Guest-agent poll interval for logged-in users (10s).
    #[arg(long, value_parser = parse_duration)]
    pub qemu_agent_user_interval: Option<Duration>,
    /// Guest-agent poll interval for the agent's version and commands (300s).
    #[arg(long, value_parser = parse_duration)]
    pub qemu_agent_version_interval: Option<Duration>,
    /// Guest-agent poll interval for the filesystem freeze state (5s).
    #[arg(long, value_parser = parse_duration)]
    pub qemu_fsfreeze_status_interval: Option<Duration>,
    /// Crash at once (KubeVirt's functional tests use it).
    #[arg(long)]
    pub simulate_crash: bool,
}

/// The longest Go `time.Duration`: `i64::MAX` nanoseconds (about 292 years).
pub const GO_MAX_DURATION: Duration = Duration::from_nanos(i64::MAX.unsigned_abs());

/// Parses a Go-style duration: a sequence of `<number><unit>` with units h, m, s, ms, us, ns.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?} (expected e.g. 240s, 5m, 1500ms)");
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => value * 3600.0,
            "m" => value * 60.0,
            "s" => value,
            "ms" => value / 1e3,
            "us" | "µs" => value / 1e6,
            "ns" => value / 1e9,
            _ => return Err(bad()),
        };
        // Go's time.Duration is an int64 of nanoseconds: a longer duration is out of range
        // there, and here (adding it must not overflow, nor a deadline computed from it).
        total = Duration::try_from_secs_f64(secs)
            .ok()
            .and_then(|d| total.checked_add(d))
            .filter(|t| *t <= GO_MAX_DURATION)
            .ok_or_else(|| {
                format!("duration {text:?} out of range (at most {GO_MAX_DURATION:?})")
            })?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn durations_beyond_gos_range_are_errors_not_panics() {
        // `--qemu-timeout <huge>` panicked with "overflow when adding durations".
        for huge in [
            "18446744073709551615s",
            "5124095576030431h5124095576030431h",
            "2562048h2562048h",
            "1e300s",
        ] {
            let err = parse_duration(huge).unwrap_err();
            assert!(
                err.contains("out of range") || err.contains("invalid duration"),
                "{huge}: {err}"
            );
        }
        assert_eq!(
            parse_duration("2562047h").unwrap(),
            Duration::from_secs(2_562_047 * 3600)
        );
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("240s").unwrap(), Duration::from_secs(240));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn kubevirt_template_flags_are_accepted() {
        let f = Flags::try_parse_from([
            "virt-launcher",
            "--qemu-timeout",
            "262s",
            "--name",
            "vm",
            "--uid",
            "u-1",
            "--namespace",
            "ns",
            "--kubevirt-share-dir",
            "/var/run/kubevirt",
            "--ephemeral-disk-dir",
            "/var/run/kubevirt-ephemeral-disks",
            "--container-disk-dir",
            "/var/run/kubevirt/container-disks",
            "--grace-period-seconds",
            "45",
            "--hook-sidecars",
            "0",
            "--ovmf-path",
            "/usr/share/edk2/ovmf",
            "--disk-memory-limit",
            "2097152000",
            "--hypervisor",
            "kvm",
            "--run-as-nonroot",
            "--allow-emulation",
        ])
        .unwrap();
        assert_eq!(f.qemu_timeout, Duration::from_secs(262));
        assert_eq!(
            (
                f.name.as_str(),
                f.namespace.as_str(),
                f.grace_period_seconds
            ),
            ("vm", "ns", 45)
        );
        assert!(f.allow_emulation && f.run_as_nonroot);
    }
}
