//! The migration proxy over real sockets: a source manager (the source node's handler) and a
//! target manager (the target node's) joined by TCP on loopback, the "pods" being directories
//! with unix-socket servers standing for the target pod's libvirt daemon and QEMU migration
//! socket. Each server names itself in every answer, so a byte that reaches the wrong socket is
//! seen.
//!
//! Checked: KubeVirt's socket names and port map; bytes both ways (16 MiB each way, hashed)
//! through mutual TLS; a source whose certificate another CA signed, and a plain TCP client,
//! reach nothing of the target pod (its servers see no connection); the same target again is
//! a no-op, another replaces the proxies; stopping ends live connections and removes the
//! source sockets; a handler shutting down refuses new proxies with KubeVirt's message;
//! `disableTLS` is plain TCP; a target socket's symlink is followed only inside the pod (an
//! absolute link to a node socket reaches nothing); the source socket belongs to the pod's QEMU
//! user.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kvrs_virt_handler::migration_proxy::tls::PemPair;
use kvrs_virt_handler::migration_proxy::{
    MigrationTls, ProxyManager, TargetSocket, proxy_key, source_unix_file,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

const UID: &str = "6a1b7c9e-0000-4000-8000-000000000001";

use kvrs_virt_api::certs::ThrowawayPki as Pki;

fn pki() -> Pki {
    kvrs_virt_api::certs::throwaway_pki("kvrs-virt-handler").expect("certificates")
}

fn tls(p: &Pki) -> MigrationTls {
    MigrationTls::new(
        PemPair {
            cert: p.serving.0.as_bytes(),
            key: p.serving.1.as_bytes(),
        },
        PemPair {
            cert: p.client.0.as_bytes(),
            key: p.client.1.as_bytes(),
        },
        p.ca.as_bytes(),
    )
    .expect("the migration TLS configurations")
}

/// A unix-socket server that answers every chunk with `NAME:` and the chunk, counting its
/// connections.
struct Server {
    accepted: Arc<AtomicUsize>,
}

fn serve(path: &Path, name: &'static str) -> Server {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(path).expect("bind the pod's socket");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if name.is_empty() {
                        if conn.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    } else {
                        let mut out = format!("{name}:").into_bytes();
                        out.extend_from_slice(&buf[..n]);
                        if conn.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Server { accepted }
}

struct Pods {
    _dir: tempfile::TempDir,
    /// The target pod's run directory (what the target handler trusts).
    target_run: PathBuf,
    /// The source pod's `/var/run/kubevirt`.
    source_base: PathBuf,
}

fn pods() -> Pods {
    let dir = tempfile::tempdir().unwrap();
    let target_run = dir.path().join("target/run");
    let source_base = dir.path().join("source/kubevirt");
    std::fs::create_dir_all(&source_base).unwrap();
    Pods {
        target_run,
        source_base,
        _dir: dir,
    }
}

/// The target pod's sockets as KubeVirt's handler lists them: the daemon's, then QEMU's.
fn target_sockets(run: &Path) -> Vec<TargetSocket> {
    vec![
        TargetSocket {
            root: run.to_path_buf(),
            relative: "libvirt/virtqemud-sock".into(),
        },
        TargetSocket {
            root: run.to_path_buf(),
            relative: PathBuf::from("kubevirt/migrationproxy")
                .join(format!("{}-source.sock", proxy_key(UID, 49152))),
        },
    ]
}

async fn ask(socket: &Path, message: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut conn = UnixStream::connect(socket).await?;
    conn.write_all(message).await?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(200), conn.read(&mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => return Err(e),
            Err(_) if !answer.is_empty() => break,
            Err(_) => {}
        }
    }
    Ok(answer)
}

async fn start_pair(
    pods: &Pods,
    source_tls: MigrationTls,
    target_tls: MigrationTls,
) -> (ProxyManager, ProxyManager, BTreeMap<String, u16>) {
    let target = ProxyManager::new(target_tls, None);
    target
        .start_target_listener(UID, target_sockets(&pods.target_run))
        .await
        .expect("target listeners");
    let ports = target.target_listener_ports(UID);
    let source = ProxyManager::new(source_tls, None);
    source
        .start_source_listener(UID, "127.0.0.1", &ports, &pods.source_base)
        .await
        .expect("source listeners");
    (source, target, ports)
}

#[tokio::test]
async fn bytes_cross_both_ways_through_mutual_tls_to_the_right_socket() {
    let pki = pki();
    let pods = pods();
    let daemon = serve(&pods.target_run.join("libvirt/virtqemud-sock"), "virtqemud");
    let qemu_path = pods
        .target_run
        .join("kubevirt/migrationproxy")
        .join(format!("{UID}-49152-source.sock"));
    let qemu = serve(&qemu_path, "");
    let (source, target, ports) = start_pair(&pods, tls(&pki), tls(&pki)).await;

    // The map the target publishes: TCP port -> the libvirt port (0: the daemon).
    let mut libvirt_ports: Vec<u16> = ports.values().copied().collect();
    libvirt_ports.sort();
    assert_eq!(libvirt_ports, vec![0, 49152], "{ports:?}");
    assert_eq!(target.open_listener_count(), 1);
    // KubeVirt's names for the source sockets, which the source launcher dials.
    let mut files = source.source_listener_files(UID);
    files.sort();
    let mut expected = vec![
        source_unix_file(&pods.source_base, UID),
        source_unix_file(&pods.source_base, &proxy_key(UID, 49152)),
    ];
    expected.sort();
    assert_eq!(files, expected);

    let answer = ask(&source_unix_file(&pods.source_base, UID), b"hello")
        .await
        .unwrap();
    assert_eq!(answer, b"virtqemud:hello");
    assert_eq!(daemon.accepted.load(Ordering::SeqCst), 1);

    // 16 MiB each way through the QEMU socket's proxy, compared byte for byte.
    let payload: Vec<u8> = (0..16u32 << 20)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[1])
        .collect();
    let conn = UnixStream::connect(source_unix_file(&pods.source_base, &proxy_key(UID, 49152)))
        .await
        .unwrap();
    let (mut read, mut write) = conn.into_split();
    let sent = payload.clone();
    let writer = tokio::spawn(async move {
        write.write_all(&sent).await.unwrap();
        write.shutdown().await.unwrap();
    });
    let mut echoed = Vec::with_capacity(payload.len());
    tokio::time::timeout(Duration::from_secs(60), read.read_to_end(&mut echoed))
        .await
        .expect("the echo within a minute")
        .unwrap();
    writer.await.unwrap();
    assert_eq!(echoed.len(), payload.len());
    assert!(echoed == payload, "the bytes came back changed");
    assert_eq!(qemu.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_peer_the_ca_did_not_sign_reaches_nothing_of_the_target_pod() {
    let pods = pods();
    let daemon = serve(&pods.target_run.join("libvirt/virtqemud-sock"), "virtqemud");
    let ours = pki();
    let theirs = pki();
    let (source, _target, ports) = start_pair(&pods, tls(&theirs), tls(&ours)).await;
    let answer = ask(&source_unix_file(&pods.source_base, UID), b"hello")
        .await
        .unwrap_or_default();
    assert!(answer.is_empty(), "{answer:?}");
    // A source that trusts the target's CA but presents a certificate another CA signed: the
    // target refuses it.
    let foreign_client = MigrationTls::new(
        PemPair {
            cert: theirs.serving.0.as_bytes(),
            key: theirs.serving.1.as_bytes(),
        },
        PemPair {
            cert: theirs.client.0.as_bytes(),
            key: theirs.client.1.as_bytes(),
        },
        ours.ca.as_bytes(),
    )
    .unwrap();
    let impostor = ProxyManager::new(foreign_client, None);
    let base = pods.source_base.join("impostor");
    impostor
        .start_source_listener(UID, "127.0.0.1", &ports, &base)
        .await
        .unwrap();
    let answer = ask(&source_unix_file(&base, UID), b"hello")
        .await
        .unwrap_or_default();
    assert!(answer.is_empty(), "{answer:?}");
    // Plain TCP straight to the target's port.
    let port = ports.iter().find(|(_, l)| **l == 0).unwrap().0.clone();
    let mut tcp = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    let _ = tcp.write_all(b"GET / HTTP/1.0\r\n\r\n").await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut buf)).await;
    assert!(!buf.starts_with(b"virtqemud"), "{buf:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        daemon.accepted.load(Ordering::SeqCst),
        0,
        "the pod's socket was dialled for an unauthenticated peer"
    );
    drop(source);
}

#[tokio::test]
async fn the_same_target_is_kept_another_replaces_it_and_stop_ends_connections() {
    let pki = pki();
    let pods = pods();
    let _daemon = serve(&pods.target_run.join("libvirt/virtqemud-sock"), "virtqemud");
    let (source, target, ports) = start_pair(&pods, tls(&pki), tls(&pki)).await;

    // Again with the same sockets and target: nothing changes.
    target
        .start_target_listener(UID, target_sockets(&pods.target_run))
        .await
        .unwrap();
    assert_eq!(target.target_listener_ports(UID), ports);
    source
        .start_source_listener(UID, "127.0.0.1", &ports, &pods.source_base)
        .await
        .unwrap();

    // A live connection, then the source proxies stop: it is closed, the sockets are gone.
    let socket = source_unix_file(&pods.source_base, UID);
    let mut conn = UnixStream::connect(&socket).await.unwrap();
    conn.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 64];
    let n = conn.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"virtqemud:ping");
    source.stop_source_listener(UID);
    let closed = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
        .await
        .expect("the connection ends when the proxy stops");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    assert!(!socket.exists(), "the source socket is removed");
    assert!(source.source_listener_files(UID).is_empty());
    assert_eq!(source.open_listener_count(), 0);

    // Other sockets for the key: new ports, the old ones closed.
    let other_run = pods.target_run.parent().unwrap().join("other-run");
    let _other = serve(&other_run.join("libvirt/virtqemud-sock"), "other");
    target
        .start_target_listener(UID, target_sockets(&other_run))
        .await
        .unwrap();
    let new_ports = target.target_listener_ports(UID);
    assert_eq!(new_ports.len(), 2);
    for old in ports.keys() {
        if new_ports.contains_key(old) {
            continue; // the kernel gave the same port again
        }
        let refused = tokio::net::TcpStream::connect(format!("127.0.0.1:{old}")).await;
        assert!(refused.is_err(), "old port {old} still listening");
    }
    source
        .start_source_listener(UID, "127.0.0.1", &new_ports, &pods.source_base)
        .await
        .unwrap();
    assert_eq!(ask(&socket, b"x").await.unwrap(), b"other:x");
    target.stop_target_listener(UID);
    assert_eq!(target.open_listener_count(), 0);
    assert!(ask(&socket, b"x").await.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn a_handler_shutting_down_refuses_new_proxies() {
    let pods = pods();
    let manager = ProxyManager::new(MigrationTls::disabled(), None);
    manager.initiate_graceful_shutdown();
    let err = manager
        .start_target_listener(UID, target_sockets(&pods.target_run))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unable to process new migration connections during virt-handler shutdown"
    );
    assert_eq!(err.label(), "shutting_down");
    let err = manager
        .start_source_listener(UID, "127.0.0.1", &BTreeMap::new(), &pods.source_base)
        .await
        .unwrap_err();
    assert_eq!(err.label(), "shutting_down");
    let err = ProxyManager::new(MigrationTls::disabled(), None)
        .start_source_listener(
            UID,
            "127.0.0.1",
            &BTreeMap::from([("http".to_string(), 0)]),
            &pods.source_base,
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "target port \"http\" is not a port number");
}

#[tokio::test]
async fn disabled_tls_is_plain_tcp() {
    let pods = pods();
    let _daemon = serve(&pods.target_run.join("libvirt/virtqemud-sock"), "virtqemud");
    let (source, _target, ports) =
        start_pair(&pods, MigrationTls::disabled(), MigrationTls::disabled()).await;
    assert_eq!(
        ask(&source_unix_file(&pods.source_base, UID), b"plain")
            .await
            .unwrap(),
        b"virtqemud:plain"
    );
    // Plain TCP straight to the target's port reaches the daemon: TLS is off.
    let port = ports.iter().find(|(_, l)| **l == 0).unwrap().0.clone();
    let mut tcp = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    tcp.write_all(b"raw").await.unwrap();
    let mut buf = [0u8; 32];
    let n = tcp.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"virtqemud:raw");
    drop(source);
}

#[tokio::test]
async fn a_target_socket_link_is_followed_only_inside_the_pod() {
    let pki = pki();
    let pods = pods();
    // The pod replaced its daemon socket by a link to a socket elsewhere on the node.
    let elsewhere = pods.target_run.parent().unwrap().join("node-secret.sock");
    let secret = serve(&elsewhere, "node");
    std::fs::create_dir_all(pods.target_run.join("libvirt")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, pods.target_run.join("libvirt/virtqemud-sock")).unwrap();
    let (_source, _target, _) = start_pair(&pods, tls(&pki), tls(&pki)).await;
    let answer = ask(&source_unix_file(&pods.source_base, UID), b"hello")
        .await
        .unwrap_or_default();
    assert!(answer.is_empty(), "{answer:?}");
    assert_eq!(secret.accepted.load(Ordering::SeqCst), 0);

    // A relative link inside the pod, as the launcher makes `virtqemud-sock` -> `libvirt-sock`
    // when it runs the monolithic daemon: followed.
    let pods = self::pods();
    let _daemon = serve(&pods.target_run.join("libvirt/libvirt-sock"), "libvirtd");
    std::os::unix::fs::symlink(
        "libvirt-sock",
        pods.target_run.join("libvirt/virtqemud-sock"),
    )
    .unwrap();
    let (_source, _target, _) = start_pair(&pods, tls(&pki), tls(&pki)).await;
    let answer = ask(&source_unix_file(&pods.source_base, UID), b"hello")
        .await
        .unwrap();
    assert_eq!(answer, b"libvirtd:hello");
}

#[tokio::test]
async fn the_source_socket_belongs_to_the_pods_qemu_user() {
    if !nix::unistd::Uid::effective().is_root() {
        panic!("run as root: the socket is given to UID 107 as KubeVirt gives it");
    }
    let pods = pods();
    let manager = ProxyManager::new(MigrationTls::disabled(), Some((107, 107)));
    manager
        .start_source_listener(
            UID,
            "127.0.0.1",
            &BTreeMap::from([("1".to_string(), 0)]),
            &pods.source_base,
        )
        .await
        .unwrap();
    let meta = std::fs::metadata(source_unix_file(&pods.source_base, UID)).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (107, 107));
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
}
