//! Command-line flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::certs::Validity;
use crate::server::Accounts;

/// kvrs virt-api: KubeVirt v1.9.0's admission webhooks over HTTPS.
///
/// Example, against the cluster of the current kubeconfig:
///   virt-api --kubeconfig ~/.kube/config --namespace kubevirt
#[derive(Debug, Clone, Parser)]
#[command(name = "virt-api", version)]
pub struct Flags {
    /// Kubeconfig to use; without it the in-cluster service account (or $KUBECONFIG) is used.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// KubeVirt's install namespace: the KubeVirt CR, the certificate Secret, the service
    /// accounts of KubeVirt's components.
    #[arg(long, default_value = "kubevirt")]
    pub namespace: String,
    /// Address the HTTPS webhooks and `/healthz` are served on.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// The Service in front of virt-api: its DNS names go into the serving certificate.
    #[arg(long, default_value = "kvrs-virt-api")]
    pub service: String,
    /// Further names or IP addresses for the serving certificate, comma-separated (e.g.
    /// `127.0.0.1` when the API server calls a URL instead of the Service).
    #[arg(long, value_delimiter = ',')]
    pub tls_san: Vec<String>,
    /// virt-handler's server port, where the VMI subresources are forwarded (KubeVirt's
    /// `--console-server-port`); the handler pods are found in `--namespace` on the VMI's node.
    #[arg(long, default_value_t = crate::subresources::vmi::HANDLER_PORT)]
    pub console_server_port: u16,
    /// The Secret (in `--namespace`) holding the CA and serving certificate.
    #[arg(long, default_value = "kvrs-virt-api-certs")]
    pub cert_secret: String,
    /// The CA's lifetime in seconds (KubeVirt's default: 7 days); renewed with a fifth left.
    #[arg(long, default_value_t = 7 * 24 * 3600)]
    pub ca_validity_seconds: u64,
    /// The serving certificate's lifetime in seconds (KubeVirt's default: 1 day).
    #[arg(long, default_value_t = 24 * 3600)]
    pub cert_validity_seconds: u64,
    /// The MutatingWebhookConfiguration whose caBundle virt-api keeps current.
    #[arg(long, default_value = "kvrs-virt-api-mutator")]
    pub mutating_configuration: String,
    /// The ValidatingWebhookConfiguration whose caBundle virt-api keeps current.
    #[arg(long, default_value = "kvrs-virt-api-validator")]
    pub validating_configuration: String,
    /// virt-controller's service account in `--namespace` (may write VMI status and spec, set a
    /// migration's priority).
    #[arg(long, default_value = "kvrs-controller")]
    pub controller_service_account: String,
    /// virt-handler's service account in `--namespace` (node restriction applies to it).
    #[arg(long, default_value = "kvrs-handler")]
    pub handler_service_account: String,
    /// virt-api's own service account in `--namespace`.
    #[arg(long, default_value = "kvrs-virt-api")]
    pub api_service_account: String,
    /// Feature gates enabled beyond KubeVirt's defaults, comma-separated; added to the KubeVirt
    /// CR's `developerConfiguration.featureGates`.
    #[arg(long, value_delimiter = ',')]
    pub feature_gates: Vec<String>,
    /// Log lines on stderr: `text` or `json`.
    #[arg(long, default_value = "text")]
    pub log_format: kvrs_runtime::kube::setup::LogFormat,
}

impl Flags {
    /// How long certificates live.
    pub fn validity(&self) -> Validity {
        Validity {
            ca: Duration::from_secs(self.ca_validity_seconds),
            cert: Duration::from_secs(self.cert_validity_seconds),
        }
    }

    /// KubeVirt's service accounts as the API server names their users.
    pub fn accounts(&self) -> Accounts {
        let user = |sa: &str| format!("system:serviceaccount:{}:{sa}", self.namespace);
        Accounts {
            all: [
                &self.controller_service_account,
                &self.handler_service_account,
                &self.api_service_account,
            ]
            .into_iter()
            .map(|sa| user(sa))
            .collect(),
            controller: user(&self.controller_service_account),
            handler: user(&self.handler_service_account),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Deployment in `bins/deploy` must start this binary with flags it accepts.
    #[test]
    fn the_deployment_passes_flags_the_binary_accepts() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/virt-api/deployment.yaml"
        );
        let text = std::fs::read_to_string(path).expect("deployment.yaml");
        let doc: serde_norway::Value = serde_norway::from_str(&text).expect("yaml");
        let container = &doc["spec"]["template"]["spec"]["containers"][0];
        let mut argv = vec!["virt-api".to_string()];
        for a in container["args"].as_sequence().expect("args") {
            argv.push(a.as_str().expect("string arg").to_string());
        }
        let flags = Flags::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert_eq!(flags.namespace, "kubevirt");
        assert_eq!(flags.listen.port(), 8443);
        assert_eq!(flags.service, "kvrs-virt-api");
    }

    #[test]
    fn accounts_are_service_account_users_of_the_namespace() {
        let flags = Flags::try_parse_from(["virt-api"]).unwrap();
        let a = flags.accounts();
        assert_eq!(
            a.controller,
            "system:serviceaccount:kubevirt:kvrs-controller"
        );
        assert_eq!(a.handler, "system:serviceaccount:kubevirt:kvrs-handler");
        assert!(
            a.all
                .contains("system:serviceaccount:kubevirt:kvrs-virt-api")
        );
        assert_eq!(flags.validity(), Validity::default());
    }
}
