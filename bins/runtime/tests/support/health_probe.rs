//! The client side of the health endpoints' tests (virt-controller's and virt-handler's
//! `tests/health_tls.rs`): a probe over HTTPS that trusts only the CA it is given, as the
//! kubelet's probe of KubeVirt's components trusts their operator's CA, and the plain HTTP/1.1
//! request under it. Included by path (`#[path = "../../runtime/tests/support/health_probe.rs"]`):
//! the components serve their health endpoints with this crate's server, and the client is test
//! code, kept out of the library.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// `GET path` over TLS to `localhost` at `addr`, trusting only the PEM certificates in `ca`:
/// (status, body), or the TLS/IO error.
pub async fn https_get(addr: SocketAddr, ca: &str, path: &str) -> Result<(u16, String), String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    request(&mut tls, path).await
}

/// `GET path` in plain HTTP/1.1 on `stream`, read until the server closes: (status, body), or
/// the IO error or what arrived when it is not an HTTP response.
pub async fn request<S>(stream: &mut S, path: &str) -> Result<(u16, String), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // The server may close without a TLS close_notify: keep what arrived.
    while let Ok(n) = stream.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    Ok((status, body.unwrap_or_default()))
}
