//! The CA that verifies virt-api's client certificate, where KubeVirt's operator keeps it.
//!
//! kvrs's own manifests give the REST server one Secret with `tls.crt`, `tls.key` and `ca.crt`
//! (virt-api issues them). KubeVirt's operator mounts a Secret with the serving pair only and
//! keeps the CA bundle in the ConfigMap `kubevirt-ca` (key `ca-bundle`) of the install
//! namespace, which KubeVirt's handler watches (`--ca-configmap-name`). So kvrs's handler
//! dropped in under that operator keeps the ConfigMap's bundle in a file of its private
//! directory, which the REST server reads while its certificate directory has no `ca.crt`
//! ([`crate::rest::tls::CertDir::with_ca_fallback`]). While the directory has a `ca.crt` (kvrs's
//! layout) the ConfigMap is not read at all: kvrs's own handler role grants no ConfigMaps.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use tracing::{debug, info, warn};

use crate::rest::tls::CA_FILE;

/// KubeVirt's default `--ca-configmap-name`.
pub const DEFAULT_CONFIGMAP: &str = "kubevirt-ca";
/// The ConfigMap's key holding the PEM bundle.
pub const BUNDLE_KEY: &str = "ca-bundle";
/// The file (under `--private-dir`) the bundle is kept in.
pub const FALLBACK_FILE: &str = "kubevirt-ca/ca.crt";
/// How often the ConfigMap is read again (the REST server re-reads its files as often).
const PERIOD: Duration = Duration::from_secs(20);
/// Where a pod finds its own namespace.
const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The PEM bundle of a `kubevirt-ca` ConfigMap, when it holds one.
pub fn bundle_of(cm: &ConfigMap) -> Option<&str> {
    cm.data
        .as_ref()?
        .get(BUNDLE_KEY)
        .map(String::as_str)
        .filter(|b| b.contains("-----BEGIN CERTIFICATE-----"))
}

/// This pod's namespace (KubeVirt's handler reads its CA from its own namespace); `kubevirt`
/// outside a pod.
pub fn own_namespace() -> String {
    std::fs::read_to_string(NAMESPACE_FILE)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kubevirt".into())
}

/// What one look at the ConfigMap did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Synced {
    /// The certificate directory has its own `ca.crt`: nothing read.
    OwnCa,
    /// The bundle was written to the fallback file (it changed).
    Written,
    /// The fallback file already holds the bundle.
    Unchanged,
}

/// One look: when `cert_dir` has no `ca.crt`, the ConfigMap `namespace/name`'s bundle written
/// to `target` if it differs (through a temporary file and a rename, so a reader never sees a
/// half-written bundle).
pub async fn sync_once(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    cert_dir: &Path,
    target: &Path,
) -> Result<Synced, String> {
    if cert_dir.join(CA_FILE).exists() {
        return Ok(Synced::OwnCa);
    }
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), namespace);
    let cm = api
        .get(name)
        .await
        .map_err(|e| format!("ConfigMap {namespace}/{name}: {e}"))?;
    let bundle = bundle_of(&cm)
        .ok_or_else(|| format!("ConfigMap {namespace}/{name} has no PEM under {BUNDLE_KEY}"))?;
    if std::fs::read(target).is_ok_and(|old| old == bundle.as_bytes()) {
        return Ok(Synced::Unchanged);
    }
    let dir = target
        .parent()
        .ok_or_else(|| format!("{}: no directory", target.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tmp = dir.join(".ca.crt.tmp");
    std::fs::write(&tmp, bundle)
        .and_then(|()| std::fs::rename(&tmp, target))
        .map_err(|e| format!("{}: {e}", target.display()))?;
    Ok(Synced::Written)
}

/// [`sync_once`] every 20 s, for as long as the handler runs; a failure is logged once until
/// it changes (under kvrs's own layout the directory's `ca.crt` makes every look a no-op).
pub async fn sync(
    client: kube::Client,
    namespace: String,
    name: String,
    cert_dir: PathBuf,
    target: PathBuf,
) {
    let mut reported: Option<String> = None;
    loop {
        match sync_once(&client, &namespace, &name, &cert_dir, &target).await {
            Ok(Synced::Written) => {
                info!(
                    configmap = %format!("{namespace}/{name}"),
                    file = %target.display(),
                    "REST server client CA taken from KubeVirt's ConfigMap"
                );
                reported = None;
            }
            Ok(other) => {
                debug!(?other, "REST server client CA");
                reported = None;
            }
            Err(e) => {
                if reported.as_ref() != Some(&e) {
                    warn!(
                        "no client CA for the REST server: {} has no {CA_FILE}, and {e}",
                        cert_dir.display()
                    );
                    reported = Some(e);
                }
            }
        }
        tokio::time::sleep(PERIOD).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn the_bundle_is_the_pem_under_kubevirts_key() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        assert_eq!(bundle_of(&cm(&[("ca-bundle", pem)])), Some(pem));
        assert_eq!(bundle_of(&cm(&[("ca.crt", pem)])), None, "another key");
        assert_eq!(bundle_of(&cm(&[("ca-bundle", "")])), None, "empty");
        assert_eq!(bundle_of(&ConfigMap::default()), None, "no data");
    }
}
