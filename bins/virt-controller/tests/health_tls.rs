//! virt-controller's health endpoints as KubeVirt's Deployment probes them: HTTPS on `--port`
//! with the certificate its operator mounts (`--prom-cert-file` / `--prom-key-file`), `/healthz`
//! and `/leader` answering as KubeVirt's (200 on a standby too); a renewed certificate served
//! without a restart; plain HTTP when the certificate is absent.

#[path = "../../runtime/tests/support/health_probe.rs"]
mod health_probe;

use std::path::Path;

use clap::Parser;
use health_probe::{https_get, request};
use kvrs_runtime::kube::daemon::DaemonMetrics;
use kvrs_virt_controller::{Flags, serve_health};
use tokio::net::TcpStream;

fn write_pair(dir: &Path, pki: &kvrs_virt_api::certs::ThrowawayPki) {
    std::fs::write(dir.join("tls.crt"), &pki.serving.0).unwrap();
    std::fs::write(dir.join("tls.key"), &pki.serving.1).unwrap();
}

/// KubeVirt's rendered command line, the port picked free and the certificate's files in `dir`.
fn kubevirt_flags(dir: &Path) -> Flags {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    Flags::try_parse_from([
        "virt-controller",
        "--launcher-image",
        "kvrs/virt-launcher:v0.1.0",
        "--exporter-image",
        "quay.io/kubevirt/virt-exportserver:v1.9.0",
        "--port",
        "0",
        "-v",
        "2",
        "--listen",
        "127.0.0.1",
        "--prom-cert-file",
        crt.to_str().unwrap(),
        "--prom-key-file",
        key.to_str().unwrap(),
    ])
    .unwrap()
}

#[tokio::test]
async fn the_probes_answer_over_tls_with_the_mounted_certificate() {
    let dir = std::env::temp_dir().join(format!("kvrs-ctl-health-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pki = kvrs_virt_api::certs::throwaway_pki("localhost").unwrap();
    write_pair(&dir, &pki);
    let metrics = DaemonMetrics::new("virt-controller");
    let (addr, https) = serve_health(&kubevirt_flags(&dir), &metrics).await.unwrap();
    assert!(
        https,
        "KubeVirt's command line with its certificate present"
    );

    // The liveness probe.
    assert_eq!(
        https_get(addr, &pki.ca, "/healthz").await.unwrap(),
        (200, "ok".to_string())
    );
    // The readiness probe: 200 on a standby, leadership in KubeVirt's body.
    assert_eq!(
        https_get(addr, &pki.ca, "/leader").await.unwrap(),
        (200, r#"{"apiserver":{"leader":"false"}}"#.to_string())
    );
    metrics.set_leading(true);
    assert_eq!(
        https_get(addr, &pki.ca, "/leader").await.unwrap(),
        (200, r#"{"apiserver":{"leader":"true"}}"#.to_string())
    );
    // The certificate is what the client checks: a client trusting another CA is refused.
    let other = kvrs_virt_api::certs::throwaway_pki("localhost").unwrap();
    let refused = https_get(addr, &other.ca, "/healthz").await.unwrap_err();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");
    // Plain HTTP on the HTTPS port gets no HTTP answer.
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert!(request(&mut tcp, "/healthz").await.is_err());

    // The operator renews the Secret: the next handshake serves the new certificate.
    write_pair(&dir, &other);
    assert_eq!(https_get(addr, &other.ca, "/healthz").await.unwrap().0, 200);
    assert!(https_get(addr, &pki.ca, "/healthz").await.is_err());
    // A broken renewal keeps the last good certificate in service.
    std::fs::write(dir.join("tls.key"), "not a key").unwrap();
    assert_eq!(https_get(addr, &other.ca, "/healthz").await.unwrap().0, 200);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn without_the_certificate_the_endpoints_stay_plain_http() {
    let dir = std::env::temp_dir().join(format!("kvrs-ctl-health-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let metrics = DaemonMetrics::new("virt-controller");
    let (addr, https) = serve_health(&kubevirt_flags(&dir), &metrics).await.unwrap();
    assert!(!https);
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert_eq!(
        request(&mut tcp, "/healthz").await.unwrap(),
        (200, "ok".to_string())
    );
    // kvrs's own `/leader`: 503 on a standby (its own probes use `/readyz`).
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert_eq!(request(&mut tcp, "/leader").await.unwrap().0, 503);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn an_unusable_certificate_at_start_is_an_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("kvrs-ctl-health-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), "not a certificate").unwrap();
    std::fs::write(dir.join("tls.key"), "not a key").unwrap();
    let metrics = DaemonMetrics::new("virt-controller");
    let err = serve_health(&kubevirt_flags(&dir), &metrics)
        .await
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("tls.crt"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
