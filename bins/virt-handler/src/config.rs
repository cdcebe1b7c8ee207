//! virt-handler's live configuration: the KubeVirt CR's `spec.configuration` with the flags laid
//! over it (`kvrs_runtime::kube::kubevirt_config`), as the decisions and the launcher options
//! read it. One snapshot per sync.
//!
//! Precedence: `--feature-gates` adds to the CR's gates; `--allow-emulation` forces
//! `useEmulation` on (without it the CR decides). Everything else comes from the CR: SMBIOS and
//! `memBalloonStatsPeriod` (sent with `SyncVirtualMachine`), `virtualMachineOptions` and the
//! CR's VGA annotation (the launcher's cluster options), `evictionStrategy`,
//! `supportedGuestAgentVersions` and the migratable network binding plugins (the handler's
//! decisions), the binding plugins' domain attachment types (the pod network and the launcher).

use kvrs_admission::ClusterConfig;
use kvrs_admission::kubevirt_cr::{DaemonSettings, KubevirtCr};
use kvrs_admission::live_config::Overrides;
use kvrs_decide::handler::HandlerConfig;
use kvrs_node::network::BindingPlugins;
use kvrs_runtime::kube::daemon::flag_overrides;

use crate::Flags;

/// What one handler sync reads.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeConfig {
    /// The cluster configuration (SMBIOS, balloon period, gates, `useEmulation`).
    pub cluster: ClusterConfig,
    /// The settings only the daemons read (the launcher's cluster options).
    pub daemon: DaemonSettings,
    /// What the handler's decisions read.
    pub decide: HandlerConfig,
    /// The network binding plugins' `domainAttachmentType`s: the pod network setup wires a
    /// `managedTap` plugin's interfaces, and the launcher is told which interfaces are taps.
    pub bindings: BindingPlugins,
}

/// The flags that override the CR (`--feature-gates`, `--allow-emulation`).
pub fn overrides(flags: &Flags) -> anyhow::Result<Overrides> {
    Ok(flag_overrides(&flags.feature_gates, flags.allow_emulation)?)
}

/// The configuration `cr` (flags already laid over it) gives.
pub fn derive(cr: &KubevirtCr) -> NodeConfig {
    let defaults = HandlerConfig::default();
    let decide = HandlerConfig {
        feature_gates: cr.config.feature_gates.iter().cloned().collect(),
        eviction_strategy: cr.daemon.eviction_strategy.clone(),
        migratable_bindings: cr
            .network_bindings
            .iter()
            .filter(|(_, plugin)| plugin.migration)
            .map(|(name, _)| name.clone())
            .collect(),
        supported_agent_versions: cr
            .daemon
            .supported_guest_agent_versions
            .clone()
            .unwrap_or(defaults.supported_agent_versions),
        host_cpu_model: defaults.host_cpu_model,
    };
    let bindings = cr
        .network_bindings
        .iter()
        .filter_map(|(name, plugin)| Some((name.clone(), plugin.domain_attachment_type.clone()?)))
        .collect();
    NodeConfig {
        cluster: cr.config.clone(),
        daemon: cr.daemon.clone(),
        decide,
        bindings,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use kvrs_runtime::kube::daemon::configuration_of;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_cr_configures_the_handler_and_flags_override_it() {
        let conf = json!({
            "developerConfiguration": {"featureGates": ["HostDisk"], "useEmulation": false},
            "evictionStrategy": "LiveMigrate",
            "supportedGuestAgentVersions": ["9.*"],
            "network": {"binding": {
                "passt": {"migration": {"method": "link-refresh"}},
                "tap": {},
                "mtap": {"domainAttachmentType": "managedTap"},
            }},
        });
        let c = node_config(
            &[
                "virt-handler",
                "--feature-gates",
                "Sidecar",
                "--allow-emulation",
            ],
            conf.clone(),
        );
        assert!(c.cluster.use_emulation, "--allow-emulation wins");
        assert_eq!(c.decide.feature_gates, ["HostDisk", "Sidecar"]);
        assert_eq!(c.decide.eviction_strategy.as_deref(), Some("LiveMigrate"));
        assert_eq!(c.decide.migratable_bindings, ["passt"]);
        assert_eq!(
            c.bindings,
            BindingPlugins::from_iter([("mtap", "managedTap")]),
            "only plugins with a domainAttachmentType"
        );
        assert_eq!(c.decide.supported_agent_versions, ["9.*"]);
        assert_eq!(
            c.decide.host_cpu_model,
            HandlerConfig::default().host_cpu_model
        );
        assert!(!node_config(&["virt-handler"], conf).cluster.use_emulation);
    }

    #[test]
    fn without_a_cr_setting_kubevirts_defaults_hold() {
        let c = node_config(&["virt-handler"], json!({}));
        assert_eq!(c.decide, HandlerConfig::default());
        assert_eq!(c.cluster, ClusterConfig::default());
        assert_eq!(c.bindings, BindingPlugins::default());
    }

    fn node_config(argv: &[&str], configuration: serde_json::Value) -> NodeConfig {
        let flags = Flags::try_parse_from(argv).unwrap();
        derive(&configuration_of(&overrides(&flags).unwrap(), configuration).unwrap())
    }
}
