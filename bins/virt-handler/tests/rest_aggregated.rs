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
//! The aggregator dials the Service's endpoints, which may not be loopback addresses: virt-api
//! listens on [`ADDRESS`], added to a dummy link (or `lo`) and removed after, as virt-api's own
//! `subresources` test does (other address, other link: the two may run at once).

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
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

struct LocalAddress {
    dev: &'static str,
}

fn ip(args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"))
}

impl LocalAddress {
    fn create() -> LocalAddress {
        let _ = ip(&["link", "del", LINK]);
        let _ = ip(&["addr", "del", &format!("{ADDRESS}/32"), "dev", "lo"]);
        let dev = if ip(&["link", "add", LINK, "type", "dummy"]).status.success() {
            assert!(ip(&["link", "set", LINK, "up"]).status.success());
            LINK
        } else {
            "lo"
        };
        let guard = LocalAddress { dev };
        let out = ip(&["addr", "add", &format!("{ADDRESS}/32"), "dev", dev]);
        assert!(
            out.status.success(),
            "ip addr add {ADDRESS}/32 dev {dev}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }
}

impl Drop for LocalAddress {
    fn drop(&mut self) {
        if self.dev == LINK {
            let _ = ip(&["link", "del", LINK]);
        } else {
            let _ = ip(&["addr", "del", &format!("{ADDRESS}/32"), "dev", self.dev]);
        }
    }
}

fn yaml_docs(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

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
    let _address = LocalAddress::create();
    let cluster = Cluster::start();
    let c = &cluster.cluster;
    let deploy = root().join("bins/deploy/virt-api");
    for f in [
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "role.yaml",
        "rolebinding.yaml",
        "auth-reader-rolebinding.yaml",
    ] {
        c.apply_path(&deploy.join(f))
            .unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    for doc in yaml_docs(&deploy.join("apiservice.yaml")) {
        cluster.apply(&doc);
    }
    cluster.apply(&json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": {"configuration": {}}}));
    let api_port = std::net::TcpListener::bind((ADDRESS, 0))
        .and_then(|l| l.local_addr())
        .expect("a port on the dummy address")
        .port();
    let api_addr: SocketAddr = format!("{ADDRESS}:{api_port}").parse().unwrap();
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": api_port, "protocol": "TCP"}]}}));
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
        "subsets": [{"addresses": [{"ip": ADDRESS}],
            "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}]}]}));
    cluster.apply(
        &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kvrs-virt-api-1", "namespace": "kubevirt",
            "labels": {"kubernetes.io/service-name": "kvrs-virt-api"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ADDRESS], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}]}),
    );

    // virt-api's daemon, as its Deployment runs it, with its ServiceAccount.
    let handler_port = kvrs_test_cluster::free_loopback_port();
    let token = c.service_account_token("kubevirt", "kvrs-virt-api");
    let api_kubeconfig = c.kubeconfig_for_token(&token);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let flags = kvrs_virt_api::Flags::try_parse_from([
        "virt-api",
        "--listen",
        &api_addr.to_string(),
        "--console-server-port",
        &handler_port.to_string(),
    ])
    .expect("flags");
    let client = rt
        .block_on(kvrs_runtime::kube::setup::connect_as(
            "virt-api",
            Some(&api_kubeconfig),
        ))
        .expect("virt-api's client");
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let api = rt.spawn(async move {
        let shutdown = async move {
            let _ = api_stopped.await;
        };
        kvrs_virt_api::run(flags, client, shutdown)
            .await
            .map(drop)
            .map_err(|e| format!("{e:#}"))
    });

    // The handler's certificate, as virt-api wrote it and the DaemonSet mounts it.
    let secret = wait_for(
        "virt-api's Secret kvrs-virt-handler-certs",
        Duration::from_secs(60),
        || cluster.get("secret", Some("kubevirt"), "kvrs-virt-handler-certs"),
        || "virt-api wrote no handler Secret".into(),
    );
    let dirs = NodeDirs::new("aggregated");
    let cert_dir = dirs.root.join("certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        let b64 = secret["data"][file].as_str().expect(file);
        let out = Command::new("sh")
            .args(["-c", &format!("echo '{b64}' | base64 -d")])
            .output()
            .unwrap();
        assert!(out.status.success());
        std::fs::write(cert_dir.join(file), out.stdout).unwrap();
    }
    let handler = dirs.start_handler(
        &cluster,
        0,
        &[
            "--console-server-port",
            &handler_port.to_string(),
            "--listen-address",
            "127.0.0.1",
            "--server-cert-dir",
            cert_dir.to_str().unwrap(),
        ],
    );
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "virt-handler-agg", "namespace": "kubevirt",
            "labels": {"kubevirt.io": "virt-handler"}},
        "spec": {"nodeName": NODE, "serviceAccountName": "kvrs-handler",
            "automountServiceAccountToken": false,
            "containers": [{"name": "virt-handler", "image": "kvrs/virt-handler:v0.1.0"}]}}));
    let out = c.kubectl([
        "patch",
        "pod",
        "virt-handler-agg",
        "-n",
        "kubevirt",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for name in [
        "v1.subresources.kubevirt.io",
        "v1alpha3.subresources.kubevirt.io",
    ] {
        wait_for(
            &format!("APIService {name} Available"),
            Duration::from_secs(90),
            || {
                let svc = cluster.get("apiservice", None, name)?;
                condition(&svc, "Available")
                    .is_some_and(|c| c["status"] == "True")
                    .then_some(())
            },
            || "not available".into(),
        );
    }

    let (_, mut pod) = boot_vmi_with_agent(&cluster, &dirs, &handler, 1, guest_with_shell("guest"));
    let ctx = || guest_context(&cluster, &handler, &pod, "guest");

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
    let _ = stop_api.send(());
    let ended = rt.block_on(api).expect("virt-api's task");
    assert!(ended.is_ok(), "virt-api: {ended:?}");
}
