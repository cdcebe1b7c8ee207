//! `kvrs launcher` as an operator runs it, against launchers served inside the test over real
//! Unix sockets: every action, a launcher-side failure, a missing and a stale socket, a peer
//! that refuses our version, and bad arguments.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use kvrs_ipc::{
    CmdError, CmdResult, LauncherService, ServeOptions, ServerHandle, VmiCommand, serve_launcher,
};

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");

const DOMAIN: &str = r#"{"kind":"Domain","spec":{"name":"default_cli-vmi","uuid":"5d307ca9-b3ef-428c-8861-06e72d69f223"},"status":{"status":"Running","reason":"Unknown"}}"#;

/// A launcher recording which commands it got for which VMI.
#[derive(Default)]
struct Launcher {
    has_domain: bool,
    calls: Mutex<Vec<String>>,
}

impl Launcher {
    fn record(&self, rpc: &str, cmd: &VmiCommand) -> CmdResult {
        let name = cmd.vmi.metadata.name.clone().unwrap_or_default();
        self.calls.lock().unwrap().push(format!("{rpc} {name}"));
        if name.starts_with("fail-") {
            return Err(CmdError::failed("virError(Code=38): domain is not running"));
        }
        Ok(())
    }
}

#[kvrs_ipc::async_trait]
impl LauncherService for Launcher {
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        self.record("sync", &cmd)
    }
    async fn shutdown(&self, cmd: VmiCommand) -> CmdResult {
        self.record("shutdown", &cmd)
    }
    async fn kill(&self, cmd: VmiCommand) -> CmdResult {
        self.record("kill", &cmd)
    }
    async fn pause(&self, cmd: VmiCommand) -> CmdResult {
        self.record("pause", &cmd)
    }
    async fn unpause(&self, cmd: VmiCommand) -> CmdResult {
        self.record("unpause", &cmd)
    }
    async fn get_domain(&self) -> CmdResult<Option<String>> {
        Ok(self.has_domain.then(|| DOMAIN.to_string()))
    }
}

/// A launcher implementing nothing but Ping.
struct Bare;
impl LauncherService for Bare {}

/// Serves a launcher on its own runtime thread for the duration of a test.
struct Served {
    _runtime: tokio::runtime::Runtime,
    _server: ServerHandle,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

fn serve<S: LauncherService>(service: Arc<S>, options: ServeOptions) -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sockets/launcher-sock");
    let server = runtime
        .block_on(serve_launcher(&socket, service, options))
        .unwrap();
    Served {
        _runtime: runtime,
        _server: server,
        dir,
        socket,
    }
}

fn kvrs(args: &[&str]) -> Output {
    Command::new(KVRS)
        .arg("launcher")
        .args(args)
        .output()
        .expect("run kvrs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_string()
}

fn write_vmi(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  domain:\n    devices: {{}}\n    resources:\n      requests:\n        memory: 64Mi\n"
        ),
    )
    .unwrap();
    path
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status.code(),
        text(&output.stderr)
    );
    text(&output.stdout)
}

fn fails(output: &Output, code: i32) -> String {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}",
        text(&output.stdout)
    );
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(output.stdout.is_empty());
    stderr
}

#[test]
fn ping_and_info() {
    let served = serve(Arc::new(Launcher::default()), ServeOptions::default());
    let socket = served.socket.to_str().unwrap();
    assert_eq!(ok(&kvrs(&["ping", socket])), "ok\n");

    let info: serde_json::Value = serde_json::from_str(&ok(&kvrs(&["info", socket]))).unwrap();
    assert_eq!(info["supportedCmdVersions"], serde_json::json!([1]));
    assert_eq!(info["negotiatedVersion"], 1);
    assert_eq!(info["compatible"], true);
}

#[test]
fn get_domain_prints_the_domain_json() {
    let with = serve(
        Arc::new(Launcher {
            has_domain: true,
            ..Default::default()
        }),
        ServeOptions::default(),
    );
    let printed = ok(&kvrs(&["get-domain", with.socket.to_str().unwrap()]));
    let value: serde_json::Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(
        value,
        serde_json::from_str::<serde_json::Value>(DOMAIN).unwrap()
    );
    assert!(
        printed.contains("\n  \"spec\""),
        "pretty-printed: {printed}"
    );

    let without = serve(Arc::new(Launcher::default()), ServeOptions::default());
    assert_eq!(
        ok(&kvrs(&["get-domain", without.socket.to_str().unwrap()])),
        "null\n"
    );
}

#[test]
fn vmi_commands_send_the_vmi_file() {
    let launcher = Arc::new(Launcher::default());
    let served = serve(launcher.clone(), ServeOptions::default());
    let socket = served.socket.to_str().unwrap();
    let vmi = write_vmi(served.dir.path(), "cli-vmi");
    let vmi = vmi.to_str().unwrap();
    for action in ["sync", "shutdown", "kill", "pause", "unpause"] {
        assert_eq!(ok(&kvrs(&[action, socket, vmi])), "ok\n", "{action}");
    }
    assert_eq!(
        *launcher.calls.lock().unwrap(),
        [
            "sync cli-vmi",
            "shutdown cli-vmi",
            "kill cli-vmi",
            "pause cli-vmi",
            "unpause cli-vmi"
        ]
    );
}

#[test]
fn a_failure_reported_by_the_launcher() {
    let served = serve(Arc::new(Launcher::default()), ServeOptions::default());
    let vmi = write_vmi(served.dir.path(), "fail-vmi");
    let stderr = fails(
        &kvrs(&[
            "kill",
            served.socket.to_str().unwrap(),
            vmi.to_str().unwrap(),
        ]),
        1,
    );
    assert_eq!(
        stderr,
        "kvrs: server error. command KillVirtualMachine failed: \"virError(Code=38): domain is not running\"\n"
    );
}

#[test]
fn an_rpc_the_launcher_does_not_implement() {
    let served = serve(Arc::new(Bare), ServeOptions::default());
    let socket = served.socket.to_str().unwrap();
    assert_eq!(ok(&kvrs(&["ping", socket])), "ok\n");
    let stderr = fails(&kvrs(&["get-domain", socket]), 1);
    assert!(
        stderr.starts_with("kvrs: GetDomain: not implemented by the peer"),
        "{stderr}"
    );
}

#[test]
fn a_missing_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("launcher-sock");
    let stderr = fails(&kvrs(&["ping", socket.to_str().unwrap()]), 1);
    assert_eq!(
        stderr,
        format!(
            "kvrs: {}: no such socket (is the peer running?)\n",
            socket.display()
        )
    );
}

#[test]
fn a_stale_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("launcher-sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let stderr = fails(&kvrs(&["info", socket.to_str().unwrap()]), 1);
    assert!(
        stderr.contains("connection refused: stale socket"),
        "{stderr}"
    );
}

#[test]
fn a_peer_that_refuses_our_version() {
    let launcher = Arc::new(Launcher::default());
    let options = ServeOptions {
        announced_versions: Some(vec![2]),
        ..ServeOptions::default()
    };
    let served = serve(launcher.clone(), options);
    let socket = served.socket.to_str().unwrap();
    let vmi = write_vmi(served.dir.path(), "cli-vmi");

    let stderr = fails(&kvrs(&["sync", socket, vmi.to_str().unwrap()]), 1);
    assert!(
        stderr.ends_with(
            "cmd version mismatch: peer supports versions [2], we support [1]; no common version\n"
        ),
        "{stderr}"
    );
    assert!(
        launcher.calls.lock().unwrap().is_empty(),
        "nothing sent to an incompatible peer"
    );

    // `info` still shows what the peer speaks.
    let info: serde_json::Value = serde_json::from_str(&ok(&kvrs(&["info", socket]))).unwrap();
    assert_eq!(info["supportedCmdVersions"], serde_json::json!([2]));
    assert_eq!(info["compatible"], false);
    assert_eq!(info["negotiatedVersion"], serde_json::Value::Null);
}

#[test]
fn bad_arguments_exit_2() {
    let served = serve(Arc::new(Launcher::default()), ServeOptions::default());
    let socket = served.socket.to_str().unwrap();
    let stderr = fails(&kvrs(&["sync", socket]), 2);
    assert_eq!(stderr, "kvrs: launcher sync: needs a VMI-FILE\n");

    let vm = served.dir.path().join("vm.yaml");
    std::fs::write(&vm, "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm\nspec:\n  template:\n    spec:\n      domain:\n        devices: {}\n").unwrap();
    let stderr = fails(&kvrs(&["kill", socket, vm.to_str().unwrap()]), 2);
    assert!(
        stderr.contains("the launcher takes a VirtualMachineInstance"),
        "{stderr}"
    );

    let stderr = fails(&kvrs(&["ping", socket, "--timeout=0"]), 2);
    assert!(stderr.contains("--timeout"), "{stderr}");
}
