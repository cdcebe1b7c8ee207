//! Mutual TLS between two nodes' migration proxies. The target's listener requires a client
//! certificate signed by the cluster's CA; the source verifies the target's certificate against
//! the same CA but not its name: the source reaches the target by the node address in the
//! VMI's migration state, which no certificate names (KubeVirt's handler does the same through
//! its own peer verification). `migrations.disableTLS` in the KubeVirt CR is
//! [`MigrationTls::disabled`]: plain TCP, as KubeVirt.

use std::sync::Arc;

use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};

use crate::rest::tls::TlsError;

/// The TLS configurations of a node's proxies (both `None`: TLS disabled).
#[derive(Clone, Default)]
pub struct MigrationTls {
    /// The target listener's: the node's serving certificate, clients verified.
    pub server: Option<Arc<ServerConfig>>,
    /// The source's: the node's client certificate, the target verified against the CA.
    pub client: Option<Arc<ClientConfig>>,
}

/// A certificate chain and its key, PEM.
#[derive(Clone, Debug)]
pub struct PemPair<'a> {
    /// The chain.
    pub cert: &'a [u8],
    /// The private key.
    pub key: &'a [u8],
}

fn pem_err(what: &str, why: impl std::fmt::Display) -> TlsError {
    TlsError::Pem {
        path: what.into(),
        why: why.to_string(),
    }
}

fn chain(what: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| pem_err(what, e))?;
    if chain.is_empty() {
        return Err(pem_err(what, "no CERTIFICATE"));
    }
    Ok(chain)
}

fn roots(ca: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots
            .add(cert.map_err(|e| pem_err("ca", e))?)
            .map_err(|e| pem_err("ca", e))?;
    }
    if roots.is_empty() {
        return Err(pem_err("ca", "no CERTIFICATE"));
    }
    Ok(Arc::new(roots))
}

fn rustls_err(e: impl std::fmt::Display) -> TlsError {
    TlsError::Rustls(e.to_string())
}

impl std::fmt::Debug for MigrationTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MigrationTls")
            .field("server", &self.server.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl MigrationTls {
    /// No TLS (`migrations.disableTLS`).
    pub fn disabled() -> MigrationTls {
        MigrationTls::default()
    }

    /// The configurations for a node holding `serving` (presented by its target listeners) and
    /// `client` (presented when it is the source), both peers verified against `ca`.
    pub fn new(
        serving: PemPair<'_>,
        client: PemPair<'_>,
        ca: &[u8],
    ) -> Result<MigrationTls, TlsError> {
        let provider = Arc::new(default_provider());
        let roots = roots(ca)?;
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(rustls_err)?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(rustls_err)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(
                chain("serving certificate", serving.cert)?,
                PrivateKeyDer::from_pem_slice(serving.key)
                    .map_err(|e| pem_err("serving key", e))?,
            )
            .map_err(rustls_err)?;
        let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(rustls_err)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(rustls_err)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SignedByTheCa(server_verifier)))
            .with_client_auth_cert(
                chain("client certificate", client.cert)?,
                PrivateKeyDer::from_pem_slice(client.key).map_err(|e| pem_err("client key", e))?,
            )
            .map_err(rustls_err)?;
        Ok(MigrationTls {
            server: Some(Arc::new(server)),
            client: Some(Arc::new(client)),
        })
    }
}

/// The CA's verification of the target's certificate with its name left out (see the module
/// doc): everything else — chain, validity, usage, signatures — is WebPKI's.
#[derive(Debug)]
struct SignedByTheCa(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for SignedByTheCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
