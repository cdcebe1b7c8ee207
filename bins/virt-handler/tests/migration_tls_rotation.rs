//! Migration TLS with the certificates virt-api issues, as the DaemonSet's Secret volume holds
//! them: two proxy managers reading one `--migration-cert-dir` (the handlers of two nodes mount
//! the same Secret) carry a connection over mutual TLS — the handler's serving pair
//! (`serverAuth`) on the target, its migration client pair (`clientAuth`) on the source, both
//! verified against `ca.crt`. Then the Secret is rotated to another CA the way the kubelet
//! updates a volume (a new version directory, the `..data` link switched): the running proxies
//! use the new files from their next connection on, and a source still holding the old
//! configuration is refused by the target.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kvrs_virt_api::certs::{Bundle, Plan, Validity, apply};
use kvrs_virt_api::subresources::handler::handler_secret_data;
use kvrs_virt_handler::migration_proxy::cert_dir::{CLIENT_CERT, load_tls};
use kvrs_virt_handler::migration_proxy::{
    MigrationCertDir, ProxyManager, TargetSocket, TlsSource, source_unix_file,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

const UID: &str = "6a1b7c9e-0000-4000-8000-00000000beef";
const DAY: Duration = Duration::from_secs(86_400);

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap())
        .unwrap()
}

/// virt-api's CA bundle, fresh.
fn bundle() -> Bundle {
    apply(
        &Plan::RotateCa("test".into()),
        None,
        &["kvrs-virt-api".into()],
        now(),
        Validity::default(),
    )
    .unwrap()
}

/// Writes `data` as version `version` of a kubelet Secret volume at `root` and switches the
/// volume to it.
fn publish(root: &Path, version: &str, data: &std::collections::BTreeMap<String, Vec<u8>>) {
    let dir = root.join(version);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in data {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let tmp = root.join("..data_tmp");
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, root.join("..data")).unwrap();
    for name in data.keys() {
        let link = root.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), link).unwrap();
        }
    }
}

/// A unix socket answering each connection's bytes with `echo:` and the bytes.
fn echo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0; 64];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let _ = conn.write_all(&[b"echo:", &buf[..n]].concat()).await;
            });
        }
    });
}

/// Sends `what` through the source socket `file`; what came back (empty: refused).
async fn ask(file: &Path, what: &[u8]) -> Vec<u8> {
    let Ok(mut conn) = UnixStream::connect(file).await else {
        return Vec::new();
    };
    let _ = conn.write_all(what).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer)).await;
    answer
}

#[tokio::test]
async fn virt_apis_certificates_carry_a_migration_and_a_rotation_needs_no_restart() {
    let scratch = tempfile::tempdir().unwrap();
    let certs_dir = scratch.path().join("certs");
    std::fs::create_dir_all(&certs_dir).unwrap();
    let first = handler_secret_data(None, &bundle(), now(), DAY)
        .unwrap()
        .expect("a first Secret");
    assert!(first.contains_key(CLIENT_CERT), "the migration client pair");
    publish(&certs_dir, "..v1", &first);

    let pod_run = scratch.path().join("target-pod/run");
    echo(&pod_run.join("libvirt/virtqemud-sock"));
    let reading = || TlsSource::Dir(Arc::new(MigrationCertDir::new(&certs_dir)));
    let target = ProxyManager::new(reading(), None);
    target
        .start_target_listener(
            UID,
            vec![TargetSocket {
                root: pod_run.clone(),
                relative: "libvirt/virtqemud-sock".into(),
            }],
        )
        .await
        .unwrap();
    let ports = target.target_listener_ports(UID);
    let source = ProxyManager::new(reading(), None);
    let source_base = scratch.path().join("source-pod");
    source
        .start_source_listener(UID, "127.0.0.1", &ports, &source_base)
        .await
        .unwrap();
    let socket = source_unix_file(&source_base, UID);
    assert_eq!(
        ask(&socket, b"one").await,
        b"echo:one",
        "mutual TLS, first Secret"
    );

    // The old configuration, as a handler that read the files once would keep it.
    let stale = ProxyManager::new(load_tls(&certs_dir).unwrap(), None);
    let stale_base = scratch.path().join("stale-pod");
    stale
        .start_source_listener(UID, "127.0.0.1", &ports, &stale_base)
        .await
        .unwrap();
    let stale_socket = source_unix_file(&stale_base, UID);
    assert_eq!(ask(&stale_socket, b"old").await, b"echo:old");

    // virt-api rotates to a new CA (unrelated to the first: nothing of it is trusted now).
    let held = |k: &str| String::from_utf8(first[k].clone()).unwrap();
    let (cert, ca, client) = (held("tls.crt"), held("ca.crt"), held(CLIENT_CERT));
    let second = handler_secret_data(Some((&cert, &ca, Some(&client))), &bundle(), now(), DAY)
        .unwrap()
        .expect("another CA: the Secret is issued again");
    assert_ne!(second["ca.crt"], first["ca.crt"]);
    publish(&certs_dir, "..v2", &second);

    assert_eq!(
        ask(&socket, b"two").await,
        b"echo:two",
        "the running proxies use the rotated Secret on both sides"
    );
    assert_eq!(
        ask(&stale_socket, b"old").await,
        b"",
        "a source with the first CA's certificate is refused by the rotated target"
    );
}
