//! The metrics and health endpoints every kvrs daemon serves, as KubeVirt's do: `/metrics`
//! (Prometheus text format 0.0.4), `/healthz` (liveness), `/readyz` (caches synced, so a
//! Service may route to this replica, standby or not) and `/leader` (this replica leads).
//!
//! ## The series: prometheus-client
//!
//! Counters, gauges and histograms are the maintained `prometheus-client` crate's (as kube-rs's
//! controller-rs uses it), kept in its `Registry` and written by its
//! `encoding::prometheus_text` encoder. A worker updates a series through a handle it keeps (a
//! clone of the crate's metric: one atomic operation for counters and gauges, a short lock for a
//! histogram), never through a name lookup.
//!
//! What stays kvrs's own here, and why:
//! - **Text format 0.0.4, not OpenMetrics.** KubeVirt v1.9.0's daemons serve client_golang's
//!   `promhttp` handler with default options (`EnableOpenMetrics` off), which answers
//!   Prometheus's default scrape in the 0.0.4 text format (`text/plain; version=0.0.4`);
//!   KubeVirt's ServiceMonitor scrapes that, and kvrs promised the same bytes: counter families
//!   named with their `_total` (`# TYPE kubevirt_workqueue_adds_total counter`), no `# EOF`.
//!   prometheus-client's default OpenMetrics encoder would change both, so its 0.0.4 encoder is
//!   used and [`METRICS_CONTENT_TYPE`] is its content type.
//! - **HELP texts verbatim.** `Registry::register` appends a `.` to every HELP text; client-go's
//!   work-queue texts ("Current depth of workqueue") have none, and a text that already ends in
//!   one (KubeVirt's "Indication for an operating virt-controller.", kvrs's leading gauge) would
//!   get two. So each family is registered as a small [`Collector`] that writes its descriptor
//!   as given.
//! - **Counters are named as scraped.** Callers write the exposed name (`…_total`, which
//!   [`Metrics::counter`] requires); the suffix is taken off at registration because the encoder
//!   appends it (and `Registry::register` refuses such a name in debug builds).
//! - **Label names are fixed per family**, the values given in order ([`MetricVec::with`], like
//!   client_golang's `WithLabelValues`), and names are checked at registration: a name taken
//!   twice, an invalid name or the reserved `le` is a programming error (client_golang's
//!   `MustRegister` panics likewise); prometheus-client checks none of this.
//! - **Gauges are integers** (queue depth, the 0/1 leading and ready gauges), so a value is
//!   written `2` as client_golang writes it, not `2.0`.
//! - **The names**: the work-queue families are client-go's work-queue metrics under
//!   KubeVirt's `kubevirt_workqueue_` prefix, label `name` = the queue, and
//!   `kubevirt_<component>_leading_status` / `_ready_status` are KubeVirt's leader and readiness
//!   gauges, so KubeVirt's dashboards and alerts carry over.
//!
//! Against the hand-written encoder this replaced, the text differs only where no parser looks:
//! a histogram `_sum` that is a whole number is written `30.0` (was `30`), and the series of one
//! family come in hash order (were sorted).
//!
//! ## The endpoints
//!
//! The HTTP side is hyper's HTTP/1.1 server with the limits a probe endpoint wants: a bounded
//! request head, no request body, a header read timeout, a connection cap and a graceful stop.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, prometheus_text};
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

/// A monotonically increasing count of events (prometheus-client's).
pub use prometheus_client::metrics::counter::Counter;
/// A value that goes up and down; an `i64` (prometheus-client's).
pub use prometheus_client::metrics::gauge::Gauge;
/// A distribution of observations over fixed buckets (prometheus-client's).
pub use prometheus_client::metrics::histogram::Histogram;

/// Work-duration buckets in seconds, from a fast cache-only sync to a slow API round trip.
pub const DURATION_BUCKETS: [f64; 13] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The `Content-Type` of the Prometheus text exposition format 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking registration leaves a registry that still renders.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// --- the registry ------------------------------------------------------------------------

/// A set of metric families rendered together; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<Families>>,
}

#[derive(Default)]
struct Families {
    registry: Registry,
    /// The exposed names, so one is registered once.
    names: BTreeSet<String>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// One family with its HELP text as given (see the module documentation).
#[derive(Debug)]
struct Described<M> {
    /// The name the encoder is given (a counter's without `_total`).
    name: String,
    help: String,
    metric: M,
}

impl<M: EncodeMetric + std::fmt::Debug + Send + Sync + 'static> Collector for Described<M> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let metric =
            encoder.encode_descriptor(&self.name, &self.help, None, self.metric.metric_type())?;
        self.metric.encode(metric)
    }
}

/// A series' label pairs, in the family's label-name order.
pub type Labels = Vec<(&'static str, String)>;

/// A family of one metric type; [`with`](Self::with) picks (or creates) one label set's series.
#[derive(Debug)]
pub struct MetricVec<M, C = fn() -> M> {
    name: Arc<str>,
    label_names: Arc<[&'static str]>,
    family: Family<Labels, M, C>,
}

impl<M, C: Clone> Clone for MetricVec<M, C> {
    fn clone(&self) -> Self {
        MetricVec {
            name: self.name.clone(),
            label_names: self.label_names.clone(),
            family: self.family.clone(),
        }
    }
}

impl<M: Clone, C: MetricConstructor<M>> MetricVec<M, C> {
    /// The series for `values` (one per label name). Keep it: updates then skip the lookup.
    ///
    /// # Panics
    /// If the number of values differs from the number of label names.
    pub fn with(&self, values: &[&str]) -> M {
        assert_eq!(
            values.len(),
            self.label_names.len(),
            "metric {} takes labels {:?}",
            self.name,
            self.label_names
        );
        let labels: Labels = self
            .label_names
            .iter()
            .zip(values)
            .map(|(name, value)| (*name, (*value).to_owned()))
            .collect();
        self.family.get_or_create_owned(&labels)
    }
}

/// A counter family.
pub type CounterVec = MetricVec<Counter>;
/// A gauge family.
pub type GaugeVec = MetricVec<Gauge>;
/// A histogram family; every series has the family's buckets.
pub type HistogramVec = MetricVec<Histogram, Buckets>;

/// The upper bounds of a histogram family's buckets (`+Inf` implied): how its series start.
#[derive(Clone, Debug)]
pub struct Buckets(Arc<[f64]>);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
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

    /// Registers `family` as `name` (exposed as `exposed`) after checking the names.
    fn register<M, C>(
        &self,
        exposed: &str,
        name: &str,
        help: &str,
        label_names: &[&'static str],
        family: Family<Labels, M, C>,
    ) -> MetricVec<M, C>
    where
        Family<Labels, M, C>: EncodeMetric + Clone + std::fmt::Debug + Send + Sync + 'static,
    {
        assert!(valid_name(exposed, true), "invalid metric name {exposed:?}");
        for label in label_names {
            assert!(
                valid_name(label, false) && !label.starts_with("__") && *label != "le",
                "invalid label name {label:?} of metric {exposed}"
            );
        }
        let mut families = lock(&self.inner);
        assert!(
            families.names.insert(exposed.to_owned()),
            "metric {exposed} registered twice"
        );
        families.registry.register_collector(Box::new(Described {
            name: name.to_owned(),
            help: help.to_owned(),
            metric: family.clone(),
        }));
        MetricVec {
            name: exposed.into(),
            label_names: label_names.into(),
            family,
        }
    }

    /// Registers a counter family named `name`, as scraped: it must end in `_total`.
    ///
    /// # Panics
    /// If `name` does not end in `_total`, `name` or a label name is not a valid Prometheus
    /// name, or `name` is taken: all are program constants, so this is a programming error
    /// (like client_golang's `MustRegister`).
    pub fn counter(&self, name: &str, help: &str, label_names: &[&'static str]) -> CounterVec {
        let Some(base) = name.strip_suffix("_total") else {
            panic!("counter name {name:?} must end in _total");
        };
        self.register(name, base, help, label_names, Family::default())
    }

    /// Registers a gauge family. Panics as [`counter`](Self::counter) does (bar `_total`).
    pub fn gauge(&self, name: &str, help: &str, label_names: &[&'static str]) -> GaugeVec {
        self.register(name, name, help, label_names, Family::default())
    }

    /// Registers a histogram family with upper bounds `buckets` (ascending; `+Inf` is implied).
    ///
    /// # Panics
    /// As [`gauge`](Self::gauge), and if `buckets` is not finite and strictly ascending.
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
        let family = Family::new_with_constructor(Buckets(buckets.into()));
        self.register(name, name, help, label_names, family)
    }

    /// Every family in registration order, in the text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String does not fail, nor does encoding our label values.
        if let Err(e) = prometheus_text::encode(&mut out, &lock(&self.inner).registry) {
            error!(error = %e, "encoding the metrics failed");
        }
        out
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

/// One queue's series, kept by its loop. It is the queue's own metrics hook
/// ([`kvrs_queue::QueueMetrics`]): hand it to the queue with [`hooks`](Self::hooks).
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

    /// These series as the hooks a `kvrs_queue::WorkQueue` reports to (`with_metrics`).
    pub fn hooks(&self) -> Arc<dyn kvrs_queue::QueueMetrics> {
        Arc::new(self.clone())
    }
}

/// The queue counts adds, retries, depth, queue latency and work duration itself, as client-go's
/// workqueue counts them.
impl kvrs_queue::QueueMetrics for QueueMetrics {
    fn depth(&self, depth: usize) {
        self.depth.set(i64::try_from(depth).unwrap_or(i64::MAX));
    }
    fn add(&self) {
        self.adds.inc();
    }
    fn retry(&self) {
        self.retries.inc();
    }
    fn queue_latency(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }
    fn work_duration(&self, took: Duration) {
        self.work_duration.observe(took.as_secs_f64());
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
    kubevirt_leader_probe: AtomicBool,
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
                kubevirt_leader_probe: AtomicBool::new(false),
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
        self.ready_gauge.set(i64::from(ready));
    }

    /// Leadership, shown by `/leader` and the leading gauge.
    pub fn set_leading(&self, leading: bool) {
        self.flags.leading.store(leading, Ordering::Relaxed);
        self.leading_gauge.set(i64::from(leading));
    }

    /// `/leader` as KubeVirt's virt-controller answers it (its Deployment's readiness probe):
    /// 200 on every replica, the body `{"apiserver":{"leader":"true"}}` or `"false"`, so a
    /// standby counts as Ready and a rolling update can proceed while another replica leads.
    /// Without it `/leader` answers 503 on a standby (kvrs's own probes use `/readyz`).
    pub fn set_kubevirt_leader_probe(&self, on: bool) {
        self.flags
            .kubevirt_leader_probe
            .store(on, Ordering::Relaxed);
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
            _ if self.flags.kubevirt_leader_probe.load(Ordering::Relaxed) => {
                let body: &'static str = if self.flags.leading.load(Ordering::Relaxed) {
                    "{\"apiserver\":{\"leader\":\"true\"}}"
                } else {
                    "{\"apiserver\":{\"leader\":\"false\"}}"
                };
                (StatusCode::OK, Text::json(body))
            }
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

    fn json(text: &'static str) -> Self {
        Text {
            body: Some(Bytes::from_static(text.as_bytes())),
            content_type: "application/json",
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
/// How long a connection's handshake (TLS) may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
        self.run_with(shutdown, |stream| std::future::ready(Ok(stream)))
            .await
    }

    /// As [`run`](Self::run), each accepted connection first passed through `wrap` (a TLS
    /// handshake, say) in its own task; a connection `wrap` fails is dropped and logged at debug.
    pub async fn run_with<W, F, S>(
        self,
        shutdown: impl Future<Output = ()>,
        wrap: W,
    ) -> Result<(), ServeError>
    where
        W: Fn(tokio::net::TcpStream) -> F,
        F: Future<Output = std::io::Result<S>> + Send + 'static,
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
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
                        let (http, service, stopping) = (http.clone(), Service(self.state.clone()), stopping.clone());
                        let wrapped = wrap(stream);
                        connections.spawn(async move {
                            // The handshake is bounded like a request head is.
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, wrapped).await {
                                Ok(Ok(stream)) => {
                                    let conn = http.serve_connection(TokioIo::new(stream), service);
                                    drive(conn, stopping, peer).await;
                                }
                                Ok(Err(e)) => debug!(%peer, error = %e, "connection refused in its handshake"),
                                Err(_) => debug!(%peer, "handshake timed out"),
                            }
                        });
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

type Connection<S> = hyper::server::conn::http1::Connection<TokioIo<S>, Service>;

/// Drives one connection, asking it to finish its current request and close on shutdown.
async fn drive<S>(
    conn: Connection<S>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    peer: SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
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
    fn renders_counters_gauges_and_histograms_in_text_format_0_0_4() {
        let metrics = Metrics::new();
        let errors = metrics.counter(
            "errs_total",
            "Errors.\nSecond line \\",
            &["queue", "reason"],
        );
        errors.with(&["a\"b\\c\nd", "x"]).inc();
        metrics.gauge("up", "Up", &[]).with(&[]).set(1);
        let h = metrics.histogram("dur_seconds", "Durations", &["name"], &[0.25, 1.0]);
        let vm = h.with(&["vm"]);
        vm.observe(0.25);
        vm.observe(0.5);
        vm.observe(4.0);
        metrics.counter("none_total", "Nothing yet", &["reason"]);
        let text = metrics.render();
        // HELP verbatim (no `.` appended), `_total` once, integer gauges, Go's `le` spelling,
        // a family without series still described, no `# EOF`.
        let expected = "\
# HELP errs_total Errors.\\nSecond line \\\\
# TYPE errs_total counter
errs_total{queue=\"a\\\"b\\\\c\\nd\",reason=\"x\"} 1
# HELP up Up
# TYPE up gauge
up 1
# HELP dur_seconds Durations
# TYPE dur_seconds histogram
dur_seconds_bucket{name=\"vm\",le=\"0.25\"} 1
dur_seconds_bucket{name=\"vm\",le=\"1\"} 2
dur_seconds_bucket{name=\"vm\",le=\"+Inf\"} 3
dur_seconds_sum{name=\"vm\"} 4.75
dur_seconds_count{name=\"vm\"} 3
# HELP none_total Nothing yet
# TYPE none_total counter
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_series_is_one_handle() {
        let metrics = Metrics::new();
        let errors = metrics.counter("errs_total", "Errors", &["queue", "reason"]);
        errors.with(&["vmi", "api_write"]).inc_by(2);
        errors.with(&["vmi", "api_write"]).inc();
        errors.with(&["vm", "api_write"]).inc();
        assert_eq!(errors.with(&["vmi", "api_write"]).get(), 3);
        let text = metrics.render();
        assert!(text.contains("errs_total{queue=\"vmi\",reason=\"api_write\"} 3\n"));
        assert!(text.contains("errs_total{queue=\"vm\",reason=\"api_write\"} 1\n"));
        let g = metrics.gauge("g", "G", &["q"]).with(&["a"]);
        g.inc_by(3);
        g.dec();
        assert_eq!(g.get(), 2);
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn a_name_registers_once() {
        let metrics = Metrics::new();
        metrics.counter("c_total", "C", &[]);
        metrics.counter("c_total", "C", &[]);
    }

    #[test]
    #[should_panic(expected = "must end in _total")]
    fn a_counter_is_named_as_scraped() {
        Metrics::new().counter("c", "C", &[]);
    }

    #[test]
    #[should_panic(expected = "invalid label name")]
    fn le_is_reserved() {
        Metrics::new().histogram("h", "H", &["le"], &[1.0]);
    }

    #[test]
    #[should_panic(expected = "takes labels")]
    fn a_series_takes_every_label() {
        Metrics::new().gauge("g", "G", &["a", "b"]).with(&["x"]);
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
