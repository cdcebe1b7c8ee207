//! The VMI subresources from virt-api's decision to the guest, on real components: a real
//! kube-apiserver, virt-handler (the binary, its REST server on, with the serving certificate
//! virt-api's library wrote into the Secret `kubevirt/kvrs-virt-handler-certs`, as the
//! DaemonSet mounts it), a real launcher with libvirt and QEMU booting the test guest with its
//! guest agent (see `support`).
//!
//! virt-api's side is its library's `subresources::serve::vmi_request` — what its HTTPS server
//! calls once the aggregator's request is authenticated — run here with virt-api's own
//! ServiceAccount and RBAC from `bins/deploy/virt-api`: it reads the VMI, checks KubeVirt's
//! preconditions, finds the virt-handler pod of the VMI's node (a Pod object written here with
//! the handler's address, as the kubelet would report it) and calls it over mutual TLS. The
//! aggregator hop itself is covered by virt-api's `subresources` test.
//!
//! Checked: `pause` → the domain is paused and the VMI gets `Paused` (PausedByUser); a second
//! pause is 409 "VMI is already paused", a softreboot of the paused VMI 409 "VMI is paused";
//! `unpause` → running again, the condition gone; `reset` → the guest boots again; `guestosinfo`, `userlist`, `filesystemlist`
//! are the agent's answers; a VMI not running is refused (409 for pause, a plain 500 for
//! guestosinfo, as KubeVirt answers); a missing VMI is 404; the handler refuses a client
//! without a certificate, with another CA's, and with its own serving certificate.
//!
//! The serial console, on the handler's WebSocket with virt-api's client (its dial, as
//! virt-api's console stream opens it): a VMI not on this node is 404, a request that is no
//! WebSocket handshake 400; a client sees the guest boot (after the reset) and its shell
//! answer a command; a second client takes the console over and the first is closed without
//! a close frame, as KubeVirt's handler does. VNC likewise (the display's RFB greeting), and a
//! VNC client asking `preserveSession=true` is refused with 503 while another is connected.

mod support;

use std::process::Command;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use kvrs_virt_api::auth::User;
use kvrs_virt_api::certs::{self, Bundle};
use kvrs_virt_api::subresources::Route;
use kvrs_virt_api::subresources::handler::{
    HANDLER_SECRET, HandlerClient, HandlerError, StreamError, client_config, sync_handler_secret,
};
use kvrs_virt_api::subresources::serve::{Handlers, vmi_request};
use serde_json::{Value, json};
use support::*;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .cast_signed()
}

/// The domain's state as the launcher reports it (`GetDomain`).
fn domain_state(pod: &LauncherPod) -> String {
    let socket = pod.sockets_dir.join("launcher-sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let json = rt
        .block_on(async {
            let client = kvrs_ipc::LauncherClient::connect(&socket).await?;
            client.get_domain().await
        })
        .unwrap_or_else(|e| panic!("GetDomain on {}: {e}", socket.display()))
        .expect("a domain");
    let d: Value = serde_json::from_str(&json).expect("domain JSON");
    // Go's `api.Domain` JSON: untagged fields keep their Go names.
    d["Status"]["Status"]
        .as_str()
        .unwrap_or_else(|| panic!("no Status.Status in the domain: {json}"))
        .to_string()
}

/// A console client: the handler's WebSocket as virt-api dials it.
type Console = WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

async fn open_console(
    client: &HandlerClient,
    port: u16,
    name: &str,
) -> Result<Console, StreamError> {
    open_stream(client, port, &format!("{name}/console")).await
}

/// The handler's WebSocket at `.../virtualmachineinstances/{tail}`.
async fn open_stream(
    client: &HandlerClient,
    port: u16,
    tail: &str,
) -> Result<Console, StreamError> {
    let upgraded = client
        .open_stream(
            &format!("127.0.0.1:{port}"),
            &format!("/v1/namespaces/{NS}/virtualmachineinstances/{tail}"),
        )
        .await?;
    Ok(
        WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            Role::Client,
            None,
        )
        .await,
    )
}

/// Reads the console until its output holds `needle` (what was read), or says what it saw.
async fn read_until(
    console: &mut Console,
    seen: &mut String,
    needle: &str,
    within: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    while !seen.contains(needle) {
        match tokio::time::timeout_at(deadline, console.next()).await {
            Err(_) => {
                return Err(format!(
                    "no {needle:?} within {within:?}; the console showed:\n{seen}"
                ));
            }
            Ok(Some(Ok(Message::Binary(b)))) => seen.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(Ok(other))) => return Err(format!("a {other:?} message on the console")),
            Ok(Some(Err(e))) => return Err(format!("the console failed: {e}; it showed:\n{seen}")),
            Ok(None) => return Err(format!("the console closed; it showed:\n{seen}")),
        }
    }
    Ok(())
}

/// Types `command` into the guest's shell until `answer` shows (the shell starts a little after
/// the boot marker; what is typed before is lost or runs late, both harmless).
async fn ask(console: &mut Console, command: &str, answer: &str) -> Result<String, String> {
    let mut seen = String::new();
    for _ in 0..30 {
        console
            .send(Message::Binary(format!("{command}\r").into_bytes().into()))
            .await
            .map_err(|e| format!("typing: {e}"))?;
        match read_until(console, &mut seen, answer, Duration::from_secs(3)).await {
            Ok(()) => return Ok(seen),
            Err(e) if e.starts_with("no ") => continue,
            Err(e) => return Err(e),
        }
    }
    Err(format!(
        "the shell never answered {command:?}; the console showed:\n{seen}"
    ))
}

#[test]
fn vmi_subresources_reach_the_guest_through_virt_handler() {
    let _one = serial();
    let cluster = Cluster::start();
    let deploy = root().join("bins/deploy/virt-api");
    for f in [
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "role.yaml",
        "rolebinding.yaml",
    ] {
        cluster
            .cluster
            .apply_path(&deploy.join(f))
            .unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let token = cluster
        .cluster
        .service_account_token("kubevirt", "kvrs-virt-api");
    let api_kubeconfig = cluster.cluster.kubeconfig_for_token(&token);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt
        .block_on(kvrs_runtime::kube::setup::connect_as(
            "virt-api",
            Some(&api_kubeconfig),
        ))
        .expect("virt-api's client");

    // virt-api's CA and the handler's certificate, written by virt-api's library with its RBAC.
    let t0 = now();
    let (ca_cert, ca_key) = certs::new_ca(t0, Duration::from_secs(7 * 86400)).unwrap();
    let (cert, key) = certs::issue(
        &ca_cert,
        &ca_key,
        &["virt-api".into()],
        t0,
        Duration::from_secs(86400),
    )
    .unwrap();
    let bundle = Bundle {
        ca_cert,
        ca_key,
        previous_ca_cert: None,
        cert,
        key,
    };
    let written = rt
        .block_on(sync_handler_secret(
            &client,
            "kubevirt",
            &bundle,
            t0,
            Duration::from_secs(86400),
        ))
        .expect("the handler Secret written");
    assert!(written);
    assert!(
        !rt.block_on(sync_handler_secret(
            &client,
            "kubevirt",
            &bundle,
            t0 + 5,
            Duration::from_secs(86400)
        ))
        .unwrap(),
        "a current Secret is kept"
    );
    // As the DaemonSet's secret volume would hold it.
    let dirs = NodeDirs::new("rest");
    let cert_dir = dirs.root.join("certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    let secret = cluster
        .get("secret", Some("kubevirt"), HANDLER_SECRET)
        .expect("the Secret");
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        let b64 = secret["data"][file].as_str().expect(file);
        let out = Command::new("base64")
            .arg("-d")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b64.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        std::fs::write(cert_dir.join(file), out.stdout).unwrap();
    }

    let port = kvrs_test_cluster::free_loopback_port();
    // The handler, and its pod as the API server lists it for the node.
    let handler = dirs.start_rest_handler(&cluster, port, &cert_dir, "virt-handler-rest");

    let handler_client = HandlerClient::default();
    handler_client.load(&bundle, now()).unwrap();
    let console_client = HandlerClient::default();
    console_client.load(&bundle, now()).unwrap();
    let handlers = Handlers {
        client: std::sync::Arc::new(handler_client),
        namespace: "kubevirt".into(),
        port,
    };
    let user = User {
        name: "kvrs-test".into(),
        groups: vec![],
    };
    let call = |name: &str, sub: &str, method: &str, body: &str| -> (u16, String) {
        let route = Route::Vmi {
            namespace: NS.into(),
            name: name.into(),
            subresource: sub.into(),
        };
        let (code, _, body) = rt
            .block_on(vmi_request(
                &client,
                &handlers,
                &route,
                method,
                body.as_bytes(),
                &user,
            ))
            .expect("a VMI route kvrs forwards");
        (code, String::from_utf8_lossy(&body).into_owned())
    };

    // A VMI that never ran, and one that does not exist.
    cluster.create_vmi(guest_vmi("idle"));
    let (code, body) = call("idle", "pause", "PUT", "");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("VM is not running"), "{body}");
    let (code, body) = call("idle", "guestosinfo", "GET", "");
    assert_eq!(
        (code, body.as_str()),
        (
            500,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"idle\": VMI is not running"
        )
    );
    let (code, body) = call("absent", "unpause", "PUT", "");
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("virtualmachineinstance.kubevirt.io \\\"absent\\\" not found"),
        "{body}"
    );

    // A guest running with its agent.
    let (uid, mut pod) =
        boot_vmi_with_agent(&cluster, &dirs, &handler, 1, guest_with_shell("guest"));
    let ctx = || guest_context(&cluster, &handler, &pod, "guest");

    // Without virt-api's client certificate the handler does not answer.
    let direct = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT"])
        .arg(format!(
            "https://127.0.0.1:{port}/v1/namespaces/{NS}/virtualmachineinstances/guest/pause"
        ))
        .output()
        .unwrap();
    assert!(
        !direct.status.success() && direct.stdout == b"000",
        "a client without a certificate got an answer: {}",
        String::from_utf8_lossy(&direct.stdout)
    );

    // Nor with a client certificate of another CA, nor with the handler's own serving
    // certificate (signed by the right CA, but for serverAuth only).
    let handler_cert = std::fs::read_to_string(cert_dir.join("tls.crt")).unwrap();
    let handler_key = std::fs::read_to_string(cert_dir.join("tls.key")).unwrap();
    let (other_ca, other_ca_key) = certs::new_ca(now(), Duration::from_secs(3600)).unwrap();
    let (other_cert, other_key) = certs::issue_for(
        &other_ca,
        &other_ca_key,
        &certs::Leaf {
            names: &[],
            common_name: "kubevirt.io:system:client:virt-handler",
            client: true,
        },
        now(),
        Duration::from_secs(3600),
    )
    .unwrap();
    for (what, cert, key) in [
        ("another CA's client certificate", &other_cert, &other_key),
        (
            "the handler's serving certificate",
            &handler_cert,
            &handler_key,
        ),
    ] {
        let intruder = HandlerClient::default();
        intruder.set(client_config(&bundle.ca_bundle(now()), cert, key).unwrap());
        let refused = rt.block_on(intruder.call(
            &format!("127.0.0.1:{port}"),
            "GET",
            &format!("/v1/namespaces/{NS}/virtualmachineinstances/guest/guestosinfo"),
            Vec::new(),
        ));
        assert!(
            matches!(&refused, Err(HandlerError::Transport(_))),
            "{what} was let in: {refused:?}"
        );
    }

    // guestosinfo, userlist, filesystemlist: the agent's answers.
    let (code, body) = call("guest", "guestosinfo", "GET", "");
    assert_eq!(code, 200, "{body}\n{}", ctx());
    let info: Value = serde_json::from_str(&body).expect("guestosinfo JSON");
    assert_eq!(info["os"]["id"], kvrs_test_guest::OS_ID, "{info}");
    assert_eq!(info["hostname"], pod.guest_info()["hostname"], "{info}");
    assert!(
        info["guestAgentVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{info}"
    );
    let (code, body) = call("guest", "userlist", "GET", "");
    assert_eq!(code, 200, "userlist: {body}\n{}", ctx());
    let users: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(users["metadata"], json!({}), "{users}");
    assert!(users["items"].is_array(), "{users}");
    // The launcher polls the agent's filesystems in their own round: wait for the first.
    let filesystems = wait_for(
        "the guest's filesystems in filesystemlist",
        Duration::from_secs(120),
        || {
            let (code, body) = call("guest", "filesystemlist", "GET", "");
            assert_eq!(code, 200, "filesystemlist: {body}");
            let v: Value = serde_json::from_str(&body).expect("JSON");
            v["items"]
                .as_array()
                .is_some_and(|i| !i.is_empty())
                .then_some(v)
        },
        ctx,
    );
    assert_eq!(filesystems["metadata"], json!({}), "{filesystems}");
    assert!(
        filesystems["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["mountPoint"].is_string() && f["fileSystemType"].is_string()),
        "{filesystems}"
    );

    // A dry run changes nothing.
    let (code, body) = call("guest", "pause", "PUT", r#"{"dryRun":["All"]}"#);
    assert_eq!(code, 200, "{body}");
    assert_eq!(domain_state(&pod), "Running");

    // pause: the domain paused, the VMI's Paused condition written by the handler.
    let (code, body) = call("guest", "pause", "PUT", "");
    assert_eq!(code, 200, "{body}\n{}", ctx());
    assert_eq!(domain_state(&pod), "Paused");
    let vmi = wait_for(
        "the Paused condition",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_some().then_some(v)
        },
        ctx,
    );
    let paused = condition(&vmi, "Paused").unwrap();
    assert_eq!(paused["status"], "True", "{paused}");
    assert_eq!(paused["reason"], "PausedByUser", "{paused}");
    let (code, body) = call("guest", "pause", "PUT", "");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("VMI is already paused"), "{body}");
    let (code, body) = call("guest", "softreboot", "PUT", "");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("VMI is paused"), "{body}");

    // unpause: running again, the condition gone.
    let (code, body) = call("guest", "unpause", "PUT", "");
    assert_eq!(code, 200, "{body}\n{}", ctx());
    assert_eq!(domain_state(&pod), "Running");
    wait_for(
        "the Paused condition removed",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_none().then_some(())
        },
        ctx,
    );
    let (code, body) = call("guest", "unpause", "PUT", "");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("VMI is not paused"), "{body}");

    // freeze / unfreeze reach the launcher's FSFreeze / FSThaw through the guest's agent (the
    // launcher's own test freezes a mounted ext2 disk and watches the state; here the path).
    // virt-api forwards the body as KubeVirt's does; the handler's 400 for a body without the
    // timeout comes back as virt-api's 500 quoting it, as in KubeVirt.
    for (body, message) in [
        ("", "failed to retrieve unfreeze timeout"),
        ("{}", "Unfreeze timeout in freeze request is not set"),
    ] {
        let (code, answer) = call("guest", "freeze", "PUT", body);
        assert_eq!(code, 500, "{answer}");
        assert!(
            answer.contains("unexpected return code 400") && answer.contains(message),
            "{answer}"
        );
    }
    // 200 twice each: the second call is a no-op.
    for _ in 0..2 {
        let (code, body) = call("guest", "freeze", "PUT", r#"{"unfreezeTimeout":"5m0s"}"#);
        assert_eq!(code, 200, "freeze: {body}\n{}", ctx());
    }
    for _ in 0..2 {
        let (code, body) = call("guest", "unfreeze", "PUT", "");
        assert_eq!(code, 200, "unfreeze: {body}\n{}", ctx());
    }

    // The console's refusals: a VMI not on this node, a request that is no WebSocket handshake.
    for absent in ["absent", "idle"] {
        match rt.block_on(open_console(&console_client, port, absent)) {
            Err(StreamError::Refused(r)) => assert_eq!(
                (r.status, String::from_utf8_lossy(&r.body).as_ref()),
                (404, format!("VMI {NS}/{absent} does not exist").as_str())
            ),
            Err(e) => panic!("{absent}'s console: {e}"),
            Ok(_) => panic!("{absent}'s console was opened"),
        }
    }
    let plain = rt
        .block_on(console_client.call(
            &format!("127.0.0.1:{port}"),
            "GET",
            &format!("/v1/namespaces/{NS}/virtualmachineinstances/guest/console"),
            Vec::new(),
        ))
        .unwrap();
    assert_eq!(plain.status, 400, "{plain:?}");
    assert!(
        String::from_utf8_lossy(&plain.body).contains("not using the websocket protocol"),
        "{plain:?}"
    );

    // reset: a hard reset of the guest, which boots again, seen on the serial console.
    let mut first = rt
        .block_on(open_console(&console_client, port, "guest"))
        .unwrap_or_else(|e| panic!("the console: {e}\n{}", ctx()));
    let boots = |log: &str| log.matches(kvrs_test_guest::BOOT_MARKER).count();
    let before = boots(&pod.serial_log(&uid));
    assert!(
        before >= 1,
        "the guest booted once:\n{}",
        pod.serial_log(&uid)
    );
    let (code, body) = call("guest", "reset", "PUT", "");
    assert_eq!(code, 200, "{body}\n{}", ctx());
    let mut seen = String::new();
    rt.block_on(read_until(
        &mut first,
        &mut seen,
        kvrs_test_guest::BOOT_MARKER,
        Duration::from_secs(180),
    ))
    .unwrap_or_else(|e| panic!("the boot on the console: {e}\n{}", ctx()));
    assert!(
        seen.contains("Linux version"),
        "the kernel's boot output:\n{seen}"
    );
    wait_for(
        "the guest booting again after the reset",
        Duration::from_secs(120),
        || (boots(&pod.serial_log(&uid)) > before).then_some(()),
        ctx,
    );
    assert_eq!(domain_state(&pod), "Running");
    // The guest's shell answers what is typed.
    rt.block_on(ask(
        &mut first,
        "echo KVRS-CONSOLE-$((6*7))",
        "KVRS-CONSOLE-42",
    ))
    .unwrap_or_else(|e| panic!("{e}\n{}", ctx()));

    // A second client takes the console over; the first is closed without a close frame.
    let mut second = rt
        .block_on(open_console(&console_client, port, "guest"))
        .unwrap_or_else(|e| panic!("the second console: {e}\n{}", ctx()));
    let closed = rt.block_on(async {
        loop {
            match tokio::time::timeout(Duration::from_secs(20), first.next()).await {
                Err(_) => return Err("the first client is still connected".to_string()),
                Ok(Some(Ok(Message::Binary(_)))) => continue,
                Ok(Some(Ok(other))) => return Err(format!("the first client got {other:?}")),
                Ok(Some(Err(e))) => return Ok(e.to_string()),
                Ok(None) => return Ok("closed".to_string()),
            }
        }
    });
    let closed = closed.unwrap_or_else(|e| panic!("{e}\n{}", ctx()));
    eprintln!("the first console client: {closed}");
    rt.block_on(ask(
        &mut second,
        "echo KVRS-SECOND-$((7*7))",
        "KVRS-SECOND-49",
    ))
    .unwrap_or_else(|e| panic!("{e}\n{}", ctx()));
    drop(second);

    // VNC: the display's RFB greeting; a client preserving the session is refused while one is
    // connected; one that does not takes the display over.
    let vnc = |preserve: bool| {
        rt.block_on(open_stream(
            &console_client,
            port,
            &format!("guest/vnc?preserveSession={preserve}"),
        ))
    };
    let mut display = vnc(false).unwrap_or_else(|e| panic!("VNC: {e}\n{}", ctx()));
    let mut greeting = String::new();
    rt.block_on(read_until(
        &mut display,
        &mut greeting,
        "RFB 003.008",
        Duration::from_secs(20),
    ))
    .unwrap_or_else(|e| panic!("VNC's greeting: {e}\n{}", ctx()));
    match vnc(true) {
        Err(StreamError::Refused(r)) => assert_eq!(
            (r.status, String::from_utf8_lossy(&r.body).as_ref()),
            (503, "Active VNC connection. Request denied.")
        ),
        Err(e) => panic!("VNC preserving the session: {e}"),
        Ok(_) => panic!("a VNC client preserving the session took the display over"),
    }
    let mut taker = vnc(false).unwrap_or_else(|e| panic!("VNC again: {e}\n{}", ctx()));
    let mut greeting = String::new();
    rt.block_on(read_until(
        &mut taker,
        &mut greeting,
        "RFB 003.008",
        Duration::from_secs(20),
    ))
    .unwrap_or_else(|e| panic!("VNC's greeting to the second client: {e}\n{}", ctx()));
    let first_display =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), display.next()).await });
    assert!(
        matches!(first_display, Ok(None | Some(Err(_)))),
        "the first VNC client: {first_display:?}"
    );
    drop(taker);

    pod.delete();
}
