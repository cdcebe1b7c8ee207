//! Fixtures shared by the kvrs-ipc integration tests: a sample VMI and a launcher that records
//! every call and answers something derived from its input.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvrs_api::VirtualMachineInstance;
use kvrs_ipc::proto::cmd::v1::{ExecRequest, Response, VmStatsRequest, VmStatsResponse};
use kvrs_ipc::{CmdError, CmdResult, ExecOutput, LauncherService, Screenshot, VmiCommand};

/// A small but real VMI: name, namespace, UID, one disk, memory request.
pub fn sample_vmi(name: &str) -> VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": "6a7c-11ee"},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]},
                "resources": {"requests": {"memory": "128Mi"}}
            },
            "volumes": [{"name": "containerdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora"}}]
        }
    }))
    .expect("sample VMI decodes")
}

/// One recorded call: the RPC and what the launcher saw of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub rpc: &'static str,
    pub detail: String,
}

/// A launcher implementing every RPC: it records the call and answers from its input.
/// VMIs named `fail-*` make VMI commands report failure; `slow-*` make them sleep 5 s.
#[derive(Default)]
pub struct RecordingLauncher {
    pub calls: Mutex<Vec<Call>>,
}

impl RecordingLauncher {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, rpc: &'static str, detail: String) {
        self.calls.lock().unwrap().push(Call { rpc, detail });
    }

    async fn vmi_cmd(&self, rpc: &'static str, cmd: VmiCommand) -> CmdResult {
        let name = cmd.vmi.metadata.name.clone().unwrap_or_default();
        let smbios = cmd
            .options
            .virtual_machine_sm_bios
            .as_ref()
            .map(|s| s.manufacturer.clone())
            .unwrap_or_default();
        self.record(rpc, format!("{name} smbios={smbios}"));
        if name.starts_with("fail-") {
            return Err(CmdError::failed(format!(
                "{rpc} of {name} failed in libvirt"
            )));
        }
        if name.starts_with("slow-") {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        Ok(())
    }
}

fn name_of(vmi: &VirtualMachineInstance) -> String {
    vmi.metadata.name.clone().unwrap_or_default()
}

#[tonic::async_trait]
impl LauncherService for RecordingLauncher {
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("SyncVirtualMachine", cmd).await
    }
    async fn pause(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("PauseVirtualMachine", cmd).await
    }
    async fn unpause(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("UnpauseVirtualMachine", cmd).await
    }
    async fn freeze(
        &self,
        vmi: VirtualMachineInstance,
        unfreeze_timeout_seconds: i32,
    ) -> CmdResult {
        self.record(
            "FreezeVirtualMachine",
            format!("{} {unfreeze_timeout_seconds}", name_of(&vmi)),
        );
        Ok(())
    }
    async fn unfreeze(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("UnfreezeVirtualMachine", cmd).await
    }
    async fn reset(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("ResetVirtualMachine", cmd).await
    }
    async fn soft_reboot(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("SoftRebootVirtualMachine", cmd).await
    }
    async fn shutdown(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("ShutdownVirtualMachine", cmd).await
    }
    async fn kill(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("KillVirtualMachine", cmd).await
    }
    async fn delete(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("DeleteVirtualMachine", cmd).await
    }
    async fn migrate(&self, vmi: VirtualMachineInstance, options_json: Vec<u8>) -> CmdResult {
        self.record(
            "MigrateVirtualMachine",
            format!(
                "{} {}",
                name_of(&vmi),
                String::from_utf8_lossy(&options_json)
            ),
        );
        Ok(())
    }
    async fn sync_migration_target(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("SyncMigrationTarget", cmd).await
    }
    async fn cancel_migration(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("CancelVirtualMachineMigration", cmd).await
    }
    async fn signal_target_pod_cleanup(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("SignalTargetPodCleanup", cmd).await
    }
    async fn finalize_migration(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("FinalizeVirtualMachineMigration", cmd).await
    }
    async fn hotplug_host_devices(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("HotplugHostDevices", cmd).await
    }
    async fn get_domain(&self) -> CmdResult<Option<String>> {
        self.record("GetDomain", String::new());
        Ok(Some(
            r#"{"kind":"Domain","spec":{"name":"default_testvmi"}}"#.to_string(),
        ))
    }
    async fn get_domain_stats(&self) -> CmdResult<Option<String>> {
        self.record("GetDomainStats", String::new());
        Ok(Some(
            r#"{"name":"default_testvmi","cpuTime":42}"#.to_string(),
        ))
    }
    async fn get_guest_info(&self) -> CmdResult<String> {
        self.record("GetGuestInfo", String::new());
        Ok(r#"{"hostname":"guest"}"#.to_string())
    }
    async fn get_users(&self) -> CmdResult<String> {
        self.record("GetUsers", String::new());
        Ok(r#"[{"userName":"fedora"}]"#.to_string())
    }
    async fn get_filesystems(&self) -> CmdResult<String> {
        self.record("GetFilesystems", String::new());
        Ok(r#"[{"mountPoint":"/"}]"#.to_string())
    }
    async fn ping(&self) -> CmdResult {
        self.record("Ping", String::new());
        Ok(())
    }
    async fn exec(&self, request: ExecRequest) -> CmdResult<ExecOutput> {
        self.record(
            "Exec",
            format!(
                "{} {} {:?} {}",
                request.domain_name, request.command, request.args, request.timeout_seconds
            ),
        );
        Ok(ExecOutput {
            exit_code: i32::try_from(request.args.len()).unwrap_or(i32::MAX),
            stdout: request.args.join(" "),
        })
    }
    async fn guest_ping(&self, domain_name: String, timeout_seconds: i32) -> CmdResult {
        self.record("GuestPing", format!("{domain_name} {timeout_seconds}"));
        Ok(())
    }
    async fn memory_dump(&self, vmi: VirtualMachineInstance, dump_path: String) -> CmdResult {
        self.record(
            "VirtualMachineMemoryDump",
            format!("{} {dump_path}", name_of(&vmi)),
        );
        Ok(())
    }
    async fn get_qemu_version(&self) -> CmdResult<String> {
        self.record("GetQemuVersion", String::new());
        Ok("10.1.0".to_string())
    }
    async fn sync_cpus(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("SyncVirtualMachineCPUs", cmd).await
    }
    async fn sync_memory(&self, cmd: VmiCommand) -> CmdResult {
        self.vmi_cmd("SyncVirtualMachineMemory", cmd).await
    }
    async fn get_sev_info(&self) -> CmdResult<Vec<u8>> {
        self.record("GetSEVInfo", String::new());
        Ok(br#"{"pdh":"AAAA"}"#.to_vec())
    }
    async fn get_launch_measurement(&self, cmd: VmiCommand) -> CmdResult<Vec<u8>> {
        self.record("GetLaunchMeasurement", name_of(&cmd.vmi));
        Ok(br#"{"measurement":"BBBB"}"#.to_vec())
    }
    async fn inject_launch_secret(
        &self,
        vmi: VirtualMachineInstance,
        options_json: Vec<u8>,
    ) -> CmdResult {
        self.record(
            "InjectLaunchSecret",
            format!(
                "{} {}",
                name_of(&vmi),
                String::from_utf8_lossy(&options_json)
            ),
        );
        Ok(())
    }
    async fn get_dirty_rate_stats(&self) -> CmdResult<i64> {
        self.record("GetDomainDirtyRateStats", String::new());
        Ok(-7)
    }
    async fn get_screenshot(&self, cmd: VmiCommand) -> CmdResult<Screenshot> {
        self.record("GetScreenshot", name_of(&cmd.vmi));
        Ok(Screenshot {
            mime: "image/png".into(),
            data: vec![0x89, b'P', b'N', b'G', 0],
        })
    }
    async fn backup(&self, vmi: VirtualMachineInstance, options_json: Vec<u8>) -> CmdResult {
        self.record(
            "BackupVirtualMachine",
            format!(
                "{} {}",
                name_of(&vmi),
                String::from_utf8_lossy(&options_json)
            ),
        );
        Ok(())
    }
    async fn redefine_checkpoint(
        &self,
        vmi: VirtualMachineInstance,
        checkpoint_json: Vec<u8>,
    ) -> CmdResult {
        let checkpoint = String::from_utf8_lossy(&checkpoint_json).to_string();
        self.record(
            "RedefineCheckpoint",
            format!("{} {checkpoint}", name_of(&vmi)),
        );
        if checkpoint.contains("broken") {
            return Err(CmdError::InvalidCheckpoint(
                "checkpoint cp-1 not found in qemu".into(),
            ));
        }
        Ok(())
    }
    async fn get_vm_stats(&self, request: VmStatsRequest) -> CmdResult<VmStatsResponse> {
        self.record(
            "GetVMStats",
            format!(
                "domain={} load={}",
                request.domain_stats.is_some(),
                request.guest_get_load.is_some()
            ),
        );
        Ok(VmStatsResponse {
            guest_get_load: Some(Response {
                success: true,
                message: r#"{"load1m":0.5}"#.into(),
            }),
            ..Default::default()
        })
    }
}

/// A launcher that implements nothing: every RPC but Ping answers `Unimplemented`.
pub struct EmptyLauncher;

impl LauncherService for EmptyLauncher {}
