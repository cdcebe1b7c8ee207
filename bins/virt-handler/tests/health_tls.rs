//! virt-handler's health endpoints as KubeVirt's DaemonSet probes them: `/healthz` over HTTPS
//! on `--port` with the certificate its operator mounts (`--tls-cert-file` / `--tls-key-file`,
//! the Secret `kubevirt-virt-handler-server-certs`); plain HTTP when it is absent.

#[path = "../../runtime/tests/support/health_probe.rs"]
mod health_probe;

use std::path::Path;

use clap::Parser;
use health_probe::{https_get, request};
use kvrs_runtime::kube::daemon::DaemonMetrics;
use kvrs_virt_handler::{Flags, serve_health};
use tokio::net::TcpStream;

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
