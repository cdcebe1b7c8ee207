//! The REST server's TLS: the serving certificate and the CA bundle clients are verified
//! against, read from one directory (the mounted Secret `kvrs-virt-handler-certs` that
//! virt-api issues: `tls.crt`, `tls.key`, `ca.crt`). A client must present a certificate the CA
//! signed for client use (`clientAuth`) with virt-api's common name: the handler's own serving
//! certificate is issued for `serverAuth` only, and its migration client certificate carries
//! another common name, so one node's handler cannot call another's.
//!
//! The files are re-read periodically ([`CertDir::load_if_changed`]); the server takes the
//! configuration current at each handshake, so a renewal needs no restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

use crate::migration_proxy::peer;

/// The serving certificate's file in the directory.
pub const CERT_FILE: &str = "tls.crt";
/// Its key.
pub const KEY_FILE: &str = "tls.key";
/// The CA bundle client certificates are verified against.
pub const CA_FILE: &str = "ca.crt";

/// Why the directory's certificates cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM.
    #[error("{path}: {why}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the certificates.
    #[error("TLS: {0}")]
    Rustls(String),
}

impl TlsError {
    /// A stable label for logs.
    pub fn label(&self) -> &'static str {
        match self {
            TlsError::Read { .. } => "read",
            TlsError::Pem { .. } => "pem",
            TlsError::Rustls(_) => "rustls",
        }
    }
}

/// The three PEM files, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// `tls.crt`.
    pub cert: Vec<u8>,
    /// `tls.key`.
    pub key: Vec<u8>,
    /// `ca.crt`.
    pub ca: Vec<u8>,
}

/// The server configuration for `files`: the serving certificate, clients required and
/// verified against the CA bundle, HTTP/1.1.
pub fn server_config(files: &CertFiles) -> Result<ServerConfig, TlsError> {
    let pem = |path: &str, why: String| TlsError::Pem {
        path: path.into(),
        why,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&files.cert)
        .collect::<Result<_, _>>()
        .map_err(|e| pem(CERT_FILE, e.to_string()))?;
    if chain.is_empty() {
        return Err(pem(CERT_FILE, "no CERTIFICATE".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(&files.key).map_err(|e| pem(KEY_FILE, e.to_string()))?;
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&files.ca) {
        let ca = ca.map_err(|e| pem(CA_FILE, e.to_string()))?;
        roots.add(ca).map_err(|e| pem(CA_FILE, e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(pem(CA_FILE, "no CERTIFICATE".into()));
    }
    let provider = Arc::new(default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    // virt-api's certificate only: handlers hold client certificates of their own (migrations).
    let verifier = Arc::new(peer::CommonNameIs::new(verifier, &[peer::VIRT_API_CLIENT]));
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e: rustls::Error| TlsError::Rustls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn read_file(path: PathBuf) -> Result<Vec<u8>, TlsError> {
    std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
}

/// The certificate directory and what was last loaded from it.
#[derive(Debug)]
pub struct CertDir {
    dir: PathBuf,
    ca_fallback: Option<PathBuf>,
    last: Option<CertFiles>,
}

impl CertDir {
    /// The directory `dir`, nothing loaded yet.
    pub fn new(dir: &Path) -> CertDir {
        Self::with_ca_fallback(dir, None)
    }

    /// The directory `dir`, whose CA bundle is `ca_fallback` while the directory has no
    /// `ca.crt` (KubeVirt's Secret layout: the CA is in a ConfigMap, see
    /// [`crate::kubevirt_ca`]). A `ca.crt` in the directory always wins.
    pub fn with_ca_fallback(dir: &Path, ca_fallback: Option<&Path>) -> CertDir {
        CertDir {
            dir: dir.to_path_buf(),
            ca_fallback: ca_fallback.map(Path::to_path_buf),
            last: None,
        }
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, TlsError> {
        read_file(self.dir.join(name))
    }

    fn read_ca(&self) -> Result<Vec<u8>, TlsError> {
        let own = self.dir.join(CA_FILE);
        match (&self.ca_fallback, own.exists()) {
            (Some(fallback), false) => read_file(fallback.clone()),
            _ => read_file(own),
        }
    }

    /// A new configuration when the files changed since the last successful load; `None` when
    /// they did not.
    pub fn load_if_changed(&mut self) -> Result<Option<ServerConfig>, TlsError> {
        let files = CertFiles {
            cert: self.read(CERT_FILE)?,
            key: self.read(KEY_FILE)?,
            ca: self.read_ca()?,
        };
        if self.last.as_ref() == Some(&files) {
            return Ok(None);
        }
        let config = server_config(&files)?;
        self.last = Some(files);
        Ok(Some(config))
    }
}
