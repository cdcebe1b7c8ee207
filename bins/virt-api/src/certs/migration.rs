//! virt-handler's migration client certificate: what a handler presents when it is the source
//! of a live migration and dials the target handler's proxy (KubeVirt v1.9.0's Secret
//! `kubevirt-virt-handler-migration-client-certs`, CN `kubevirt.io:system:client:migration`).
//!
//! KubeVirt's handler serves its migration listeners with its *server* certificate
//! (`serverAuth`) and dials them with a *client* one (`clientAuth`); each side verifies the
//! other against the kubevirt CA bundle with the usage its role needs. kvrs issues the client
//! pair into the same Secret as the handler's serving pair ([`CLIENT_CERT`], [`CLIENT_KEY`]
//! beside `tls.crt`, `tls.key`, `ca.crt`), so that one kubelet volume update swaps all five
//! files at once: a handler never sees a client certificate from a CA its `ca.crt` does not
//! hold yet.

use std::time::Duration;

use super::{Bundle, CertError, Leaf, issue_for, leaf_due};

/// Secret key of the migration client certificate (PEM), as `--migration-cert-dir` reads it.
pub const CLIENT_CERT: &str = "client.crt";
/// Secret key of its private key (PEM, PKCS#8).
pub const CLIENT_KEY: &str = "client.key";
/// Its subject's common name (KubeVirt's).
pub const CLIENT_COMMON_NAME: &str = "kubevirt.io:system:client:migration";

/// Whether the migration client certificate held (`None`: none) must be issued again at `now`:
/// missing, unreadable, a fifth of its life or less left.
pub fn client_due(held: Option<&str>, now: i64) -> bool {
    held.is_none_or(|cert| leaf_due(cert, now))
}

/// A migration client certificate signed by the bundle's CA, valid from `now` for `validity`
/// (never past the CA): `clientAuth` only and no names, as KubeVirt's `NewClientKeyPair`
/// makes it. (certificate, key), PEM.
pub fn issue_client(
    bundle: &Bundle,
    now: i64,
    validity: Duration,
) -> Result<(String, String), CertError> {
    issue_for(
        &bundle.ca_cert,
        &bundle.ca_key,
        &Leaf {
            names: &[],
            common_name: CLIENT_COMMON_NAME,
            client: true,
        },
        now,
        validity,
    )
}

#[cfg(test)]
mod tests {
    use super::super::der::{pem_blocks, read_certificate};
    use super::super::{Plan, Validity, apply};
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn bundle() -> Bundle {
        apply(
            &Plan::RotateCa("none".into()),
            None,
            &["kvrs-virt-api".into()],
            NOW,
            Validity::default(),
        )
        .unwrap()
    }

    /// The DER bytes of an extended key usage OID (1.3.6.1.5.5.7.3.x) as it appears in a
    /// certificate: `06 08 2b 06 01 05 05 07 03 x`.
    fn eku(x: u8) -> Vec<u8> {
        vec![0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, x]
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn the_client_pair_is_signed_by_the_ca_for_client_use_only() {
        let b = bundle();
        let day = Duration::from_secs(86_400);
        let (cert, key) = issue_client(&b, NOW, day).unwrap();
        let der = pem_blocks(&cert, "CERTIFICATE").remove(0);
        let info = read_certificate(&der).unwrap();
        let ca = read_certificate(&pem_blocks(&b.ca_cert, "CERTIFICATE").remove(0)).unwrap();
        assert_eq!(info.issuer, ca.subject, "signed by the bundle's CA");
        assert_eq!(info.common_name.as_deref(), Some(CLIENT_COMMON_NAME));
        assert_eq!(info.not_after, NOW + 86_400);
        assert!(contains(&der, &eku(2)), "clientAuth (1.3.6.1.5.5.7.3.2)");
        assert!(
            !contains(&der, &eku(1)),
            "no serverAuth (1.3.6.1.5.5.7.3.1)"
        );
        assert!(rcgen::KeyPair::from_pem(&key).is_ok(), "its key is usable");
    }

    #[test]
    fn the_client_pair_is_reissued_when_missing_or_a_fifth_of_its_life_is_left() {
        let b = bundle();
        let day = Duration::from_secs(86_400);
        let (cert, _) = issue_client(&b, NOW, day).unwrap();
        assert!(client_due(None, NOW));
        assert!(client_due(Some("not a certificate"), NOW));
        assert!(!client_due(Some(&cert), NOW + 3600));
        assert!(client_due(Some(&cert), NOW + 86_400 - 3600));
    }
}
