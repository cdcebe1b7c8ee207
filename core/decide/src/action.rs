//! What a plan asks the world to do besides API writes: commands to a virt-launcher and steps on
//! the node. virt-handler's decision emits them; the shell runs them in the order given.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ApiWrite;
use crate::handler::migration::MigrationOptions;

/// One thing a plan asks for, in the order it must happen.
///
/// KubeVirt's handler prepares the pod (container disks, network, device ownership) before it
/// sends `SyncVirtualMachine`, and writes the VMI status after the launcher answered; one ordered
/// list keeps that order a fact of the plan instead of a convention of each shell.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send this write to the API server.
    Write(ApiWrite),
    /// Send this command to the VMI's virt-launcher.
    Launcher(LauncherCall),
    /// Do this on the node, outside the launcher pod.
    Node(NodeStep),
}

impl Action {
    /// The write, if this is one.
    pub fn as_write(&self) -> Option<&ApiWrite> {
        match self {
            Action::Write(w) => Some(w),
            _ => None,
        }
    }

    /// A short name for logs and metrics: the verb and resource of a write, the command name of a
    /// launcher call, the step name of a node step.
    pub fn label(&self) -> String {
        match self {
            Action::Write(w) => format!("{} {}", w.op.verb(), w.resource),
            Action::Launcher(c) => c.name().to_string(),
            Action::Node(s) => s.name().to_string(),
        }
    }
}

/// A command sent to virt-launcher over its command socket.
///
/// Not `Copy`: `MigrateVirtualMachine` carries the options the source handler computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LauncherCall {
    /// Define/start/update the domain from the VMI.
    SyncVirtualMachine,
    /// ACPI shutdown.
    ShutdownVirtualMachine,
    /// Destroy the domain now.
    KillVirtualMachine,
    /// Undefine the domain.
    DeleteDomain,
    /// Ask the guest agent about itself.
    GetGuestInfo,
    /// Source side: start migrating the running domain to the target published in the VMI's
    /// `migrationState`, with these options (sent as JSON, the shape virt-launcher expects).
    MigrateVirtualMachine(MigrationOptions),
    /// Source side: abort the running migration job.
    CancelVirtualMachineMigration,
    /// Target side: prepare the receiving domain (the launcher starts libvirt's incoming side).
    SyncMigrationTarget,
    /// Target side: the domain runs here now; finish the hand-over (network, clocks, ...).
    FinalizeVirtualMachineMigration,
    /// Target side: the migration failed; let the target pod exit.
    SignalTargetPodCleanup,
}

impl LauncherCall {
    /// The command name as KubeVirt's command client spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SyncVirtualMachine => "SyncVirtualMachine",
            Self::ShutdownVirtualMachine => "ShutdownVirtualMachine",
            Self::KillVirtualMachine => "KillVirtualMachine",
            Self::DeleteDomain => "DeleteDomain",
            Self::GetGuestInfo => "GetGuestInfo",
            Self::MigrateVirtualMachine(_) => "MigrateVirtualMachine",
            Self::CancelVirtualMachineMigration => "CancelVirtualMachineMigration",
            Self::SyncMigrationTarget => "SyncMigrationTarget",
            Self::FinalizeVirtualMachineMigration => "FinalizeVirtualMachineMigration",
            Self::SignalTargetPodCleanup => "SignalTargetPodCleanup",
        }
    }
}

/// Node-local work the handler does around the launcher commands, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum NodeStep {
    /// Mount the container disks into the launcher pod and verify them.
    MountContainerDisks,
    /// Mount hotplugged volumes.
    MountHotplugVolumes,
    /// Unmount hotplugged volumes that left the spec.
    UnmountHotplugVolumes,
    /// Plug these networks into the pod (bridge, tap, masquerade rules, ...).
    SetupNetworks {
        /// Network names from `spec.networks`.
        networks: Vec<String>,
    },
    /// Give the launcher's user (qemu, 107) these device nodes inside the pod.
    ClaimDevices {
        /// Paths relative to the launcher's root.
        paths: Vec<String>,
    },
    /// Final local cleanup of a VMI with this UID: unmount container disks and hotplug volumes,
    /// tear the network cache down, close the launcher client, drop the domain from the cache.
    Cleanup {
        /// VMI UID (may be a stale one).
        uid: String,
    },
    /// Close the cached launcher client.
    CloseLauncherClient,
    /// Migration source: open the local unix sockets the launcher's libvirt migrates into, each
    /// forwarding (over TLS) to the target node's published port.
    StartSourceProxy {
        /// Proxy key (the VMI UID).
        key: String,
        /// The target node's migration address (`migrationState.targetNodeAddress`).
        target_address: String,
        /// Target TCP port (as text) -> the libvirt port it stands for (0: the daemon socket).
        ports: BTreeMap<String, u16>,
    },
    /// Migration source: close the source sockets of this key.
    StopSourceProxy {
        /// Proxy key (the VMI UID).
        key: String,
    },
    /// Migration target: listen on TCP ports forwarding into the target launcher's sockets.
    StartTargetProxy {
        /// Proxy key (the VMI UID).
        key: String,
        /// Sockets relative to the launcher's run directory (`/var/run` in its mount namespace):
        /// the libvirt daemon socket, then one migration socket per libvirt port.
        sockets: Vec<String>,
    },
    /// Migration target: stop listening for this key.
    StopTargetProxy {
        /// Proxy key (the VMI UID).
        key: String,
    },
}

impl NodeStep {
    /// The step's name as it appears in plans (`mountContainerDisks`, `setupNetworks`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            NodeStep::MountContainerDisks => "mountContainerDisks",
            NodeStep::MountHotplugVolumes => "mountHotplugVolumes",
            NodeStep::UnmountHotplugVolumes => "unmountHotplugVolumes",
            NodeStep::SetupNetworks { .. } => "setupNetworks",
            NodeStep::ClaimDevices { .. } => "claimDevices",
            NodeStep::Cleanup { .. } => "cleanup",
            NodeStep::CloseLauncherClient => "closeLauncherClient",
            NodeStep::StartSourceProxy { .. } => "startSourceProxy",
            NodeStep::StopSourceProxy { .. } => "stopSourceProxy",
            NodeStep::StartTargetProxy { .. } => "startTargetProxy",
            NodeStep::StopTargetProxy { .. } => "stopTargetProxy",
        }
    }
}
