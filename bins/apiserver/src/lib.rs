//! An in-process Kubernetes API server over [`kvrs_store::Store`], on loopback, for `kvrs run`:
//! kvrs's real virt-controller and virt-handler (kube-rs clients, watchers and reflectors) run
//! against it on one machine with no cluster.
//!
//! It speaks the REST and watch protocol kube-rs and kubectl use (see [`route`] for the paths,
//! `handler` for the verbs, `watch` for watches), with a random bearer token required on
//! every request and a kubeconfig written for clients. Admission ([`Admission`]) stands in for
//! KubeVirt's webhooks; extensions ([`Extension`]) serve further API groups behind the same
//! token (for `kvrs run`, virt-api's `subresources.kubevirt.io`).

mod discovery;
mod error;
mod extension;
mod handler;
mod kubeconfig;
mod openapi;
mod patch;
mod query;
pub mod route;
mod table;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

pub use discovery::GIT_VERSION;
pub use error::ApiError;
pub use extension::{Answer, Extension, Objects, ObjectsHandle, Pending};
pub use handler::Body;
pub use kvrs_store::{self as store, Operation, Store};

/// Defaulting and validation of objects before they are stored, in place of KubeVirt's
/// mutating and validating webhooks.
pub trait Admission: Send + Sync {
    /// Called before every create and update (including patches and `/status` writes) with
    /// the object as it would be stored; may change it. `resource` is the plural, with
    /// `/status` for status writes (`virtualmachineinstances`, `virtualmachines/status`).
    /// An `Err` refuses the write with 422 Invalid and the message.
    fn admit(&self, op: Operation, resource: &str, obj: &mut Value) -> Result<(), String>;
}

/// How the server is started.
#[derive(Clone)]
pub struct Options {
    /// Where the kubeconfig is written (mode 0600); a file in the temporary directory named
    /// after the process and port when `None`.
    pub kubeconfig_path: Option<PathBuf>,
    /// The admission hook.
    pub admission: Option<Arc<dyn Admission>>,
    /// API groups served by [`Extension`]s (`kvrs run`: `subresources.kubevirt.io`).
    pub extensions: Vec<Arc<dyn Extension>>,
    /// Events kept for watches (older resourceVersions get 410 Gone).
    pub history: usize,
    /// How often an idle watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Namespaces that exist from the start (others are created on first use).
    pub namespaces: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            kubeconfig_path: None,
            admission: None,
            extensions: Vec::new(),
            history: 10_000,
            bookmark_interval: Duration::from_secs(30),
            namespaces: vec!["default".into(), "kube-system".into(), "kube-public".into()],
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("kubeconfig_path", &self.kubeconfig_path)
            .field("admission", &self.admission.is_some())
            .field(
                "extensions",
                &self
                    .extensions
                    .iter()
                    .map(|e| e.group())
                    .collect::<Vec<_>>(),
            )
            .field("history", &self.history)
            .field("bookmark_interval", &self.bookmark_interval)
            .finish_non_exhaustive()
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding 127.0.0.1:0 failed.
    #[error("binding 127.0.0.1:0: {0}")]
    Bind(#[source] std::io::Error),
    /// No randomness for the token.
    #[error("reading /dev/urandom: {0}")]
    Random(#[source] std::io::Error),
    /// The kubeconfig could not be written.
    #[error("writing the kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl StartError {
    /// A stable name of the variant, for logs.
    pub fn label(&self) -> &'static str {
        match self {
            StartError::Bind(_) => "bind",
            StartError::Random(_) => "random",
            StartError::Kubeconfig { .. } => "kubeconfig",
        }
    }
}

/// Shared by every connection: the store behind one mutex, and the resourceVersion watchers
/// wait on (a `watch` channel: a write never waits for a watcher).
pub(crate) struct State {
    store: Mutex<Store>,
    changed: tokio::sync::watch::Sender<u64>,
    token: String,
    addr: String,
    bookmark_interval: Duration,
    rng: Mutex<u64>,
    extensions: Vec<Arc<dyn Extension>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic inside a store call leaves a consistent-enough store to keep serving.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a write and wakes the watchers.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let (r, rv) = {
            let mut s = self.lock();
            let r = f(&mut s);
            (r, s.resource_version())
        };
        self.changed.send_replace(rv);
        r
    }

    pub(crate) fn read<R>(&self, f: impl FnOnce(&Store) -> R) -> R {
        f(&self.lock())
    }

    fn next_random(&self) -> u64 {
        // splitmix64, seeded from /dev/urandom at start: UIDs and names need uniqueness,
        // not secrecy (the token is read from /dev/urandom directly).
        let mut s = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A random version-4 UID.
    pub(crate) fn uid(&self) -> String {
        let (a, b) = (self.next_random(), self.next_random());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    /// A generateName suffix in Kubernetes' alphabet (no vowels, no look-alikes).
    pub(crate) fn name_suffix(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut r = self.next_random();
        (0..5)
            .map(|_| {
                let n = ALPHABET.len() as u64; // 27
                // `r % n < 27`: the conversion cannot fail.
                let c = ALPHABET[usize::try_from(r % n).unwrap_or(0)] as char;
                r /= n;
                c
            })
            .collect()
    }
}

/// Seconds since the Unix epoch (the store takes time as data).
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Stops the server when [`stop`](Self::stop)ped or dropped.
#[derive(Debug)]
pub struct Shutdown {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Shutdown {
    /// Stops accepting, closes every connection (watches end) and waits for that.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Shutdown {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The bearer token every request must carry.
    pub token: String,
    /// The kubeconfig written for clients (`kube::Config::from_custom_kubeconfig`,
    /// `kubectl --kubeconfig`).
    pub kubeconfig_path: PathBuf,
    /// Stops the server (also when dropped).
    pub shutdown: Shutdown,
    state: Arc<State>,
}

impl Running {
    /// Runs `f` on the store directly (seeding objects such as the Node), waking watchers
    /// afterwards. Admission applies here too, as it is installed in the store.
    pub fn with_store<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        self.state.write(f)
    }
}

/// The API server.
#[derive(Debug)]
pub struct ApiServer;

impl ApiServer {
    /// Binds 127.0.0.1 on a free port, writes the kubeconfig and serves on the current tokio
    /// runtime until the returned [`Shutdown`] is stopped or dropped.
    pub async fn start(options: Options) -> Result<Running, StartError> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(StartError::Bind)?;
        let addr = listener.local_addr().map_err(StartError::Bind)?;
        let url = format!("http://{addr}");
        let random = kubeconfig::random_bytes(40).map_err(StartError::Random)?;
        let token = kubeconfig::hex(&random[..32]);
        let seed = random[32..40]
            .iter()
            .fold(0u64, |a, b| (a << 8) | u64::from(*b));
        let kubeconfig_path = options.kubeconfig_path.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!(
                "kvrs-apiserver-{}-{}.kubeconfig",
                std::process::id(),
                addr.port()
            ))
        });
        kubeconfig::write(&kubeconfig_path, &url, &token).map_err(|source| {
            StartError::Kubeconfig {
                path: kubeconfig_path.clone(),
                source,
            }
        })?;
        let mut store = Store::new(store::StoreOptions {
            typed: false,
            history: options.history,
            keep_evicted: false,
        });
        if let Some(admission) = options.admission.clone() {
            store.set_admission(Some(Arc::new(
                move |op: Operation, _: &store::ResourceType, resource: &str, obj: &mut Value| {
                    admission.admit(op, resource, obj)
                },
            )));
        }
        let (changed, _) = tokio::sync::watch::channel(0);
        let state = Arc::new(State {
            store: Mutex::new(store),
            changed,
            token: token.clone(),
            addr: addr.to_string(),
            bookmark_interval: options.bookmark_interval,
            rng: Mutex::new(seed),
            extensions: options.extensions.clone(),
        });
        for ns in &options.namespaces {
            handler::ensure_namespace(&state, ns);
        }
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(serve(listener, state.clone(), stopped));
        info!(%url, kubeconfig = %kubeconfig_path.display(), "embedded API server listening");
        Ok(Running {
            url,
            token,
            kubeconfig_path,
            shutdown: Shutdown {
                stop: Some(stop),
                task: Some(task),
            },
            state,
        })
    }
}

async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new());
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Interactive streams (a console) write small frames: never hold one back
                    // for the peer's delayed ACK (Nagle's ~40 ms).
                    let _ = stream.set_nodelay(true);
                    let state = state.clone();
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(handler::handle(state, req).await) }
                    });
                    // With upgrades: an extension may take a connection over (a console).
                    let conn = http.serve_connection(TokioIo::new(stream), service).with_upgrades();
                    connections.spawn(async move {
                        if let Err(e) = conn.await {
                            debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    // Watches never finish on their own: close everything.
    connections.shutdown().await;
    info!("embedded API server stopped");
}
