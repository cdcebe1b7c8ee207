//! What the cluster and node tests share: kubectl's output as text, the busybox image their pods
//! run, and one HTTP GET.

#![allow(dead_code)] // each test binary uses its part

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use kvrs_test_cluster::oci_archive;

/// A command's stdout, trimmed.
pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The stdout of a kubectl that must succeed.
#[track_caller]
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed ({}): stdout {:?} stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text(&out)
}

/// `kvrs.local/busybox:1` written to `dir/busybox.tar`: Debian's busybox-static with `applets`
/// as links, and the cluster's kubectl as an in-cluster client (busybox's wget cannot negotiate
/// TLS with Go's server).
pub fn busybox_image(dir: &Path, kubectl: &Path, applets: &[&str]) -> PathBuf {
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.is_file(),
        "/bin/busybox is missing: install Debian's busybox-static (scripts/install-test-deps.sh)"
    );
    let rootfs = dir.join("busybox-rootfs");
    fs::create_dir_all(rootfs.join("bin")).unwrap();
    fs::create_dir_all(rootfs.join("tmp")).unwrap();
    fs::copy(busybox, rootfs.join("bin/busybox")).unwrap();
    for applet in applets {
        symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    let client = dir.join("kubectl-layer");
    fs::create_dir_all(client.join("bin")).unwrap();
    fs::copy(kubectl, client.join("bin/kubectl")).unwrap();
    let tar = dir.join("busybox.tar");
    oci_archive(
        &rootfs,
        "kvrs.local/busybox:1",
        &tar,
        &[
            "--rootfs",
            client.to_str().unwrap(),
            "--entrypoint",
            r#"["/bin/sh"]"#,
            "--env",
            "PATH=/bin",
        ],
    )
    .expect("writing the busybox image");
    tar
}

/// One HTTP/1.0 GET of `path` to `addr`; the whole answer.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}
