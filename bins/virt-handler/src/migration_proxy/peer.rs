//! Which kind of peer a client certificate belongs to, by its subject's common name, as
//! KubeVirt's handler tells virt-api (`kubevirt.io:system:client:virt-handler`) from another
//! handler's migration client (`kubevirt.io:system:client:migration`).
//!
//! Every certificate virt-api issues is signed by the one CA, and since handlers hold a client
//! certificate of their own (for migrations), "signed by the CA for client use" no longer says
//! "virt-api": without this check one node's handler could call another node's REST server
//! (pause, soft-reboot, read guest data of VMIs it does not run). [`CommonNameIs`] wraps the
//! CA's verification and then requires one of the listed common names, as KubeVirt's
//! `verifyPeerCert` does.

use std::sync::Arc;

use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    self, CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme,
};

/// virt-api's client certificate (KubeVirt's `virt-handler` common-name type).
pub const VIRT_API_CLIENT: &str = "kubevirt.io:system:client:virt-handler";
/// A handler's migration client certificate (KubeVirt's `migration` type).
pub const MIGRATION_CLIENT: &str = "kubevirt.io:system:client:migration";

/// One DER element at the start of `data`: (tag, contents, what follows).
fn element(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = data.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject's first common name of a DER certificate (UTF8String or PrintableString).
pub fn common_name(cert: &[u8]) -> Option<String> {
    const SEQUENCE_OF_VERSION: u8 = 0xa0;
    const COMMON_NAME: [u8; 3] = [0x55, 0x04, 0x03];
    let (_, certificate, _) = element(cert)?;
    let (_, mut tbs, _) = element(certificate)?;
    if element(tbs)?.0 == SEQUENCE_OF_VERSION {
        tbs = element(tbs)?.2;
    }
    // serialNumber, signature, issuer, validity: then the subject.
    for _ in 0..4 {
        tbs = element(tbs)?.2;
    }
    let (_, mut names, _) = element(tbs)?;
    while !names.is_empty() {
        let (_, mut set, rest) = element(names)?;
        names = rest;
        while !set.is_empty() {
            let (_, attribute, rest) = element(set)?;
            set = rest;
            let (_, oid, value) = element(attribute)?;
            if oid == COMMON_NAME {
                let (tag, text, _) = element(value)?;
                return matches!(tag, 0x0c | 0x13)
                    .then(|| String::from_utf8(text.to_vec()).ok())
                    .flatten();
            }
        }
    }
    None
}

/// A client verifier that accepts what `inner` (the CA's) accepts and whose common name is one
/// of `allowed`.
#[derive(Debug)]
pub struct CommonNameIs {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: &'static [&'static str],
}

impl CommonNameIs {
    /// `inner`, narrowed to the common names `allowed`.
    pub fn new(
        inner: Arc<dyn ClientCertVerifier>,
        allowed: &'static [&'static str],
    ) -> CommonNameIs {
        CommonNameIs { inner, allowed }
    }
}

impl ClientCertVerifier for CommonNameIs {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        match common_name(end_entity.as_ref()) {
            Some(cn) if self.allowed.contains(&cn.as_str()) => Ok(verified),
            _ => Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kvrs_virt_api::certs::{Leaf, Plan, Validity, apply, issue_for, migration};
    use tokio_rustls::rustls::crypto::ring::default_provider;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::server::WebPkiClientVerifier;
    use tokio_rustls::rustls::{RootCertStore, server::danger::ClientCertVerifier};

    use super::*;

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn only_the_listed_common_names_pass_the_cas_verification() {
        let now = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        )
        .unwrap();
        let b = apply(
            &Plan::RotateCa("test".into()),
            None,
            &["kvrs-virt-api".into()],
            now,
            Validity::default(),
        )
        .unwrap();
        let day = Duration::from_secs(86_400);
        let (api, _) = issue_for(
            &b.ca_cert,
            &b.ca_key,
            &Leaf {
                names: &[],
                common_name: VIRT_API_CLIENT,
                client: true,
            },
            now,
            day,
        )
        .unwrap();
        let (handler, _) = migration::issue_client(&b, now, day).unwrap();
        assert_eq!(common_name(&der(&api)).as_deref(), Some(VIRT_API_CLIENT));
        assert_eq!(
            common_name(&der(&handler)).as_deref(),
            Some(MIGRATION_CLIENT)
        );
        assert_eq!(common_name(b"\x30\x03\x02\x01"), None, "truncated DER");

        let mut roots = RootCertStore::empty();
        roots.add(der(&b.ca_cert)).unwrap();
        let ca = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(default_provider()),
        )
        .build()
        .unwrap();
        let rest = CommonNameIs::new(ca.clone(), &[VIRT_API_CLIENT]);
        let at = UnixTime::now();
        assert!(rest.verify_client_cert(&der(&api), &[], at).is_ok());
        assert!(
            rest.verify_client_cert(&der(&handler), &[], at).is_err(),
            "a handler's migration client certificate does not open another handler's REST server"
        );
        let proxies = CommonNameIs::new(ca, &[VIRT_API_CLIENT, MIGRATION_CLIENT]);
        assert!(proxies.verify_client_cert(&der(&handler), &[], at).is_ok());
        assert!(rest.client_auth_mandatory());
    }
}
