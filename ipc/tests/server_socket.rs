//! The server socket's life: rename-on-ready, owner-only permissions, cleanup, stale files.

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::RecordingLauncher;
use kvrs_ipc::layout::{LAUNCHER_INIT_SOCKET, LAUNCHER_SOCKET};
use kvrs_ipc::{LauncherClient, ServeOptions, serve_launcher};

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_name_appears_only_once_the_server_answers() {
    let dir = tempfile::tempdir().unwrap();
    let sockets = dir.path().join("sockets");
    std::fs::create_dir_all(&sockets).unwrap();
    let socket = sockets.join(LAUNCHER_SOCKET);

    // A watcher in the role of virt-handler: poll for the final name; the moment it appears,
    // connect and ping. It must never find a socket that does not answer.
    let watched = socket.clone();
    let watcher = tokio::spawn(async move {
        let mut saw_staging = false;
        loop {
            if is_socket(&watched.with_file_name(LAUNCHER_INIT_SOCKET)) {
                saw_staging = true;
            }
            if is_socket(&watched) {
                let client = LauncherClient::connect(&watched)
                    .await
                    .expect("final socket answers");
                client.ping().await.expect("ping on first sight");
                return saw_staging;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });

    let server = serve_launcher(&socket, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    let _saw_staging = tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(server.socket(), socket);
    assert!(is_socket(&socket));
    // The staging name is gone and nothing else was left behind in the directory.
    assert_eq!(entries(&sockets), vec![LAUNCHER_SOCKET.to_string()]);
}

#[tokio::test]
async fn a_stale_staging_socket_from_a_crashed_launcher_is_replaced() {
    assert_eq!(
        kvrs_ipc::layout::staging_socket_for(Path::new("/run/kubevirt/sockets/launcher-sock")),
        Path::new("/run/kubevirt/sockets/launcher-init-sock")
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(LAUNCHER_SOCKET);
    let stale =
        std::os::unix::net::UnixListener::bind(dir.path().join(LAUNCHER_INIT_SOCKET)).unwrap();
    drop(stale);
    let _server = serve_launcher(&socket, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    assert_eq!(entries(dir.path()), vec![LAUNCHER_SOCKET.to_string()]);
}

#[tokio::test]
async fn a_start_racing_its_readiness_deadline_leaves_no_half_state() {
    // With deadlines too short for the readiness probe to be sure of success, each start either
    // succeeds (only the final socket exists, and it answers) or fails with "not ready" and
    // leaves neither the final nor the staging socket behind.
    let mut failed = 0;
    for (i, deadline) in [0u64, 1, 10, 100, 1_000, 10_000, 100_000]
        .iter()
        .cycle()
        .take(21)
        .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(LAUNCHER_SOCKET);
        let options = ServeOptions {
            ready_timeout: Duration::from_micros(*deadline),
            ..ServeOptions::default()
        };
        match serve_launcher(&socket, RecordingLauncher::new(), options).await {
            Ok(server) => {
                assert_eq!(
                    entries(dir.path()),
                    vec![LAUNCHER_SOCKET.to_string()],
                    "run {i}"
                );
                LauncherClient::connect(&socket)
                    .await
                    .unwrap()
                    .ping()
                    .await
                    .unwrap();
                server.shutdown().await.unwrap();
            }
            Err(err) => {
                failed += 1;
                assert!(err.to_string().contains("not ready"), "run {i}: {err}");
                assert!(
                    entries(dir.path()).is_empty(),
                    "run {i}: left {:?}",
                    entries(dir.path())
                );
            }
        }
    }
    eprintln!("{failed} of 21 racing starts gave up as not ready");
}

#[tokio::test]
async fn only_the_owner_may_connect() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(LAUNCHER_SOCKET);
    let _server = serve_launcher(&socket, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let other = dir.path().join("group-sock");
    let options = ServeOptions {
        mode: 0o660,
        ..ServeOptions::default()
    };
    let _server2 = serve_launcher(&other, RecordingLauncher::new(), options)
        .await
        .unwrap();
    assert_eq!(
        std::fs::metadata(&other).unwrap().permissions().mode() & 0o777,
        0o660
    );
}

#[tokio::test]
async fn shutdown_removes_the_socket_and_a_restart_replaces_a_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(LAUNCHER_SOCKET);
    let server = serve_launcher(&socket, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    server.shutdown().await.unwrap();
    assert!(!socket.exists(), "socket removed on shutdown");

    // A launcher that died left its socket behind: the next one takes the name over.
    let stale = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    drop(stale);
    assert!(is_socket(&socket));
    let server = serve_launcher(&socket, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    LauncherClient::connect(&socket)
        .await
        .unwrap()
        .ping()
        .await
        .unwrap();
    drop(server);
    assert!(
        !socket.exists(),
        "socket removed when the handle is dropped"
    );
}

#[tokio::test]
async fn dropping_an_old_handle_does_not_remove_its_successors_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(LAUNCHER_SOCKET);
    let old = serve_launcher(&socket, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    let new = serve_launcher(
        &socket,
        Arc::new(common::EmptyLauncher),
        ServeOptions::default(),
    )
    .await
    .unwrap();
    drop(old);
    assert!(is_socket(&socket), "the successor's socket survives");
    let client = LauncherClient::connect(&socket).await.unwrap();
    client.ping().await.unwrap();
    assert!(
        client.get_domain().await.unwrap_err().is_unimplemented(),
        "we talk to the successor"
    );
    new.shutdown().await.unwrap();
}
