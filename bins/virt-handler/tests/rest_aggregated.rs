//! `PUT .../virtualmachineinstances/guest/pause` through kube-apiserver, the whole way: the
//! apiserver's aggregator (APIServices of `bins/deploy/virt-api`) → virt-api (its daemon, in
//! this process, with its ServiceAccount and RBAC) → the virt-handler pod of the VMI's node over
//! mutual TLS (the binary, its serving certificate the one virt-api itself wrote into
//! `kubevirt/kvrs-virt-handler-certs`) → the launcher → the paused domain and the VMI's Paused
//! condition; `unpause` and `guestosinfo` likewise (`kubectl replace|get --raw`); the serial
//! `console` as `virtctl console` opens it (a WebSocket through the aggregator and virt-api to
//! the handler), the guest's shell answering what is typed, a missing VMI refused with 404;
//! `vnc` the same way (the display's RFB greeting).
//!
//! The setup is [`support::aggregated`]'s; virt-api listens on [`ADDRESS`] of link [`LINK`]
//! (other addresses, other links than virt-api's `subresources` test and `virtctl.rs`: they may
//! run at once).

mod support;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use support::*;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

const LINK: &str = "kvrs-api1";
const ADDRESS: &str = "10.253.0.2";

/// A console WebSocket through kube-apiserver, as virtctl opens one (the admin's token).
type Console = WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

/// `GET path` upgraded to KubeVirt's `plain.kubevirt.io` WebSocket on the API server: the
/// stream, or the refusal's status and body.
async fn open_console(
    c: &kvrs_test_cluster::TestCluster,
    path: &str,
) -> Result<Console, (u16, String)> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(c.ca_cert_pem().as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let authority = c.server_url().trim_start_matches("https://").to_string();
    let host = authority.rsplit_once(':').unwrap().0.to_string();
    let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let tls = TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::try_from(host).unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection.with_upgrades());
    let request = hyper::Request::get(path)
        .header("host", &authority)
        .header("authorization", format!("Bearer {}", c.admin_token()))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-protocol", "plain.kubevirt.io")
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    if status != 101 {
        use http_body_util::BodyExt;
        let body = response.into_body().collect().await.unwrap().to_bytes();
        return Err((status, String::from_utf8_lossy(&body).into_owned()));
    }
    assert_eq!(
        response.headers()["sec-websocket-accept"],
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
        "the RFC's answer to its example key"
    );
    let upgraded = hyper::upgrade::on(response).await.unwrap();
    Ok(
        WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            Role::Client,
            None,
        )
        .await,
    )
}

/// Types `command` until the console shows `answer` (the shell may still be starting).
async fn ask(console: &mut Console, command: &str, answer: &str) -> Result<String, String> {
    let mut seen = String::new();
    for _ in 0..40 {
        console
            .send(Message::Binary(format!("{command}\r").into_bytes().into()))
            .await
            .map_err(|e| format!("typing: {e}"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while !seen.contains(answer) {
            match tokio::time::timeout_at(deadline, console.next()).await {
                Err(_) => break,
                Ok(Some(Ok(Message::Binary(b)))) => seen.push_str(&String::from_utf8_lossy(&b)),
                Ok(other) => return Err(format!("the console: {other:?}; it showed:\n{seen}")),
            }
        }
        if seen.contains(answer) {
            return Ok(seen);
        }
    }
    Err(format!("no {answer:?} on the console; it showed:\n{seen}"))
}

#[test]
fn pause_unpause_and_guestosinfo_through_the_aggregator() {
    let _one = serial();
    let mut setup = aggregated::Aggregated::start(LINK, ADDRESS, "aggregated");
    let (cluster, dirs, handler, rt) = (&setup.cluster, &setup.dirs, &setup.handler, &setup.rt);
    let c = &cluster.cluster;

    let (_, mut pod) = boot_vmi_with_agent(cluster, dirs, handler, 1, guest_with_shell("guest"));
    let ctx = || guest_context(cluster, handler, &pod, "guest");

    let path = |sub: &str| {
        format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/guest/{sub}"
        )
    };
    let replace = |sub: &str| {
        let out = c.kubectl_with_stdin(["replace", "--raw", &path(sub), "-f", "-"], "{}");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (ok, err) = replace("pause");
    assert!(ok, "pause: {err}\n{}", ctx());
    let vmi = wait_for(
        "the Paused condition",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_some().then_some(v)
        },
        ctx,
    );
    assert_eq!(condition(&vmi, "Paused").unwrap()["reason"], "PausedByUser");
    let (ok, err) = replace("pause");
    assert!(!ok);
    assert!(err.contains("VMI is already paused"), "{err}");

    let (ok, err) = replace("unpause");
    assert!(ok, "unpause: {err}\n{}", ctx());
    wait_for(
        "the Paused condition removed",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_none().then_some(())
        },
        ctx,
    );

    let out = c.kubectl(["get", "--raw", &path("guestosinfo")]);
    assert!(
        out.status.success(),
        "guestosinfo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: Value = serde_json::from_slice(&out.stdout).expect("guestosinfo JSON");
    assert_eq!(info["os"]["id"], kvrs_test_guest::OS_ID, "{info}");
    assert_eq!(
        info["os"]["prettyName"],
        kvrs_test_guest::OS_PRETTY_NAME,
        "{info}"
    );

    // The serial console, the whole way: the guest's shell answers what is typed.
    let mut console = rt
        .block_on(open_console(c, &path("console")))
        .unwrap_or_else(|e| panic!("the console: {e:?}\n{}", ctx()));
    rt.block_on(ask(
        &mut console,
        "echo KVRS-AGGREGATED-$((5*5))",
        "KVRS-AGGREGATED-25",
    ))
    .unwrap_or_else(|e| panic!("{e}\n{}", ctx()));
    drop(console);
    // VNC the same way: the display's RFB greeting.
    let mut display = rt
        .block_on(open_console(c, &path("vnc")))
        .unwrap_or_else(|e| panic!("VNC: {e:?}\n{}", ctx()));
    let greeting =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), display.next()).await });
    assert!(
        matches!(&greeting, Ok(Some(Ok(Message::Binary(b)))) if b.starts_with(b"RFB 003.008")),
        "VNC's greeting: {greeting:?}"
    );
    drop(display);
    let absent = format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/absent/console"
    );
    match rt.block_on(open_console(c, &absent)) {
        Err((code, body)) => {
            assert_eq!(code, 404, "{body}");
            assert!(
                body.contains(r#"virtualmachineinstance.kubevirt.io \"absent\" not found"#),
                "{body}"
            );
        }
        Ok(_) => panic!("a missing VMI's console was opened"),
    }

    pod.delete();
    setup.stop_api();
}
