//! The migration certificates of `--migration-cert-dir` (the mounted Secret
//! `kvrs-virt-handler-certs` that virt-api issues): `tls.crt`/`tls.key`, the serving pair the
//! target listeners present (KubeVirt's `servercertificates`); `ca.crt`, the CA bundle both
//! peers are verified against; `client.crt`/`client.key`, the pair presented when this node is
//! the source (KubeVirt's migration client certificate).
//!
//! Rotation: the directory is read again at every proxy connection ([`MigrationCertDir::current`])
//! and the TLS configurations rebuilt only when the bytes changed. Per connection rather than
//! on a timer or a file watch because a migration opens only a handful of connections, each at
//! the moment its certificates must be valid: the very next connection after the kubelet
//! swapped the Secret's files uses the new pair, with no interval in which an expired one is
//! still presented and no watcher to keep alive (reading five small files costs microseconds).
//! The kubelet updates a Secret volume by switching its `..data` link to a new directory, so
//! the files are read through that link resolved once: all five come from one version.
//! A directory that stops making a configuration (a half-written file by hand) keeps the last
//! good one, with a warning, as KubeVirt's file certificate manager keeps its current pair.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use super::tls::{MigrationTls, PemPair};

/// The serving certificate's file.
pub const SERVING_CERT: &str = "tls.crt";
/// The serving key's file.
pub const SERVING_KEY: &str = "tls.key";
/// The CA bundle's file.
pub const CA: &str = "ca.crt";
/// The client certificate's file.
pub const CLIENT_CERT: &str = "client.crt";
/// The client key's file.
pub const CLIENT_KEY: &str = "client.key";

/// Why the migration certificates could not be loaded.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read.
    #[error("--migration-cert-dir: reading {path}: {why}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The files do not make a TLS configuration.
    #[error("--migration-cert-dir {dir}: {why}")]
    Tls {
        /// The directory.
        dir: PathBuf,
        /// Why.
        why: String,
    },
}

/// The files' contents, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// `tls.crt`.
    pub cert: Vec<u8>,
    /// `tls.key`.
    pub key: Vec<u8>,
    /// `ca.crt`.
    pub ca: Vec<u8>,
    /// `client.crt` and `client.key`, when the directory has a client certificate.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Where the files of `dir` are read from: the version its `..data` link names (a kubelet
/// Secret volume), else `dir` itself.
fn snapshot(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir.join("..data")).unwrap_or_else(|_| dir.to_path_buf())
}

/// Reads the files of `dir` (one version of a Secret volume).
pub fn read_files(dir: &Path) -> Result<CertFiles, CertError> {
    let from = snapshot(dir);
    let read = |name: &str| {
        std::fs::read(from.join(name)).map_err(|e| CertError::Read {
            path: dir.join(name),
            why: e.to_string(),
        })
    };
    let client = if from.join(CLIENT_CERT).exists() {
        Some((read(CLIENT_CERT)?, read(CLIENT_KEY)?))
    } else {
        None
    };
    Ok(CertFiles {
        cert: read(SERVING_CERT)?,
        key: read(SERVING_KEY)?,
        ca: read(CA)?,
        client,
    })
}

/// The TLS configurations for `files` (of `dir`, named in errors). Without a client pair the
/// serving pair is presented as the client too, so it must then carry both usages.
pub fn tls_of(dir: &Path, files: &CertFiles) -> Result<MigrationTls, CertError> {
    let (client_cert, client_key) = files
        .client
        .as_ref()
        .map_or((&files.cert, &files.key), |(c, k)| (c, k));
    MigrationTls::new(
        PemPair {
            cert: &files.cert,
            key: &files.key,
        },
        PemPair {
            cert: client_cert,
            key: client_key,
        },
        &files.ca,
    )
    .map_err(|e| CertError::Tls {
        dir: dir.to_path_buf(),
        why: e.to_string(),
    })
}

/// Loads the migration TLS material of `dir` once.
pub fn load_tls(dir: &Path) -> Result<MigrationTls, CertError> {
    tls_of(dir, &read_files(dir)?)
}

/// `--migration-cert-dir`, read again at each connection (see the module doc).
#[derive(Debug)]
pub struct MigrationCertDir {
    dir: PathBuf,
    loaded: Mutex<Option<(CertFiles, MigrationTls)>>,
}

impl MigrationCertDir {
    /// The directory `dir` (nothing is read yet: the Secret may not be written so far).
    pub fn new(dir: impl Into<PathBuf>) -> MigrationCertDir {
        MigrationCertDir {
            dir: dir.into(),
            loaded: Mutex::new(None),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configurations for the directory's current files: rebuilt when they changed since
    /// the last call, the last good ones kept (with a warning) when the new files do not make
    /// any, an error only when no version ever did.
    pub fn current(&self) -> Result<MigrationTls, CertError> {
        let read = read_files(&self.dir);
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let built = match read {
            Ok(files) => {
                if let Some((held, tls)) = loaded.as_ref()
                    && *held == files
                {
                    return Ok(tls.clone());
                }
                tls_of(&self.dir, &files).map(|tls| (files, tls))
            }
            Err(e) => Err(e),
        };
        match (built, loaded.as_ref()) {
            (Ok((files, tls)), previous) => {
                info!(
                    dir = %self.dir.display(),
                    rotated = previous.is_some(),
                    separate_client = files.client.is_some(),
                    "migration certificates loaded"
                );
                *loaded = Some((files, tls.clone()));
                Ok(tls)
            }
            (Err(e), Some((_, tls))) => {
                warn!(error = %e, "migration certificates: keeping the last good ones");
                Ok(tls.clone())
            }
            (Err(e), None) => Err(e),
        }
    }
}

/// Where a proxy manager gets the TLS configurations of each new connection.
#[derive(Clone, Debug)]
pub enum TlsSource {
    /// Fixed configurations (both `None`: plain TCP, `migrations.disableTLS`).
    Fixed(MigrationTls),
    /// A certificate directory, read again at each connection.
    Dir(Arc<MigrationCertDir>),
}

impl TlsSource {
    /// The configurations for a connection starting now.
    pub fn current(&self) -> Result<MigrationTls, CertError> {
        match self {
            TlsSource::Fixed(tls) => Ok(tls.clone()),
            TlsSource::Dir(dir) => dir.current(),
        }
    }
}

impl From<MigrationTls> for TlsSource {
    fn from(tls: MigrationTls) -> TlsSource {
        TlsSource::Fixed(tls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pki() -> kvrs_virt_api::certs::ThrowawayPki {
        kvrs_virt_api::certs::throwaway_pki("kvrs-virt-handler").unwrap()
    }

    fn write(dir: &Path, name: &str, pem: &str) {
        std::fs::write(dir.join(name), pem).unwrap();
    }

    fn write_pki(dir: &Path, p: &kvrs_virt_api::certs::ThrowawayPki) {
        write(dir, SERVING_CERT, &p.serving.0);
        write(dir, SERVING_KEY, &p.serving.1);
        write(dir, CA, &p.ca);
        write(dir, CLIENT_CERT, &p.client.0);
        write(dir, CLIENT_KEY, &p.client.1);
    }

    #[test]
    fn the_cert_dir_gives_both_configurations_and_names_what_is_missing() {
        let p = pki();
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), SERVING_CERT, &p.serving.0);
        write(dir.path(), SERVING_KEY, &p.serving.1);
        let err = load_tls(dir.path()).expect_err("no ca.crt");
        assert!(
            matches!(&err, CertError::Read { path, .. } if path.ends_with("ca.crt")),
            "{err}"
        );
        write(dir.path(), CA, &p.ca);
        let tls = load_tls(dir.path()).expect("the serving pair serves as the client too");
        assert!(tls.server.is_some() && tls.client.is_some());
        write(dir.path(), CLIENT_CERT, &p.client.0);
        let err = load_tls(dir.path()).expect_err("client.crt without client.key");
        assert!(err.to_string().contains("client.key"), "{err}");
        write(dir.path(), CLIENT_KEY, &p.client.1);
        let files = read_files(dir.path()).unwrap();
        assert_eq!(files.client.as_ref().unwrap().0, p.client.0.as_bytes());
        let tls = load_tls(dir.path()).expect("a separate client pair");
        assert!(tls.server.is_some() && tls.client.is_some());
        write(dir.path(), SERVING_KEY, "not a key");
        let err = load_tls(dir.path()).expect_err("a broken serving key");
        assert!(matches!(err, CertError::Tls { .. }), "{err}");
    }

    /// A kubelet Secret volume: the files are links into `..data`, itself a link to the
    /// current version's directory.
    fn secret_volume(root: &Path, version: &str, p: &kvrs_virt_api::certs::ThrowawayPki) {
        let v = root.join(version);
        std::fs::create_dir_all(&v).unwrap();
        write_pki(&v, p);
        let tmp = root.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(version, &tmp).unwrap();
        std::fs::rename(&tmp, root.join("..data")).unwrap();
        for name in [SERVING_CERT, SERVING_KEY, CA, CLIENT_CERT, CLIENT_KEY] {
            let link = root.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(format!("..data/{name}"), link).unwrap();
            }
        }
    }

    #[test]
    fn a_rotated_secret_is_used_from_the_next_connection_on() {
        let root = tempfile::tempdir().unwrap();
        let certs = MigrationCertDir::new(root.path());
        let err = certs.current().expect_err("nothing written yet");
        assert!(err.to_string().contains("--migration-cert-dir"), "{err}");

        let first = pki();
        secret_volume(root.path(), "..v1", &first);
        let a = certs.current().unwrap();
        let again = certs.current().unwrap();
        assert!(
            Arc::ptr_eq(a.server.as_ref().unwrap(), again.server.as_ref().unwrap()),
            "unchanged files: the same configuration, not rebuilt"
        );
        assert_eq!(
            certs.loaded.lock().unwrap().as_ref().unwrap().0.ca,
            first.ca.as_bytes()
        );

        let second = pki();
        secret_volume(root.path(), "..v2", &second);
        let b = certs.current().unwrap();
        assert!(
            !Arc::ptr_eq(a.server.as_ref().unwrap(), b.server.as_ref().unwrap()),
            "rotated files: a new configuration"
        );
        let held = certs.loaded.lock().unwrap().as_ref().unwrap().0.clone();
        assert_eq!(held.ca, second.ca.as_bytes());
        assert_eq!(held.client.unwrap().0, second.client.0.as_bytes());

        // A version that makes no configuration: the last good one stays.
        std::fs::write(root.path().join("..v2").join(SERVING_KEY), "garbage").unwrap();
        let c = certs.current().unwrap();
        assert!(Arc::ptr_eq(
            b.server.as_ref().unwrap(),
            c.server.as_ref().unwrap()
        ));
    }
}
