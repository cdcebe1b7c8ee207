//! Launcher -> handler: Notify over a real socket, directly and through the in-pod pipe.

use std::sync::{Arc, Mutex};

use kvrs_ipc::layout::{HANDLER_NOTIFY_SOCKET, NOTIFY_PIPE_SOCKET};
use kvrs_ipc::notify::event_type;
use kvrs_ipc::{
    CmdError, CmdResult, DomainEvent, IpcError, NotifyClient, NotifyService, ServeOptions,
    serve_notify, serve_notify_pipe,
};

#[derive(Default)]
struct Handler {
    events: Mutex<Vec<DomainEvent>>,
    k8s: Mutex<Vec<Vec<u8>>>,
}

#[tonic::async_trait]
impl NotifyService for Handler {
    async fn handle_domain_event(&self, event: DomainEvent) -> CmdResult {
        if event.domain_json.starts_with(b"{bad") {
            return Err(CmdError::failed("cannot decode domain"));
        }
        self.events.lock().unwrap().push(event);
        Ok(())
    }
    async fn handle_k8s_event(&self, event_json: Vec<u8>) -> CmdResult {
        self.k8s.lock().unwrap().push(event_json);
        Ok(())
    }
}

fn modified() -> DomainEvent {
    DomainEvent {
        event_type: event_type::MODIFIED.into(),
        domain_json: br#"{"metadata":{"name":"default_testvmi"},"status":{"status":"Running"}}"#
            .to_vec(),
        status_json: Vec::new(),
    }
}

#[tokio::test]
async fn domain_and_k8s_events_reach_the_handler() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(HANDLER_NOTIFY_SOCKET);
    let handler = Arc::new(Handler::default());
    let _server = serve_notify(&socket, handler.clone(), ServeOptions::default())
        .await
        .unwrap();
    let client = NotifyClient::connect(&socket).await.unwrap();

    client.send_domain_event(modified()).await.unwrap();
    let error_event = DomainEvent {
        event_type: event_type::ERROR.into(),
        domain_json: Vec::new(),
        status_json: br#"{"message":"libvirt down"}"#.to_vec(),
    };
    client.send_domain_event(error_event.clone()).await.unwrap();
    let k8s = br#"{"type":"Warning","reason":"GuestPanicked","message":"panic"}"#.to_vec();
    client.send_k8s_event(k8s.clone()).await.unwrap();

    assert_eq!(
        *handler.events.lock().unwrap(),
        vec![modified(), error_event]
    );
    assert_eq!(*handler.k8s.lock().unwrap(), vec![k8s]);

    let err = client
        .send_domain_event(DomainEvent {
            domain_json: b"{bad".to_vec(),
            ..modified()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, IpcError::Failed { rpc: "HandleDomainEvent", message } if message == "cannot decode domain"),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_launcher_reaches_the_handler_through_the_pod_pipe() {
    let node = tempfile::tempdir().unwrap();
    let pod = tempfile::tempdir().unwrap();
    let handler_socket = node.path().join(HANDLER_NOTIFY_SOCKET);
    let pipe_socket = pod.path().join(NOTIFY_PIPE_SOCKET);
    let handler = Arc::new(Handler::default());
    let _server = serve_notify(&handler_socket, handler.clone(), ServeOptions::default())
        .await
        .unwrap();
    let pipe = serve_notify_pipe(&pipe_socket, &handler_socket, 0o600, None).unwrap();

    // The launcher knows only the path in its pod.
    let client = NotifyClient::connect(pipe.socket()).await.unwrap();
    assert_eq!(client.version(), 1);
    for _ in 0..3 {
        client.send_domain_event(modified()).await.unwrap();
    }
    assert_eq!(handler.events.lock().unwrap().len(), 3);

    drop(pipe);
    assert!(!pipe_socket.exists(), "pipe socket removed with its handle");
}

#[tokio::test]
async fn a_pipe_whose_handler_is_gone_fails_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let pipe_socket = dir.path().join(NOTIFY_PIPE_SOCKET);
    let _pipe =
        serve_notify_pipe(&pipe_socket, &dir.path().join("nobody.sock"), 0o600, None).unwrap();
    let config = kvrs_ipc::ClientConfig::uniform(std::time::Duration::from_millis(500));
    let err = NotifyClient::connect_with(&pipe_socket, config)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            IpcError::Handshake { .. } | IpcError::Unresponsive { .. }
        ),
        "{err:?}"
    );
}
