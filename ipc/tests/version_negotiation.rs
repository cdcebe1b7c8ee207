//! Version negotiation through CmdInfo and NotifyInfo, both succeeding and refusing.

mod common;

use std::sync::Arc;

use common::RecordingLauncher;
use kvrs_ipc::{
    IpcError, LauncherClient, NotifyClient, NotifyService, ServeOptions, serve_launcher,
    serve_notify,
};

fn announcing(versions: &[u32]) -> ServeOptions {
    ServeOptions {
        announced_versions: Some(versions.to_vec()),
        ..ServeOptions::default()
    }
}

#[tokio::test]
async fn cmd_version_one_is_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    let _server = serve_launcher(&path, RecordingLauncher::new(), ServeOptions::default())
        .await
        .unwrap();
    let client = LauncherClient::connect(&path).await.unwrap();
    assert_eq!(client.version(), 1);
    assert_eq!(client.peer_versions(), &[1]);

    // A newer launcher that also speaks 1 is still accepted, at version 1.
    let newer = dir.path().join("newer-sock");
    let _server2 = serve_launcher(&newer, RecordingLauncher::new(), announcing(&[3, 1, 2]))
        .await
        .unwrap();
    let client = LauncherClient::connect(&newer).await.unwrap();
    assert_eq!(client.version(), 1);
    client.ping().await.unwrap();
}

#[tokio::test]
async fn a_launcher_without_a_common_cmd_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("launcher-sock");
    let launcher = RecordingLauncher::new();
    let _server = serve_launcher(&path, launcher.clone(), announcing(&[2, 3]))
        .await
        .unwrap();
    let err = LauncherClient::connect(&path).await.unwrap_err();
    match &err {
        IpcError::NoCommonVersion {
            service,
            peer,
            ours,
            ..
        } => {
            assert_eq!(*service, "cmd");
            assert_eq!(peer, &[2, 3]);
            assert_eq!(ours, &[1]);
        }
        other => panic!("expected NoCommonVersion, got {other:?}"),
    }
    assert!(
        err.to_string().ends_with(
            "cmd version mismatch: peer supports versions [2, 3], we support [1]; no common version"
        ),
        "{err}"
    );
    assert!(
        launcher.calls().is_empty(),
        "no command was sent to the refused peer"
    );
}

struct Quiet;
impl NotifyService for Quiet {}

#[tokio::test]
async fn notify_versions_are_negotiated_too() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("domain-notify.sock");
    let _a = serve_notify(&good, Arc::new(Quiet), ServeOptions::default())
        .await
        .unwrap();
    assert_eq!(NotifyClient::connect(&good).await.unwrap().version(), 1);

    let bad = dir.path().join("other-notify.sock");
    let _b = serve_notify(&bad, Arc::new(Quiet), announcing(&[]))
        .await
        .unwrap();
    let err = NotifyClient::connect(&bad).await.unwrap_err();
    assert!(
        matches!(&err, IpcError::NoCommonVersion { service: "notify", peer, .. } if peer.is_empty()),
        "{err:?}"
    );
}

#[tokio::test]
async fn dialling_a_notify_server_as_a_launcher_fails_the_handshake() {
    // The wrong kind of peer: a notify server has no CmdInfo service.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("domain-notify.sock");
    let _server = serve_notify(&path, Arc::new(Quiet), ServeOptions::default())
        .await
        .unwrap();
    let err = LauncherClient::connect(&path).await.unwrap_err();
    assert!(
        matches!(
            err,
            IpcError::Handshake {
                service: "CmdInfo",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("could not check the CmdInfo server version"),
        "{err}"
    );
}
