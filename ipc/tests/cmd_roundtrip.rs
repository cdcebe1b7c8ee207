//! Every `Cmd` RPC, handler -> launcher, over a real Unix socket in a temp dir.

mod common;

use std::sync::Arc;

use common::{Call, EmptyLauncher, RecordingLauncher, sample_vmi};
use kvrs_ipc::proto::cmd::v1::{AgentLoadRequest, DomainStatsRequest, SmBios, VmStatsRequest};
use kvrs_ipc::{
    IpcError, LauncherClient, ServeOptions, ServerHandle, VirtualMachineOptions, serve_launcher,
};

async fn start(
    launcher: Arc<RecordingLauncher>,
) -> (tempfile::TempDir, ServerHandle, LauncherClient) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sockets/launcher-sock");
    let server = serve_launcher(&socket, launcher, ServeOptions::default())
        .await
        .unwrap();
    let client = LauncherClient::connect(&socket).await.unwrap();
    (dir, server, client)
}

fn options() -> VirtualMachineOptions {
    VirtualMachineOptions {
        virtual_machine_sm_bios: Some(SmBios {
            manufacturer: "KubeVirt".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn call(rpc: &'static str, detail: &str) -> Call {
    Call {
        rpc,
        detail: detail.to_string(),
    }
}

#[tokio::test]
async fn vmi_commands_carry_the_vmi_and_options() {
    let launcher = RecordingLauncher::new();
    let (_dir, _server, client) = start(launcher.clone()).await;
    let vmi = sample_vmi("testvmi");

    client.sync_vmi(&vmi, options()).await.unwrap();
    client.pause(&vmi).await.unwrap();
    client.unpause(&vmi).await.unwrap();
    client.unfreeze(&vmi).await.unwrap();
    client.reset(&vmi).await.unwrap();
    client.soft_reboot(&vmi).await.unwrap();
    client.shutdown(&vmi).await.unwrap();
    client.kill(&vmi).await.unwrap();
    client.delete(&vmi).await.unwrap();
    client.sync_migration_target(&vmi, options()).await.unwrap();
    client.cancel_migration(&vmi).await.unwrap();
    client.signal_target_pod_cleanup(&vmi).await.unwrap();
    client.finalize_migration(&vmi, options()).await.unwrap();
    client.hotplug_host_devices(&vmi).await.unwrap();
    client.sync_cpus(&vmi, options()).await.unwrap();
    client.sync_memory(&vmi, options()).await.unwrap();

    let with = "testvmi smbios=KubeVirt";
    let without = "testvmi smbios=";
    assert_eq!(
        launcher.calls(),
        vec![
            call("SyncVirtualMachine", with),
            call("PauseVirtualMachine", without),
            call("UnpauseVirtualMachine", without),
            call("UnfreezeVirtualMachine", without),
            call("ResetVirtualMachine", without),
            call("SoftRebootVirtualMachine", without),
            call("ShutdownVirtualMachine", without),
            call("KillVirtualMachine", without),
            call("DeleteVirtualMachine", without),
            call("SyncMigrationTarget", with),
            call("CancelVirtualMachineMigration", without),
            call("SignalTargetPodCleanup", without),
            call("FinalizeVirtualMachineMigration", with),
            call("HotplugHostDevices", without),
            call("SyncVirtualMachineCPUs", with),
            call("SyncVirtualMachineMemory", with),
        ]
    );
}

#[tokio::test]
async fn the_vmi_arrives_intact() {
    // The launcher must see the very VMI the handler sent, unknown fields included.
    struct Capture(std::sync::Mutex<Option<kvrs_api::VirtualMachineInstance>>);
    #[tonic::async_trait]
    impl kvrs_ipc::LauncherService for Capture {
        async fn sync_vmi(&self, cmd: kvrs_ipc::VmiCommand) -> kvrs_ipc::CmdResult {
            *self.0.lock().unwrap() = Some(cmd.vmi);
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("launcher-sock");
    let capture = Arc::new(Capture(Default::default()));
    let _server = serve_launcher(&socket, capture.clone(), ServeOptions::default())
        .await
        .unwrap();
    let client = LauncherClient::connect(&socket).await.unwrap();
    let mut vmi = sample_vmi("intact");
    vmi.extra
        .insert("futureField".into(), serde_json::json!({"a": [1, 2]}));
    client
        .sync_vmi(&vmi, VirtualMachineOptions::default())
        .await
        .unwrap();
    // Compared as the JSON Go writes: a field Go always writes (a struct value such as
    // `resources`) arrives as its zero value where the sender had it unset.
    let got = capture
        .0
        .lock()
        .unwrap()
        .clone()
        .expect("the launcher got the VMI");
    assert_eq!(
        serde_json::to_value(&got).unwrap(),
        serde_json::to_value(&vmi).unwrap()
    );
    assert_eq!(got.extra["futureField"], serde_json::json!({"a": [1, 2]}));
}

#[tokio::test]
async fn queries_return_their_payloads() {
    let launcher = RecordingLauncher::new();
    let (_dir, _server, client) = start(launcher.clone()).await;

    client.ping().await.unwrap();
    let domain = client.get_domain().await.unwrap().unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&domain).unwrap()["spec"]["name"],
        "default_testvmi"
    );
    assert!(
        client
            .get_domain_stats()
            .await
            .unwrap()
            .unwrap()
            .contains("\"cpuTime\":42")
    );
    assert_eq!(
        client.get_guest_info().await.unwrap(),
        r#"{"hostname":"guest"}"#
    );
    assert_eq!(
        client.get_users().await.unwrap(),
        r#"[{"userName":"fedora"}]"#
    );
    assert_eq!(
        client.get_filesystems().await.unwrap(),
        r#"[{"mountPoint":"/"}]"#
    );
    assert_eq!(client.get_qemu_version().await.unwrap(), "10.1.0");
    assert_eq!(
        client.get_sev_info().await.unwrap(),
        br#"{"pdh":"AAAA"}"#.to_vec()
    );
    assert_eq!(client.get_dirty_rate_stats().await.unwrap(), -7);
    let stats = client
        .get_vm_stats(VmStatsRequest {
            domain_stats: Some(DomainStatsRequest {}),
            guest_get_load: Some(AgentLoadRequest {}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(stats.guest_get_load.unwrap().message, r#"{"load1m":0.5}"#);
    assert!(
        stats.response.unwrap().success,
        "envelope filled in by the adapter"
    );

    let rpcs: Vec<_> = launcher.calls().into_iter().map(|c| c.rpc).collect();
    assert_eq!(
        rpcs,
        [
            "Ping",
            "GetDomain",
            "GetDomainStats",
            "GetGuestInfo",
            "GetUsers",
            "GetFilesystems",
            "GetQemuVersion",
            "GetSEVInfo",
            "GetDomainDirtyRateStats",
            "GetVMStats"
        ]
    );
    assert_eq!(
        launcher.calls().last().unwrap().detail,
        "domain=true load=true"
    );
}

#[tokio::test]
async fn commands_with_their_own_request_shapes() {
    let launcher = RecordingLauncher::new();
    let (_dir, _server, client) = start(launcher.clone()).await;
    let vmi = sample_vmi("testvmi");

    client.freeze(&vmi, 300).await.unwrap();
    client
        .migrate(&vmi, br#"{"bandwidth":"64Mi"}"#.to_vec())
        .await
        .unwrap();
    let out = client
        .exec(
            "default_testvmi",
            "/bin/echo",
            &["a".into(), "b".into()],
            10,
        )
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.stdout.as_str()), (2, "a b"));
    client.guest_ping("default_testvmi", 3).await.unwrap();
    client.memory_dump(&vmi, "/dump/mem.dump").await.unwrap();
    assert_eq!(
        client.get_launch_measurement(&vmi).await.unwrap(),
        br#"{"measurement":"BBBB"}"#.to_vec()
    );
    client
        .inject_launch_secret(&vmi, br#"{"header":"h"}"#.to_vec())
        .await
        .unwrap();
    let shot = client.get_screenshot(&vmi).await.unwrap();
    assert_eq!(
        (shot.mime.as_str(), &shot.data[..4]),
        ("image/png", &b"\x89PNG"[..])
    );
    client
        .backup(&vmi, br#"{"backupName":"b1"}"#.to_vec())
        .await
        .unwrap();
    client
        .redefine_checkpoint(&vmi, br#"{"name":"cp-1"}"#.to_vec())
        .await
        .unwrap();
    let err = client
        .redefine_checkpoint(&vmi, br#"{"name":"broken"}"#.to_vec())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, IpcError::CheckpointInvalid { message } if message.contains("cp-1 not found")),
        "{err}"
    );

    assert_eq!(
        launcher.calls(),
        vec![
            call("FreezeVirtualMachine", "testvmi 300"),
            call("MigrateVirtualMachine", r#"testvmi {"bandwidth":"64Mi"}"#),
            call("Exec", r#"default_testvmi /bin/echo ["a", "b"] 10"#),
            call("GuestPing", "default_testvmi 3"),
            call("VirtualMachineMemoryDump", "testvmi /dump/mem.dump"),
            call("GetLaunchMeasurement", "testvmi"),
            call("InjectLaunchSecret", r#"testvmi {"header":"h"}"#),
            call("GetScreenshot", "testvmi"),
            call("BackupVirtualMachine", r#"testvmi {"backupName":"b1"}"#),
            call("RedefineCheckpoint", r#"testvmi {"name":"cp-1"}"#),
            call("RedefineCheckpoint", r#"testvmi {"name":"broken"}"#),
        ]
    );
}

#[tokio::test]
async fn reported_failures_become_typed_errors() {
    let launcher = RecordingLauncher::new();
    let (_dir, _server, client) = start(launcher).await;
    let err = client
        .sync_vmi(&sample_vmi("fail-me"), VirtualMachineOptions::default())
        .await
        .unwrap_err();
    match &err {
        IpcError::Failed { rpc, message } => {
            assert_eq!(*rpc, "SyncVirtualMachine");
            assert_eq!(message, "SyncVirtualMachine of fail-me failed in libvirt");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "server error. command SyncVirtualMachine failed: \"SyncVirtualMachine of fail-me failed in libvirt\""
    );
}

#[tokio::test]
async fn unimplemented_rpcs_answer_grpc_unimplemented() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("launcher-sock");
    let _server = serve_launcher(&socket, Arc::new(EmptyLauncher), ServeOptions::default())
        .await
        .unwrap();
    let client = LauncherClient::connect(&socket).await.unwrap();
    client.ping().await.expect("Ping answers by default");
    let vmi = sample_vmi("x");
    let errors = [
        client
            .sync_vmi(&vmi, VirtualMachineOptions::default())
            .await
            .unwrap_err(),
        client.get_domain().await.unwrap_err(),
        client.exec("d", "c", &[], 1).await.unwrap_err(),
        client.redefine_checkpoint(&vmi, vec![]).await.unwrap_err(),
        client
            .get_vm_stats(VmStatsRequest::default())
            .await
            .unwrap_err(),
    ];
    for err in errors {
        assert!(err.is_unimplemented(), "{err:?}");
        assert!(err.to_string().contains("not implemented"), "{err}");
    }
}

#[tokio::test]
async fn an_undecodable_vmi_is_answered_like_kubevirt() {
    // A raw client sends garbage where the VMI JSON belongs: the launcher answers
    // success=false instead of failing the call, and the service method never runs.
    use kvrs_ipc::proto::cmd::v1::{Vmi, VmiRequest, cmd_client::CmdClient};
    let launcher = RecordingLauncher::new();
    let (dir, _server, _client) = start(launcher.clone()).await;
    let channel = kvrs_ipc::transport::dial(
        &dir.path().join("sockets/launcher-sock"),
        std::time::Duration::from_secs(2),
    )
    .await
    .unwrap();
    let answer = CmdClient::new(channel)
        .sync_virtual_machine(VmiRequest {
            vmi: Some(Vmi {
                vmi_json: b"{not json".to_vec(),
            }),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!answer.success);
    assert!(
        answer
            .message
            .starts_with("No valid vmi object present in command server request"),
        "{}",
        answer.message
    );
    assert!(launcher.calls().is_empty());
}
