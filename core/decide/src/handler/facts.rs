//! Node-side facts the handler's sync choice depends on, gathered by the shell before calling
//! [`decide`](super::decide): the state of the launcher's command socket, results of launcher
//! commands already attempted, mount and network readiness, the pod interface cache.
//!
//! The serde shape is the `extra` object of the oracle scenarios, so the same file drives the
//! oracle tests, `kvrs decide handler` and users' simulators.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Everything node-local the decision reads besides the VMI and the domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeFacts {
    /// The launcher of the VMI (matching UID).
    pub launcher: LauncherFacts,
    /// The launcher of a stale domain whose UID differs from the VMI's.
    pub old_launcher: LauncherFacts,
    /// Launcher commands that fail, by command name (`SyncVirtualMachine`, `KillVirtualMachine`, ...),
    /// with the error text. The text `disconnected` stands for the socket closing mid-call (EOF).
    ///
    /// In a real handler these are the results of commands attempted in the previous round: the shell
    /// runs the plan's launcher calls in order and, when one fails, decides again with the error here.
    pub launcher_errors: BTreeMap<String, String>,
    /// What `GetGuestInfo` returns once the agent is connected.
    pub guest_info: Option<GuestInfo>,
    /// Whether the container disks have been pulled and are ready to mount (default true).
    pub container_disks_ready: Option<bool>,
    /// Error from the container-disk readiness check.
    pub container_disk_error: Option<String>,
    /// Error from mounting and verifying container disks.
    pub mount_and_verify_error: Option<String>,
    /// Error from mounting hotplug volumes.
    pub hotplug_mount_error: Option<String>,
    /// Hotplugged volumes the node sees in the launcher pod (KubeVirt's `IsMounted`): a mount
    /// at `<volume>.img` or a block node `<volume>` in its `hotplug-disks` directory.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub hotplug_mounted: BTreeSet<String>,
    /// Error from setting up the pod network for the guest.
    pub network_setup_error: Option<String>,
    /// Error from handing the pod's device nodes (`/dev/kvm`, `/dev/net/tun`, ...) to QEMU's user
    /// (KubeVirt's `setupDevicesOwnerships`), e.g. a device the pod should have but has not.
    pub claim_devices_error: Option<String>,
    /// The pod interface cache written during network setup, by interface name.
    pub pod_interface_cache: BTreeMap<String, PodInterface>,
    /// The VMI is only in the cluster-wide informer (the node-local one lags behind).
    pub vmi_in_global_store_only: bool,
    /// UID of the VMI as remembered in the ghost record on disk.
    #[serde(rename = "ghostRecordUID")]
    pub ghost_record_uid: Option<String>,
    /// SELinux context of the launcher, when the node has SELinux (`none` when it has not); `None`
    /// leaves `status.selinuxContext` untouched.
    pub selinux_context: Option<String>,
    /// Whether the VMI's cache expectations are satisfied (default true); while the handler waits for
    /// its own previous write to come back through the informer it does nothing.
    pub expectations_satisfied: Option<bool>,
    /// The IO-error retry state the previous sync left ([`super::plan::HandlerPlan::io_error_retry`]).
    pub io_error_retry: Option<super::retry::RetryState>,
    /// What the migration controllers read besides the launcher (proxy ports, this node's
    /// migration address, cluster migration settings).
    #[serde(skip_serializing_if = "super::migration::MigrationFacts::is_empty")]
    pub migration: super::migration::MigrationFacts,
}

/// State of a launcher command client as the client manager sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LauncherFacts {
    /// The command socket stopped answering (or the pod is gone).
    pub unresponsive: bool,
    /// The socket has not appeared yet.
    pub not_initialized: bool,
    /// Checking the socket itself failed.
    pub unresponsive_error: Option<String>,
    /// No launcher socket at all (pod torn down).
    pub gone: bool,
    /// The client manager has no info about the client yet.
    pub no_client_info: bool,
    /// Since when the client has been waiting to initialise (RFC 3339).
    pub not_initialized_since: Option<String>,
}

/// What the guest agent reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GuestInfo {
    /// Agent version string.
    pub guest_agent_version: String,
    /// Commands the agent supports.
    pub supported_commands: Vec<GuestAgentCommand>,
}

/// One guest agent command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestAgentCommand {
    /// Command name, e.g. `guest-ping`.
    pub name: String,
    /// Whether it is enabled.
    pub enabled: bool,
}

/// Pod interface data cached at network setup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodInterface {
    /// First pod IP.
    #[serde(rename = "podIP")]
    pub pod_ip: String,
    /// All pod IPs.
    #[serde(rename = "podIPs")]
    pub pod_ips: Vec<String>,
}

impl NodeFacts {
    /// Records that `action` failed with `error`, as the fact the next decision of the same sync
    /// reads; `false` when no fact stands for that action (the shell then fails the sync itself).
    ///
    /// This is how a shell runs a handler plan: actions in order, and at the first failing launcher
    /// command or node step it records the failure here and decides again. The new plan repeats
    /// the actions already done, then says what KubeVirt does after that failure (usually the
    /// status write with a `Synchronized=False` condition).
    pub fn record_failure(&mut self, action: &crate::Action, error: &str) -> bool {
        use crate::{Action, NodeStep};
        let slot = match action {
            Action::Launcher(call) => {
                self.launcher_errors
                    .insert(call.name().to_string(), error.to_string());
                return true;
            }
            Action::Node(NodeStep::MountContainerDisks) => &mut self.mount_and_verify_error,
            Action::Node(NodeStep::MountHotplugVolumes) => &mut self.hotplug_mount_error,
            Action::Node(NodeStep::SetupNetworks { .. }) => &mut self.network_setup_error,
            Action::Node(NodeStep::ClaimDevices { .. }) => &mut self.claim_devices_error,
            Action::Node(NodeStep::StartSourceProxy { .. }) => {
                &mut self.migration.source_proxy_error
            }
            Action::Node(NodeStep::StartTargetProxy { .. }) => {
                &mut self.migration.target_proxy_error
            }
            _ => return false,
        };
        *slot = Some(error.to_string());
        true
    }

    /// The error text configured for a launcher command, if it fails.
    pub fn launcher_error(&self, command: &str) -> Option<&str> {
        self.launcher_errors.get(command).map(String::as_str)
    }
}

/// Whether a launcher error means the socket closed mid-call, which KubeVirt does not count as a
/// failure when the launcher is going away anyway.
pub fn is_disconnected(err: &str) -> bool {
    err == "disconnected" || err.contains("EOF") || err.contains("connection closed")
}

/// Cluster-wide settings the handler needs that are not part of the VMI.
#[derive(Clone, Debug, PartialEq)]
pub struct HandlerConfig {
    /// Host CPU model the node labeller found; empty forbids migrating host-model VMIs.
    pub host_cpu_model: String,
    /// Regular expressions of supported guest agent versions (used when the agent lists no commands).
    pub supported_agent_versions: Vec<String>,
    /// Enabled feature gates.
    pub feature_gates: Vec<String>,
    /// Cluster default eviction strategy.
    pub eviction_strategy: Option<String>,
    /// Network binding plugins that support migration.
    pub migratable_bindings: Vec<String>,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        Self {
            host_cpu_model: "Skylake-Client-IBRS".into(),
            supported_agent_versions: ["2.*", "3.*", "4.*", "5.*"].map(String::from).to_vec(),
            feature_gates: Vec::new(),
            eviction_strategy: None,
            migratable_bindings: Vec::new(),
        }
    }
}

impl HandlerConfig {
    /// Whether a feature gate is on.
    pub fn gate(&self, name: &str) -> bool {
        self.feature_gates.iter().any(|g| g == name)
    }
}
