//! The HTTPS shell of the REST server: hyper's HTTP/1.1 behind tokio-rustls, the VMI looked up
//! in this handler's VMI cache, its launcher dialled for the one call (or, for the console,
//! the connection upgraded and bridged to the serial socket: [`super::console`]).
//!
//! Limits: a TLS handshake and a request head within 10 s each, a body of at most 64 KiB
//! within 10 s (virt-api sends a few fields at most), 64 connections at once. Until the
//! certificate directory holds usable certificates, connections are closed unanswered.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::runtime::reflector::{ObjectRef, Store};
use kvrs_api::VirtualMachineInstance;
use kvrs_ipc::LauncherClient;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tracing::{debug, info, warn};

use super::console::{self, Consoles};
use super::tls::CertDir;
use super::{
    Action, Answer, Target, answer, as_list, launcher_unreachable, route, unfreeze_timeout,
    vmi_missing,
};

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BODY: usize = 64 * 1024;
const MAX_CONNECTIONS: usize = 64;
/// How often the certificate directory is re-read (a mounted Secret changes within a minute
/// or so of its update).
pub const CERT_RELOAD: Duration = Duration::from_secs(20);

/// Where the server finds a VMI and its launcher.
pub trait VmiSource: Send + Sync + 'static {
    /// The VMI `namespace/name`, if this handler serves it.
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<VirtualMachineInstance>>;
    /// Its launcher's command sockets, as this process sees them.
    fn sockets(&self, vmi: &VirtualMachineInstance) -> Vec<PathBuf>;
    /// Its launcher pods' private directories (the serial socket's `<vmi uid>/virt-serial0`
    /// is beneath), as this process sees them.
    fn private_dirs(&self, vmi: &VirtualMachineInstance) -> Vec<PathBuf>;
}

/// This node's VMIs: the handler's VMI cache (already limited to the node) and the kubelet's
/// pods directory.
pub struct NodeVmis {
    /// The VMI cache.
    pub store: Store<VirtualMachineInstance>,
    /// This node.
    pub node: String,
    /// The kubelet's pods directory.
    pub pods_dir: PathBuf,
}

impl VmiSource for NodeVmis {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<VirtualMachineInstance>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    fn sockets(&self, vmi: &VirtualMachineInstance) -> Vec<PathBuf> {
        crate::launchers::sockets_of(vmi, &self.node, &self.pods_dir)
    }

    fn private_dirs(&self, vmi: &VirtualMachineInstance) -> Vec<PathBuf> {
        crate::launchers::private_dirs_of(vmi, &self.node, &self.pods_dir)
    }
}

/// How [`LookupVmis`] finds a VMI: `(namespace, name)` to the VMI, when this node runs it.
pub type VmiLookup =
    dyn Fn(&str, &str) -> Option<Arc<VirtualMachineInstance>> + Send + Sync + 'static;

/// This node's VMIs found by a lookup other than a handler's VMI cache, their launchers under
/// the kubelet's pods directory as [`NodeVmis`] finds them: for `kvrs run`, whose API server
/// calls this server's logic in-process ([`serve`], [`console::open`]) with the VMIs of its
/// store. The lookup must answer only VMIs of `node`, as the handler's cache holds only those.
pub struct LookupVmis {
    /// The lookup.
    pub lookup: Box<VmiLookup>,
    /// This node.
    pub node: String,
    /// The kubelet's pods directory.
    pub pods_dir: PathBuf,
}

impl VmiSource for LookupVmis {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<VirtualMachineInstance>> {
        (self.lookup)(namespace, name)
    }

    fn sockets(&self, vmi: &VirtualMachineInstance) -> Vec<PathBuf> {
        crate::launchers::sockets_of(vmi, &self.node, &self.pods_dir)
    }

    fn private_dirs(&self, vmi: &VirtualMachineInstance) -> Vec<PathBuf> {
        crate::launchers::private_dirs_of(vmi, &self.node, &self.pods_dir)
    }
}

/// The TLS configuration in use, replaced on renewal.
pub type SharedTls = Arc<RwLock<Option<Arc<ServerConfig>>>>;

/// A bound REST server.
pub struct RestServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: SharedTls,
    vmis: Arc<dyn VmiSource>,
    consoles: Arc<Consoles>,
}

impl RestServer {
    /// Binds `addr`; nothing is served until [`RestServer::tls`] holds a configuration.
    pub async fn bind(addr: SocketAddr, vmis: Arc<dyn VmiSource>) -> std::io::Result<RestServer> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        Ok(RestServer {
            listener,
            local_addr,
            tls: SharedTls::default(),
            vmis,
            consoles: Arc::default(),
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The TLS configuration slot.
    pub fn tls(&self) -> SharedTls {
        self.tls.clone()
    }

    /// Serves until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(16 * 1024);
        let mut connections = JoinSet::new();
        info!(addr = %self.local_addr, "serving the VMI lifecycle REST API over mutual TLS");
        tokio::pin!(shutdown);
        loop {
            let full = connections.len() >= MAX_CONNECTIONS;
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept(), if !full => match accepted {
                    Ok((stream, peer)) => {
                        // Console and VNC frames are small: no Nagle delay behind a delayed ACK.
                        let _ = stream.set_nodelay(true);
                        let config = self.tls.read().unwrap_or_else(|p| p.into_inner()).clone();
                        let Some(config) = config else {
                            debug!(%peer, "no certificates yet: connection closed");
                            continue;
                        };
                        let (http, vmis, consoles) =
                            (http.clone(), self.vmis.clone(), self.consoles.clone());
                        connections.spawn(async move {
                            let accept = TlsAcceptor::from(config).accept(stream);
                            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
                                Ok(Ok(s)) => s,
                                Ok(Err(e)) => return debug!(%peer, error = %e, "TLS handshake failed"),
                                Err(_) => return debug!(%peer, "TLS handshake timed out"),
                            };
                            let service = hyper::service::service_fn(move |req| {
                                let (vmis, consoles) = (vmis.clone(), consoles.clone());
                                async move { Ok::<_, Infallible>(respond(vmis.as_ref(), &consoles, req).await) }
                            });
                            // With upgrades: a console's connection is handed to its bridge.
                            let connection = http.serve_connection(TokioIo::new(stream), service);
                            if let Err(e) = connection.with_upgrades().await {
                                debug!(%peer, error = %e, "connection ended with an error");
                            }
                        });
                    }
                    Err(e) => {
                        warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        connections.shutdown().await;
        info!(addr = %self.local_addr, "REST server stopped");
    }
}

/// Re-reads `dir` every [`CERT_RELOAD`] into `tls` (errors are logged; the last good
/// configuration stays); the CA comes from `ca_fallback` while `dir` has no `ca.crt`
/// ([`CertDir::with_ca_fallback`]).
pub async fn watch_certs(dir: &Path, ca_fallback: Option<&Path>, tls: SharedTls) {
    let mut certs = CertDir::with_ca_fallback(dir, ca_fallback);
    let mut reported = None;
    loop {
        match certs.load_if_changed() {
            Ok(Some(config)) => {
                *tls.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(config));
                info!(dir = %dir.display(), "REST server certificates loaded");
                reported = None;
            }
            Ok(None) => {}
            Err(e) => {
                let text = e.to_string();
                if reported.as_ref() != Some(&text) {
                    warn!(reason = e.label(), "REST server certificates: {text}");
                    reported = Some(text);
                }
            }
        }
        tokio::time::sleep(CERT_RELOAD).await;
    }
}

fn reply(a: Answer) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(a.body)));
    *r.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    r
}

async fn respond(
    vmis: &dyn VmiSource,
    consoles: &Arc<Consoles>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    match console::route(req.method().as_str(), req.uri().path(), req.uri().query()) {
        Some(Ok(target)) => return console::open(vmis, consoles, &target, req).await,
        Some(Err(a)) => return reply(a),
        None => {}
    }
    let target = match route(req.method().as_str(), req.uri().path()) {
        Ok(t) => t,
        Err(a) => return reply(a),
    };
    let body = Limited::new(req.into_body(), MAX_BODY);
    let body = match tokio::time::timeout(BODY_TIMEOUT, body.collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => return reply(Answer::text(400, &format!("reading the body: {e}"))),
        Err(_) => return reply(Answer::text(408, "the request body did not arrive in time")),
    };
    reply(serve(vmis, &target, &body).await)
}

/// One request on its VMI's launcher.
pub async fn serve(vmis: &dyn VmiSource, target: &Target, body: &[u8]) -> Answer {
    let key = target.key();
    let Some(vmi) = vmis.get(&target.namespace, &target.name) else {
        info!(vmi = %key, action = ?target.action, "Failed to retrieve VMI: not on this node");
        return vmi_missing(target);
    };
    let timeout = if target.action == Action::Freeze {
        match unfreeze_timeout(body) {
            Ok(t) => t,
            Err(e) => {
                warn!(vmi = %key, "freeze: {e}");
                return Answer::text(400, &e.to_string());
            }
        }
    } else {
        0
    };
    let Some(socket) = vmis.sockets(&vmi).into_iter().find(|s| s.exists()) else {
        warn!(vmi = %key, "Failed to detect cmd client: no launcher socket");
        return launcher_unreachable(&format!(
            "no launcher socket found for VMI {key} on this node"
        ));
    };
    let client = match LauncherClient::connect(&socket).await {
        Ok(c) => c,
        Err(e) => {
            warn!(vmi = %key, socket = %socket.display(), "Failed to connect cmd client: {e}");
            return launcher_unreachable(&e.to_string());
        }
    };
    let result = call(&client, target.action, &vmi, timeout).await;
    match &result {
        Ok(_) => info!(vmi = %key, action = ?target.action, "done on the launcher"),
        Err(e) => warn!(vmi = %key, "{}: {e}", target.action.failure()),
    }
    answer(target.action, result)
}

fn listed(json: Option<String>) -> Result<Option<String>, String> {
    as_list(json.as_deref().unwrap_or_default()).map(Some)
}

async fn call(
    client: &LauncherClient,
    action: Action,
    vmi: &VirtualMachineInstance,
    unfreeze_timeout: i32,
) -> Result<Option<String>, String> {
    let done = |r: Result<(), kvrs_ipc::IpcError>| r.map(|()| None).map_err(|e| e.to_string());
    let json = |r: Result<String, kvrs_ipc::IpcError>| r.map(Some).map_err(|e| e.to_string());
    match action {
        Action::Pause => done(client.pause(vmi).await),
        Action::Unpause => done(client.unpause(vmi).await),
        Action::SoftReboot => done(client.soft_reboot(vmi).await),
        Action::Reset => done(client.reset(vmi).await),
        Action::Freeze => done(client.freeze(vmi, unfreeze_timeout).await),
        Action::Unfreeze => done(client.unfreeze(vmi).await),
        Action::GuestOsInfo => json(client.get_guest_info().await),
        Action::UserList => json(client.get_users().await).and_then(listed),
        Action::FilesystemList => json(client.get_filesystems().await).and_then(listed),
    }
}
