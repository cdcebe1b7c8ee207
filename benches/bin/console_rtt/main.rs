//! Serial console round trip through `kvrs run`'s console subresource
//! (`benches/console-rtt.sh`; not run by CI, never a test).
//!
//! Opens `GET /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachineinstances/NAME/console`
//! on the run's API server as a WebSocket (subprotocol `plain.kubevirt.io`, binary frames of raw
//! bytes, as KubeVirt's virtctl does), waits for the guest's shell to answer a command, then
//! SAMPLES times: sends one character and times until its echo comes back (API server →
//! virt-handler's console proxy → the launcher's serial socket → QEMU → the guest's tty and
//! back), then erases it (DEL, untimed) and waits for the line to go quiet.

#[path = "../webhooks/stats.rs"]
mod stats;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "kvrs-bench-console-rtt")]
struct Args {
    /// The run's kubeconfig (`STATE_DIR/kubeconfig`): its server (plain HTTP on loopback) and
    /// bearer token.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The VMI's namespace.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// The VMI's name.
    #[arg(long, default_value = "guest")]
    name: String,
    /// Timed characters.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// A diagnostic: acknowledge every segment at once (`TCP_QUICKACK`, set again after each
    /// read, as Linux clears it) instead of delaying ACKs as ordinary clients (virtctl) do. When
    /// this removes a ~40 ms mode, the server side holds small writes back (Nagle).
    #[arg(long)]
    quickack: bool,
}

/// (host:port, token) of a kubeconfig's first cluster and user; the server must be `http://`.
fn endpoint(kubeconfig: &str) -> Result<(String, String)> {
    let doc: serde_norway::Value =
        serde_norway::from_str(kubeconfig).context("parsing the kubeconfig")?;
    let server = doc["clusters"][0]["cluster"]["server"]
        .as_str()
        .context("kubeconfig: clusters[0].cluster.server is missing")?;
    let Some(host) = server.strip_prefix("http://") else {
        bail!(
            "kubeconfig: clusters[0].cluster.server {server:?} is not http:// (kvrs run serves plain HTTP on loopback)"
        );
    };
    let token = doc["users"][0]["user"]["token"]
        .as_str()
        .context("kubeconfig: users[0].user.token is missing")?;
    Ok((host.trim_end_matches('/').to_string(), token.to_string()))
}

type Ws = WebSocketStream<TcpStream>;

/// The WebSocket upgrade, by hand (no TLS, one request): fails unless the answer is 101 with
/// the `plain.kubevirt.io` subprotocol.
async fn open(host: &str, token: &str, ns: &str, name: &str) -> Result<Ws> {
    let mut tcp = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    tcp.set_nodelay(true)?;
    let req = format!(
        "GET /apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}/console HTTP/1.1\r\n\
         Host: {host}\r\nAuthorization: Bearer {token}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: a3Zycy1jb25zb2xlLXJ0dA==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: plain.kubevirt.io\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await?;
    // The head, one byte at a time: nothing of the first frame may be read past it.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let b = tcp
            .read_u8()
            .await
            .context("reading the upgrade's answer")?;
        head.push(b);
        if head.len() > 16 * 1024 {
            bail!("the upgrade's answer has no end of headers");
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    if !head.starts_with("HTTP/1.1 101") {
        bail!("console upgrade refused: {head}");
    }
    if !head
        .to_ascii_lowercase()
        .contains("sec-websocket-protocol: plain.kubevirt.io")
    {
        bail!("console upgrade without the plain.kubevirt.io subprotocol: {head}");
    }
    Ok(WebSocketStream::from_raw_socket(tcp, Role::Client, None).await)
}

/// Whether `--quickack` is on (set once in `main`).
static QUICKACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn quickack(ws: &Ws) {
    if QUICKACK.load(std::sync::atomic::Ordering::Relaxed) {
        let _ = socket2::SockRef::from(ws.get_ref()).set_tcp_quickack(true);
    }
}

/// The next binary payload, or `None` after `wait` without one.
async fn next_bytes(ws: &mut Ws, wait: Duration) -> Result<Option<Bytes>> {
    loop {
        quickack(ws);
        match tokio::time::timeout(wait, ws.next()).await {
            Err(_) => return Ok(None),
            Ok(None) => bail!("the console stream ended"),
            Ok(Some(m)) => match m? {
                Message::Binary(b) => return Ok(Some(b)),
                Message::Close(c) => bail!("the console was closed: {c:?}"),
                _ => continue,
            },
        }
    }
}

async fn send(ws: &mut Ws, bytes: &[u8]) -> Result<()> {
    ws.send(Message::Binary(Bytes::copy_from_slice(bytes)))
        .await
        .context("writing to the console")
}

/// Reads until nothing arrives for `quiet`.
async fn drain(ws: &mut Ws, quiet: Duration) -> Result<()> {
    while next_bytes(ws, quiet).await?.is_some() {}
    Ok(())
}

/// Types `command` until the output shows `expect` (the shell may still be starting).
async fn wait_for_shell(ws: &mut Ws, command: &str, expect: &str, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    let mut seen = Vec::new();
    let mut typed = Instant::now() - Duration::from_secs(60);
    while start.elapsed() < timeout {
        if typed.elapsed() > Duration::from_secs(5) {
            send(ws, format!("{command}\r").as_bytes()).await?;
            typed = Instant::now();
        }
        if let Some(b) = next_bytes(ws, Duration::from_millis(200)).await? {
            seen.extend_from_slice(&b);
            if seen.windows(expect.len()).any(|w| w == expect.as_bytes()) {
                return Ok(());
            }
        }
    }
    bail!(
        "the guest's shell did not answer {command:?} within {timeout:?}; console showed: {}",
        String::from_utf8_lossy(&seen[seen.len().saturating_sub(400)..])
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.samples == 0 {
        bail!("--samples must be at least 1");
    }
    let text = std::fs::read_to_string(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let (host, token) = endpoint(&text)?;
    QUICKACK.store(args.quickack, std::sync::atomic::Ordering::Relaxed);
    let mut ws = open(&host, &token, &args.namespace, &args.name).await?;
    wait_for_shell(
        &mut ws,
        "echo KVRS-RTT-$((6*7))",
        "KVRS-RTT-42",
        Duration::from_secs(120),
    )
    .await?;
    drain(&mut ws, Duration::from_millis(300)).await?;

    let mut rtt = Vec::with_capacity(args.samples);
    for i in 0..args.samples {
        let c = b"abcdefghijklmnopqrstuvwxyz"[i % 26];
        let start = Instant::now();
        send(&mut ws, &[c]).await?;
        loop {
            let Some(b) = next_bytes(&mut ws, Duration::from_secs(10)).await? else {
                bail!("sample {i}: no echo of {:?} within 10 s", c as char);
            };
            if b.contains(&c) {
                break;
            }
        }
        rtt.push(start.elapsed().as_secs_f64() * 1e3);
        send(&mut ws, &[0x7f]).await?;
        drain(&mut ws, Duration::from_millis(30)).await?;
    }
    let _ = ws.close(None).await;

    let q = |x| stats::quantile(&rtt, x).unwrap_or(f64::NAN);
    let (_, q1, q3) = stats::median_iqr(&rtt).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    let mean = rtt.iter().sum::<f64>() / rtt.len() as f64;
    println!(
        "console round trip, {} characters through kvrs run's console subresource: min {:.2} ms, p50 {:.2} ms (IQR {:.2}-{:.2}), p99 {:.2} ms, max {:.2} ms, mean {:.2} ms",
        rtt.len(),
        q(0),
        q(500),
        q1,
        q3,
        q(990),
        q(1000),
        mean
    );
    println!(
        "SUMMARY console RTT (kvrs run{}): p50 {:.2} ms, p99 {:.2} ms over {} characters (KubeVirt's console path cannot run here: no KubeVirt virt-handler on this stack)",
        if args.quickack {
            ", client with TCP_QUICKACK"
        } else {
            ""
        },
        q(500),
        q(990),
        rtt.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_read_from_the_kubeconfig() {
        let k = "clusters:\n- cluster:\n    server: http://127.0.0.1:4000\n  name: c\nusers:\n- name: u\n  user:\n    token: abc\n";
        assert_eq!(
            endpoint(k).unwrap(),
            ("127.0.0.1:4000".into(), "abc".into())
        );
    }

    #[test]
    fn an_https_server_is_refused_naming_the_field() {
        let k = "clusters:\n- cluster:\n    server: https://h\nusers:\n- user:\n    token: t\n";
        let err = endpoint(k).unwrap_err().to_string();
        assert!(err.contains("clusters[0].cluster.server"), "{err}");
    }
}
