//! The daemons' metrics and health endpoints over HTTPS, as KubeVirt's virt-controller and
//! virt-handler serve them: KubeVirt's operator mounts a certificate Secret into each (its
//! `tls.crt` and `tls.key`) and probes `https://<pod>:8443/healthz` (and `/leader`). No client
//! certificate is asked for (KubeVirt's `SetupPromTLS` asks none either: the kubelet's probes
//! and Prometheus present none).
//!
//! KubeVirt's operator rotates those Secrets while the pods run, so the pair is read again at
//! each handshake (two small files, a probe every few seconds) and a renewed pair is used
//! without a restart; a pair that cannot be used keeps the last good one in service.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tracing::warn;

/// Why a certificate pair cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM certificate or key.
    #[error("{path}: {why}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the pair.
    #[error("TLS: {0}")]
    Rustls(String),
}

/// A serving certificate and its key, as two PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPair {
    /// The certificate (chain), PEM: KubeVirt's `tls.crt`.
    pub cert: PathBuf,
    /// Its private key, PEM: KubeVirt's `tls.key`.
    pub key: PathBuf,
}

impl CertPair {
    /// `tls.crt` and `tls.key` in `dir` (a mounted `kubernetes.io/tls` Secret).
    pub fn in_dir(dir: &Path) -> CertPair {
        CertPair {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    /// Whether both files exist (KubeVirt's operator mounts its Secrets `optional`, so a pod
    /// can start before they are issued).
    pub fn present(&self) -> bool {
        self.cert.is_file() && self.key.is_file()
    }

    fn read(&self) -> Result<(Vec<u8>, Vec<u8>), CertError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| CertError::Read {
                path: path.clone(),
                source,
            })
        };
        Ok((read(&self.cert)?, read(&self.key)?))
    }

    fn certified(
        &self,
        cert: &[u8],
        key: &[u8],
        provider: &CryptoProvider,
    ) -> Result<Arc<CertifiedKey>, CertError> {
        let pem = |path: &PathBuf, why: String| CertError::Pem {
            path: path.clone(),
            why,
        };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| pem(&self.cert, e.to_string()))?;
        if chain.is_empty() {
            return Err(pem(&self.cert, "no CERTIFICATE".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| pem(&self.key, e.to_string()))?;
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| pem(&self.key, e.to_string()))?;
        let certified = CertifiedKey::new(chain, signing);
        certified.keys_match().map_err(|e| {
            CertError::Rustls(format!(
                "{} and {}: {e}",
                self.cert.display(),
                self.key.display()
            ))
        })?;
        Ok(Arc::new(certified))
    }
}

/// The last pair read and what it gave.
#[derive(Debug)]
struct Loaded {
    cert: Vec<u8>,
    key: Vec<u8>,
    certified: Arc<CertifiedKey>,
}

/// Serves the pair current at each handshake.
#[derive(Debug)]
struct Reloading {
    pair: CertPair,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Loaded>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        match self.pair.read() {
            Ok((cert, key)) if cert != loaded.cert || key != loaded.key => {
                match self.pair.certified(&cert, &key, &self.provider) {
                    Ok(certified) => {
                        *loaded = Loaded {
                            cert,
                            key,
                            certified,
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "renewed certificate not usable: keeping the last one")
                    }
                }
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "certificate not readable: keeping the last one"),
        }
        Some(loaded.certified.clone())
    }
}

/// The server configuration for `pair`: its certificate (read again at each handshake), no
/// client certificate, HTTP/1.1 (KubeVirt turns HTTP/2 off on these endpoints). Fails when the
/// pair cannot be used now.
pub fn server_config(pair: &CertPair) -> Result<Arc<ServerConfig>, CertError> {
    let provider = Arc::new(default_provider());
    let (cert, key) = pair.read()?;
    let certified = pair.certified(&cert, &key, &provider)?;
    let resolver = Reloading {
        pair: pair.clone(),
        provider: provider.clone(),
        loaded: Mutex::new(Loaded {
            cert,
            key,
            certified,
        }),
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e: rustls::Error| CertError::Rustls(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
