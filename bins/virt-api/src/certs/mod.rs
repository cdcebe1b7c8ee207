//! virt-api's certificates: a self-signed CA and the serving certificate it signs, kept together
//! in one Secret, as KubeVirt's virt-operator keeps `kubevirt-ca` and `kubevirt-virt-api-certs`.
//!
//! [`plan`] decides from the Secret's contents and the clock alone what to do: keep them, issue
//! a new serving certificate, or rotate the CA (and the certificate with it). A certificate is
//! renewed once less than a fifth of its validity is left (KubeVirt's `renewBefore` default is
//! 20% too), and replaced at once when it is unreadable, expired, not yet valid or not signed
//! by the CA of the Secret. When the CA rotates, the previous one stays in the CA bundle
//! ([`Bundle::ca_bundle`]) until it expires, so an API server that still holds the old bundle
//! for a moment trusts both.
//!
//! Keys are ECDSA P-256 made by rcgen on ring.

pub mod der;
pub mod migration;

use std::collections::BTreeMap;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use self::der::{CertInfo, pem_blocks, read_certificate};

/// Secret key of the CA certificate (PEM).
pub const CA_CERT: &str = "ca.crt";
/// Secret key of the CA's private key (PEM, PKCS#8).
pub const CA_KEY: &str = "ca.key";
/// Secret key of the previous CA certificate, kept in the bundle until it expires.
pub const PREVIOUS_CA_CERT: &str = "ca-previous.crt";
/// Secret key of the serving certificate (PEM), as a `kubernetes.io/tls` Secret names it.
pub const TLS_CERT: &str = "tls.crt";
/// Secret key of the serving certificate's private key.
pub const TLS_KEY: &str = "tls.key";

/// How long certificates live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The CA's lifetime (KubeVirt: 7 days).
    pub ca: Duration,
    /// The serving certificate's lifetime (KubeVirt: 1 day); capped by the CA's remaining life.
    pub cert: Duration,
}

impl Default for Validity {
    fn default() -> Self {
        Validity {
            ca: Duration::from_secs(7 * 24 * 3600),
            cert: Duration::from_secs(24 * 3600),
        }
    }
}

/// Seconds, saturating at `i64::MAX`.
fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// When a certificate is renewed: a fifth of its validity (without the [`BACKDATE`] its start
/// was moved back by) before its end.
fn renew_at(info: &CertInfo) -> i64 {
    let life = info
        .not_after
        .saturating_sub(info.not_before.saturating_add(BACKDATE))
        .max(0);
    info.not_after - life / 5
}

/// Whether a leaf certificate (PEM) must be issued again at `now`: unreadable, or a fifth of
/// its life or less left (the rule the serving certificate follows).
pub fn leaf_due(cert_pem: &str, now: i64) -> bool {
    info(cert_pem, TLS_CERT).map_or(true, |i| now >= renew_at(&i))
}

/// The CA and serving certificate, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// The CA certificate.
    pub ca_cert: String,
    /// The CA's key.
    pub ca_key: String,
    /// The CA this one replaced, while it is still valid.
    pub previous_ca_cert: Option<String>,
    /// The serving certificate.
    pub cert: String,
    /// Its key.
    pub key: String,
}

/// What is wrong with a Secret's certificates or making new ones.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A key of the Secret is missing.
    #[error("the Secret has no {0}")]
    Missing(&'static str),
    /// A value is not the PEM it should be.
    #[error("{key}: {why}")]
    Unreadable {
        /// The Secret key.
        key: &'static str,
        /// Why.
        why: String,
    },
    /// rcgen could not make a key or certificate.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

impl CertError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            CertError::Missing(_) => "missing_key",
            CertError::Unreadable { .. } => "unreadable",
            CertError::Generate(_) => "generate",
        }
    }
}

fn text(data: &BTreeMap<String, Vec<u8>>, key: &'static str) -> Result<String, CertError> {
    let raw = data.get(key).ok_or(CertError::Missing(key))?;
    String::from_utf8(raw.clone()).map_err(|_| CertError::Unreadable {
        key,
        why: "not UTF-8".into(),
    })
}

fn info(pem: &str, key: &'static str) -> Result<CertInfo, CertError> {
    let der = pem_blocks(pem, "CERTIFICATE")
        .into_iter()
        .next()
        .ok_or(CertError::Unreadable {
            key,
            why: "no CERTIFICATE block".into(),
        })?;
    read_certificate(&der).map_err(|e| CertError::Unreadable {
        key,
        why: e.to_string(),
    })
}

impl Bundle {
    /// Reads a Secret's data.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Bundle, CertError> {
        Ok(Bundle {
            ca_cert: text(data, CA_CERT)?,
            ca_key: text(data, CA_KEY)?,
            previous_ca_cert: text(data, PREVIOUS_CA_CERT).ok().filter(|s| !s.is_empty()),
            cert: text(data, TLS_CERT)?,
            key: text(data, TLS_KEY)?,
        })
    }

    /// The Secret's data.
    pub fn secret_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut data = BTreeMap::from([
            (CA_CERT.to_string(), self.ca_cert.clone().into_bytes()),
            (CA_KEY.to_string(), self.ca_key.clone().into_bytes()),
            (TLS_CERT.to_string(), self.cert.clone().into_bytes()),
            (TLS_KEY.to_string(), self.key.clone().into_bytes()),
        ]);
        if let Some(prev) = &self.previous_ca_cert {
            data.insert(PREVIOUS_CA_CERT.to_string(), prev.clone().into_bytes());
        }
        data
    }

    /// The CA bundle for the webhook configurations: the CA, then the previous one while it is
    /// valid at `now`.
    pub fn ca_bundle(&self, now: i64) -> String {
        let mut out = self.ca_cert.clone();
        if let Some(prev) = &self.previous_ca_cert
            && info(prev, PREVIOUS_CA_CERT).is_ok_and(|i| i.not_after > now)
        {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(prev);
        }
        out
    }

    /// When [`plan`] will next want a change (the earlier renewal time of the two certificates).
    pub fn next_renewal(&self) -> Option<i64> {
        let ca = info(&self.ca_cert, CA_CERT).ok()?;
        let cert = info(&self.cert, TLS_CERT).ok()?;
        Some(renew_at(&ca).min(renew_at(&cert)))
    }
}

/// What to do with the certificates found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// They are good: use them.
    Keep,
    /// The CA is good, the serving certificate is not (why).
    IssueCert(String),
    /// The CA must be replaced (why), and the certificate with it.
    RotateCa(String),
}

/// Decides from `found` (the Secret's certificates, or why they could not be read) at `now`.
pub fn plan(found: Result<&Bundle, &CertError>, now: i64) -> Plan {
    let bundle = match found {
        Ok(b) => b,
        Err(e) => return Plan::RotateCa(e.to_string()),
    };
    let ca = match info(&bundle.ca_cert, CA_CERT) {
        Ok(ca) => ca,
        Err(e) => return Plan::RotateCa(e.to_string()),
    };
    if KeyPair::from_pem(&bundle.ca_key).is_err() {
        return Plan::RotateCa("the CA key is unreadable".into());
    }
    if now < ca.not_before || now >= renew_at(&ca) {
        return Plan::RotateCa("the CA is due for renewal".into());
    }
    let cert = match info(&bundle.cert, TLS_CERT) {
        Ok(cert) => cert,
        Err(e) => return Plan::IssueCert(e.to_string()),
    };
    if KeyPair::from_pem(&bundle.key).is_err() {
        return Plan::IssueCert("the serving key is unreadable".into());
    }
    if cert.issuer != ca.subject {
        return Plan::IssueCert("the serving certificate is not signed by the CA".into());
    }
    if now < cert.not_before || now >= renew_at(&cert) {
        return Plan::IssueCert("the serving certificate is due for renewal".into());
    }
    Plan::Keep
}

/// The CA's common name: a fixed prefix, the creation time and the start of its public key, so
/// that no two CAs share a subject (the serving certificate's issuer is matched against it).
fn ca_name(now: i64, key: &KeyPair) -> String {
    let id: String = key
        .public_key_raw()
        .iter()
        .skip(1)
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("kvrs-virt-api-ca@{now}-{id}")
}

fn time_of(unix: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(unix).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// Clock skew allowance: certificates are valid from a minute before they are made.
const BACKDATE: i64 = 60;

fn ca_params(common_name: &str, now: i64, validity: Duration) -> CertificateParams {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = time_of(now - BACKDATE);
    params.not_after = time_of(now.saturating_add(secs(validity)));
    params
}

/// A throwaway CA and two certificates it signed for `name` — one serving, one client — valid
/// for a day from the system clock: mutual TLS between kvrs components in tests and benches,
/// never a cluster's (those come from [`plan`] and [`apply`]).
#[derive(Clone, Debug)]
pub struct ThrowawayPki {
    /// The CA certificate, PEM.
    pub ca: String,
    /// The serving certificate and its key, PEM.
    pub serving: (String, String),
    /// The client certificate and its key, PEM.
    pub client: (String, String),
}

/// A [`ThrowawayPki`] for `name`.
pub fn throwaway_pki(name: &str) -> Result<ThrowawayPki, CertError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let day = Duration::from_secs(86_400);
    let (ca, ca_key) = new_ca(now, day)?;
    let names = [name.to_string()];
    let leaf = |client: bool| {
        let leaf = Leaf {
            names: &names,
            common_name: name,
            client,
        };
        issue_for(&ca, &ca_key, &leaf, now, day)
    };
    Ok(ThrowawayPki {
        serving: leaf(false)?,
        client: leaf(true)?,
        ca,
    })
}

/// A new CA at `now`: (certificate, key), PEM.
pub fn new_ca(now: i64, validity: Duration) -> Result<(String, String), CertError> {
    let key = KeyPair::generate()?;
    let cert = ca_params(&ca_name(now, &key), now, validity).self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `names` (DNS names or IP addresses) signed by the CA
/// (`ca_cert`, `ca_key`), valid from `now` for `validity` but never past the CA.
pub fn issue(
    ca_cert: &str,
    ca_key: &str,
    names: &[String],
    now: i64,
    validity: Duration,
) -> Result<(String, String), CertError> {
    let common_name = names.first().map_or("kvrs-virt-api", String::as_str);
    issue_for(
        ca_cert,
        ca_key,
        &Leaf {
            names,
            common_name,
            client: false,
        },
        now,
        validity,
    )
}

/// What a certificate signed by the CA is for.
#[derive(Clone, Copy, Debug)]
pub struct Leaf<'a> {
    /// Its DNS names or IP addresses.
    pub names: &'a [String],
    /// Its subject's common name.
    pub common_name: &'a str,
    /// A client certificate (`clientAuth`) rather than a serving one (`serverAuth`): the
    /// two are kept apart so that virt-handler's serving certificate cannot be used to call
    /// another handler as if it were virt-api.
    pub client: bool,
}

/// A certificate for `leaf` signed by the CA (`ca_cert`, `ca_key`), valid from `now` for
/// `validity` but never past the CA.
pub fn issue_for(
    ca_cert: &str,
    ca_key: &str,
    leaf: &Leaf<'_>,
    now: i64,
    validity: Duration,
) -> Result<(String, String), CertError> {
    let names = leaf.names;
    let ca = info(ca_cert, CA_CERT)?;
    let ca_signer = KeyPair::from_pem(ca_key)?;
    let name = ca.common_name.clone().ok_or(CertError::Unreadable {
        key: CA_CERT,
        why: "the CA has no common name".into(),
    })?;
    // The issuer is the CA's own parameters again: same name, same key (hence the same key
    // identifier); `plan` checks the result's issuer against the CA's subject.
    let issuer = Issuer::new(
        ca_params(&name, ca.not_before + BACKDATE, Duration::ZERO),
        ca_signer,
    );
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, leaf.common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![if leaf.client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    params.use_authority_key_identifier_extension = true;
    params.not_before = time_of(now - BACKDATE);
    params.not_after = time_of(now.saturating_add(secs(validity)).min(ca.not_after));
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Carries out `plan` on `current` at `now`: the bundle to store (the same one for
/// [`Plan::Keep`]).
pub fn apply(
    plan: &Plan,
    current: Option<&Bundle>,
    names: &[String],
    now: i64,
    validity: Validity,
) -> Result<Bundle, CertError> {
    match (plan, current) {
        (Plan::Keep, Some(b)) => Ok(b.clone()),
        (Plan::IssueCert(_), Some(b)) => {
            let (cert, key) = issue(&b.ca_cert, &b.ca_key, names, now, validity.cert)?;
            Ok(Bundle {
                cert,
                key,
                ..b.clone()
            })
        }
        _ => {
            let (ca_cert, ca_key) = new_ca(now, validity.ca)?;
            let (cert, key) = issue(&ca_cert, &ca_key, names, now, validity.cert)?;
            let previous_ca_cert = current
                .map(|b| b.ca_cert.clone())
                .filter(|prev| info(prev, CA_CERT).is_ok_and(|i| i.not_after > now));
            Ok(Bundle {
                ca_cert,
                ca_key,
                previous_ca_cert,
                cert,
                key,
            })
        }
    }
}

/// The names a serving certificate covers: the Service's DNS names in `namespace`, then
/// `extra` (e.g. `127.0.0.1` when the API server calls a URL).
pub fn serving_names(service: &str, namespace: &str, extra: &[String]) -> Vec<String> {
    let mut names = vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_string(),
    ];
    names.extend(extra.iter().cloned());
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn names() -> Vec<String> {
        serving_names("kvrs-virt-api", "kubevirt", &["127.0.0.1".to_string()])
    }

    fn validity(ca: u64, cert: u64) -> Validity {
        Validity {
            ca: Duration::from_secs(ca),
            cert: Duration::from_secs(cert),
        }
    }

    fn fresh(v: Validity) -> Bundle {
        apply(&Plan::RotateCa("none".into()), None, &names(), NOW, v).unwrap()
    }

    #[test]
    fn a_new_bundle_is_kept_until_a_fifth_of_its_life_is_left() {
        let b = fresh(validity(1000, 100));
        assert_eq!(plan(Ok(&b), NOW + 1), Plan::Keep);
        let cert = info(&b.cert, TLS_CERT).unwrap();
        let ca = info(&b.ca_cert, CA_CERT).unwrap();
        assert_eq!(cert.issuer, ca.subject, "signed by the CA");
        assert_eq!(cert.not_after, NOW + 100);
        assert_eq!(ca.not_after, NOW + 1000);
        assert_eq!(b.next_renewal(), Some(NOW + 100 - 100 / 5));
        assert!(matches!(plan(Ok(&b), NOW + 80), Plan::IssueCert(_)));
        assert!(matches!(plan(Ok(&b), NOW + 900), Plan::RotateCa(_)));
    }

    #[test]
    fn reissuing_keeps_the_ca_and_signs_with_it() {
        let b = fresh(validity(1000, 100));
        let again = apply(
            &plan(Ok(&b), NOW + 90),
            Some(&b),
            &names(),
            NOW + 90,
            validity(1000, 100),
        )
        .unwrap();
        assert_eq!(again.ca_cert, b.ca_cert);
        assert_ne!(again.cert, b.cert);
        assert_eq!(plan(Ok(&again), NOW + 91), Plan::Keep);
        assert_eq!(again.ca_bundle(NOW), b.ca_cert, "one CA, one bundle entry");
    }

    #[test]
    fn a_rotated_ca_keeps_the_previous_one_in_the_bundle_while_valid() {
        let b = fresh(validity(1000, 100));
        let rotated = apply(
            &plan(Ok(&b), NOW + 900),
            Some(&b),
            &names(),
            NOW + 900,
            validity(1000, 100),
        )
        .unwrap();
        assert_ne!(rotated.ca_cert, b.ca_cert);
        assert_eq!(
            rotated.previous_ca_cert.as_deref(),
            Some(b.ca_cert.as_str())
        );
        let bundle = rotated.ca_bundle(NOW + 900);
        assert_eq!(pem_blocks(&bundle, "CERTIFICATE").len(), 2);
        assert_eq!(
            pem_blocks(&rotated.ca_bundle(NOW + 2000), "CERTIFICATE").len(),
            1
        );
        assert_eq!(plan(Ok(&rotated), NOW + 901), Plan::Keep);
    }

    #[test]
    fn broken_or_foreign_certificates_are_replaced() {
        let b = fresh(validity(1000, 100));
        let other = fresh(validity(1000, 100));
        let mixed = Bundle {
            cert: other.cert.clone(),
            key: other.key.clone(),
            ..b.clone()
        };
        assert!(matches!(plan(Ok(&mixed), NOW + 1), Plan::IssueCert(_)));
        let garbage = Bundle {
            ca_cert: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
            ..b.clone()
        };
        assert!(matches!(plan(Ok(&garbage), NOW + 1), Plan::RotateCa(_)));
        let err = Bundle::from_secret_data(&BTreeMap::new()).unwrap_err();
        assert_eq!(err.label(), "missing_key");
        assert!(matches!(plan(Err(&err), NOW), Plan::RotateCa(_)));
        let round = Bundle::from_secret_data(&b.secret_data()).unwrap();
        assert_eq!(round, b);
    }
}
