//! [`Launcher`] over virt-launcher's command socket (feature `ipc`): the
//! kvrs-ipc client, wire-compatible with KubeVirt's launcher, so the same handler plans drive a
//! kvrs launcher or KubeVirt's own.

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::LauncherCall;
use kvrs_ipc::{LauncherClient, VirtualMachineOptions};

use kvrs_executor::Launcher;

/// One VMI's launcher, reached through its `launcher-sock`.
pub struct IpcLauncher {
    client: LauncherClient,
    options: VirtualMachineOptions,
}

impl IpcLauncher {
    /// Drives `client`; `options` are the cluster facts sent with `SyncVirtualMachine` (SMBIOS,
    /// memory-balloon period, interface MTUs, ...), as virt-handler sends them.
    pub fn new(client: LauncherClient, options: VirtualMachineOptions) -> Self {
        Self { client, options }
    }
}

impl Launcher for IpcLauncher {
    async fn call(
        &mut self,
        vmi: Option<&VirtualMachineInstance>,
        call: LauncherCall,
    ) -> Result<(), String> {
        let c = &self.client;
        // Every command but GetGuestInfo names the VMI; virt-handler sends one rebuilt from the
        // domain when the VMI is gone, and so must the caller here.
        let need = || vmi.ok_or_else(|| format!("{}: no VMI to send", call.name()));
        let result = match &call {
            LauncherCall::GetGuestInfo => c.get_guest_info().await.map(drop),
            LauncherCall::SyncVirtualMachine => c.sync_vmi(need()?, self.options.clone()).await,
            LauncherCall::ShutdownVirtualMachine => c.shutdown(need()?).await,
            LauncherCall::KillVirtualMachine => c.kill(need()?).await,
            LauncherCall::DeleteDomain => c.delete(need()?).await,
            LauncherCall::MigrateVirtualMachine(o) => c.migrate(need()?, o.to_json()).await,
            LauncherCall::CancelVirtualMachineMigration => c.cancel_migration(need()?).await,
            LauncherCall::SyncMigrationTarget => {
                c.sync_migration_target(need()?, self.options.clone()).await
            }
            // KubeVirt sends fresh options carrying only the interfaces' migration bindings.
            LauncherCall::FinalizeVirtualMachineMigration => {
                c.finalize_migration(need()?, VirtualMachineOptions::default())
                    .await
            }
            LauncherCall::SignalTargetPodCleanup => c.signal_target_pod_cleanup(need()?).await,
        };
        result.map_err(|e| e.to_string())
    }
}
