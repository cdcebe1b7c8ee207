//! The VMI's serial console and VNC display: `GET
//! /v1/namespaces/{ns}/virtualmachineinstances/{name}/console` (and `.../vnc`) upgraded to a
//! WebSocket (KubeVirt's `plain.kubevirt.io`: binary messages carrying the raw bytes) and
//! bridged to the launcher's serial (VNC) socket, as KubeVirt v1.9.0's
//! `pkg/virt-handler/rest/console.go` does.
//!
//! Where the socket is: QEMU listens on `/var/run/kubevirt-private/<vmi uid>/virt-serial0`
//! (`virt-vnc`) in the launcher pod, whose `/var/run/kubevirt-private` is the pod's `private`
//! emptyDir. The handler reaches it where the kubelet keeps that emptyDir, under the pods
//! directory, as it reaches the launcher's cmd socket in the `sockets` emptyDir. The part below
//! the emptyDir is written by the pod, so it is opened with `openat2` refusing every symlink
//! (KubeVirt's `safepath.JoinNoFollow`), and dialled through `/proc/self/fd/N`, which also
//! keeps the address within a Unix socket's 108 bytes whatever the pods directory's length.
//!
//! One client per console (and per display), as KubeVirt: a new connection to a VMI's console
//! closes the one already open, without a close frame (the former client sees an abnormal
//! closure, which `virtctl console` reports as "another user connected to the console"). QEMU
//! itself serves one serial client at a time on the socket, so the newcomer is served once the
//! former is gone. A VNC client asking `preserveSession=true` is refused with 503 instead while
//! another is connected.
//!
//! Memory is bounded: a message (and a frame) from the client is at most [`MAX_MESSAGE`] bytes,
//! the guest's output is read [`READ_CHUNK`] bytes at a time and each chunk is sent before the
//! next is read, so a slow client slows the console down instead of growing a buffer.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    CONNECTION, HeaderValue, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tracing::{info, warn};

use super::server::VmiSource;
use super::{Answer, websocket};

/// The serial socket's name in the VMI's private directory.
pub const SERIAL_SOCKET: &str = "virt-serial0";
/// The VNC socket's name there.
pub const VNC_SOCKET: &str = "virt-vnc";

/// Which of the VMI's streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The serial console (`console`).
    Serial,
    /// The VNC display (`vnc`).
    Vnc,
}

impl Stream {
    /// The socket's name in the VMI's private directory.
    pub fn socket(self) -> &'static str {
        match self {
            Stream::Serial => SERIAL_SOCKET,
            Stream::Vnc => VNC_SOCKET,
        }
    }

    /// What logs call it.
    pub fn label(self) -> &'static str {
        match self {
            Stream::Serial => "serial console",
            Stream::Vnc => "VNC",
        }
    }
}
/// The largest message (and frame) taken from a client: what a person types or pastes.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// How much of the guest's output one message carries at most.
pub const READ_CHUNK: usize = 32 * 1024;
/// The most written to a client before a send waits for the connection to drain.
const MAX_WRITE_BUFFER: usize = 2 * MAX_MESSAGE;

/// A console (or VNC) request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleTarget {
    /// The VMI's namespace.
    pub namespace: String,
    /// The VMI's name.
    pub name: String,
    /// Which stream.
    pub stream: Stream,
    /// VNC's `preserveSession`: refuse rather than take over a connected display.
    pub preserve_session: bool,
}

impl ConsoleTarget {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Go's `strconv.ParseBool`; anything else is `false`, as KubeVirt reads `preserveSession`.
pub fn parse_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// Reads a console or VNC request (`query`: the URI's query): `None` when `path` is neither
/// (other routes are [`super::route`]'s), 405 for a method other than `GET`.
pub fn route(
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Option<Result<ConsoleTarget, Answer>> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let [
        "",
        "v1",
        "namespaces",
        ns,
        "virtualmachineinstances",
        name,
        sub,
    ] = parts.as_slice()
    else {
        return None;
    };
    let stream = match *sub {
        "console" => Stream::Serial,
        "vnc" => Stream::Vnc,
        _ => return None,
    };
    let preserve_session = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "preserveSession")
        .is_some_and(|(_, v)| parse_bool(v));
    if ns.is_empty() || name.is_empty() {
        return None;
    }
    if method != "GET" {
        return Some(Err(Answer::text(405, "405: Method Not Allowed")));
    }
    Some(Ok(ConsoleTarget {
        namespace: ns.to_string(),
        name: name.to_string(),
        stream,
        preserve_session: stream == Stream::Vnc && preserve_session,
    }))
}

/// Why the serial socket cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No launcher pod of the VMI on this node (not scheduled here yet, or gone).
    #[error("no launcher pod of VMI {vmi} on this node")]
    NoPod {
        /// `namespace/name`.
        vmi: String,
    },
    /// The VMI has no UID to name its private directory by.
    #[error("VMI {vmi} has no UID")]
    NoUid {
        /// `namespace/name`.
        vmi: String,
    },
    /// The socket could not be opened (missing, or a symlink on the way).
    #[error("socket {path}: {why}")]
    Open {
        /// The path, from the node.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Something else than a socket is there.
    #[error("socket {path}: not a socket")]
    NotSocket {
        /// The path, from the node.
        path: PathBuf,
    },
    /// Dialling the socket failed (QEMU not listening).
    #[error("dial unix {path}: {source}")]
    Dial {
        /// The path, from the node.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Opens `<private_dir>/<vmi_uid>/<socket>` as an `O_PATH` descriptor, refusing symlinks and
/// anything outside `private_dir`.
pub fn open_socket(private_dir: &Path, vmi_uid: &str, socket: &str) -> Result<File, ConsoleError> {
    let path = private_dir.join(vmi_uid).join(socket);
    let open = |why: String| ConsoleError::Open {
        path: path.clone(),
        why,
    };
    if vmi_uid.is_empty() || vmi_uid.contains('/') || vmi_uid == "." || vmi_uid == ".." {
        return Err(open("the VMI's UID is not a plain name".into()));
    }
    let dir = File::open(private_dir).map_err(|e| open(e.to_string()))?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .mode(Mode::empty())
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    let relative = Path::new(vmi_uid).join(socket);
    let fd = openat2(&dir, relative.as_path(), how).map_err(|e| match e {
        nix::errno::Errno::ELOOP => open("is or passes through a symlink (refused)".into()),
        nix::errno::Errno::ENOENT => open("does not exist".into()),
        other => open(other.desc().to_string()),
    })?;
    let file = File::from(fd);
    let is_socket = file
        .metadata()
        .map_err(|e| open(e.to_string()))?
        .file_type()
        .is_socket();
    if !is_socket {
        return Err(ConsoleError::NotSocket { path });
    }
    Ok(file)
}

/// Dials the socket `opened` by [`open_socket`] (`path` is for messages).
async fn dial(opened: &File, path: &Path) -> Result<UnixStream, ConsoleError> {
    UnixStream::connect(format!("/proc/self/fd/{}", opened.as_raw_fd()))
        .await
        .map_err(|source| ConsoleError::Dial {
            path: path.to_path_buf(),
            source,
        })
}

/// A stream of one VMI (by UID).
type StreamKey = (Stream, String);

/// The client holding a stream: its claim's number and what closes it.
type Holder = (u64, oneshot::Sender<()>);

/// The open consoles and displays, one of each per VMI UID.
#[derive(Debug, Default)]
pub struct Consoles {
    next: AtomicU64,
    open: Mutex<HashMap<StreamKey, Holder>>,
}

/// A console held open; dropping it frees the VMI's slot unless a newer client took it.
#[derive(Debug)]
pub struct Claim {
    consoles: Arc<Consoles>,
    key: StreamKey,
    id: u64,
}

impl Consoles {
    /// Takes the console of VMI `uid`, closing the one open (KubeVirt's `newStopChan`): the
    /// claim, what fires when a newer client takes it over, and whether one was open.
    pub fn claim(
        self: &Arc<Self>,
        stream: Stream,
        uid: &str,
    ) -> (Claim, oneshot::Receiver<()>, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let key = (stream, uid.to_string());
        let previous = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), (id, tx));
        let replaced = previous.is_some_and(|(_, stop)| stop.send(()).is_ok());
        let claim = Claim {
            consoles: self.clone(),
            key,
            id,
        };
        (claim, rx, replaced)
    }

    /// Whether VMI `uid`'s `stream` has a client (KubeVirt's `vncInUse`).
    pub fn in_use(&self, stream: Stream, uid: &str) -> bool {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&(stream, uid.to_string()))
    }

    /// How many consoles are open.
    pub fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut open = self.consoles.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.get(&self.key).is_some_and(|(id, _)| *id == self.id) {
            open.remove(&self.key);
        }
    }
}

fn text(a: Answer) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(a.body)));
    *r.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    r
}

/// Serves a console or VNC request: the refusal, or `101` with the bridge started once hyper
/// hands the connection over. The order is KubeVirt's (VMI, socket, the former client closed,
/// dial), except that a request that is no WebSocket handshake is refused first, so it cannot
/// close another client's console, and a socket that refuses the dial is answered with 500
/// before the upgrade rather than by closing the upgraded connection.
pub async fn open(
    vmis: &dyn VmiSource,
    consoles: &Arc<Consoles>,
    target: &ConsoleTarget,
    mut req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let key = target.key();
    let Some(vmi) = vmis.get(&target.namespace, &target.name) else {
        info!(vmi = %key, "Failed to retrieve VMI: not on this node");
        return text(Answer::text(404, &format!("VMI {key} does not exist")));
    };
    let headers = req.headers();
    let accepted = match websocket::accept(req.method().as_str(), |name| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }) {
        Ok(a) => a,
        Err(refused) => {
            let why = String::from_utf8_lossy(&refused.body);
            warn!(vmi = %key, "Failed to upgrade client websocket connection: {why}");
            return text(refused);
        }
    };
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    let stream = target.stream;
    if target.preserve_session && consoles.in_use(stream, &uid) {
        warn!(vmi = %key, "Already has an active connection. Preserve it.");
        return text(Answer::text(503, "Active VNC connection. Request denied."));
    }
    let (opened, path) = match find_socket(vmis, &vmi, &key, &uid, stream) {
        Ok(s) => s,
        Err(e) => {
            warn!(vmi = %key, "Failed finding unix socket for {}: {e}", stream.label());
            return text(Answer::text(400, &e.to_string()));
        }
    };
    let (claim, taken_over, replaced) = consoles.claim(stream, &uid);
    if replaced {
        let what = stream.label();
        info!(vmi = %key, "a new client took the {what} over: the former one is closed");
    }
    let unix = match dial(&opened, &path).await {
        Ok(s) => s,
        Err(e) => {
            warn!(vmi = %key, "{e}");
            return text(Answer::text(500, &e.to_string()));
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => return warn!(vmi = %key, "the console connection was not upgraded: {e}"),
        };
        info!(vmi = %key, "{} connected", stream.label());
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE))
            .write_buffer_size(0)
            .max_write_buffer_size(MAX_WRITE_BUFFER);
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        let ended = bridge(ws, unix, taken_over).await;
        drop(claim);
        let what = stream.label();
        match ended {
            Ended::Client => info!(vmi = %key, "{what} closed by the client"),
            Ended::Guest => info!(vmi = %key, "{what} closed: the launcher's socket closed"),
            Ended::TakenOver => info!(vmi = %key, "{what} closed: another client connected"),
            Ended::Failed(e) => {
                warn!(vmi = %key, "{what}: error in proxying websocket and unix socket: {e}")
            }
        }
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accepted.accept) {
        h.insert(SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(p) = accepted.protocol {
        h.insert(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(p));
    }
    r
}

/// The `stream`'s socket of `vmi`'s launcher pod on this node, opened.
fn find_socket(
    vmis: &dyn VmiSource,
    vmi: &kvrs_api::VirtualMachineInstance,
    key: &str,
    uid: &str,
    stream: Stream,
) -> Result<(File, PathBuf), ConsoleError> {
    if uid.is_empty() {
        return Err(ConsoleError::NoUid { vmi: key.into() });
    }
    let mut last = ConsoleError::NoPod { vmi: key.into() };
    for dir in vmis.private_dirs(vmi) {
        match open_socket(&dir, uid, stream.socket()) {
            Ok(f) => return Ok((f, dir.join(uid).join(stream.socket()))),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// How a bridge ended.
#[derive(Debug)]
pub enum Ended {
    /// The client closed (or dropped) its connection.
    Client,
    /// The launcher's socket closed.
    Guest,
    /// A newer client took the console.
    TakenOver,
    /// Reading or writing failed.
    Failed(String),
}

/// Copies the guest's output to the client as binary messages and the client's binary
/// messages to the guest (text messages are skipped, as KubeVirt's reader skips them) until
/// either side closes or `stop` fires.
pub async fn bridge<S>(
    ws: WebSocketStream<S>,
    unix: UnixStream,
    stop: oneshot::Receiver<()>,
) -> Ended
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut stream) = ws.split();
    let (mut guest_out, mut guest_in) = unix.into_split();
    let to_client = async {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = match guest_out.read(&mut buf).await {
                Ok(0) => return Ended::Guest,
                Ok(n) => n,
                Err(e) => return Ended::Failed(format!("reading from the unix socket: {e}")),
            };
            let message = Message::Binary(Bytes::copy_from_slice(&buf[..n]));
            if let Err(e) = sink.send(message).await {
                return Ended::Failed(format!("writing to the client: {e}"));
            }
        }
    };
    let to_guest = async {
        while let Some(message) = stream.next().await {
            match message {
                Ok(Message::Binary(bytes)) => {
                    if let Err(e) = guest_in.write_all(&bytes).await {
                        return Ended::Failed(format!("writing to the unix socket: {e}"));
                    }
                }
                Ok(Message::Close(_)) => return Ended::Client,
                Ok(_) => {}
                Err(e) => return Ended::Failed(format!("reading from the client: {e}")),
            }
        }
        Ended::Client
    };
    tokio::select! {
        e = to_client => e,
        e = to_guest => e,
        _ = stop => Ended::TakenOver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_route_is_a_get_on_the_vmi() {
        assert_eq!(
            route(
                "GET",
                "/v1/namespaces/ns/virtualmachineinstances/v/console",
                None
            ),
            Some(Ok(ConsoleTarget {
                namespace: "ns".into(),
                name: "v".into(),
                stream: Stream::Serial,
                preserve_session: false,
            }))
        );
        let vnc = |q| {
            route("GET", "/v1/namespaces/ns/virtualmachineinstances/v/vnc", q)
                .unwrap()
                .unwrap()
        };
        assert_eq!(vnc(None).stream, Stream::Vnc);
        assert!(!vnc(None).preserve_session);
        assert!(vnc(Some("preserveSession=true")).preserve_session);
        assert!(vnc(Some("x=1&preserveSession=1")).preserve_session);
        assert!(!vnc(Some("preserveSession=yes")).preserve_session);
        assert!(!vnc(Some("preserveSession=false")).preserve_session);
        // Only VNC preserves a session.
        let serial = route(
            "GET",
            "/v1/namespaces/ns/virtualmachineinstances/v/console",
            Some("preserveSession=true"),
        );
        assert!(!serial.unwrap().unwrap().preserve_session);
        assert_eq!(
            route(
                "PUT",
                "/v1/namespaces/ns/virtualmachineinstances/v/console",
                None
            )
            .unwrap()
            .unwrap_err()
            .status,
            405
        );
        for other in [
            "/v1/namespaces/ns/virtualmachineinstances/v/pause",
            "/v1/namespaces//virtualmachineinstances/v/console",
            "/v1/namespaces/ns/virtualmachineinstances/v/console/x",
            "/v1/namespaces/ns/pods/v/console",
        ] {
            assert_eq!(route("GET", other, None), None, "{other}");
        }
    }

    #[test]
    fn a_new_client_takes_the_console_over() {
        let consoles = Arc::new(Consoles::default());
        let (first, mut first_stop, replaced) = consoles.claim(Stream::Serial, "u1");
        assert!(!replaced);
        assert!(consoles.in_use(Stream::Serial, "u1"));
        assert!(!consoles.in_use(Stream::Vnc, "u1"));
        let (second, _, replaced) = consoles.claim(Stream::Serial, "u1");
        assert!(replaced);
        assert!(first_stop.try_recv().is_ok(), "the first was told");
        // The first ending does not free the console the second holds.
        drop(first);
        assert_eq!(consoles.len(), 1);
        let (_other, _, replaced) = consoles.claim(Stream::Serial, "u2");
        assert!(!replaced);
        let (_display, _, replaced) = consoles.claim(Stream::Vnc, "u1");
        assert!(!replaced);
        drop(second);
        assert_eq!(consoles.len(), 2);
    }

    #[test]
    fn the_serial_socket_is_opened_without_following_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let private = tmp.path().join("private");
        std::fs::create_dir_all(private.join("uid-1")).unwrap();
        let socket = private.join("uid-1").join(SERIAL_SOCKET);
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        open_socket(&private, "uid-1", SERIAL_SOCKET).unwrap();

        let e = open_socket(&private, "uid-2", SERIAL_SOCKET).unwrap_err();
        assert!(e.to_string().ends_with("does not exist"), "{e}");
        // A pod's symlink to another directory is not followed.
        std::os::unix::fs::symlink(private.join("uid-1"), private.join("uid-3")).unwrap();
        let e = open_socket(&private, "uid-3", SERIAL_SOCKET).unwrap_err();
        assert!(e.to_string().contains("symlink (refused)"), "{e}");
        std::fs::create_dir_all(private.join("uid-4")).unwrap();
        std::os::unix::fs::symlink(&socket, private.join("uid-4").join(SERIAL_SOCKET)).unwrap();
        assert!(open_socket(&private, "uid-4", SERIAL_SOCKET).is_err());
        std::fs::create_dir_all(private.join("uid-5")).unwrap();
        std::fs::write(private.join("uid-5").join(SERIAL_SOCKET), b"").unwrap();
        assert!(matches!(
            open_socket(&private, "uid-5", SERIAL_SOCKET),
            Err(ConsoleError::NotSocket { .. })
        ));
        assert!(open_socket(&private, "..", SERIAL_SOCKET).is_err());
    }

    #[tokio::test]
    async fn the_bridge_carries_bytes_both_ways_and_stops_when_taken_over() {
        let tmp = tempfile::tempdir().unwrap();
        let private = tmp.path().join("private");
        std::fs::create_dir_all(private.join("u")).unwrap();
        let listener =
            tokio::net::UnixListener::bind(private.join("u").join(SERIAL_SOCKET)).unwrap();
        let opened = open_socket(&private, "u", SERIAL_SOCKET).unwrap();
        let unix = dial(&opened, &private).await.unwrap();
        let (mut guest, _) = listener.accept().await.unwrap();

        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let server = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let (stop_tx, stop) = oneshot::channel();
        let bridged = tokio::spawn(bridge(server, unix, stop));

        guest.write_all(b"login: ").await.unwrap();
        let Some(Ok(Message::Binary(b))) = client.next().await else {
            panic!("no output")
        };
        assert_eq!(&b[..], b"login: ");
        client.send(Message::text("ignored")).await.unwrap();
        client
            .send(Message::Binary(Bytes::from_static(b"root\n")))
            .await
            .unwrap();
        let mut typed = [0u8; 5];
        guest.read_exact(&mut typed).await.unwrap();
        assert_eq!(&typed, b"root\n");

        stop_tx.send(()).unwrap();
        assert!(matches!(bridged.await.unwrap(), Ended::TakenOver));
        // The guest's side is closed with the bridge.
        let mut rest = Vec::new();
        assert_eq!(guest.read_to_end(&mut rest).await.unwrap(), 0);
    }
}
