//! The handler plan's launcher calls reach a real kvrs-ipc command server over a Unix socket,
//! through the same `Launcher` trait the executor uses.

use std::sync::{Arc, Mutex};

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::LauncherCall;
use kvrs_ipc::{
    CmdResult, LauncherClient, LauncherService, ServeOptions, VirtualMachineOptions, VmiCommand,
    serve_launcher,
};
use kvrs_runtime::Launcher;
use kvrs_runtime::ipc::IpcLauncher;

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Recorder {
    fn log(&self, rpc: &str, cmd: &VmiCommand) -> CmdResult {
        let name = cmd.vmi.metadata.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push(format!("{rpc} {name}"));
        Ok(())
    }
}

#[kvrs_ipc::async_trait]
impl LauncherService for Recorder {
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        assert_eq!(
            cmd.options
                .virtual_machine_sm_bios
                .as_ref()
                .map(|s| s.family.as_str()),
            Some("KubeVirt"),
            "the cluster options travel with SyncVirtualMachine"
        );
        self.log("SyncVirtualMachine", &cmd)
    }
    async fn shutdown(&self, cmd: VmiCommand) -> CmdResult {
        self.log("ShutdownVirtualMachine", &cmd)
    }
    async fn kill(&self, cmd: VmiCommand) -> CmdResult {
        self.log("KillVirtualMachine", &cmd)
    }
}

#[tokio::test]
async fn plan_calls_reach_the_launcher_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sockets/launcher-sock");
    let recorder = Arc::new(Recorder::default());
    let _server = serve_launcher(&socket, recorder.clone(), ServeOptions::default())
        .await
        .unwrap();
    let client = LauncherClient::connect(&socket).await.unwrap();
    let options = VirtualMachineOptions {
        virtual_machine_sm_bios: Some(kvrs_ipc::proto::cmd::v1::SmBios {
            family: "KubeVirt".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut launcher = IpcLauncher::new(client, options);
    let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "demo", "namespace": "default", "uid": "u1"},
        "spec": {"domain": {"devices": {}}},
    }))
    .unwrap();
    for call in [
        LauncherCall::SyncVirtualMachine,
        LauncherCall::ShutdownVirtualMachine,
        LauncherCall::KillVirtualMachine,
    ] {
        launcher.call(Some(&vmi), call).await.unwrap();
    }
    // DeleteDomain is not implemented by this server: the launcher's answer comes back as the
    // error text the handler's decision reads as a fact.
    let err = launcher
        .call(Some(&vmi), LauncherCall::DeleteDomain)
        .await
        .unwrap_err();
    assert!(
        err.contains("DeleteVirtualMachine") || err.to_lowercase().contains("unimplemented"),
        "{err}"
    );
    assert!(
        launcher
            .call(None, LauncherCall::KillVirtualMachine)
            .await
            .is_err()
    );
    assert_eq!(
        *recorder.0.lock().unwrap(),
        [
            "SyncVirtualMachine demo",
            "ShutdownVirtualMachine demo",
            "KillVirtualMachine demo"
        ]
    );
}
