//! Launcher -> handler events: the `Notify` service.
//!
//! The launcher dials `domain-notify-pipe.sock` in its own pod (see [`crate::layout`]), checks
//! the version through `NotifyInfo`, and pushes domain events and Kubernetes events. The
//! handler implements [`NotifyService`] and serves it with [`serve_notify`] on its
//! `domain-notify.sock`. Payloads stay opaque JSON bytes: the domain is Go `api.Domain` JSON,
//! the status a `metav1.Status`, the Kubernetes event a `core/v1.Event`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::error::IpcError;
use crate::proto::notify::info::{
    NotifyInfoRequest, NotifyInfoResponse,
    notify_info_server::{NotifyInfo, NotifyInfoServer},
};
use crate::proto::notify::v1::notify_client::NotifyClient as RawNotifyClient;
use crate::proto::notify::v1::notify_server::{Notify, NotifyServer};
use crate::proto::notify::v1::{DomainEventRequest, K8sEventRequest, Response};
use crate::server::{CmdError, CmdResult};
use crate::transport::{
    ClientConfig, InfoService, ServeOptions, ServerHandle, dial_and_negotiate, request,
    serve_router,
};

/// Watch event types a domain event carries, as Kubernetes spells them.
pub mod event_type {
    /// A domain appeared.
    pub const ADDED: &str = "ADDED";
    /// A domain changed.
    pub const MODIFIED: &str = "MODIFIED";
    /// A domain is gone.
    pub const DELETED: &str = "DELETED";
    /// The launcher hit an error; `statusJSON` says which.
    pub const ERROR: &str = "ERROR";
}

/// One `HandleDomainEvent` request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DomainEvent {
    /// One of [`event_type`].
    pub event_type: String,
    /// Go `api.Domain` JSON, possibly empty.
    pub domain_json: Vec<u8>,
    /// `metav1.Status` JSON, for ERROR events.
    pub status_json: Vec<u8>,
}

/// The `kubevirt.notify.v1.Notify` service as a handler implements it. Both methods default to
/// gRPC `Unimplemented`.
#[tonic::async_trait]
pub trait NotifyService: Send + Sync + 'static {
    /// A domain event from a launcher.
    async fn handle_domain_event(&self, event: DomainEvent) -> CmdResult {
        let _ = event;
        Err(CmdError::unimplemented("HandleDomainEvent"))
    }
    /// A request to record a Kubernetes event (`core/v1.Event` JSON) on the VMI.
    async fn handle_k8s_event(&self, event_json: Vec<u8>) -> CmdResult {
        let _ = event_json;
        Err(CmdError::unimplemented("HandleK8sEvent"))
    }
}

/// Starts a notify server on `socket` (the handler's [`crate::layout::handler_notify_socket`]),
/// serving `NotifyInfo` and `Notify`, renamed into place once it answers.
pub async fn serve_notify<S: NotifyService>(
    socket: impl AsRef<Path>,
    service: Arc<S>,
    options: ServeOptions,
) -> Result<ServerHandle, IpcError> {
    let info = NotifyVersions(options.versions(InfoService::Notify));
    let router = tonic::transport::Server::builder()
        .add_service(NotifyInfoServer::new(info))
        .add_service(NotifyServer::from_arc(Arc::new(NotifyAdapter(service))));
    serve_router(socket.as_ref(), &options, router, InfoService::Notify).await
}

struct NotifyVersions(Vec<u32>);

#[tonic::async_trait]
impl NotifyInfo for NotifyVersions {
    async fn info(
        &self,
        _: Request<NotifyInfoRequest>,
    ) -> Result<tonic::Response<NotifyInfoResponse>, Status> {
        Ok(tonic::Response::new(NotifyInfoResponse {
            supported_notify_versions: self.0.clone(),
        }))
    }
}

struct NotifyAdapter<S>(Arc<S>);

fn respond(result: CmdResult) -> Result<tonic::Response<Response>, Status> {
    match result {
        Ok(()) => Ok(tonic::Response::new(Response {
            success: true,
            message: String::new(),
        })),
        Err(CmdError::Failed(message) | CmdError::InvalidCheckpoint(message)) => {
            Ok(tonic::Response::new(Response {
                success: false,
                message,
            }))
        }
        Err(CmdError::Status(status)) => Err(status),
    }
}

#[tonic::async_trait]
impl<S: NotifyService> Notify for NotifyAdapter<S> {
    async fn handle_domain_event(
        &self,
        request: Request<DomainEventRequest>,
    ) -> Result<tonic::Response<Response>, Status> {
        let request = request.into_inner();
        let event = DomainEvent {
            event_type: request.event_type,
            domain_json: request.domain_json,
            status_json: request.status_json,
        };
        respond(self.0.handle_domain_event(event).await)
    }

    async fn handle_k8s_event(
        &self,
        request: Request<K8sEventRequest>,
    ) -> Result<tonic::Response<Response>, Status> {
        respond(
            self.0
                .handle_k8s_event(request.into_inner().event_json)
                .await,
        )
    }
}

/// A connected, version-checked client of a handler's `Notify` service (used by launchers).
#[derive(Clone, Debug)]
pub struct NotifyClient {
    notify: RawNotifyClient<Channel>,
    socket: PathBuf,
    version: u32,
    config: ClientConfig,
}

impl NotifyClient {
    /// Dials `socket` (normally [`crate::layout::notify_pipe_socket`]) and negotiates the notify
    /// version; refuses a handler that speaks none of kvrs's versions.
    pub async fn connect_with(
        socket: impl AsRef<Path>,
        config: ClientConfig,
    ) -> Result<Self, IpcError> {
        let socket = socket.as_ref().to_path_buf();
        let (channel, version, _) =
            dial_and_negotiate(&socket, InfoService::Notify, &config).await?;
        Ok(NotifyClient {
            notify: RawNotifyClient::new(channel),
            socket,
            version,
            config,
        })
    }

    /// [`NotifyClient::connect_with`] with default deadlines.
    pub async fn connect(socket: impl AsRef<Path>) -> Result<Self, IpcError> {
        Self::connect_with(socket, ClientConfig::default()).await
    }

    /// The socket this client dialled.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The negotiated notify version.
    pub fn version(&self) -> u32 {
        self.version
    }

    async fn send<F, Fut>(&self, rpc: &'static str, f: F) -> Result<(), IpcError>
    where
        F: FnOnce(RawNotifyClient<Channel>, std::time::Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Response>, Status>>,
    {
        let after = self.config.short_timeout;
        let response = tokio::time::timeout(after, f(self.notify.clone(), after))
            .await
            .map_err(|_| IpcError::Timeout { rpc, after })?
            .map_err(|status| IpcError::from_status(rpc, status, after))?
            .into_inner();
        if response.success {
            Ok(())
        } else {
            Err(IpcError::Failed {
                rpc,
                message: response.message,
            })
        }
    }

    /// `HandleDomainEvent`.
    pub async fn send_domain_event(&self, event: DomainEvent) -> Result<(), IpcError> {
        let message = DomainEventRequest {
            domain_json: event.domain_json,
            status_json: event.status_json,
            event_type: event.event_type,
        };
        self.send("HandleDomainEvent", async |mut c, t| {
            c.handle_domain_event(request(message, t)).await
        })
        .await
    }

    /// `HandleK8sEvent` with a `core/v1.Event` JSON.
    pub async fn send_k8s_event(&self, event_json: Vec<u8>) -> Result<(), IpcError> {
        let message = K8sEventRequest { event_json };
        self.send("HandleK8sEvent", async |mut c, t| {
            c.handle_k8s_event(request(message, t)).await
        })
        .await
    }
}
