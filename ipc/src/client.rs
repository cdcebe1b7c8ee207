//! The handler side of `Cmd`: a typed client of one launcher's cmd socket.
//!
//! Mirrors virt-handler's client: dial the socket, negotiate the version through `CmdInfo`,
//! then each call runs under virt-handler's deadline for it (short for queries, long for VMI
//! commands, extended for freeze) and its answer is turned into a typed [`IpcError`]:
//! a reported failure (`success: false`), `Unimplemented`, a timeout or a lost connection.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kvrs_api::VirtualMachineInstance;
use tonic::transport::Channel;

use crate::error::IpcError;
use crate::proto::cmd::v1::cmd_client::CmdClient;
use crate::proto::cmd::v1::{
    BackupRequest, EmptyRequest, ExecRequest, FreezeRequest, GuestPingRequest,
    InjectLaunchSecretRequest, MemoryDumpRequest, MigrationRequest, RedefineCheckpointRequest,
    Response, VirtualMachineOptions, VmStatsRequest, VmStatsResponse, Vmi, VmiRequest,
};
use crate::server::{ExecOutput, Screenshot};
use crate::transport::{ClientConfig, InfoService, dial_and_negotiate, request};

/// A connected, version-checked client of a launcher's `Cmd` service.
///
/// Cheap to clone; clones share the connection. A call after the launcher went away fails with
/// [`IpcError::Disconnected`]; the channel redials the same path on the next call.
#[derive(Clone, Debug)]
pub struct LauncherClient {
    cmd: CmdClient<Channel>,
    socket: PathBuf,
    version: u32,
    peer_versions: Vec<u32>,
    config: ClientConfig,
}

/// Which of virt-handler's deadlines a call runs under.
#[derive(Clone, Copy)]
enum Deadline {
    Short,
    Long,
    Extended,
    /// A guest-side timeout plus the short deadline (Exec, GuestPing).
    GuestPlusShort(i32),
}

/// Extracts the `Response` envelope every answer carries.
trait Envelope {
    fn envelope(&self) -> Option<&Response>;
}

impl Envelope for Response {
    fn envelope(&self) -> Option<&Response> {
        Some(self)
    }
}

macro_rules! envelope {
    ($($ty:ident),*) => {$(
        impl Envelope for crate::proto::cmd::v1::$ty {
            fn envelope(&self) -> Option<&Response> {
                self.response.as_ref()
            }
        }
    )*};
}

envelope!(
    DomainResponse,
    DomainStatsResponse,
    GuestInfoResponse,
    GuestUserListResponse,
    GuestFilesystemsResponse,
    ExecResponse,
    GuestPingResponse,
    QemuVersionResponse,
    SevInfoResponse,
    LaunchMeasurementResponse,
    DirtyRateStatsResponse,
    ScreenshotResponse,
    RedefineCheckpointResponse,
    VmStatsResponse
);

impl LauncherClient {
    /// Dials the launcher socket at `socket` with virt-handler's default deadlines.
    pub async fn connect(socket: impl AsRef<Path>) -> Result<Self, IpcError> {
        Self::connect_with(socket, ClientConfig::default()).await
    }

    /// Dials `socket` and negotiates the cmd version; refuses a launcher that speaks none of
    /// kvrs's versions ([`IpcError::NoCommonVersion`]).
    pub async fn connect_with(
        socket: impl AsRef<Path>,
        config: ClientConfig,
    ) -> Result<Self, IpcError> {
        let socket = socket.as_ref().to_path_buf();
        let (channel, version, peer_versions) =
            dial_and_negotiate(&socket, InfoService::Cmd, &config).await?;
        tracing::debug!(socket = %socket.display(), version, "connected to launcher");
        Ok(LauncherClient {
            cmd: CmdClient::new(channel),
            socket,
            version,
            peer_versions,
            config,
        })
    }

    /// The socket this client dialled.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The negotiated cmd version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The versions the launcher announced.
    pub fn peer_versions(&self) -> &[u32] {
        &self.peer_versions
    }

    fn deadline(&self, deadline: Deadline) -> Duration {
        match deadline {
            Deadline::Short => self.config.short_timeout,
            Deadline::Long => self.config.long_timeout,
            Deadline::Extended => self.config.extended_timeout,
            Deadline::GuestPlusShort(secs) => {
                Duration::from_secs(u64::try_from(secs).unwrap_or(0)) + self.config.short_timeout
            }
        }
    }

    /// Runs one call under its deadline, without looking at the answer.
    async fn call_raw<T, F, Fut>(
        &self,
        rpc: &'static str,
        deadline: Deadline,
        f: F,
    ) -> Result<T, IpcError>
    where
        F: FnOnce(CmdClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let after = self.deadline(deadline);
        Ok(tokio::time::timeout(after, f(self.cmd.clone(), after))
            .await
            .map_err(|_| IpcError::Timeout { rpc, after })?
            .map_err(|status| IpcError::from_status(rpc, status, after))?
            .into_inner())
    }

    /// Runs one call under its deadline and turns `success: false` into [`IpcError::Failed`].
    async fn call<T, F, Fut>(
        &self,
        rpc: &'static str,
        deadline: Deadline,
        f: F,
    ) -> Result<T, IpcError>
    where
        T: Envelope,
        F: FnOnce(CmdClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let answer = self.call_raw(rpc, deadline, f).await?;
        if let Some(response) = answer.envelope()
            && !response.success
        {
            return Err(IpcError::Failed {
                rpc,
                message: response.message.clone(),
            });
        }
        Ok(answer)
    }

    async fn vmi_command<F, Fut>(
        &self,
        rpc: &'static str,
        vmi: &VirtualMachineInstance,
        options: Option<VirtualMachineOptions>,
        send: F,
    ) -> Result<(), IpcError>
    where
        F: FnOnce(CmdClient<Channel>, tonic::Request<VmiRequest>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Response>, tonic::Status>>,
    {
        let vmi = vmi_message(vmi)?;
        let message = VmiRequest {
            vmi: Some(vmi),
            options,
        };
        self.call(rpc, Deadline::Long, |c, t| send(c, request(message, t)))
            .await
            .map(drop)
    }
}

/// Serializes the VMI the way virt-handler does: kubevirt.io/v1 JSON in `vmiJson`.
fn vmi_message(vmi: &VirtualMachineInstance) -> Result<Vmi, IpcError> {
    Ok(Vmi {
        vmi_json: serde_json::to_vec(vmi).map_err(|source| IpcError::Encode {
            what: "VMI",
            source,
        })?,
    })
}

macro_rules! vmi_commands {
    ($( $(#[$doc:meta])* $method:ident => $rpc:literal, $grpc:ident, $opts:tt );* $(;)?) => {
        impl LauncherClient {
            $( vmi_commands!(@one $(#[$doc])* $method, $rpc, $grpc, $opts); )*
        }
    };
    (@one $(#[$doc:meta])* $method:ident, $rpc:literal, $grpc:ident, options) => {
        $(#[$doc])*
        pub async fn $method(&self, vmi: &VirtualMachineInstance, options: VirtualMachineOptions) -> Result<(), IpcError> {
            self.vmi_command($rpc, vmi, Some(options), async |mut c, r| c.$grpc(r).await).await
        }
    };
    (@one $(#[$doc:meta])* $method:ident, $rpc:literal, $grpc:ident, plain) => {
        $(#[$doc])*
        pub async fn $method(&self, vmi: &VirtualMachineInstance) -> Result<(), IpcError> {
            // virt-handler sends empty options with these commands.
            self.vmi_command($rpc, vmi, Some(VirtualMachineOptions::default()), async |mut c, r| c.$grpc(r).await).await
        }
    };
}

vmi_commands! {
    /// `SyncVirtualMachine`: make the launcher's domain match `vmi`.
    sync_vmi => "SyncVirtualMachine", sync_virtual_machine, options;
    /// `PauseVirtualMachine`.
    pause => "PauseVirtualMachine", pause_virtual_machine, plain;
    /// `UnpauseVirtualMachine`.
    unpause => "UnpauseVirtualMachine", unpause_virtual_machine, plain;
    /// `UnfreezeVirtualMachine`.
    unfreeze => "UnfreezeVirtualMachine", unfreeze_virtual_machine, plain;
    /// `ResetVirtualMachine`.
    reset => "ResetVirtualMachine", reset_virtual_machine, plain;
    /// `SoftRebootVirtualMachine`.
    soft_reboot => "SoftRebootVirtualMachine", soft_reboot_virtual_machine, plain;
    /// `ShutdownVirtualMachine`: graceful (ACPI) power-off.
    shutdown => "ShutdownVirtualMachine", shutdown_virtual_machine, plain;
    /// `KillVirtualMachine`: destroy the domain.
    kill => "KillVirtualMachine", kill_virtual_machine, plain;
    /// `DeleteVirtualMachine`: undefine the domain.
    delete => "DeleteVirtualMachine", delete_virtual_machine, plain;
    /// `SyncMigrationTarget`.
    sync_migration_target => "SyncMigrationTarget", sync_migration_target, options;
    /// `CancelVirtualMachineMigration`.
    cancel_migration => "CancelVirtualMachineMigration", cancel_virtual_machine_migration, plain;
    /// `SignalTargetPodCleanup`.
    signal_target_pod_cleanup => "SignalTargetPodCleanup", signal_target_pod_cleanup, plain;
    /// `FinalizeVirtualMachineMigration`.
    finalize_migration => "FinalizeVirtualMachineMigration", finalize_virtual_machine_migration, options;
    /// `HotplugHostDevices`.
    hotplug_host_devices => "HotplugHostDevices", hotplug_host_devices, plain;
    /// `SyncVirtualMachineCPUs` (CPU hotplug).
    sync_cpus => "SyncVirtualMachineCPUs", sync_virtual_machine_cp_us, options;
    /// `SyncVirtualMachineMemory` (memory hotplug).
    sync_memory => "SyncVirtualMachineMemory", sync_virtual_machine_memory, options;
}

impl LauncherClient {
    /// `Ping`: is the launcher's cmd server answering.
    pub async fn ping(&self) -> Result<(), IpcError> {
        self.call("Ping", Deadline::Short, async |mut c, t| {
            c.ping(request(EmptyRequest {}, t)).await
        })
        .await
        .map(drop)
    }

    /// `GetDomain`: the domain as Go `api.Domain` JSON, `None` when the launcher has none.
    pub async fn get_domain(&self) -> Result<Option<String>, IpcError> {
        let answer = self
            .call("GetDomain", Deadline::Short, async |mut c, t| {
                c.get_domain(request(EmptyRequest {}, t)).await
            })
            .await?;
        Ok(Some(answer.domain).filter(|d| !d.is_empty()))
    }

    /// `GetDomainStats`: stats JSON, `None` when there is no domain.
    pub async fn get_domain_stats(&self) -> Result<Option<String>, IpcError> {
        let answer = self
            .call("GetDomainStats", Deadline::Short, async |mut c, t| {
                c.get_domain_stats(request(EmptyRequest {}, t)).await
            })
            .await?;
        Ok(Some(answer.domain_stats).filter(|d| !d.is_empty()))
    }

    /// `GetGuestInfo`: guest-agent info JSON.
    pub async fn get_guest_info(&self) -> Result<String, IpcError> {
        self.call("GetGuestInfo", Deadline::Short, async |mut c, t| {
            c.get_guest_info(request(EmptyRequest {}, t)).await
        })
        .await
        .map(|a| a.guest_info_response)
    }

    /// `GetUsers`: guest user list JSON.
    pub async fn get_users(&self) -> Result<String, IpcError> {
        self.call("GetUsers", Deadline::Short, async |mut c, t| {
            c.get_users(request(EmptyRequest {}, t)).await
        })
        .await
        .map(|a| a.guest_user_list_response)
    }

    /// `GetFilesystems`: guest filesystem list JSON.
    pub async fn get_filesystems(&self) -> Result<String, IpcError> {
        self.call("GetFilesystems", Deadline::Short, async |mut c, t| {
            c.get_filesystems(request(EmptyRequest {}, t)).await
        })
        .await
        .map(|a| a.guest_filesystems_response)
    }

    /// `GetQemuVersion`.
    pub async fn get_qemu_version(&self) -> Result<String, IpcError> {
        self.call("GetQemuVersion", Deadline::Short, async |mut c, t| {
            c.get_qemu_version(request(EmptyRequest {}, t)).await
        })
        .await
        .map(|a| a.version)
    }

    /// `GetSEVInfo`: SEV platform info JSON.
    pub async fn get_sev_info(&self) -> Result<Vec<u8>, IpcError> {
        self.call("GetSEVInfo", Deadline::Short, async |mut c, t| {
            c.get_sev_info(request(EmptyRequest {}, t)).await
        })
        .await
        .map(|a| a.sev_info)
    }

    /// `GetDomainDirtyRateStats` in MB/s.
    pub async fn get_dirty_rate_stats(&self) -> Result<i64, IpcError> {
        self.call(
            "GetDomainDirtyRateStats",
            Deadline::Long,
            async |mut c, t| {
                c.get_domain_dirty_rate_stats(request(EmptyRequest {}, t))
                    .await
            },
        )
        .await
        .map(|a| a.dirty_rate_mbs)
    }

    /// `GetVMStats`: the raw answer (stats JSON and guest-agent answers per field).
    pub async fn get_vm_stats(&self, stats: VmStatsRequest) -> Result<VmStatsResponse, IpcError> {
        self.call("GetVMStats", Deadline::Short, async |mut c, t| {
            c.get_vm_stats(request(stats, t)).await
        })
        .await
    }

    /// `FreezeVirtualMachine`: freeze guest filesystems, thawed by the launcher after
    /// `unfreeze_timeout_seconds`.
    pub async fn freeze(
        &self,
        vmi: &VirtualMachineInstance,
        unfreeze_timeout_seconds: i32,
    ) -> Result<(), IpcError> {
        let vmi = vmi_message(vmi)?;
        self.call(
            "FreezeVirtualMachine",
            Deadline::Extended,
            async |mut c, t| {
                let message = FreezeRequest {
                    vmi: Some(vmi),
                    unfreeze_timeout_seconds,
                };
                c.freeze_virtual_machine(request(message, t)).await
            },
        )
        .await
        .map(drop)
    }

    /// `MigrateVirtualMachine`; `options_json` is virt-handler's MigrationOptions JSON.
    pub async fn migrate(
        &self,
        vmi: &VirtualMachineInstance,
        options_json: Vec<u8>,
    ) -> Result<(), IpcError> {
        let vmi = vmi_message(vmi)?;
        self.call("MigrateVirtualMachine", Deadline::Long, async |mut c, t| {
            let message = MigrationRequest {
                vmi: Some(vmi),
                options: options_json,
            };
            c.migrate_virtual_machine(request(message, t)).await
        })
        .await
        .map(drop)
    }

    /// `Exec`: run `command args…` in the guest through the agent.
    pub async fn exec(
        &self,
        domain_name: &str,
        command: &str,
        args: &[String],
        timeout_seconds: i32,
    ) -> Result<ExecOutput, IpcError> {
        let message = ExecRequest {
            domain_name: domain_name.to_string(),
            command: command.to_string(),
            args: args.to_vec(),
            timeout_seconds,
        };
        self.call(
            "Exec",
            Deadline::GuestPlusShort(timeout_seconds),
            async |mut c, t| c.exec(request(message, t)).await,
        )
        .await
        .map(|a| ExecOutput {
            exit_code: a.exit_code,
            stdout: a.std_out,
        })
    }

    /// `GuestPing`: is the guest agent answering.
    pub async fn guest_ping(
        &self,
        domain_name: &str,
        timeout_seconds: i32,
    ) -> Result<(), IpcError> {
        let message = GuestPingRequest {
            domain_name: domain_name.to_string(),
            timeout_seconds,
        };
        self.call(
            "GuestPing",
            Deadline::GuestPlusShort(timeout_seconds),
            async |mut c, t| c.guest_ping(request(message, t)).await,
        )
        .await
        .map(drop)
    }

    /// `VirtualMachineMemoryDump` into `dump_path`.
    pub async fn memory_dump(
        &self,
        vmi: &VirtualMachineInstance,
        dump_path: &str,
    ) -> Result<(), IpcError> {
        let vmi = vmi_message(vmi)?;
        self.call(
            "VirtualMachineMemoryDump",
            Deadline::Long,
            async |mut c, t| {
                let message = MemoryDumpRequest {
                    vmi: Some(vmi),
                    dump_path: dump_path.to_string(),
                };
                c.virtual_machine_memory_dump(request(message, t)).await
            },
        )
        .await
        .map(drop)
    }

    /// `GetLaunchMeasurement`: SEV measurement JSON.
    pub async fn get_launch_measurement(
        &self,
        vmi: &VirtualMachineInstance,
    ) -> Result<Vec<u8>, IpcError> {
        let vmi = vmi_message(vmi)?;
        self.call("GetLaunchMeasurement", Deadline::Short, async |mut c, t| {
            let message = VmiRequest {
                vmi: Some(vmi),
                options: None,
            };
            c.get_launch_measurement(request(message, t)).await
        })
        .await
        .map(|a| a.launch_measurement)
    }

    /// `InjectLaunchSecret`; `options_json` is a SEVSecretOptions JSON.
    pub async fn inject_launch_secret(
        &self,
        vmi: &VirtualMachineInstance,
        options_json: Vec<u8>,
    ) -> Result<(), IpcError> {
        let vmi = vmi_message(vmi)?;
        self.call("InjectLaunchSecret", Deadline::Long, async |mut c, t| {
            let message = InjectLaunchSecretRequest {
                vmi: Some(vmi),
                options: options_json,
            };
            c.inject_launch_secret(request(message, t)).await
        })
        .await
        .map(drop)
    }

    /// `GetScreenshot`.
    pub async fn get_screenshot(
        &self,
        vmi: &VirtualMachineInstance,
    ) -> Result<Screenshot, IpcError> {
        let vmi = vmi_message(vmi)?;
        self.call("GetScreenshot", Deadline::Short, async |mut c, t| {
            let message = VmiRequest {
                vmi: Some(vmi),
                options: None,
            };
            c.get_screenshot(request(message, t)).await
        })
        .await
        .map(|a| Screenshot {
            mime: a.mime,
            data: a.data,
        })
    }

    /// `BackupVirtualMachine`; `options_json` is a BackupOptions JSON.
    pub async fn backup(
        &self,
        vmi: &VirtualMachineInstance,
        options_json: Vec<u8>,
    ) -> Result<(), IpcError> {
        let vmi = vmi_message(vmi)?;
        self.call("BackupVirtualMachine", Deadline::Long, async |mut c, t| {
            let message = BackupRequest {
                vmi: Some(vmi),
                options: options_json,
            };
            c.backup_virtual_machine(request(message, t)).await
        })
        .await
        .map(drop)
    }

    /// `RedefineCheckpoint`; a checkpoint the launcher found invalid fails with
    /// [`IpcError::CheckpointInvalid`].
    pub async fn redefine_checkpoint(
        &self,
        vmi: &VirtualMachineInstance,
        checkpoint_json: Vec<u8>,
    ) -> Result<(), IpcError> {
        let vmi = vmi_message(vmi)?;
        let answer = self
            .call_raw("RedefineCheckpoint", Deadline::Long, async |mut c, t| {
                let message = RedefineCheckpointRequest {
                    vmi: Some(vmi),
                    checkpoint: checkpoint_json,
                };
                c.redefine_checkpoint(request(message, t)).await
            })
            .await?;
        match answer.response {
            Some(r) if !r.success && answer.checkpoint_invalid => {
                Err(IpcError::CheckpointInvalid { message: r.message })
            }
            Some(r) if !r.success => Err(IpcError::Failed {
                rpc: "RedefineCheckpoint",
                message: r.message,
            }),
            _ => Ok(()),
        }
    }
}
