//! Every way reaching a peer can fail, each with its own error and a message that says so.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{RecordingLauncher, sample_vmi};
use kvrs_ipc::{
    ClientConfig, IpcError, LauncherClient, ServeOptions, VirtualMachineOptions, serve_launcher,
};

fn quick() -> ClientConfig {
    ClientConfig::uniform(Duration::from_millis(500))
}

#[tokio::test]
async fn a_missing_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    let err = LauncherClient::connect(&path).await.unwrap_err();
    assert!(
        matches!(&err, IpcError::SocketMissing { path: p } if *p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains("no such socket"), "{err}");
    assert!(err.is_disconnected());
}

#[tokio::test]
async fn a_stale_socket_nobody_listens_on_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let err = LauncherClient::connect(&path).await.unwrap_err();
    assert!(matches!(err, IpcError::Refused { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("connection refused") && text.contains("stale socket"),
        "{text}"
    );
}

#[tokio::test]
async fn a_regular_file_is_not_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    std::fs::write(&path, b"not a socket").unwrap();
    let err = LauncherClient::connect(&path).await.unwrap_err();
    assert!(matches!(err, IpcError::NotASocket { .. }), "{err:?}");
    assert!(err.to_string().ends_with("not a Unix socket"), "{err}");
}

#[tokio::test]
async fn a_peer_that_accepts_but_never_answers_is_unresponsive() {
    // A bound socket whose owner never accepts: connect(2) succeeds through the backlog but the
    // handshake never gets an answer.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    let _hung = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let started = std::time::Instant::now();
    let err = LauncherClient::connect_with(&path, quick())
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "gave up in time"
    );
    assert!(
        matches!(
            err,
            IpcError::Unresponsive {
                service: "CmdInfo",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("did not answer CmdInfo.Info"),
        "{err}"
    );
}

#[tokio::test]
async fn a_call_slower_than_its_deadline_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    let _server = serve_launcher(&path, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    let client = LauncherClient::connect_with(&path, quick()).await.unwrap();
    let started = std::time::Instant::now();
    let err = client
        .sync_vmi(&sample_vmi("slow-vmi"), VirtualMachineOptions::default())
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    match &err {
        IpcError::Timeout { rpc, after } => {
            assert_eq!(*rpc, "SyncVirtualMachine");
            assert_eq!(*after, Duration::from_millis(500));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(err.to_string(), "SyncVirtualMachine: timed out after 500ms");
    // The connection is still good for the next call.
    client.ping().await.unwrap();
}

/// Runs a launcher on its own runtime and thread, the way a separate process would, so the
/// test can kill it (drop the runtime) in the middle of a call.
fn launcher_in_its_own_runtime(
    path: std::path::PathBuf,
    entered: tokio::sync::mpsc::UnboundedSender<()>,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    struct Hanging(tokio::sync::mpsc::UnboundedSender<()>);
    #[tonic::async_trait]
    impl kvrs_ipc::LauncherService for Hanging {
        async fn kill(&self, _: kvrs_ipc::VmiCommand) -> kvrs_ipc::CmdResult {
            let _ = self.0.send(());
            std::future::pending::<()>().await;
            Ok(())
        }
    }
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let (die_tx, die_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime
            .block_on(serve_launcher(
                &path,
                Arc::new(Hanging(entered)),
                ServeOptions::default(),
            ))
            .unwrap();
        ready_tx.send(()).unwrap();
        let _ = die_rx.recv();
        std::mem::forget(server); // a dying process does not clean up
        runtime.shutdown_background();
    });
    ready_rx.recv().unwrap();
    (die_tx, thread)
}

#[tokio::test]
async fn a_server_that_dies_mid_call_is_reported_as_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (die, thread) = launcher_in_its_own_runtime(path.clone(), entered_tx);

    let client =
        LauncherClient::connect_with(&path, ClientConfig::uniform(Duration::from_secs(10)))
            .await
            .unwrap();
    let vmi = sample_vmi("victim");
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.kill(&vmi).await }
    });
    entered
        .recv()
        .await
        .expect("the launcher started handling Kill");
    die.send(()).unwrap();
    thread.join().unwrap();

    let started = std::time::Instant::now();
    let err = call.await.unwrap().unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "noticed promptly"
    );
    assert!(
        matches!(
            err,
            IpcError::Disconnected {
                rpc: "KillVirtualMachine",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_disconnected());
    assert!(
        err.to_string()
            .starts_with("KillVirtualMachine: connection to the peer was lost"),
        "{err}"
    );

    // The dead launcher left its socket behind: later calls and new clients see a stale socket.
    let again = client.ping().await.unwrap_err();
    assert!(again.is_disconnected(), "{again:?}");
    let fresh = LauncherClient::connect(&path).await.unwrap_err();
    assert!(matches!(fresh, IpcError::Refused { .. }), "{fresh:?}");
}
