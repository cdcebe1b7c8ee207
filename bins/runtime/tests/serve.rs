//! The metrics and health endpoints over real HTTP/1.1: raw requests on a TcpStream, so the
//! test sees exactly the bytes a kubelet probe or a Prometheus scrape would.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kvrs_runtime::kube::serve::{Endpoints, Metrics, ServeState, WorkqueueMetrics};

/// The status code and the whole response (head and body) of one request.
struct Reply {
    status: u16,
    text: String,
}

/// Writes `request` on a new connection and reads until the server closes it (blocking).
fn exchange(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    Ok(reply)
}

/// Sends `request` verbatim and reads until the server closes the connection.
async fn send(addr: SocketAddr, request: String) -> Reply {
    tokio::task::spawn_blocking(move || {
        let reply = exchange(addr, request.as_bytes()).expect("exchange");
        let text = String::from_utf8(reply).expect("a UTF-8 response");
        let status = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP/1.1 response: {text:?}"));
        Reply { status, text }
    })
    .await
    .unwrap()
}

async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    send(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
    )
    .await
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path).await
}

/// Binds port 0 and serves until the returned sender fires.
async fn start(
    state: ServeState,
    header_read_timeout: Duration,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let endpoints = Endpoints::bind("127.0.0.1:0".parse().unwrap(), state)
        .await
        .expect("bind")
        .with_header_read_timeout(header_read_timeout);
    let addr = endpoints.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        endpoints
            .run(async {
                let _ = stopped.await;
            })
            .await
            .expect("serve");
    });
    (addr, stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_answer_flip_and_stop() {
    let metrics = Metrics::new();
    let workqueue = WorkqueueMetrics::register(&metrics);
    let state = ServeState::new(metrics.clone(), "virt-controller");
    let (addr, stop, task) = start(state.clone(), Duration::from_secs(5)).await;

    // Fresh process: alive, not ready, not leading.
    assert_eq!(get(addr, "/healthz").await.status, 200);
    assert!(get(addr, "/healthz").await.text.ends_with("\r\n\r\nok"));
    assert_eq!(get(addr, "/readyz").await.status, 503);
    assert_eq!(get(addr, "/leader").await.status, 503);
    assert_eq!(get(addr, "/nope").await.status, 404);
    assert_eq!(get(addr, "/metrics/extra").await.status, 404);
    let post = request(addr, "POST", "/metrics").await;
    assert_eq!(post.status, 405);
    assert!(
        post.text.to_ascii_lowercase().contains("allow: get"),
        "{}",
        post.text
    );
    assert_eq!(request(addr, "DELETE", "/healthz").await.status, 405);

    // Caches synced on a standby: ready, still not leading.
    state.set_ready(true);
    assert_eq!(get(addr, "/readyz").await.status, 200);
    assert_eq!(get(addr, "/leader").await.status, 503);

    // Leadership through the elector's watch channel.
    let (leading, rx) = tokio::sync::watch::channel(false);
    let follower = tokio::spawn({
        let state = state.clone();
        async move { state.follow_leading(rx).await }
    });
    leading.send_replace(true);
    wait_for_status(addr, "/leader", 200).await;

    let vmi = workqueue.queue("virt-controller-vmi");
    vmi.adds.inc_by(3);
    vmi.retries.inc();
    vmi.depth.set(2);
    vmi.work_duration
        .observe(Duration::from_millis(20).as_secs_f64());
    vmi.work_duration.observe(45.0);
    vmi.reconcile_error("api_write");
    vmi.reconcile_error("api_write");
    let metrics = get(addr, "/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = &metrics.text;
    assert!(
        text.contains("Content-Type: text/plain; version=0.0.4")
            || text.contains("content-type: text/plain; version=0.0.4"),
        "{text}"
    );
    for line in [
        "# TYPE kubevirt_workqueue_adds_total counter",
        "kubevirt_workqueue_adds_total{name=\"virt-controller-vmi\"} 3",
        "kubevirt_workqueue_retries_total{name=\"virt-controller-vmi\"} 1",
        "# TYPE kubevirt_workqueue_depth gauge",
        "kubevirt_workqueue_depth{name=\"virt-controller-vmi\"} 2",
        "# TYPE kubevirt_workqueue_work_duration_seconds histogram",
        "kubevirt_workqueue_work_duration_seconds_bucket{name=\"virt-controller-vmi\",le=\"0.01\"} 0",
        "kubevirt_workqueue_work_duration_seconds_bucket{name=\"virt-controller-vmi\",le=\"0.025\"} 1",
        "kubevirt_workqueue_work_duration_seconds_bucket{name=\"virt-controller-vmi\",le=\"30\"} 1",
        "kubevirt_workqueue_work_duration_seconds_bucket{name=\"virt-controller-vmi\",le=\"+Inf\"} 2",
        "kubevirt_workqueue_work_duration_seconds_sum{name=\"virt-controller-vmi\"} 45.02",
        "kubevirt_workqueue_work_duration_seconds_count{name=\"virt-controller-vmi\"} 2",
        "kvrs_reconcile_errors_total{queue=\"virt-controller-vmi\",reason=\"api_write\"} 2",
        "kubevirt_virt_controller_leading_status 1",
        "kubevirt_virt_controller_ready_status 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in:\n{text}"
        );
    }

    // The elector is gone: no longer leading.
    drop(leading);
    follower.await.unwrap();
    assert_eq!(get(addr, "/leader").await.status, 503);
    state.set_healthy(false);
    assert_eq!(get(addr, "/healthz").await.status, 503);

    let begun = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("serve returns promptly after the shutdown signal")
        .unwrap();
    eprintln!("shutdown took {:?}", begun.elapsed());
    assert!(
        TcpStream::connect(addr).is_err(),
        "listener closed after shutdown"
    );
}

async fn wait_for_status(addr: SocketAddr, path: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(addr, path).await.status != status {
        assert!(Instant::now() < deadline, "{path} never answered {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_bounded() {
    let state = ServeState::new(Metrics::new(), "virt-handler");
    let (addr, stop, task) = start(state, Duration::from_millis(500)).await;

    // A head beyond the limit is refused (431), never buffered without bound.
    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let reply = send(addr, huge).await;
    assert_eq!(reply.status, 431, "{}", reply.text);

    // The endpoints take no input.
    let with_body = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    assert_eq!(send(addr, with_body.to_owned()).await.status, 413);

    // A client that never finishes its head is cut off after the header read timeout.
    let begun = Instant::now();
    let closed =
        tokio::task::spawn_blocking(move || exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: loc"))
            .await
            .unwrap();
    let waited = begun.elapsed();
    assert!(
        closed.is_ok() && waited < Duration::from_secs(5),
        "slow client not cut off: {closed:?} after {waited:?}"
    );
    eprintln!("slow client cut off after {waited:?}");

    // Keep-alive: two requests on one connection.
    let two = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\nGET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let reply = send(addr, two.to_owned()).await;
    assert_eq!(
        reply.text.matches("HTTP/1.1 200 OK").count(),
        2,
        "{}",
        reply.text
    );

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("serve returns")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_idle_keep_alive_connection_go() {
    let state = ServeState::new(Metrics::new(), "virt-controller");
    let (addr, stop, task) = start(state, Duration::from_secs(30)).await;
    // A connection that stays open after its request (keep-alive) must not hold up shutdown.
    let client = tokio::task::spawn_blocking(move || {
        let reply = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("the server closes the idle connection on shutdown");
        String::from_utf8_lossy(&reply).into_owned()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let begun = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("serve returns promptly")
        .unwrap();
    eprintln!(
        "shutdown with an idle connection took {:?}",
        begun.elapsed()
    );
    let text = client.await.unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
}
