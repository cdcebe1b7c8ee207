//! virt-api → virt-handler over mutual TLS, as KubeVirt's handler-to-api pattern: both sides'
//! certificates are signed by one CA, here the CA virt-api already keeps for its webhooks
//! (`kvrs-virt-api-certs`). virt-api issues
//!
//! - virt-handler's serving certificate into the Secret [`HANDLER_SECRET`] (`tls.crt`,
//!   `tls.key`, and `ca.crt`: the CA bundle that handler trusts clients by), which the handler
//!   DaemonSet mounts, renewed when a fifth of its life is left or the CA bundle changes;
//! - its own client certificate, in memory only (nothing else needs it; each replica makes
//!   its own from the shared CA).
//!
//! virt-handler listens on its pod's IP, which no certificate can name ahead of time: virt-api
//! dials the pod's address and verifies the certificate for the fixed name
//! [`HANDLER_SERVER_NAME`] instead (KubeVirt checks the handler's common name; the effect is
//! the same: only a certificate the CA issued for virt-handler is accepted).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tracing::info;

use crate::certs::der::pem_blocks;
use crate::certs::{self, Bundle, CA_CERT, CertError, Leaf, TLS_CERT, TLS_KEY, migration};

pub use super::vmi::HANDLER_SECRET;
/// The name virt-handler's serving certificate is issued for and verified against.
pub const HANDLER_SERVER_NAME: &str = "virt-handler.kubevirt.internal";
/// The common name of virt-handler's serving certificate (KubeVirt's).
pub const HANDLER_COMMON_NAME: &str = "kubevirt.io:system:node:virt-handler";
/// The common name of virt-api's client certificate (KubeVirt's).
pub const CLIENT_COMMON_NAME: &str = "kubevirt.io:system:client:virt-handler";
/// The most of a handler's answer read (the agent's lists are small JSON documents).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// How long a call to the handler may take, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a handler call or its TLS set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// No client certificate loaded yet.
    #[error("virt-api has no client certificate for virt-handler yet")]
    NotReady,
    /// A certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// Issuing a certificate failed.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// Connecting, the handshake or the exchange failed.
    #[error("{0}")]
    Transport(String),
    /// No answer in [`CALL_TIMEOUT`].
    #[error("virt-handler did not answer within {CALL_TIMEOUT:?}")]
    Timeout,
}

impl HandlerError {
    /// A stable label for logs.
    pub fn label(&self) -> &'static str {
        match self {
            HandlerError::NotReady => "not_ready",
            HandlerError::Tls(_) => "tls",
            HandlerError::Cert(_) => "cert",
            HandlerError::Transport(_) => "transport",
            HandlerError::Timeout => "timeout",
        }
    }
}

/// A handler's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerAnswer {
    /// The HTTP status.
    pub status: u16,
    /// Its reason phrase (`Internal Server Error`).
    pub reason: String,
    /// The body.
    pub body: Vec<u8>,
}

/// The mTLS client configuration, replaced when the CA bundle changes.
#[derive(Debug, Default)]
pub struct HandlerClient {
    config: RwLock<Option<(String, Arc<ClientConfig>)>>,
}

fn tls_err(e: impl std::fmt::Display) -> HandlerError {
    HandlerError::Tls(e.to_string())
}

/// A client configuration trusting `ca_bundle` and presenting `cert_pem` / `key_pem`.
pub fn client_config(
    ca_bundle: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<ClientConfig, HandlerError> {
    let mut roots = RootCertStore::empty();
    for der in pem_blocks(ca_bundle, "CERTIFICATE") {
        roots.add(CertificateDer::from(der)).map_err(tls_err)?;
    }
    let chain: Vec<CertificateDer<'static>> = pem_blocks(cert_pem, "CERTIFICATE")
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let key = pem_blocks(key_pem, "PRIVATE KEY")
        .into_iter()
        .next()
        .ok_or_else(|| tls_err("no PRIVATE KEY"))?;
    let config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)))
        .map_err(tls_err)?;
    Ok(config)
}

impl HandlerClient {
    /// Issues a client certificate from `bundle`'s CA at `now` unless the bundle is the one
    /// already loaded; returns whether it changed.
    pub fn load(&self, bundle: &Bundle, now: i64) -> Result<bool, HandlerError> {
        let ca_bundle = bundle.ca_bundle(now);
        let current = self.config.read().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|(ca, _)| *ca == ca_bundle) {
            return Ok(false);
        }
        drop(current);
        let (cert, key) = certs::issue_for(
            &bundle.ca_cert,
            &bundle.ca_key,
            &Leaf {
                names: &[],
                common_name: CLIENT_COMMON_NAME,
                client: true,
            },
            now,
            // Never past the CA (`issue_for` caps it); replaced with the CA.
            Duration::from_secs(365 * 24 * 3600),
        )?;
        let config = client_config(&ca_bundle, &cert, &key)?;
        *self.config.write().unwrap_or_else(|p| p.into_inner()) =
            Some((ca_bundle, Arc::new(config)));
        Ok(true)
    }

    /// Uses `config` as it is (tests).
    pub fn set(&self, config: ClientConfig) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) =
            Some((String::new(), Arc::new(config)));
    }

    /// `method path` on the handler at `address` (`ip:port`), with `body`.
    pub async fn call(
        &self,
        address: &str,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<HandlerAnswer, HandlerError> {
        let config = self
            .config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, c)| c.clone())
            .ok_or(HandlerError::NotReady)?;
        tokio::time::timeout(CALL_TIMEOUT, exchange(config, address, method, path, body))
            .await
            .map_err(|_| HandlerError::Timeout)?
    }
}

/// A handler's answer to a WebSocket dial other than `101 Switching Protocols`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRefused {
    /// The HTTP status.
    pub status: u16,
    /// Its `Content-Type`.
    pub content_type: String,
    /// The body (at most [`MAX_ANSWER_BYTES`]).
    pub body: Vec<u8>,
}

/// Why a stream to the handler was not opened.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The handler answered, but not with an upgrade.
    #[error("virt-handler refused the stream with {}", .0.status)]
    Refused(StreamRefused),
    /// It could not be reached or spoke no WebSocket.
    #[error(transparent)]
    Handler(#[from] HandlerError),
}

/// KubeVirt's raw stream subprotocol, asked of the handler as KubeVirt's dialer asks it.
pub const PLAIN_STREAM_PROTOCOL: &str = "plain.kubevirt.io";

impl HandlerClient {
    /// Opens the WebSocket at `path` on the handler at `address` (`ip:port`): the connection
    /// once the handler switched protocols, its frames left to the caller.
    pub async fn open_stream(
        &self,
        address: &str,
        path: &str,
    ) -> Result<hyper::upgrade::Upgraded, StreamError> {
        let config = self
            .config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, c)| c.clone())
            .ok_or(HandlerError::NotReady)?;
        tokio::time::timeout(CALL_TIMEOUT, dial_stream(config, address, path))
            .await
            .map_err(|_| HandlerError::Timeout)?
    }
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64.
fn websocket_key() -> String {
    use base64::Engine;
    use ring::rand::{SecureRandom, SystemRandom};
    let mut nonce = [0u8; 16];
    // The system RNG does not fail on Linux; a failure leaves zeros, still a valid key.
    let _ = SystemRandom::new().fill(&mut nonce);
    base64::engine::general_purpose::STANDARD.encode(nonce)
}

/// A mutual-TLS connection to the handler at `address`, its certificate checked for the
/// handler's server name.
async fn connect(
    config: Arc<ClientConfig>,
    address: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HandlerError> {
    let tcp = TcpStream::connect(address)
        .await
        .map_err(|e| HandlerError::Transport(format!("dial tcp {address}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(HANDLER_SERVER_NAME).map_err(tls_err)?;
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| HandlerError::Transport(format!("TLS with {address}: {e}")))
}

async fn dial_stream(
    config: Arc<ClientConfig>,
    address: &str,
    path: &str,
) -> Result<hyper::upgrade::Upgraded, StreamError> {
    let transport = |e: &dyn std::fmt::Display| HandlerError::Transport(e.to_string());
    let tls = connect(config, address).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| transport(&e))?;
    // Driven until the upgrade hands the connection over (or the answer is read).
    tokio::spawn(connection.with_upgrades());
    let key = websocket_key();
    let request = hyper::Request::builder()
        .method("GET")
        .uri(path)
        .header(hyper::header::HOST, HANDLER_SERVER_NAME)
        .header(hyper::header::CONNECTION, "Upgrade")
        .header(hyper::header::UPGRADE, "websocket")
        .header(hyper::header::SEC_WEBSOCKET_VERSION, "13")
        .header(hyper::header::SEC_WEBSOCKET_KEY, &key)
        .header(hyper::header::SEC_WEBSOCKET_PROTOCOL, PLAIN_STREAM_PROTOCOL)
        .body(Full::new(Bytes::new()))
        .map_err(|e| transport(&e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| transport(&e))?;
    let status = response.status();
    if status != hyper::StatusCode::SWITCHING_PROTOCOLS {
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        return Err(StreamError::Refused(StreamRefused {
            status: status.as_u16(),
            content_type,
            body,
        }));
    }
    let accepted = response
        .headers()
        .get(hyper::header::SEC_WEBSOCKET_ACCEPT)
        .and_then(|v| v.to_str().ok());
    if accepted != Some(super::stream::accept_key(&key).as_str()) {
        return Err(HandlerError::Transport(
            "virt-handler's Sec-WebSocket-Accept does not match the key sent".into(),
        )
        .into());
    }
    hyper::upgrade::on(response)
        .await
        .map_err(|e| HandlerError::Transport(format!("upgrading the connection: {e}")).into())
}

async fn exchange(
    config: Arc<ClientConfig>,
    address: &str,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<HandlerAnswer, HandlerError> {
    let transport = |e: &dyn std::fmt::Display| HandlerError::Transport(e.to_string());
    let tls = connect(config, address).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| transport(&e))?;
    let driver = tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, HANDLER_SERVER_NAME)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| transport(&e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| transport(&e))?;
    let status = response.status();
    let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| HandlerError::Transport(format!("reading the answer: {e}")))?
        .to_bytes();
    driver.abort();
    Ok(HandlerAnswer {
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or("").to_string(),
        body: bytes.to_vec(),
    })
}

/// What the handler Secret must hold for `bundle` at `now`, when what it holds (`found`:
/// its `tls.crt`, `ca.crt` and migration `client.crt`) is not good any more: missing, due for
/// renewal, or trusting another CA bundle. `None`: keep it. Both pairs are issued together,
/// so one volume update gives the handler a consistent set.
pub fn handler_secret_data(
    found: Option<(&str, &str, Option<&str>)>,
    bundle: &Bundle,
    now: i64,
    validity: Duration,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, CertError> {
    let ca_bundle = bundle.ca_bundle(now);
    if let Some((cert, ca, client)) = found
        && ca == ca_bundle
        && !certs::leaf_due(cert, now)
        && !migration::client_due(client, now)
    {
        return Ok(None);
    }
    let (client_cert, client_key) = migration::issue_client(bundle, now, validity)?;
    let (cert, key) = certs::issue_for(
        &bundle.ca_cert,
        &bundle.ca_key,
        &Leaf {
            names: &[HANDLER_SERVER_NAME.to_string()],
            common_name: HANDLER_COMMON_NAME,
            client: false,
        },
        now,
        validity,
    )?;
    Ok(Some(BTreeMap::from([
        (TLS_CERT.to_string(), cert.into_bytes()),
        (TLS_KEY.to_string(), key.into_bytes()),
        (CA_CERT.to_string(), ca_bundle.into_bytes()),
        (migration::CLIENT_CERT.to_string(), client_cert.into_bytes()),
        (migration::CLIENT_KEY.to_string(), client_key.into_bytes()),
    ])))
}

/// Keeps the handler Secret `namespace/HANDLER_SECRET` current for `bundle` (server-side
/// apply: replicas racing write equally valid certificates from the same CA).
pub async fn sync_handler_secret(
    client: &kube::Client,
    namespace: &str,
    bundle: &Bundle,
    now: i64,
    validity: Duration,
) -> Result<bool, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let current = api
        .get_opt(HANDLER_SECRET)
        .await
        .map_err(|e| format!("reading {namespace}/{HANDLER_SECRET}: {e}"))?;
    let text = |s: &Secret, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    let held = current.as_ref().and_then(|s| {
        Some((
            text(s, TLS_CERT)?,
            text(s, CA_CERT)?,
            text(s, migration::CLIENT_CERT),
        ))
    });
    let Some(data) = handler_secret_data(
        held.as_ref()
            .map(|(c, ca, client)| (c.as_str(), ca.as_str(), client.as_deref())),
        bundle,
        now,
        validity,
    )
    .map_err(|e| e.to_string())?
    else {
        return Ok(false);
    };
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(HANDLER_SECRET.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "kvrs-virt-api".to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&secret).map_err(|e| e.to_string())?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    api.patch(
        HANDLER_SECRET,
        &PatchParams::apply("kvrs-virt-api").force(),
        &Patch::Apply(value),
    )
    .await
    .map_err(|e| format!("writing {namespace}/{HANDLER_SECRET}: {e}"))?;
    info!(secret = %format!("{namespace}/{HANDLER_SECRET}"), "virt-handler's certificate written");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(now: i64) -> Bundle {
        let (ca_cert, ca_key) = certs::new_ca(now, Duration::from_secs(7 * 86400)).unwrap();
        let (cert, key) = certs::issue(
            &ca_cert,
            &ca_key,
            &["virt-api".into()],
            now,
            Duration::from_secs(86400),
        )
        .unwrap();
        Bundle {
            ca_cert,
            ca_key,
            previous_ca_cert: None,
            cert,
            key,
        }
    }

    #[test]
    fn the_handler_secret_is_issued_once_and_renewed_when_due_or_the_ca_changes() {
        let now = 1_700_000_000;
        let b = bundle(now);
        let day = Duration::from_secs(86400);
        let data = handler_secret_data(None, &b, now, day).unwrap().unwrap();
        let cert = String::from_utf8(data[TLS_CERT].clone()).unwrap();
        let ca = String::from_utf8(data[CA_CERT].clone()).unwrap();
        let client = String::from_utf8(data[migration::CLIENT_CERT].clone()).unwrap();
        assert!(data.contains_key(migration::CLIENT_KEY));
        assert_eq!(ca, b.ca_bundle(now));
        let held = Some((cert.as_str(), ca.as_str(), Some(client.as_str())));
        assert!(
            handler_secret_data(held, &b, now + 3600, day)
                .unwrap()
                .is_none()
        );
        // A Secret written before the migration client pair existed gets one.
        assert!(
            handler_secret_data(Some((&cert, &ca, None)), &b, now + 3600, day)
                .unwrap()
                .is_some()
        );
        // A fifth of a day before the end: renewed.
        assert!(
            handler_secret_data(held, &b, now + 86400 - 3600, day)
                .unwrap()
                .is_some()
        );
        let other = bundle(now);
        assert!(
            handler_secret_data(held, &other, now, day)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_client_configuration_is_made_from_the_bundle_once() {
        let now = 1_700_000_000;
        let b = bundle(now);
        let client = HandlerClient::default();
        assert!(client.load(&b, now).unwrap());
        assert!(!client.load(&b, now + 10).unwrap());
        assert!(client.load(&bundle(now), now).unwrap());
    }
}
