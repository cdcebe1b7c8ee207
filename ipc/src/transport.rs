//! gRPC over Unix sockets: dialling a peer by path, and serving a router on a socket that only
//! appears under its final name once it answers.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::Router;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::IpcError;
use crate::layout::staging_socket_for;
use crate::proto::cmd::info::{CmdInfoRequest, cmd_info_client::CmdInfoClient};
use crate::proto::notify::info::{NotifyInfoRequest, notify_info_client::NotifyInfoClient};

/// The deadlines a client applies; the defaults are virt-handler's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long `connect(2)` may take (KubeVirt: 2 s).
    pub connect_timeout: Duration,
    /// Version handshake, queries and `Ping` (KubeVirt: 5 s).
    pub short_timeout: Duration,
    /// Commands carrying a VMI, such as `SyncVirtualMachine` (KubeVirt: 20 s).
    pub long_timeout: Duration,
    /// `FreezeVirtualMachine` (KubeVirt: 60 s).
    pub extended_timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect_timeout: Duration::from_secs(2),
            short_timeout: Duration::from_secs(5),
            long_timeout: Duration::from_secs(20),
            extended_timeout: Duration::from_secs(60),
        }
    }
}

impl ClientConfig {
    /// Every deadline set to `timeout` (handy for command-line tools and tests).
    pub fn uniform(timeout: Duration) -> Self {
        ClientConfig {
            connect_timeout: timeout,
            short_timeout: timeout,
            long_timeout: timeout,
            extended_timeout: timeout,
        }
    }
}

/// Opens a gRPC channel to the Unix socket at `path`.
///
/// The first connection is made here, so a missing, stale or foreign socket is reported now with
/// a precise error instead of at the first call. Later reconnects (after the peer restarted)
/// dial the same path again. The `:authority` is `localhost`, as KubeVirt's Go client sends it.
pub async fn dial(path: &Path, connect_timeout: Duration) -> Result<Channel, IpcError> {
    let stream = tokio::time::timeout(connect_timeout, UnixStream::connect(path))
        .await
        .map_err(|_| IpcError::ConnectTimeout {
            path: path.to_path_buf(),
            after: connect_timeout,
        })?
        .map_err(|e| IpcError::from_connect(path.to_path_buf(), e))?;
    let first = Arc::new(Mutex::new(Some(stream)));
    let socket = path.to_path_buf();
    let connector = tower::service_fn(move |_: Uri| {
        let first = Arc::clone(&first);
        let socket = socket.clone();
        async move {
            let ready = first.lock().map(|mut slot| slot.take()).unwrap_or(None);
            let stream = match ready {
                Some(stream) => stream,
                None => UnixStream::connect(&socket).await?,
            };
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    });
    Endpoint::from_static("http://localhost")
        .connect_timeout(connect_timeout)
        .connect_with_connector(connector)
        .await
        .map_err(|e| IpcError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })
}

/// Which handshake a peer answers, and so which Info service to ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfoService {
    /// `kubevirt.cmd.info.CmdInfo`, served by launchers.
    Cmd,
    /// `kubevirt.notify.info.NotifyInfo`, served by handlers.
    Notify,
}

impl InfoService {
    /// The gRPC service name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            InfoService::Cmd => "CmdInfo",
            InfoService::Notify => "NotifyInfo",
        }
    }

    /// The versions kvrs speaks for this service.
    pub fn our_versions(self) -> &'static [u32] {
        match self {
            InfoService::Cmd => crate::version::CMD_VERSIONS,
            InfoService::Notify => crate::version::NOTIFY_VERSIONS,
        }
    }
}

/// Asks the peer behind `channel` which versions of `service` it supports.
pub async fn query_versions(
    channel: &Channel,
    path: &Path,
    service: InfoService,
    timeout: Duration,
) -> Result<Vec<u32>, IpcError> {
    let call = async {
        match service {
            InfoService::Cmd => CmdInfoClient::new(channel.clone())
                .info(request(CmdInfoRequest {}, timeout))
                .await
                .map(|r| r.into_inner().supported_cmd_versions),
            InfoService::Notify => NotifyInfoClient::new(channel.clone())
                .info(request(NotifyInfoRequest {}, timeout))
                .await
                .map(|r| r.into_inner().supported_notify_versions),
        }
    };
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(IpcError::Unresponsive {
            path: path.to_path_buf(),
            service: service.name(),
            after: timeout,
        }),
        Ok(Err(status)) if crate::error::is_deadline(&status) => Err(IpcError::Unresponsive {
            path: path.to_path_buf(),
            service: service.name(),
            after: timeout,
        }),
        Ok(Err(status)) => Err(IpcError::Handshake {
            path: path.to_path_buf(),
            service: service.name(),
            status_message: format!("{:?}: {}", status.code(), status.message()),
        }),
        Ok(Ok(versions)) => Ok(versions),
    }
}

/// Dials `path`, asks for the versions of `service` and picks the highest one both sides speak.
/// Returns the channel, the chosen version and what the peer announced.
pub async fn dial_and_negotiate(
    path: &Path,
    service: InfoService,
    config: &ClientConfig,
) -> Result<(Channel, u32, Vec<u32>), IpcError> {
    let channel = dial(path, config.connect_timeout).await?;
    let peer = query_versions(&channel, path, service, config.short_timeout).await?;
    let ours = service.our_versions();
    match crate::version::highest_common_version(&peer, ours) {
        Some(version) => Ok((channel, version, peer)),
        None => Err(IpcError::NoCommonVersion {
            path: path.to_path_buf(),
            service: match service {
                InfoService::Cmd => "cmd",
                InfoService::Notify => "notify",
            },
            peer,
            ours: ours.to_vec(),
        }),
    }
}

/// Wraps a message in a request whose `grpc-timeout` header tells the peer our deadline.
pub(crate) fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// How a server socket is created.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The name bound while starting; `None` picks [`staging_socket_for`] the final path
    /// (`launcher-init-sock` for `launcher-sock`).
    pub staging: Option<PathBuf>,
    /// The socket's permission bits; the default 0o600 lets only its owner connect.
    pub mode: u32,
    /// A `(uid, gid)` to hand the socket to, e.g. the launcher's non-root user 107.
    pub owner: Option<(u32, u32)>,
    /// The versions the Info service announces; `None` announces the versions kvrs speaks.
    /// Other values exist to test how peers react to a version they do not know.
    pub announced_versions: Option<Vec<u32>>,
    /// How long the server may take to answer its own readiness probe before giving up.
    pub ready_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            staging: None,
            mode: 0o600,
            owner: None,
            announced_versions: None,
            ready_timeout: Duration::from_secs(15),
        }
    }
}

impl ServeOptions {
    pub(crate) fn versions(&self, service: InfoService) -> Vec<u32> {
        self.announced_versions
            .clone()
            .unwrap_or_else(|| service.our_versions().to_vec())
    }
}

/// A running server on a Unix socket. Dropping it stops the server and removes its socket.
#[derive(Debug)]
pub struct ServerHandle {
    socket: PathBuf,
    /// Device and inode of the socket we created, so we never remove a successor's socket.
    identity: Option<(u64, u64)>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl ServerHandle {
    /// The final socket path clients dial.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// True once the server loop has ended (stopped, or failed).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops accepting, lets calls in flight finish for up to a second (as KubeVirt's launcher
    /// does), then removes the socket.
    pub async fn shutdown(mut self) -> Result<(), IpcError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let result = match self.task.take() {
            Some(mut task) => match tokio::time::timeout(Duration::from_secs(1), &mut task).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(e))) => Err(IpcError::Server {
                    path: self.socket.clone(),
                    detail: e.to_string(),
                }),
                Ok(Err(join)) => Err(IpcError::Server {
                    path: self.socket.clone(),
                    detail: join.to_string(),
                }),
                Err(_) => {
                    tracing::warn!(socket = %self.socket.display(), "server did not stop within 1s; abandoning it");
                    task.abort();
                    Ok(())
                }
            },
            None => Ok(()),
        };
        self.remove_socket();
        result
    }

    fn remove_socket(&mut self) {
        if let Some(identity) = self.identity.take() {
            remove_if_same(&self.socket, identity);
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.remove_socket();
    }
}

fn identity_of(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

fn remove_if_same(path: &Path, identity: (u64, u64)) {
    if identity_of(path) == Some(identity) {
        let _ = std::fs::remove_file(path);
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IpcError + '_ {
    move |source| IpcError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Binds a listener whose socket file already has `mode` (and `owner`) when it appears at
/// `target`: it is bound inside a fresh 0700 directory, adjusted, then renamed into place, so
/// there is no moment where a wider-permission socket is reachable.
///
/// `target`'s directory may be writable by a less-privileged process (the pod's 0777
/// `/run/kubevirt`), which could swap a directory for a symlink between two calls: nothing here
/// goes through a path that process can change after the check. The directory is opened once
/// (`O_NOFOLLOW`); the private directory is made and opened through that descriptor, and must
/// be this process's own 0700 directory (not a symlink, not one swapped in); the socket is
/// bound through `/proc/self/fd/<private>/s` (the descriptor's directory, whatever its name
/// is now) and changed and renamed through the descriptors (`fchmodat`, `fchownat` with
/// `AT_SYMLINK_NOFOLLOW`, `renameat`).
pub fn bind_private(
    target: &Path,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<UnixListener, IpcError> {
    use nix::fcntl::{AtFlags, OFlag, openat, renameat};
    use nix::sys::stat::{FchmodatFlags, Mode, SFlag, fchmodat, fstat, mkdirat};
    use nix::unistd::{Gid, Uid, UnlinkatFlags, fchownat, unlinkat};
    use std::os::fd::AsRawFd;

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = target.parent().unwrap_or(Path::new("."));
    let Some(name) = target.file_name() else {
        return Err(io_err(target)(std::io::Error::from(
            std::io::ErrorKind::InvalidInput,
        )));
    };
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let nix_err = |path: &Path| {
        let path = path.to_path_buf();
        move |e: nix::Error| IpcError::Io {
            path,
            source: std::io::Error::from(e),
        }
    };
    let dir_flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dir_fd = nix::fcntl::open(dir, dir_flags, Mode::empty()).map_err(nix_err(dir))?;
    let private_name = format!(
        ".kvrs-bind-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let private = dir.join(&private_name);
    mkdirat(
        &dir_fd,
        private_name.as_str(),
        Mode::from_bits_truncate(0o700),
    )
    .map_err(nix_err(&private))?;
    let result = (|| {
        let private_fd = openat(&dir_fd, private_name.as_str(), dir_flags, Mode::empty())
            .map_err(nix_err(&private))?;
        // Ours, as made: a directory swapped in by someone else is refused.
        let st = fstat(&private_fd).map_err(nix_err(&private))?;
        if st.st_uid != Uid::effective().as_raw() || st.st_mode & 0o077 != 0 {
            return Err(io_err(&private)(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the private bind directory was replaced",
            )));
        }
        // Without /proc the socket is bound by path, and then must be found through the
        // descriptor: bound anywhere else (a swapped path), it is refused.
        let through_fd = Path::new("/proc/self/fd").is_dir();
        let bound = if through_fd {
            PathBuf::from(format!("/proc/self/fd/{}/s", private_fd.as_raw_fd()))
        } else {
            private.join("s")
        };
        let listener = UnixListener::bind(&bound).map_err(io_err(&bound))?;
        if !through_fd {
            let st = nix::sys::stat::fstatat(&private_fd, "s", AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(nix_err(&bound))?;
            let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
            if kind != SFlag::S_IFSOCK {
                return Err(io_err(&bound)(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "the socket was not bound in the private bind directory",
                )));
            }
        }
        let done = (|| {
            fchmodat(
                &private_fd,
                "s",
                Mode::from_bits_truncate(mode),
                FchmodatFlags::FollowSymlink,
            )?;
            if let Some((uid, gid)) = owner {
                fchownat(
                    &private_fd,
                    "s",
                    Some(Uid::from_raw(uid)),
                    Some(Gid::from_raw(gid)),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
            }
            renameat(&private_fd, "s", &dir_fd, name)
        })();
        if done.is_err() {
            let _ = unlinkat(&private_fd, "s", UnlinkatFlags::NoRemoveDir);
        }
        done.map_err(nix_err(target))?;
        Ok(listener)
    })();
    let _ = unlinkat(&dir_fd, private_name.as_str(), UnlinkatFlags::RemoveDir);
    result
}

/// Serves `router` on `socket`: binds the staging name, starts serving, checks that the Info
/// service answers through the staging name, and only then renames it to `socket`. Watchers of
/// `socket` (virt-handler) therefore never see a socket that is not ready.
pub(crate) async fn serve_router(
    socket: &Path,
    options: &ServeOptions,
    router: Router,
    probe: InfoService,
) -> Result<ServerHandle, IpcError> {
    let staging = options
        .staging
        .clone()
        .unwrap_or_else(|| staging_socket_for(socket));
    let listener = bind_private(&staging, options.mode, options.owner)?;
    let staging_identity = identity_of(&staging);
    let (stop, stopped) = oneshot::channel::<()>();
    let incoming = UnixListenerStream::new(listener);
    let task = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        let _ = stopped.await;
    }));
    let mut handle = ServerHandle {
        socket: staging.clone(),
        identity: staging_identity,
        stop: Some(stop),
        task: Some(task),
    };

    let probe_config = ClientConfig::uniform(options.ready_timeout);
    let probed = async {
        let channel = dial(&staging, probe_config.connect_timeout).await?;
        query_versions(&channel, &staging, probe, probe_config.short_timeout).await
    }
    .await;
    if let Err(e) = probed {
        let _ = handle.shutdown().await;
        return Err(IpcError::Server {
            path: socket.to_path_buf(),
            detail: format!("not ready: {e}"),
        });
    }

    std::fs::rename(&staging, socket).map_err(io_err(socket))?;
    handle.socket = socket.to_path_buf();
    tracing::info!(socket = %socket.display(), "serving, marked ready");
    Ok(handle)
}

#[cfg(test)]
mod bind_private_tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn binds_with_mode_and_owner_and_leaves_no_private_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("sock");
        let owner = nix::unistd::Uid::effective()
            .is_root()
            .then_some((107, 107));
        let _l = bind_private(&target, 0o600, owner).unwrap();
        let md = std::fs::symlink_metadata(&target).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&md.file_type()));
        assert_eq!(md.mode() & 0o777, 0o600);
        if let Some((uid, gid)) = owner {
            assert_eq!((md.uid(), md.gid()), (uid, gid));
        }
        assert_eq!(entries(tmp.path()), ["sock"]);
    }

    /// The socket's directory swapped for a symlink before the call: not followed, nothing
    /// is made or chowned where it points.
    #[tokio::test]
    async fn a_directory_swapped_for_a_symlink_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("s"), "victim").unwrap();
        let run = tmp.path().join("run");
        std::os::unix::fs::symlink(&elsewhere, &run).unwrap();
        let err = bind_private(&run.join("sock"), 0o666, Some((107, 107)));
        assert!(err.is_err(), "bound through a symlinked directory");
        assert_eq!(entries(&elsewhere), ["s"]);
        let md = std::fs::metadata(elsewhere.join("s")).unwrap();
        assert_eq!(
            (md.uid(), md.mode() & 0o777 == 0o666),
            (nix::unistd::Uid::effective().as_raw(), false)
        );
    }

    /// A symlink planted at the socket's name is replaced, never followed: its target keeps
    /// its owner and mode.
    #[tokio::test]
    async fn a_symlink_at_the_socket_name_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "x").unwrap();
        std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let target = tmp.path().join("sock");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        let _l = bind_private(&target, 0o666, Some((107, 107))).unwrap_or_else(|e| {
            // Not root: the chown is refused, but nothing was followed either.
            assert!(!nix::unistd::Uid::effective().is_root(), "{e}");
            UnixListener::bind(tmp.path().join("unused")).unwrap()
        });
        let md = std::fs::metadata(&victim).unwrap();
        assert_eq!(md.mode() & 0o777, 0o600);
        assert_eq!(md.uid(), nix::unistd::Uid::effective().as_raw());
    }
}
