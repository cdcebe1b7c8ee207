//! The launcher side of `Cmd`: a trait with one method per RPC, typed, and its wiring to tonic.
//!
//! A launcher implements [`LauncherService`] and calls [`serve_launcher`]. Every method has a
//! default answering gRPC `Unimplemented` (except [`LauncherService::ping`], which answers
//! success), so a launcher implements only what it supports and a Go handler sees exactly what
//! it sees from an older launcher. Requests carrying a VMI are decoded before the method runs;
//! an undecodable VMI is answered `success: false` like KubeVirt's launcher does.

use std::path::Path;
use std::sync::Arc;

use kvrs_api::VirtualMachineInstance;
use tonic::{Request, Status};

use crate::error::IpcError;
use crate::proto::cmd::info::{
    CmdInfoRequest, CmdInfoResponse,
    cmd_info_server::{CmdInfo, CmdInfoServer},
};
use crate::proto::cmd::v1::cmd_server::{Cmd, CmdServer};
use crate::proto::cmd::v1::{
    BackupRequest, DirtyRateStatsResponse, DomainResponse, DomainStatsResponse, EmptyRequest,
    ExecRequest, ExecResponse, FreezeRequest, GuestFilesystemsResponse, GuestInfoResponse,
    GuestPingRequest, GuestPingResponse, GuestUserListResponse, InjectLaunchSecretRequest,
    LaunchMeasurementResponse, MemoryDumpRequest, MigrationRequest, QemuVersionResponse,
    RedefineCheckpointRequest, RedefineCheckpointResponse, Response, ScreenshotResponse,
    SevInfoResponse, VirtualMachineOptions, VmStatsRequest, VmStatsResponse, Vmi, VmiRequest,
};
use crate::transport::{InfoService, ServeOptions, ServerHandle, serve_router};

/// How a command handler fails.
#[derive(Debug)]
pub enum CmdError {
    /// The command ran and failed: answered `Response { success: false, message }`, the way
    /// KubeVirt's launcher reports libvirt errors. The handler logs it and retries.
    Failed(String),
    /// Answered as a gRPC status instead (e.g. `Unimplemented`).
    Status(Status),
    /// `RedefineCheckpoint` only: failed because the checkpoint is invalid (answered
    /// `success: false, checkpointInvalid: true`); elsewhere it is a plain failure.
    InvalidCheckpoint(String),
}

impl CmdError {
    /// A [`CmdError::Failed`] with `message`.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        CmdError::Failed(message.to_string())
    }

    /// The answer of an RPC the service does not implement.
    pub fn unimplemented(rpc: &str) -> Self {
        CmdError::Status(Status::unimplemented(format!(
            "{rpc} is not implemented by this launcher"
        )))
    }
}

impl From<Status> for CmdError {
    fn from(status: Status) -> Self {
        CmdError::Status(status)
    }
}

/// What a service method returns.
pub type CmdResult<T = ()> = Result<T, CmdError>;

/// A request that carries the VMI, decoded, with the handler's options
/// (default when the handler sent none).
#[derive(Clone, Debug, Default)]
pub struct VmiCommand {
    /// The VMI as the handler sees it.
    pub vmi: VirtualMachineInstance,
    /// Host facts the handler computed (SMBIOS, NUMA topology, disk info, cluster switches…).
    pub options: VirtualMachineOptions,
}

/// `Exec`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// The command's exit code in the guest.
    pub exit_code: i32,
    /// What it printed.
    pub stdout: String,
}

/// `GetScreenshot`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Screenshot {
    /// MIME type of `data`, e.g. `image/png`.
    pub mime: String,
    /// The image.
    pub data: Vec<u8>,
}

macro_rules! unimplemented_default {
    ($rpc:literal) => {
        Err(CmdError::unimplemented($rpc))
    };
}

/// The `kubevirt.cmd.v1.Cmd` service as a launcher implements it. JSON payloads (domain,
/// stats, guest-agent data, migration/backup options) are opaque strings or bytes.
#[tonic::async_trait]
pub trait LauncherService: Send + Sync + 'static {
    /// `SyncVirtualMachine`: make the domain match the VMI (define, start, hotplug…).
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("SyncVirtualMachine")
    }
    /// `PauseVirtualMachine`.
    async fn pause(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("PauseVirtualMachine")
    }
    /// `UnpauseVirtualMachine`.
    async fn unpause(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("UnpauseVirtualMachine")
    }
    /// `FreezeVirtualMachine`: freeze guest filesystems, thawing after the timeout.
    async fn freeze(
        &self,
        vmi: VirtualMachineInstance,
        unfreeze_timeout_seconds: i32,
    ) -> CmdResult {
        let _ = (vmi, unfreeze_timeout_seconds);
        unimplemented_default!("FreezeVirtualMachine")
    }
    /// `UnfreezeVirtualMachine`.
    async fn unfreeze(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("UnfreezeVirtualMachine")
    }
    /// `ResetVirtualMachine`.
    async fn reset(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("ResetVirtualMachine")
    }
    /// `SoftRebootVirtualMachine`.
    async fn soft_reboot(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("SoftRebootVirtualMachine")
    }
    /// `ShutdownVirtualMachine`: ask the guest to power off (ACPI).
    async fn shutdown(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("ShutdownVirtualMachine")
    }
    /// `KillVirtualMachine`: destroy the domain.
    async fn kill(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("KillVirtualMachine")
    }
    /// `DeleteVirtualMachine`: undefine the domain.
    async fn delete(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("DeleteVirtualMachine")
    }
    /// `MigrateVirtualMachine`; `options_json` is the handler's MigrationOptions JSON.
    async fn migrate(&self, vmi: VirtualMachineInstance, options_json: Vec<u8>) -> CmdResult {
        let _ = (vmi, options_json);
        unimplemented_default!("MigrateVirtualMachine")
    }
    /// `SyncMigrationTarget`.
    async fn sync_migration_target(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("SyncMigrationTarget")
    }
    /// `CancelVirtualMachineMigration`.
    async fn cancel_migration(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("CancelVirtualMachineMigration")
    }
    /// `SignalTargetPodCleanup`.
    async fn signal_target_pod_cleanup(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("SignalTargetPodCleanup")
    }
    /// `FinalizeVirtualMachineMigration`.
    async fn finalize_migration(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("FinalizeVirtualMachineMigration")
    }
    /// `HotplugHostDevices`.
    async fn hotplug_host_devices(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("HotplugHostDevices")
    }
    /// `GetDomain`: Go `api.Domain` JSON, `None` when no domain exists.
    async fn get_domain(&self) -> CmdResult<Option<String>> {
        unimplemented_default!("GetDomain")
    }
    /// `GetDomainStats`: stats JSON, `None` when no domain exists.
    async fn get_domain_stats(&self) -> CmdResult<Option<String>> {
        unimplemented_default!("GetDomainStats")
    }
    /// `GetGuestInfo`: guest-agent info JSON.
    async fn get_guest_info(&self) -> CmdResult<String> {
        unimplemented_default!("GetGuestInfo")
    }
    /// `GetUsers`: guest user list JSON.
    async fn get_users(&self) -> CmdResult<String> {
        unimplemented_default!("GetUsers")
    }
    /// `GetFilesystems`: guest filesystem list JSON.
    async fn get_filesystems(&self) -> CmdResult<String> {
        unimplemented_default!("GetFilesystems")
    }
    /// `Ping`: answers success by default, the server being up is the answer.
    async fn ping(&self) -> CmdResult {
        Ok(())
    }
    /// `Exec`: run a command in the guest through the agent.
    async fn exec(&self, request: ExecRequest) -> CmdResult<ExecOutput> {
        let _ = request;
        unimplemented_default!("Exec")
    }
    /// `GuestPing`: is the guest agent answering.
    async fn guest_ping(&self, domain_name: String, timeout_seconds: i32) -> CmdResult {
        let _ = (domain_name, timeout_seconds);
        unimplemented_default!("GuestPing")
    }
    /// `VirtualMachineMemoryDump` to `dump_path`.
    async fn memory_dump(&self, vmi: VirtualMachineInstance, dump_path: String) -> CmdResult {
        let _ = (vmi, dump_path);
        unimplemented_default!("VirtualMachineMemoryDump")
    }
    /// `GetQemuVersion`.
    async fn get_qemu_version(&self) -> CmdResult<String> {
        unimplemented_default!("GetQemuVersion")
    }
    /// `SyncVirtualMachineCPUs` (CPU hotplug).
    async fn sync_cpus(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("SyncVirtualMachineCPUs")
    }
    /// `SyncVirtualMachineMemory` (memory hotplug).
    async fn sync_memory(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        unimplemented_default!("SyncVirtualMachineMemory")
    }
    /// `GetSEVInfo`: SEV platform info JSON.
    async fn get_sev_info(&self) -> CmdResult<Vec<u8>> {
        unimplemented_default!("GetSEVInfo")
    }
    /// `GetLaunchMeasurement`: SEV measurement JSON.
    async fn get_launch_measurement(&self, cmd: VmiCommand) -> CmdResult<Vec<u8>> {
        let _ = cmd;
        unimplemented_default!("GetLaunchMeasurement")
    }
    /// `InjectLaunchSecret`; `options_json` is a SEVSecretOptions JSON.
    async fn inject_launch_secret(
        &self,
        vmi: VirtualMachineInstance,
        options_json: Vec<u8>,
    ) -> CmdResult {
        let _ = (vmi, options_json);
        unimplemented_default!("InjectLaunchSecret")
    }
    /// `GetDomainDirtyRateStats` in MB/s.
    async fn get_dirty_rate_stats(&self) -> CmdResult<i64> {
        unimplemented_default!("GetDomainDirtyRateStats")
    }
    /// `GetScreenshot` of the VM's display.
    async fn get_screenshot(&self, cmd: VmiCommand) -> CmdResult<Screenshot> {
        let _ = cmd;
        unimplemented_default!("GetScreenshot")
    }
    /// `BackupVirtualMachine`; `options_json` is a BackupOptions JSON.
    async fn backup(&self, vmi: VirtualMachineInstance, options_json: Vec<u8>) -> CmdResult {
        let _ = (vmi, options_json);
        unimplemented_default!("BackupVirtualMachine")
    }
    /// `RedefineCheckpoint`; an invalid checkpoint is reported with
    /// [`CmdError::InvalidCheckpoint`].
    async fn redefine_checkpoint(
        &self,
        vmi: VirtualMachineInstance,
        checkpoint_json: Vec<u8>,
    ) -> CmdResult {
        let _ = (vmi, checkpoint_json);
        unimplemented_default!("RedefineCheckpoint")
    }
    /// `GetVMStats`: the requested stats; the envelope's `response` is filled in when left empty.
    async fn get_vm_stats(&self, request: VmStatsRequest) -> CmdResult<VmStatsResponse> {
        let _ = request;
        unimplemented_default!("GetVMStats")
    }
}

/// Starts a launcher's cmd server on `socket` (normally
/// [`crate::layout::launcher_socket`]): binds the staging name, serves `CmdInfo` (announcing
/// [`ServeOptions::announced_versions`]) and `Cmd`, and renames to `socket` once it answers.
pub async fn serve_launcher<S: LauncherService>(
    socket: impl AsRef<Path>,
    service: Arc<S>,
    options: ServeOptions,
) -> Result<ServerHandle, IpcError> {
    let info = VersionInfo(options.versions(InfoService::Cmd));
    let router = tonic::transport::Server::builder()
        .add_service(CmdInfoServer::new(info))
        .add_service(CmdServer::from_arc(Arc::new(CmdAdapter(service))));
    serve_router(socket.as_ref(), &options, router, InfoService::Cmd).await
}

/// Answers `CmdInfo.Info` with a fixed version list.
struct VersionInfo(Vec<u32>);

#[tonic::async_trait]
impl CmdInfo for VersionInfo {
    async fn info(
        &self,
        _: Request<CmdInfoRequest>,
    ) -> Result<tonic::Response<CmdInfoResponse>, Status> {
        Ok(tonic::Response::new(CmdInfoResponse {
            supported_cmd_versions: self.0.clone(),
        }))
    }
}

fn success() -> Response {
    Response {
        success: true,
        message: String::new(),
    }
}

fn failure(message: String) -> Response {
    Response {
        success: false,
        message,
    }
}

/// Decodes the VMI JSON of a request; a failure becomes the `Response` to send back.
fn decode_vmi(vmi: Option<Vmi>) -> Result<VirtualMachineInstance, Response> {
    let json = vmi.map(|v| v.vmi_json).unwrap_or_default();
    serde_json::from_slice(&json).map_err(|e| {
        failure(format!(
            "No valid vmi object present in command server request: {e}"
        ))
    })
}

fn decode_cmd(request: VmiRequest) -> Result<VmiCommand, Response> {
    Ok(VmiCommand {
        vmi: decode_vmi(request.vmi)?,
        options: request.options.unwrap_or_default(),
    })
}

/// Turns a method's result into the RPC's answer: the payload with `response` set on success
/// or reported failure, or a gRPC status.
fn answer<T: Default, R>(
    result: CmdResult<T>,
    build: impl FnOnce(Response, T) -> R,
) -> Result<tonic::Response<R>, Status> {
    match result {
        Ok(value) => Ok(tonic::Response::new(build(success(), value))),
        Err(CmdError::Failed(message) | CmdError::InvalidCheckpoint(message)) => {
            Ok(tonic::Response::new(build(failure(message), T::default())))
        }
        Err(CmdError::Status(status)) => Err(status),
    }
}

type Answer<R> = Result<tonic::Response<R>, Status>;

/// Bridges a [`LauncherService`] to the generated tonic trait.
struct CmdAdapter<S>(Arc<S>);

macro_rules! decode_or_answer {
    ($decoded:expr, $wrap:expr) => {
        match $decoded {
            Ok(value) => value,
            Err(response) => return Ok(tonic::Response::new($wrap(response))),
        }
    };
}

macro_rules! cmd_adapter {
    ( vmi_commands { $($grpc:ident => $method:ident),* $(,)? } $($rest:tt)* ) => {
        #[tonic::async_trait]
        impl<S: LauncherService> Cmd for CmdAdapter<S> {
            $(
                async fn $grpc(&self, request: Request<VmiRequest>) -> Answer<Response> {
                    let cmd = decode_or_answer!(decode_cmd(request.into_inner()), |r| r);
                    answer(self.0.$method(cmd).await, |r, ()| r)
                }
            )*
            $($rest)*
        }
    };
}

cmd_adapter! {
    vmi_commands {
        sync_virtual_machine => sync_vmi,
        pause_virtual_machine => pause,
        unpause_virtual_machine => unpause,
        unfreeze_virtual_machine => unfreeze,
        reset_virtual_machine => reset,
        soft_reboot_virtual_machine => soft_reboot,
        shutdown_virtual_machine => shutdown,
        kill_virtual_machine => kill,
        delete_virtual_machine => delete,
        sync_migration_target => sync_migration_target,
        cancel_virtual_machine_migration => cancel_migration,
        signal_target_pod_cleanup => signal_target_pod_cleanup,
        finalize_virtual_machine_migration => finalize_migration,
        hotplug_host_devices => hotplug_host_devices,
        sync_virtual_machine_cp_us => sync_cpus,
        sync_virtual_machine_memory => sync_memory,
    }

    async fn freeze_virtual_machine(&self, request: Request<FreezeRequest>) -> Answer<Response> {
        let request = request.into_inner();
        let vmi = decode_or_answer!(decode_vmi(request.vmi), |r| r);
        answer(self.0.freeze(vmi, request.unfreeze_timeout_seconds).await, |r, ()| r)
    }

    async fn migrate_virtual_machine(&self, request: Request<MigrationRequest>) -> Answer<Response> {
        let request = request.into_inner();
        let vmi = decode_or_answer!(decode_vmi(request.vmi), |r| r);
        answer(self.0.migrate(vmi, request.options).await, |r, ()| r)
    }

    async fn get_domain(&self, _: Request<EmptyRequest>) -> Answer<DomainResponse> {
        answer(self.0.get_domain().await, |r, domain| DomainResponse {
            response: Some(r),
            domain: domain.unwrap_or_default(),
        })
    }

    async fn get_domain_stats(&self, _: Request<EmptyRequest>) -> Answer<DomainStatsResponse> {
        answer(self.0.get_domain_stats().await, |r, stats| DomainStatsResponse {
            response: Some(r),
            domain_stats: stats.unwrap_or_default(),
        })
    }

    async fn get_guest_info(&self, _: Request<EmptyRequest>) -> Answer<GuestInfoResponse> {
        answer(self.0.get_guest_info().await, |r, info| GuestInfoResponse {
            response: Some(r),
            guest_info_response: info,
        })
    }

    async fn get_users(&self, _: Request<EmptyRequest>) -> Answer<GuestUserListResponse> {
        answer(self.0.get_users().await, |r, users| GuestUserListResponse {
            response: Some(r),
            guest_user_list_response: users,
        })
    }

    async fn get_filesystems(&self, _: Request<EmptyRequest>) -> Answer<GuestFilesystemsResponse> {
        answer(self.0.get_filesystems().await, |r, fs| GuestFilesystemsResponse {
            response: Some(r),
            guest_filesystems_response: fs,
        })
    }

    async fn ping(&self, _: Request<EmptyRequest>) -> Answer<Response> {
        answer(self.0.ping().await, |r, ()| r)
    }

    async fn exec(&self, request: Request<ExecRequest>) -> Answer<ExecResponse> {
        answer(self.0.exec(request.into_inner()).await, |r, out| ExecResponse {
            response: Some(r),
            exit_code: out.exit_code,
            std_out: out.stdout,
        })
    }

    async fn guest_ping(&self, request: Request<GuestPingRequest>) -> Answer<GuestPingResponse> {
        let request = request.into_inner();
        answer(
            self.0.guest_ping(request.domain_name, request.timeout_seconds).await,
            |r, ()| GuestPingResponse { response: Some(r) },
        )
    }

    async fn virtual_machine_memory_dump(&self, request: Request<MemoryDumpRequest>) -> Answer<Response> {
        let request = request.into_inner();
        let vmi = decode_or_answer!(decode_vmi(request.vmi), |r| r);
        answer(self.0.memory_dump(vmi, request.dump_path).await, |r, ()| r)
    }

    async fn get_qemu_version(&self, _: Request<EmptyRequest>) -> Answer<QemuVersionResponse> {
        answer(self.0.get_qemu_version().await, |r, version| QemuVersionResponse {
            response: Some(r),
            version,
        })
    }

    async fn get_sev_info(&self, _: Request<EmptyRequest>) -> Answer<SevInfoResponse> {
        answer(self.0.get_sev_info().await, |r, sev_info| SevInfoResponse {
            response: Some(r),
            sev_info,
        })
    }

    async fn get_launch_measurement(&self, request: Request<VmiRequest>) -> Answer<LaunchMeasurementResponse> {
        let wrap = |r| LaunchMeasurementResponse { response: Some(r), launch_measurement: Vec::new() };
        let cmd = decode_or_answer!(decode_cmd(request.into_inner()), wrap);
        answer(self.0.get_launch_measurement(cmd).await, |r, launch_measurement| {
            LaunchMeasurementResponse { response: Some(r), launch_measurement }
        })
    }

    async fn inject_launch_secret(&self, request: Request<InjectLaunchSecretRequest>) -> Answer<Response> {
        let request = request.into_inner();
        let vmi = decode_or_answer!(decode_vmi(request.vmi), |r| r);
        answer(self.0.inject_launch_secret(vmi, request.options).await, |r, ()| r)
    }

    async fn get_domain_dirty_rate_stats(&self, _: Request<EmptyRequest>) -> Answer<DirtyRateStatsResponse> {
        answer(self.0.get_dirty_rate_stats().await, |r, dirty_rate_mbs| DirtyRateStatsResponse {
            response: Some(r),
            dirty_rate_mbs,
        })
    }

    async fn get_screenshot(&self, request: Request<VmiRequest>) -> Answer<ScreenshotResponse> {
        let wrap = |r| ScreenshotResponse { response: Some(r), ..Default::default() };
        let cmd = decode_or_answer!(decode_cmd(request.into_inner()), wrap);
        answer(self.0.get_screenshot(cmd).await, |r, shot| ScreenshotResponse {
            response: Some(r),
            mime: shot.mime,
            data: shot.data,
        })
    }

    async fn backup_virtual_machine(&self, request: Request<BackupRequest>) -> Answer<Response> {
        let request = request.into_inner();
        let vmi = decode_or_answer!(decode_vmi(request.vmi), |r| r);
        answer(self.0.backup(vmi, request.options).await, |r, ()| r)
    }

    async fn redefine_checkpoint(&self, request: Request<RedefineCheckpointRequest>) -> Answer<RedefineCheckpointResponse> {
        let request = request.into_inner();
        let wrap = |r| RedefineCheckpointResponse { response: Some(r), checkpoint_invalid: false };
        let vmi = decode_or_answer!(decode_vmi(request.vmi), wrap);
        let result = self.0.redefine_checkpoint(vmi, request.checkpoint).await;
        let checkpoint_invalid = matches!(result, Err(CmdError::InvalidCheckpoint(_)));
        answer(result, |r, ()| RedefineCheckpointResponse {
            response: Some(r),
            checkpoint_invalid,
        })
    }

    async fn get_vm_stats(&self, request: Request<VmStatsRequest>) -> Answer<VmStatsResponse> {
        answer(self.0.get_vm_stats(request.into_inner()).await, |r, mut stats| {
            if stats.response.is_none() {
                stats.response = Some(r);
            }
            stats
        })
    }
}
