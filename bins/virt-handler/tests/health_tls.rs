//! virt-handler's health endpoints as KubeVirt's DaemonSet probes them: `/healthz` over HTTPS
//! on `--port` with the certificate its operator mounts (`--tls-cert-file` / `--tls-key-file`,
//! the Secret `kubevirt-virt-handler-server-certs`); plain HTTP when it is absent.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use clap::Parser;
use kvrs_runtime::kube::daemon::DaemonMetrics;
use kvrs_virt_handler::{Flags, serve_health};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// `GET path` over TLS, trusting only `ca`: (status, body), or the TLS/IO error.
async fn https_get(addr: SocketAddr, ca: &str, path: &str) -> Result<(u16, String), String> {
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

/// `GET path` in plain HTTP/1.1 on `stream`, read until the server closes.
async fn request<S>(stream: &mut S, path: &str) -> Result<(u16, String), String>
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

/// KubeVirt's rendered command line, the port picked free and the certificate's files in `dir`.
fn kubevirt_flags(dir: &Path) -> Flags {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    Flags::try_parse_from([
        "virt-handler",
        "--port",
        "0",
        "--hostname-override",
        "node01",
        "--pod-ip-address",
        "127.0.0.1",
        "--max-metric-requests",
        "3",
        "--console-server-port",
        "8186",
        "--vmstats-server-port",
        "8187",
        "--graceful-shutdown-seconds",
        "315",
        "-v",
        "2",
        "--listen",
        "127.0.0.1",
        &format!("--tls-cert-file={}", crt.display()),
        &format!("--tls-key-file={}", key.display()),
    ])
    .unwrap()
}

#[tokio::test]
async fn the_probe_answers_over_tls_with_the_mounted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = kvrs_virt_api::certs::throwaway_pki("localhost").unwrap();
    std::fs::write(dir.path().join("tls.crt"), &pki.serving.0).unwrap();
    std::fs::write(dir.path().join("tls.key"), &pki.serving.1).unwrap();
    let metrics = DaemonMetrics::new("virt-handler");
    let (addr, https) = serve_health(&kubevirt_flags(dir.path()), &metrics)
        .await
        .unwrap();
    assert!(
        https,
        "KubeVirt's command line with its certificate present"
    );
    // KubeVirt's liveness and readiness probes both ask `/healthz`.
    assert_eq!(
        https_get(addr, &pki.ca, "/healthz").await.unwrap(),
        (200, "ok".to_string())
    );
    metrics.set_ready(true);
    assert_eq!(https_get(addr, &pki.ca, "/readyz").await.unwrap().0, 200);
    let other = kvrs_virt_api::certs::throwaway_pki("localhost").unwrap();
    assert!(https_get(addr, &other.ca, "/healthz").await.is_err());
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert!(
        request(&mut tcp, "/healthz").await.is_err(),
        "no plain HTTP"
    );
}

#[tokio::test]
async fn without_the_certificate_the_endpoints_stay_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = DaemonMetrics::new("virt-handler");
    let (addr, https) = serve_health(&kubevirt_flags(dir.path()), &metrics)
        .await
        .unwrap();
    assert!(!https);
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert_eq!(
        request(&mut tcp, "/healthz").await.unwrap(),
        (200, "ok".to_string())
    );
}
