//! Authentication as an aggregated API server: the kube-apiserver's aggregator calls virt-api
//! with its front-proxy client certificate and names the user in headers. virt-api reads the
//! requestheader settings from ConfigMap `kube-system/extension-apiserver-authentication` (as
//! every aggregated server does), asks each TLS client for a certificate (optionally: the
//! apiserver's webhook calls carry none), verifies one against the requestheader client CA, and
//! serves the subresources only to a verified certificate whose common name is allowed. The user
//! and groups come from the configured headers (for the logs; the apiserver has already
//! authorized the request on `virtualmachines/start` etc. before proxying it).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    self, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};

use crate::certs::der::{pem_blocks, read_certificate};
use crate::subresources::ApiError;

/// The ConfigMap's namespace and name.
pub const CONFIGMAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");

/// The requestheader settings the apiserver publishes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHeader {
    /// `requestheader-client-ca-file`: the PEM of the front-proxy CA(s).
    pub client_ca: String,
    /// `requestheader-allowed-names`: the common names accepted (empty: any).
    pub allowed_names: Vec<String>,
    /// `requestheader-username-headers`.
    pub username_headers: Vec<String>,
    /// `requestheader-group-headers`.
    pub group_headers: Vec<String>,
}

/// Why the ConfigMap's settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No `requestheader-client-ca-file` (the apiserver runs without `--requestheader-*`).
    #[error("{}/{} has no requestheader-client-ca-file", CONFIGMAP.0, CONFIGMAP.1)]
    NoClientCa,
    /// A list key is not a JSON array of strings.
    #[error("{key}: {source}")]
    List {
        /// The key.
        key: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The CA PEM holds no usable certificate.
    #[error("requestheader-client-ca-file: {0}")]
    Ca(String),
}

impl RequestHeader {
    /// Reads the ConfigMap's `data`.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<RequestHeader, AuthError> {
        let list = |key: &'static str| -> Result<Vec<String>, AuthError> {
            match data.get(key).map(|s| s.trim()) {
                None | Some("") => Ok(Vec::new()),
                Some(s) => {
                    serde_json::from_str(s).map_err(|source| AuthError::List { key, source })
                }
            }
        };
        let client_ca = data
            .get("requestheader-client-ca-file")
            .filter(|s| !s.trim().is_empty())
            .ok_or(AuthError::NoClientCa)?
            .clone();
        Ok(RequestHeader {
            client_ca,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            group_headers: list("requestheader-group-headers")?,
        })
    }
}

/// The user a front-proxy request is made for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The groups.
    pub groups: Vec<String>,
}

/// Decides a request: `peer_cn` is the common name of the client certificate the TLS layer
/// verified against the requestheader CA (`None`: no certificate), `header` reads a request
/// header's values.
pub fn authenticate<'h>(
    settings: Option<&RequestHeader>,
    peer_cn: Option<&str>,
    header: impl Fn(&str) -> Vec<&'h str>,
) -> Result<User, ApiError> {
    let Some(settings) = settings else {
        return Err(ApiError::unauthorized(
            "Unauthorized: the requestheader configuration is not loaded",
        ));
    };
    let Some(cn) = peer_cn else {
        return Err(ApiError::unauthorized(
            "Unauthorized: no front-proxy client certificate",
        ));
    };
    if !settings.allowed_names.is_empty() && !settings.allowed_names.iter().any(|n| n == cn) {
        return Err(ApiError::forbidden(&format!(
            "Forbidden: client certificate {cn:?} is not one of the requestheader allowed names"
        )));
    }
    let name = settings
        .username_headers
        .iter()
        .find_map(|h| header(h).into_iter().find(|v| !v.is_empty()))
        .ok_or_else(|| ApiError::unauthorized("Unauthorized: no user in the request headers"))?;
    let groups = settings
        .group_headers
        .iter()
        .flat_map(|h| header(h))
        .map(String::from)
        .collect();
    Ok(User {
        name: name.to_string(),
        groups,
    })
}

/// The common name of a DER certificate.
pub fn common_name(der: &[u8]) -> Option<String> {
    read_certificate(der).ok()?.common_name
}

/// The requestheader settings and the client-certificate verifier built from them, replaced
/// when the ConfigMap changes; shared by the TLS layer and the request handler.
#[derive(Default)]
pub struct FrontProxy {
    current: RwLock<Option<(RequestHeader, Arc<dyn ClientCertVerifier>)>>,
}

impl fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrontProxy")
            .field("loaded", &self.settings().is_some())
            .finish()
    }
}

impl FrontProxy {
    /// Uses `settings` from now on (unchanged settings are kept as they are). Returns whether
    /// they changed.
    pub fn load(&self, settings: RequestHeader) -> Result<bool, AuthError> {
        if self.settings().as_ref() == Some(&settings) {
            return Ok(false);
        }
        let mut roots = RootCertStore::empty();
        for der in pem_blocks(&settings.client_ca, "CERTIFICATE") {
            roots
                .add(CertificateDer::from(der))
                .map_err(|e| AuthError::Ca(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(AuthError::Ca("no certificate".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| AuthError::Ca(e.to_string()))?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some((settings, verifier));
        Ok(true)
    }

    /// The settings in use.
    pub fn settings(&self) -> Option<RequestHeader> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(s, _)| s.clone())
    }

    fn verifier(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, v)| v.clone())
    }
}

/// The rustls verifier: asks for a certificate, accepts none, verifies one against the current
/// requestheader CA (refusing every certificate until one is loaded).
#[derive(Debug)]
pub struct OptionalClientCert(pub Arc<FrontProxy>);

fn no_ca() -> rustls::Error {
    rustls::Error::General("no requestheader client CA loaded".into())
}

impl ClientCertVerifier for OptionalClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No hints: a Go client then offers the certificate it has.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .verifier()
            .ok_or_else(no_ca)?
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .verifier()
            .ok_or_else(no_ca)?
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .verifier()
            .ok_or_else(no_ca)?
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Reads the ConfigMap through `client`.
pub async fn read(client: &kube::Client) -> Result<RequestHeader, String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), CONFIGMAP.0);
    let cm = api
        .get(CONFIGMAP.1)
        .await
        .map_err(|e| format!("reading {}/{}: {e}", CONFIGMAP.0, CONFIGMAP.1))?;
    RequestHeader::from_data(&cm.data.unwrap_or_default()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RequestHeader {
        RequestHeader::from_data(&BTreeMap::from([
            (
                "requestheader-client-ca-file".to_string(),
                "PEM".to_string(),
            ),
            (
                "requestheader-allowed-names".to_string(),
                r#"["front-proxy-client"]"#.to_string(),
            ),
            (
                "requestheader-username-headers".to_string(),
                r#"["X-Remote-User"]"#.to_string(),
            ),
            (
                "requestheader-group-headers".to_string(),
                r#"["X-Remote-Group"]"#.to_string(),
            ),
        ]))
        .unwrap()
    }

    #[test]
    fn the_configmap_is_read() {
        let s = settings();
        assert_eq!(s.allowed_names, ["front-proxy-client"]);
        assert_eq!(s.username_headers, ["X-Remote-User"]);
        assert!(matches!(
            RequestHeader::from_data(&BTreeMap::new()),
            Err(AuthError::NoClientCa)
        ));
    }

    #[test]
    fn only_an_allowed_certificate_with_a_user_is_served() {
        let s = settings();
        let headers = |h: &str| match h {
            "X-Remote-User" => vec!["alice"],
            "X-Remote-Group" => vec!["dev", "system:authenticated"],
            _ => vec![],
        };
        let user = authenticate(Some(&s), Some("front-proxy-client"), headers).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        assert_eq!(authenticate(Some(&s), None, headers).unwrap_err().code, 401);
        assert_eq!(
            authenticate(Some(&s), Some("mallory"), headers)
                .unwrap_err()
                .code,
            403
        );
        assert_eq!(
            authenticate(None, Some("front-proxy-client"), headers)
                .unwrap_err()
                .code,
            401
        );
        assert_eq!(
            authenticate(Some(&s), Some("front-proxy-client"), |_| vec![])
                .unwrap_err()
                .code,
            401
        );
        // No allowed names: any verified certificate.
        let any = RequestHeader {
            allowed_names: vec![],
            ..s
        };
        assert!(authenticate(Some(&any), Some("x"), headers).is_ok());
    }
}
