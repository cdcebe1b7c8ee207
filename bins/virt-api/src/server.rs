//! The HTTPS shell around [`crate::handle`]: hyper's HTTP/1.1 server behind tokio-rustls (ring),
//! with the limits a webhook facing the API server wants and a certificate that can be swapped
//! while serving ([`ReloadableCert`]).
//!
//! Limits (each answered, never a panic, and the server keeps serving):
//! - a TLS handshake must finish within [`Limits::handshake_timeout`];
//! - a request head within [`Limits::header_timeout`] (also closes idle keep-alive
//!   connections), at most 16 KiB;
//! - a body within [`Limits::body_timeout`] (408 otherwise) and at most [`MAX_BODY_BYTES`]
//!   (413, refused from `Content-Length` before reading when it says so);
//! - at most [`Limits::max_connections`] connections at once; more wait in the backlog.
//!
//! Routes: `POST` on each [`Webhook`] path, `GET /healthz`, and the aggregated API: `/apis`,
//! `/version`, everything under `/apis/subresources.kubevirt.io` ([`crate::subresources`]; its
//! namespaced routes only for the aggregator, [`crate::auth`]; a VMI's `console` and `vnc`
//! upgraded to a WebSocket piped to its virt-handler, [`crate::subresources::stream`]); anything
//! else is 404 or 405.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kvrs_admission::ClusterConfig;
use kvrs_api::time::Now;
use kvrs_runtime::kube::kubevirt_config::LiveConfig;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring::sign::any_supported_type;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tracing::{debug, info, warn};

use crate::auth::{self, FrontProxy, OptionalClientCert, common_name};
use crate::certs::der::pem_blocks;
use crate::subresources::{self, ApiError, Route};
use crate::webhooks::{Context, Facts, Webhook, lookup};
use crate::{MAX_BODY_BYTES, Reply, answer, read_request};

/// The serving certificate, replaceable while the server runs: each new TLS handshake takes
/// the one current then.
#[derive(Debug, Default)]
pub struct ReloadableCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

/// Why a certificate could not be loaded or the server started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The PEM has no certificate or no PKCS#8 key.
    #[error("the serving certificate PEM has no {0}")]
    Pem(&'static str),
    /// rustls refused the key or configuration.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// The address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl ServerError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            ServerError::Pem(_) => "pem",
            ServerError::Tls(_) => "tls",
            ServerError::Bind { .. } => "bind",
        }
    }
}

impl ReloadableCert {
    /// Serves `cert_pem` (the certificate, then any chain) with `key_pem` from now on.
    pub fn load(&self, cert_pem: &str, key_pem: &str) -> Result<(), ServerError> {
        let chain: Vec<CertificateDer<'static>> = pem_blocks(cert_pem, "CERTIFICATE")
            .into_iter()
            .map(CertificateDer::from)
            .collect();
        if chain.is_empty() {
            return Err(ServerError::Pem("CERTIFICATE"));
        }
        let key = pem_blocks(key_pem, "PRIVATE KEY")
            .into_iter()
            .next()
            .ok_or(ServerError::Pem("PRIVATE KEY"))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
        let signer = any_supported_type(&key)?;
        let certified = Arc::new(CertifiedKey::new(chain, signer));
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(certified);
        Ok(())
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The connection and request limits (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// TLS handshake deadline.
    pub handshake_timeout: Duration,
    /// Request head deadline (and keep-alive idle limit).
    pub header_timeout: Duration,
    /// Body deadline, from the end of the head.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // The API server gives a webhook 10 s (KubeVirt's timeoutSeconds) for the whole call.
        Limits {
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 256,
        }
    }
}

/// KubeVirt's (kvrs's) service accounts, as the API server names their users.
#[derive(Clone, Debug, Default)]
pub struct Accounts {
    /// Every one of them.
    pub all: BTreeSet<String>,
    /// virt-controller's.
    pub controller: String,
    /// virt-handler's.
    pub handler: String,
}

/// What the request handler shares.
pub struct AppState {
    /// The live cluster configuration.
    pub config: LiveConfig<ClusterConfig>,
    /// KubeVirt's service accounts.
    pub accounts: Accounts,
    /// For the facts some webhooks need (`None`: they are refused as unreadable).
    pub client: Option<kube::Client>,
    /// The requestheader settings the subresource routes are authenticated with.
    pub front_proxy: Arc<FrontProxy>,
    /// How the VMI subresources reach virt-handler (`None`: they answer 501).
    pub handlers: Option<subresources::serve::Handlers>,
}

/// A bound, not yet serving, HTTPS server.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: TlsAcceptor,
    state: Arc<AppState>,
    limits: Limits,
}

impl Server {
    /// Binds `addr` with `cert` as the serving certificate.
    pub async fn bind(
        addr: SocketAddr,
        cert: Arc<ReloadableCert>,
        state: AppState,
        limits: Limits,
    ) -> Result<Server, ServerError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(Arc::new(OptionalClientCert(state.front_proxy.clone())))
            .with_cert_resolver(cert);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let bind_error = |source| ServerError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        Ok(Server {
            listener,
            local_addr,
            tls: TlsAcceptor::from(Arc::new(config)),
            state: Arc::new(state),
            limits,
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes, then stops accepting and gives open connections a
    /// few seconds.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_timeout)
            .max_buf_size(16 * 1024);
        let mut connections = JoinSet::new();
        info!(addr = %self.local_addr, "serving KubeVirt's admission webhooks over HTTPS");
        tokio::pin!(shutdown);
        loop {
            let full = connections.len() >= self.limits.max_connections;
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept(), if !full => match accepted {
                    Ok((stream, peer)) => {
                        // Console and VNC frames are small: no Nagle delay behind a delayed ACK.
                        let _ = stream.set_nodelay(true);
                        let (tls, http, state, limits) =
                            (self.tls.clone(), http.clone(), self.state.clone(), self.limits);
                        connections.spawn(async move {
                            let handshake = tokio::time::timeout(limits.handshake_timeout, tls.accept(stream));
                            let stream = match handshake.await {
                                Ok(Ok(s)) => s,
                                Ok(Err(e)) => return debug!(%peer, error = %e, "TLS handshake failed"),
                                Err(_) => return debug!(%peer, "TLS handshake timed out"),
                            };
                            // The verified client certificate's name, if one was presented.
                            let peer_cn: Option<Arc<str>> = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .and_then(|c| common_name(c))
                                .map(Arc::from);
                            let service = hyper::service::service_fn(move |req| {
                                let (state, peer_cn) = (state.clone(), peer_cn.clone());
                                async move { Ok::<_, Infallible>(respond(&state, req, limits, peer_cn.as_deref()).await) }
                            });
                            // With upgrades: a console's connection is handed to its pipe.
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
        drop(self.listener);
        let drained = tokio::time::timeout(Duration::from_secs(5), async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            connections.shutdown().await;
        }
        info!(addr = %self.local_addr, "stopped serving");
    }
}

fn reply(r: Reply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(r.body)));
    *response.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(r.content_type));
    response
}

/// Two fresh random (version 4) UUIDs.
fn fresh_uuids() -> [String; 2] {
    use ring::rand::{SecureRandom, SystemRandom};
    let rng = SystemRandom::new();
    std::array::from_fn(|_| {
        let mut b = [0u8; 16];
        // The system RNG does not fail on Linux; a failure leaves zeros, still a valid UUID.
        let _ = rng.fill(&mut b);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    })
}

fn wall_clock() -> Now {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    Now::from_unix(unix)
}

async fn respond(
    state: &AppState,
    req: Request<Incoming>,
    limits: Limits,
    peer_cn: Option<&str>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    if path == "/healthz" {
        return match *req.method() {
            Method::GET | Method::HEAD => reply(Reply::text(200, "ok")),
            _ => not_allowed("GET"),
        };
    }
    if path.starts_with("/apis") || path == "/version" || path == "/" {
        return aggregated(state, req, limits, peer_cn).await;
    }
    let Some(webhook) = Webhook::from_path(&path) else {
        return reply(Reply::text(404, format!("no webhook at {path}")));
    };
    if req.method() != Method::POST {
        return not_allowed("POST");
    }
    let json = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim() == "application/json")
        });
    if !json {
        return reply(Reply::text(400, "expected Content-Type application/json"));
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let started = Instant::now();
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES);
    let bytes = match tokio::time::timeout(limits.body_timeout, body.collect()).await {
        Err(_) => return reply(Reply::text(408, "the request body did not arrive in time")),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Ok(Err(e)) => return reply(Reply::text(400, format!("reading the body: {e}"))),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let request = match read_request(&bytes) {
        Ok(r) => r,
        Err((reply_400, e)) => {
            warn!(webhook = webhook.label(), reason = e.label(), "{e}");
            return reply(reply_400);
        }
    };
    let facts = match (lookup(webhook, &request), &state.client) {
        (None, _) => Facts::default(),
        // Its read ends with a write (the evacuation mark), which needs the request.
        (Some(crate::webhooks::Lookup::Eviction { .. }), Some(client)) => {
            crate::cluster::read_eviction_facts(client, &request).await
        }
        (Some(l), Some(client)) => crate::cluster::read_facts(client, &l).await,
        (Some(_), None) => Facts {
            error: Some("virt-api has no client to read the cluster with".into()),
            ..Facts::default()
        },
    };
    let config = state.config.current();
    let ctx = Context {
        config: &config,
        service_accounts: &state.accounts.all,
        controller_account: &state.accounts.controller,
        handler_account: &state.accounts.handler,
        now: wall_clock(),
        fresh_uuids: if webhook == Webhook::VmMutate {
            fresh_uuids()
        } else {
            Default::default()
        },
    };
    let (out, verdict) = answer(webhook, &request, &ctx, &facts);
    let object = request.key();
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    if verdict.allowed {
        debug!(webhook = webhook.label(), %object, operation = ?request.operation, patched = verdict.patch.is_some(), micros, "admitted");
    } else {
        info!(webhook = webhook.label(), %object, operation = ?request.operation, user = %request.user_info.username, micros, "refused: {}", verdict.message());
    }
    reply(out)
}

fn json_reply(status: u16, body: Option<&serde_json::Value>) -> Response<Full<Bytes>> {
    match body {
        Some(b) => reply(Reply {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(b).unwrap_or_default(),
        }),
        None => {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            r
        }
    }
}

fn status_reply(e: &ApiError) -> Response<Full<Bytes>> {
    json_reply(e.code, Some(&e.body()))
}

/// The largest subresource request body read (KubeVirt's options are a few fields).
const MAX_SUBRESOURCE_BODY: usize = 64 * 1024;

/// The aggregated API: discovery and version for anyone (as KubeVirt serves them), the
/// subresources for the aggregator's authenticated requests only.
async fn aggregated(
    state: &AppState,
    req: Request<Incoming>,
    limits: Limits,
    peer_cn: Option<&str>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let method = req.method().as_str().to_string();
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    let info = match path.as_str() {
        "/" => Some(subresources::root_paths()),
        "/apis" | "/apis/" => Some(subresources::api_group_list()),
        "/version" => Some(subresources::version_info()),
        _ => None,
    };
    if let Some(body) = info {
        return if get {
            json_reply(200, Some(&body))
        } else {
            not_allowed("GET")
        };
    }
    let Some(route) = subresources::route(&path) else {
        return status_reply(&ApiError::status(
            404,
            "NotFound",
            &format!("the server could not find the requested resource: {path}"),
        ));
    };
    if !route.needs_auth() {
        if !get {
            return not_allowed("GET");
        }
        let body = match &route {
            Route::Group => subresources::api_group(),
            Route::Resources(v) => subresources::resource_list(v),
            Route::Version => subresources::version_info(),
            _ => return reply(Reply::text(200, "ok")),
        };
        return json_reply(200, Some(&body));
    }
    let settings = state.front_proxy.settings();
    let headers = req.headers();
    let user = match auth::authenticate(settings.as_ref(), peer_cn, |h| {
        headers
            .get_all(h)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }) {
        Ok(u) => u,
        Err(e) => {
            info!(%path, code = e.code, "subresource request refused: {}", e.message);
            return status_reply(&e);
        }
    };
    if let (
        Route::Vmi {
            namespace,
            name,
            subresource,
        },
        Some(handlers),
        Some(client),
    ) = (&route, &state.handlers, &state.client)
        && let Some(stream) = subresources::console::Stream::read(subresource, req.uri().query())
    {
        let opened =
            subresources::stream::open(client, handlers, namespace, name, stream, req, &user);
        return match opened.await {
            Ok(switching) => switching,
            Err(e) => status_reply(&e),
        };
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_SUBRESOURCE_BODY as u64) {
        return status_reply(&ApiError::status(
            413,
            "RequestEntityTooLarge",
            "the request body is too large",
        ));
    }
    let body = Limited::new(req.into_body(), MAX_SUBRESOURCE_BODY);
    let bytes = match tokio::time::timeout(limits.body_timeout, body.collect()).await {
        Err(_) => {
            return status_reply(&ApiError::status(
                408,
                "Timeout",
                "the request body did not arrive in time",
            ));
        }
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return status_reply(&ApiError::status(
                413,
                "RequestEntityTooLarge",
                "the request body is too large",
            ));
        }
        Ok(Err(e)) => {
            return status_reply(&ApiError::bad_request(&format!("reading the body: {e}")));
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let Some(client) = &state.client else {
        return status_reply(&ApiError::internal(
            "virt-api has no client to read the cluster with",
        ));
    };
    if let (Route::Vmi { .. }, Some(handlers)) = (&route, &state.handlers)
        && let Some((code, content_type, body)) =
            subresources::serve::vmi_request(client, handlers, &route, &method, &bytes, &user).await
    {
        return reply(Reply {
            status: code,
            content_type,
            body,
        });
    }
    let config = state.config.current();
    match subresources::serve::vm_request(client, &config, &route, &method, &bytes, &user).await {
        Ok((code, body)) => json_reply(code, body.as_ref()),
        Err(e) => {
            debug!(%path, user = %user.name, code = e.code, "{}", e.message);
            status_reply(&e)
        }
    }
}

fn not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut r = reply(Reply::text(405, "method not allowed"));
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}

fn too_large() -> Response<Full<Bytes>> {
    reply(Reply::text(
        413,
        format!("the AdmissionReview is larger than {MAX_BODY_BYTES} bytes"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_uuids_are_version_4_and_differ() {
        let [a, b] = fresh_uuids();
        assert_ne!(a, b);
        for u in [a, b] {
            assert_eq!(u.len(), 36);
            assert_eq!(&u[14..15], "4", "{u}");
            assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        }
    }

    #[test]
    fn a_certificate_loads_and_garbage_does_not() {
        let (ca, ca_key) = crate::certs::new_ca(1_700_000_000, Duration::from_secs(3600)).unwrap();
        let (cert, key) = crate::certs::issue(
            &ca,
            &ca_key,
            &["localhost".to_string()],
            1_700_000_000,
            Duration::from_secs(600),
        )
        .unwrap();
        let r = ReloadableCert::default();
        r.load(&cert, &key).unwrap();
        assert!(r.current.read().unwrap().is_some());
        assert_eq!(r.load("nope", &key).unwrap_err().label(), "pem");
        assert_eq!(r.load(&cert, "nope").unwrap_err().label(), "pem");
    }
}
