//! The metrics and health endpoints every kvrs daemon serves, as KubeVirt's do: `/metrics`
//! (Prometheus text format 0.0.4), `/healthz` (liveness), `/readyz` (caches synced, so a
//! Service may route to this replica, standby or not) and `/leader` (this replica leads).
//!
//! The registry is deliberately tiny (counters, gauges, histograms with label sets) instead of
//! a metrics crate: the daemons need a handful of series, and a worker updates a series through
//! a handle it keeps (one atomic operation), never through a name lookup.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

/// Work-duration buckets in seconds, from a fast cache-only sync to a slow API round trip.
pub const DURATION_BUCKETS: [f64; 13] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The `Content-Type` of the Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking updater leaves plain numbers behind, still worth rendering.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// --- the registry ------------------------------------------------------------------------

/// A set of metric families rendered together; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Metrics {
    families: Arc<Mutex<Vec<Arc<dyn Render>>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

trait Render: Send + Sync {
    fn name(&self) -> &str;
    fn render(&self, out: &mut String);
}

/// One kind of series: how it starts, its `# TYPE`, and its sample lines.
trait Sample: Send + Sync + 'static {
    const TYPE: &'static str;
    type Config: Send + Sync + 'static;
    fn new(config: &Self::Config) -> Self;
    fn write(&self, name: &str, labels: &str, out: &mut String);
}

struct Family<S: Sample> {
    name: String,
    help: String,
    label_names: Vec<&'static str>,
    config: S::Config,
    series: Mutex<BTreeMap<Vec<String>, Arc<S>>>,
}

impl<S: Sample> Family<S> {
    fn with(&self, values: &[&str]) -> Arc<S> {
        assert_eq!(
            values.len(),
            self.label_names.len(),
            "metric {} takes labels {:?}",
            self.name,
            self.label_names
        );
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        lock(&self.series)
            .entry(key)
            .or_insert_with(|| Arc::new(S::new(&self.config)))
            .clone()
    }
}

impl<S: Sample> Render for Family<S> {
    fn name(&self) -> &str {
        &self.name
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, escape(&self.help, false));
        let _ = writeln!(out, "# TYPE {} {}", self.name, S::TYPE);
        for (values, sample) in lock(&self.series).iter() {
            let mut labels = String::new();
            for (name, value) in self.label_names.iter().zip(values) {
                let sep = if labels.is_empty() { "" } else { "," };
                let _ = write!(labels, "{sep}{name}=\"{}\"", escape(value, true));
            }
            sample.write(&self.name, &labels, out);
        }
    }
}

/// Escapes a HELP text (`\`, newline) or a label value (also `"`), as the format requires.
fn escape(text: &str, label_value: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if label_value => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A sample value as Prometheus (Go's `strconv`) spells it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

/// `name{labels}` (or bare `name` without labels), then an optional extra label.
fn series_name(name: &str, suffix: &str, labels: &str, extra: Option<(&str, &str)>) -> String {
    let mut all = labels.to_owned();
    if let Some((k, v)) = extra {
        let sep = if all.is_empty() { "" } else { "," };
        let _ = write!(all, "{sep}{k}=\"{v}\"");
    }
    if all.is_empty() {
        format!("{name}{suffix}")
    } else {
        format!("{name}{suffix}{{{all}}}")
    }
}

fn valid_name(name: &str, colon: bool) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn register<S: Sample>(
        &self,
        name: &str,
        help: &str,
        label_names: &[&'static str],
        config: S::Config,
    ) -> Arc<Family<S>> {
        assert!(valid_name(name, true), "invalid metric name {name:?}");
        for label in label_names {
            assert!(
                valid_name(label, false) && !label.starts_with("__") && *label != "le",
                "invalid label name {label:?} of metric {name}"
            );
        }
        let mut families = lock(&self.families);
        assert!(
            families.iter().all(|f| f.name() != name),
            "metric {name} registered twice"
        );
        let family = Arc::new(Family::<S> {
            name: name.to_owned(),
            help: help.to_owned(),
            label_names: label_names.to_vec(),
            config,
            series: Mutex::default(),
        });
        families.push(family.clone());
        family
    }

    /// Registers a counter family.
    ///
    /// # Panics
    /// If `name` or a label name is not a valid Prometheus name, or `name` is taken: both are
    /// program constants, so this is a programming error (like client_golang's `MustRegister`).
    pub fn counter(&self, name: &str, help: &str, label_names: &[&'static str]) -> CounterVec {
        CounterVec(self.register(name, help, label_names, ()))
    }

    /// Registers a gauge family. Panics as [`counter`](Self::counter) does.
    pub fn gauge(&self, name: &str, help: &str, label_names: &[&'static str]) -> GaugeVec {
        GaugeVec(self.register(name, help, label_names, ()))
    }

    /// Registers a histogram family with upper bounds `buckets` (ascending; `+Inf` is implied).
    ///
    /// # Panics
    /// As [`counter`](Self::counter), and if `buckets` is not strictly ascending.
    pub fn histogram(
        &self,
        name: &str,
        help: &str,
        label_names: &[&'static str],
        buckets: &[f64],
    ) -> HistogramVec {
        assert!(
            buckets.windows(2).all(|w| w[0] < w[1]) && buckets.iter().all(|b| b.is_finite()),
            "histogram {name}: buckets must be finite and strictly ascending"
        );
        HistogramVec(self.register(name, help, label_names, buckets.into()))
    }

    /// Every family in registration order, in the text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let families = lock(&self.families).clone();
        let mut out = String::new();
        for family in families {
            family.render(&mut out);
        }
        out
    }
}

/// A monotonically increasing count of events.
#[derive(Debug, Clone)]
pub struct Counter(Arc<AtomicU64>);

impl Sample for AtomicU64 {
    const TYPE: &'static str = "counter";
    type Config = ();
    fn new(_: &()) -> Self {
        AtomicU64::new(0)
    }
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let _ = writeln!(
            out,
            "{} {}",
            series_name(name, "", labels, None),
            self.load(Ordering::Relaxed)
        );
    }
}

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A counter family; [`with`](Self::with) picks (or creates) one label set's series.
#[derive(Clone)]
pub struct CounterVec(Arc<Family<AtomicU64>>);

impl CounterVec {
    /// The series for `values` (one per label name). Keep it: updates are then lock-free.
    ///
    /// # Panics
    /// If the number of values differs from the number of label names.
    pub fn with(&self, values: &[&str]) -> Counter {
        Counter(self.0.with(values))
    }
}

/// A value that goes up and down (an `f64` stored as bits).
#[derive(Debug, Clone)]
pub struct Gauge(Arc<GaugeCell>);

/// The gauge's `f64` as bits, so it updates atomically.
#[derive(Debug, Default)]
pub struct GaugeCell(AtomicU64);

impl Sample for GaugeCell {
    const TYPE: &'static str = "gauge";
    type Config = ();
    fn new(_: &()) -> Self {
        GaugeCell::default()
    }
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let v = f64::from_bits(self.0.load(Ordering::Relaxed));
        let _ = writeln!(out, "{} {}", series_name(name, "", labels, None), number(v));
    }
}

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.0.0.store(v.to_bits(), Ordering::Relaxed);
    }

    /// Adds `delta` (negative to subtract).
    pub fn add(&self, delta: f64) {
        let _ = self
            .0
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + delta).to_bits())
            });
    }

    /// The current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.0.load(Ordering::Relaxed))
    }
}

/// A gauge family; see [`CounterVec`].
#[derive(Clone)]
pub struct GaugeVec(Arc<Family<GaugeCell>>);

impl GaugeVec {
    /// The series for `values`; panics as [`CounterVec::with`] does.
    pub fn with(&self, values: &[&str]) -> Gauge {
        Gauge(self.0.with(values))
    }
}

/// A distribution of observations over fixed buckets.
#[derive(Debug, Clone)]
pub struct Histogram(Arc<HistogramCell>);

/// A histogram's buckets (non-cumulative, the last one above every bound) and sum.
#[derive(Debug)]
pub struct HistogramCell {
    bounds: Arc<[f64]>,
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Sample for HistogramCell {
    const TYPE: &'static str = "histogram";
    type Config = Arc<[f64]>;
    fn new(bounds: &Arc<[f64]>) -> Self {
        HistogramCell {
            bounds: bounds.clone(),
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let le = self
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".into(), |b| number(*b));
            let series = series_name(name, "_bucket", labels, Some(("le", &le)));
            let _ = writeln!(out, "{series} {cumulative}");
        }
        let sum = f64::from_bits(self.sum.load(Ordering::Relaxed));
        let _ = writeln!(
            out,
            "{} {}",
            series_name(name, "_sum", labels, None),
            number(sum)
        );
        // The `+Inf` bucket's total, so `_count` always equals it.
        let _ = writeln!(
            out,
            "{} {cumulative}",
            series_name(name, "_count", labels, None)
        );
    }
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, v: f64) {
        let cell = &self.0;
        let i = cell.bounds.partition_point(|b| *b < v);
        cell.counts[i].fetch_add(1, Ordering::Relaxed);
        let _ = cell
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// Records a duration in seconds.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }
}

/// A histogram family; see [`CounterVec`].
#[derive(Clone)]
pub struct HistogramVec(Arc<Family<HistogramCell>>);

impl HistogramVec {
    /// The series for `values`; panics as [`CounterVec::with`] does.
    pub fn with(&self, values: &[&str]) -> Histogram {
        Histogram(self.0.with(values))
    }
}

// --- the work-queue metrics -------------------------------------------------------------

/// The families every controller loop reports, named as KubeVirt's (client-go's workqueue
/// metrics under `kubevirt_workqueue_`, label `name` = the queue), so dashboards carry over.
#[derive(Clone)]
pub struct WorkqueueMetrics {
    depth: GaugeVec,
    adds: CounterVec,
    retries: CounterVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    errors: CounterVec,
}

/// One queue's series, kept by its loop.
#[derive(Clone)]
pub struct QueueMetrics {
    /// Keys waiting (`kubevirt_workqueue_depth`).
    pub depth: Gauge,
    /// Keys added (`kubevirt_workqueue_adds_total`).
    pub adds: Counter,
    /// Rate-limited re-adds (`kubevirt_workqueue_retries_total`).
    pub retries: Counter,
    /// Time a key waited in the queue before a worker took it
    /// (`kubevirt_workqueue_queue_duration_seconds`).
    pub queue_duration: Histogram,
    /// Time one sync took (`kubevirt_workqueue_work_duration_seconds`).
    pub work_duration: Histogram,
    name: String,
    errors: CounterVec,
}

impl WorkqueueMetrics {
    /// Registers the families in `metrics`.
    pub fn register(metrics: &Metrics) -> Self {
        WorkqueueMetrics {
            depth: metrics.gauge(
                "kubevirt_workqueue_depth",
                "Current depth of workqueue",
                &["name"],
            ),
            adds: metrics.counter(
                "kubevirt_workqueue_adds_total",
                "Total number of adds handled by workqueue",
                &["name"],
            ),
            retries: metrics.counter(
                "kubevirt_workqueue_retries_total",
                "Total number of retries handled by workqueue",
                &["name"],
            ),
            queue_duration: metrics.histogram(
                "kubevirt_workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested.",
                &["name"],
                &DURATION_BUCKETS,
            ),
            work_duration: metrics.histogram(
                "kubevirt_workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
                &["name"],
                &DURATION_BUCKETS,
            ),
            errors: metrics.counter(
                "kvrs_reconcile_errors_total",
                "Syncs that failed, by queue and a stable reason such as api_write.",
                &["queue", "reason"],
            ),
        }
    }

    /// The series of queue `name`.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        QueueMetrics {
            depth: self.depth.with(&[name]),
            adds: self.adds.with(&[name]),
            retries: self.retries.with(&[name]),
            queue_duration: self.queue_duration.with(&[name]),
            work_duration: self.work_duration.with(&[name]),
            name: name.to_owned(),
            errors: self.errors.clone(),
        }
    }
}

impl QueueMetrics {
    /// Counts a failed sync; `reason` must be a stable label (an error's `label()`), never a
    /// message, to keep the series few.
    pub fn reconcile_error(&self, reason: &str) {
        self.errors.with(&[&self.name, reason]).inc();
    }
}

// --- the endpoints' state ---------------------------------------------------------------

/// What the endpoints report; cheap to clone, set by the daemon's loops.
#[derive(Clone)]
pub struct ServeState {
    metrics: Metrics,
    flags: Arc<Flags>,
    leading_gauge: Gauge,
    ready_gauge: Gauge,
}

#[derive(Debug)]
struct Flags {
    healthy: AtomicBool,
    ready: AtomicBool,
    leading: AtomicBool,
}

impl ServeState {
    /// State over `metrics`, registering `kubevirt_<component>_leading_status` and
    /// `kubevirt_<component>_ready_status` (KubeVirt's names; `-` in `component` becomes `_`).
    /// Starts healthy, not ready, not leading.
    pub fn new(metrics: Metrics, component: &str) -> Self {
        let component = component.replace('-', "_");
        let leading_gauge = metrics
            .gauge(
                &format!("kubevirt_{component}_leading_status"),
                &format!("Indication for an operating {component} (1 when leading)."),
                &[],
            )
            .with(&[]);
        let ready_gauge = metrics
            .gauge(
                &format!("kubevirt_{component}_ready_status"),
                &format!("Indication for a {component} that is ready to take the lead."),
                &[],
            )
            .with(&[]);
        ServeState {
            metrics,
            flags: Arc::new(Flags {
                healthy: AtomicBool::new(true),
                ready: AtomicBool::new(false),
                leading: AtomicBool::new(false),
            }),
            leading_gauge,
            ready_gauge,
        }
    }

    /// The registry `/metrics` renders.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Liveness: false when a loop died and the process should be restarted.
    pub fn set_healthy(&self, healthy: bool) {
        self.flags.healthy.store(healthy, Ordering::Relaxed);
    }

    /// Readiness: true once the caches are synced (on a standby too).
    pub fn set_ready(&self, ready: bool) {
        self.flags.ready.store(ready, Ordering::Relaxed);
        self.ready_gauge.set(f64::from(u8::from(ready)));
    }

    /// Leadership, shown by `/leader` and the leading gauge.
    pub fn set_leading(&self, leading: bool) {
        self.flags.leading.store(leading, Ordering::Relaxed);
        self.leading_gauge.set(f64::from(u8::from(leading)));
    }

    /// Mirrors a leadership channel (such as `LeaderElector::leading`) until its sender is
    /// gone; leadership then reads false.
    pub async fn follow_leading(&self, mut leading: tokio::sync::watch::Receiver<bool>) {
        loop {
            self.set_leading(*leading.borrow_and_update());
            if leading.changed().await.is_err() {
                break;
            }
        }
        self.set_leading(false);
    }

    fn respond(&self, method: &Method, path: &str) -> (StatusCode, Text) {
        let flag = |set: &AtomicBool, yes: &'static str, no: &'static str| {
            if set.load(Ordering::Relaxed) {
                (StatusCode::OK, Text::plain(yes))
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, Text::plain(no))
            }
        };
        let known = ["/metrics", "/healthz", "/readyz", "/leader"].contains(&path);
        if !known {
            return (StatusCode::NOT_FOUND, Text::plain("not found\n"));
        }
        if method != Method::GET {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                Text::plain("method not allowed\n"),
            );
        }
        match path {
            "/metrics" => (StatusCode::OK, Text::metrics(self.metrics.render())),
            "/healthz" => flag(&self.flags.healthy, "ok", "unhealthy"),
            "/readyz" => flag(&self.flags.ready, "ok", "caches not synced"),
            _ => flag(&self.flags.leading, "leading", "not leading"),
        }
    }
}

// --- the HTTP server --------------------------------------------------------------------

/// A response body sent in one frame.
struct Text {
    body: Option<Bytes>,
    content_type: &'static str,
}

impl Text {
    fn plain(text: &'static str) -> Self {
        Text {
            body: Some(Bytes::from_static(text.as_bytes())),
            content_type: "text/plain; charset=utf-8",
        }
    }

    fn metrics(text: String) -> Self {
        Text {
            body: Some(Bytes::from(text)),
            content_type: METRICS_CONTENT_TYPE,
        }
    }
}

impl Body for Text {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.body.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.body.as_ref().map_or(0, |b| b.len() as u64))
    }
}

/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound (in use, not permitted).
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
}

/// The largest request head read; a request with any body is refused as well, since the
/// endpoints take no input.
pub const MAX_REQUEST_BYTES: usize = 8192;
/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 64;
/// How long open connections get to finish after the shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The endpoints on a bound socket; [`run`](Self::run) serves them.
pub struct Endpoints {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: ServeState,
    header_read_timeout: Duration,
}

impl Endpoints {
    /// Binds `addr` (port 0 picks a free port; see [`local_addr`](Self::local_addr)).
    pub async fn bind(addr: SocketAddr, state: ServeState) -> Result<Self, ServeError> {
        let bind_error = |source| ServeError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        Ok(Endpoints {
            listener,
            local_addr,
            state,
            header_read_timeout: Duration::from_secs(5),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// How long a client may take to send a request head (also closes idle keep-alive
    /// connections); 5 s unless changed.
    pub fn with_header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Serves until `shutdown` completes, then stops accepting, lets open requests finish
    /// (for at most a few seconds) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .max_buf_size(MAX_REQUEST_BYTES)
            .max_header_size(MAX_REQUEST_BYTES);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let mut connections = JoinSet::new();
        info!(addr = %self.local_addr, "serving metrics and health endpoints");
        tokio::pin!(shutdown);
        loop {
            let full = connections.len() >= MAX_CONNECTIONS;
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept(), if !full => match accepted {
                    Ok((stream, peer)) => {
                        let conn = http.serve_connection(TokioIo::new(stream), Service(self.state.clone()));
                        connections.spawn(drive(conn, stopping.clone(), peer));
                    }
                    Err(e) => {
                        // Out of file descriptors, usually: let connections close first.
                        warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        drop(self.listener);
        let _ = stop.send(true);
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                left = connections.len(),
                "closing connections still open after the grace period"
            );
            connections.shutdown().await;
        }
        info!(addr = %self.local_addr, "stopped serving");
        Ok(())
    }
}

/// Binds `addr` and serves until `shutdown` completes; see [`Endpoints`].
pub async fn serve(
    addr: SocketAddr,
    state: ServeState,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    Endpoints::bind(addr, state).await?.run(shutdown).await
}

type Connection = hyper::server::conn::http1::Connection<TokioIo<tokio::net::TcpStream>, Service>;

/// Drives one connection, asking it to finish its current request and close on shutdown.
async fn drive(
    conn: Connection,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    peer: SocketAddr,
) {
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        // An error (the server dropped its sender) means stopping too.
        () = async { drop(stopping.wait_for(|stop| *stop).await) } => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// The request handler: routes on method and path only, never reads a body.
#[derive(Clone)]
struct Service(ServeState);

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Text>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Text>, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let too_large = request.headers().contains_key(TRANSFER_ENCODING)
            || request
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .is_some_and(|n| n > 0);
        let (status, body) = if too_large {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                Text::plain("no request body accepted\n"),
            )
        } else {
            self.0.respond(request.method(), request.uri().path())
        };
        let content_type = HeaderValue::from_static(body.content_type);
        let mut response = Response::new(body);
        *response.status_mut() = status;
        response.headers_mut().insert(CONTENT_TYPE, content_type);
        if status == StatusCode::METHOD_NOT_ALLOWED {
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET"));
        }
        std::future::ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms_in_text_format() {
        let metrics = Metrics::new();
        let errors = metrics.counter(
            "errs_total",
            "Errors.\nSecond line \\",
            &["queue", "reason"],
        );
        errors.with(&["vmi", "api_write"]).inc_by(2);
        errors.with(&["a\"b\\c\nd", "x"]).inc();
        metrics.gauge("up", "Up.", &[]).with(&[]).set(1.0);
        let h = metrics.histogram("dur_seconds", "Durations.", &["name"], &[0.1, 1.0]);
        let vm = h.with(&["vm"]);
        vm.observe(0.05);
        vm.observe(0.1);
        vm.observe(5.0);
        let text = metrics.render();
        let expected = "\
# HELP errs_total Errors.\\nSecond line \\\\
# TYPE errs_total counter
errs_total{queue=\"a\\\"b\\\\c\\nd\",reason=\"x\"} 1
errs_total{queue=\"vmi\",reason=\"api_write\"} 2
# HELP up Up.
# TYPE up gauge
up 1
# HELP dur_seconds Durations.
# TYPE dur_seconds histogram
dur_seconds_bucket{name=\"vm\",le=\"0.1\"} 2
dur_seconds_bucket{name=\"vm\",le=\"1\"} 2
dur_seconds_bucket{name=\"vm\",le=\"+Inf\"} 3
dur_seconds_sum{name=\"vm\"} 5.15
dur_seconds_count{name=\"vm\"} 3
";
        assert_eq!(text, expected);
    }

    #[test]
    fn gauges_add_and_values_spell_like_prometheus() {
        let g = Metrics::new().gauge("g", "G.", &["q"]).with(&["a"]);
        g.add(3.0);
        g.add(-1.5);
        assert_eq!(g.get(), 1.5);
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(0.001), "0.001");
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn a_name_registers_once() {
        let metrics = Metrics::new();
        metrics.counter("c_total", "C.", &[]);
        metrics.counter("c_total", "C.", &[]);
    }

    #[test]
    #[should_panic(expected = "invalid label name")]
    fn le_is_reserved() {
        Metrics::new().histogram("h", "H.", &["le"], &[1.0]);
    }

    #[test]
    fn routes_by_method_and_path() {
        let state = ServeState::new(Metrics::new(), "virt-controller");
        let status = |m: Method, p: &str| state.respond(&m, p).0;
        assert_eq!(status(Method::GET, "/healthz"), StatusCode::OK);
        assert_eq!(
            status(Method::GET, "/readyz"),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(Method::GET, "/leader"),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status(Method::GET, "/nope"), StatusCode::NOT_FOUND);
        assert_eq!(
            status(Method::POST, "/metrics"),
            StatusCode::METHOD_NOT_ALLOWED
        );
        state.set_ready(true);
        state.set_leading(true);
        assert_eq!(status(Method::GET, "/readyz"), StatusCode::OK);
        assert_eq!(status(Method::GET, "/leader"), StatusCode::OK);
        let text = state.metrics().render();
        assert!(
            text.contains("kubevirt_virt_controller_leading_status 1\n"),
            "{text}"
        );
        assert!(
            text.contains("kubevirt_virt_controller_ready_status 1\n"),
            "{text}"
        );
    }
}
