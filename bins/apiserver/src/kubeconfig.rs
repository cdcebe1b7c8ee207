//! The bearer token and the kubeconfig file clients read it from.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// `n` bytes from the kernel's random source.
pub fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// client-go (kubectl) sends credentials only over TLS (kubernetes/kubectl#744) but does send
/// impersonation headers over plain http, so the kubeconfig also carries the token as
/// `as: kvrs-token:<token>`, and an `Impersonate-User` header of that form is accepted as the
/// token. kube-rs sends the bearer token over http as well; either header authenticates.
pub const IMPERSONATE_PREFIX: &str = "kvrs-token:";

/// Writes a kubeconfig for `server` with `token`, readable by the owner only (it holds the
/// token), replacing any file there.
pub fn write(path: &Path, server: &str, token: &str) -> std::io::Result<()> {
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kvrs
  cluster:
    server: {server}
users:
- name: kvrs
  user:
    token: {token}
    as: {IMPERSONATE_PREFIX}{token}
contexts:
- name: kvrs
  context:
    cluster: kvrs
    user: kvrs
    namespace: default
current-context: kvrs
preferences: {{}}
"
    );
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}
