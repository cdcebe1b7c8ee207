//! virt-controller's live configuration: the KubeVirt CR's `spec.configuration` with the flags
//! laid over it (`kvrs_runtime::kube::kubevirt_config`), and the launcher pod inputs it changes.
//!
//! Precedence: `--feature-gates` adds to the CR's gates; `--allow-emulation` forces
//! `useEmulation` on (without it the CR decides); `--launcher-image` is the launcher image (the
//! CR has none: virt-operator passes it as this flag); `--virt-api-webhooks` (implied by
//! KubeVirt's operator's command line, [`Flags::webhooks_in_front`]) and
//! `--qemu-timeout-seconds` are not CR settings. Everything else comes from the CR.

use kvrs_admission::ClusterConfig;
use kvrs_admission::kubevirt_cr::KubevirtCr;
use kvrs_admission::live_config::Overrides;
use kvrs_pod::PodInputs;
use kvrs_runtime::kube::daemon::flag_overrides;

use crate::Flags;

/// What one sync decides and renders with (one snapshot per sync).
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// The cluster configuration the decisions read.
    pub cluster: ClusterConfig,
    /// The launcher pod inputs (the qemu-timeout jitter is drawn per pod).
    pub pod_inputs: PodInputs,
}

/// The flags that override the CR: both daemons' (`--feature-gates`, `--allow-emulation`) and
/// virt-controller's own (`--launcher-image`, `--virt-api-webhooks`).
pub fn overrides(flags: &Flags) -> anyhow::Result<Overrides> {
    Ok(Overrides {
        launcher_image: Some(flags.launcher_image.clone()),
        admit_created_vmis: !flags.webhooks_in_front(),
        ..flag_overrides(&flags.feature_gates, flags.allow_emulation)?
    })
}

/// The configuration `cr` (flags already laid over it) gives, on top of the flags' pod inputs.
pub fn derive(cr: &KubevirtCr, base: &PodInputs) -> ControllerConfig {
    let mut pod_inputs = base.clone();
    pod_inputs.serial_console_log_disabled = cr.daemon.serial_console_log_disabled;
    // The binding plugins the CR registers: their sidecars and Multus elements go into the pod,
    // and a VMI naming an unregistered one gets KubeVirt's render error.
    pod_inputs.network_bindings = cr.network_bindings.clone();
    pod_inputs.image_pull_policy = cr
        .daemon
        .image_pull_policy
        .clone()
        .unwrap_or_else(|| base.image_pull_policy.clone());
    ControllerConfig {
        cluster: cr.config.clone(),
        pod_inputs,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use kvrs_runtime::kube::daemon::configuration_of;
    use serde_json::json;

    use super::*;

    fn config(argv: &[&str], configuration: serde_json::Value) -> ControllerConfig {
        let flags = Flags::try_parse_from(argv).unwrap();
        let base = PodInputs {
            qemu_timeout_seconds: flags.qemu_timeout_seconds,
            ..PodInputs::default()
        };
        let cr = configuration_of(&overrides(&flags).unwrap(), configuration).unwrap();
        derive(&cr, &base)
    }

    #[test]
    fn the_cr_configures_the_controller_and_flags_override_it() {
        let conf = json!({
            "developerConfiguration": {"featureGates": ["HostDisk"], "useEmulation": true},
            "imagePullPolicy": "Always",
            "virtualMachineOptions": {"disableSerialConsoleLog": {}},
        });
        let c = config(
            &["virt-controller", "--qemu-timeout-seconds", "60"],
            conf.clone(),
        );
        assert!(c.cluster.use_emulation);
        assert!(c.cluster.gate("HostDisk"));
        assert!(c.cluster.admit_created_vmis);
        assert_eq!(c.pod_inputs.image_pull_policy, "Always");
        assert!(c.pod_inputs.serial_console_log_disabled);
        assert_eq!(c.pod_inputs.qemu_timeout_seconds, 60);
        assert!(c.pod_inputs.network_bindings.is_empty());
        let passt =
            json!({"network": {"binding": {"passt": {"sidecarImage": "example.org/passt:1"}}}});
        let with_plugin = config(&["virt-controller"], passt);
        assert_eq!(
            with_plugin.pod_inputs.network_bindings["passt"]
                .sidecar_image
                .as_deref(),
            Some("example.org/passt:1"),
            "the CR's binding plugins reach the pod renderer"
        );

        let c = config(
            &[
                "virt-controller",
                "--feature-gates",
                "Sidecar",
                "--launcher-image",
                "example.org/launcher:1",
                "--virt-api-webhooks",
            ],
            conf,
        );
        assert!(c.cluster.gate("HostDisk") && c.cluster.gate("Sidecar"));
        assert_eq!(c.cluster.launcher_image, "example.org/launcher:1");
        assert!(!c.cluster.admit_created_vmis);
        // KubeVirt's operator's command line: its virt-api's webhook admits the VMIs.
        let c = config(
            &[
                "virt-controller",
                "--launcher-image",
                "kvrs/virt-launcher:v0.1.0",
                "--exporter-image",
                "quay.io/kubevirt/virt-exportserver:v1.9.0",
                "--port",
                "8443",
                "-v",
                "2",
            ],
            json!({}),
        );
        assert!(!c.cluster.admit_created_vmis);

        // `--allow-emulation` forces emulation on; it cannot be forced off.
        let off = json!({"developerConfiguration": {"useEmulation": false}});
        assert!(
            !config(&["virt-controller"], off.clone())
                .cluster
                .use_emulation
        );
        assert!(
            config(&["virt-controller", "--allow-emulation"], off)
                .cluster
                .use_emulation
        );
    }

    #[test]
    fn an_unknown_gate_flag_is_refused_naming_the_flag() {
        let flags = Flags::try_parse_from(["virt-controller", "--feature-gates", "Nope"]).unwrap();
        let err = overrides(&flags).unwrap_err();
        assert!(
            format!("{err:#}").starts_with("--feature-gates: "),
            "{err:#}"
        );
    }
}
