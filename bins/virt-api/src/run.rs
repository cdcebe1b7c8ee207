//! The daemon: the KubeVirt CR watched live, the certificates made or read, the caBundle of the
//! webhook configurations kept current, the HTTPS server, and the rotation loop.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kvrs_runtime::kube::daemon::flag_overrides;
use kvrs_runtime::kube::kubevirt_config::{self, Reporting};
use tracing::{error, info, warn};

use crate::Flags;
use crate::auth::{self, FrontProxy};
use crate::certs::{Bundle, serving_names};
use crate::cluster::{CertSecret, ConfigurationKind, sync_api_service_ca_bundle, sync_ca_bundle};
use crate::server::{AppState, Limits, ReloadableCert, Server};
use crate::subresources::API_SERVICES;
use crate::subresources::handler::{HandlerClient, sync_handler_secret};
use crate::subresources::serve::Handlers;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The longest the rotation loop sleeps: it also re-reads the Secret (another replica may have
/// rotated it) and re-asserts the caBundle this often.
const RESYNC: Duration = Duration::from_secs(60);

/// Runs virt-api with `client` until `shutdown` resolves.
pub async fn run(
    flags: Flags,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    let overrides = flag_overrides(&flags.feature_gates, false)?;
    let (config, config_watch) = kubevirt_config::watch(
        &client,
        &flags.namespace,
        overrides,
        |cr| cr.config.clone(),
        Reporting {
            events: None,
            refused: Box::new(|_| {}),
        },
    )
    .await;

    let rotation = Rotation {
        secret: CertSecret::new(client.clone(), &flags.namespace, &flags.cert_secret),
        names: serving_names(&flags.service, &flags.namespace, &flags.tls_san),
        flags: flags.clone(),
        client: client.clone(),
        cert: Arc::new(ReloadableCert::default()),
        front_proxy: None,
        handler_client: None,
    };
    let bundle = rotation
        .secret
        .ensure(&rotation.names, now(), flags.validity())
        .await
        .context("the serving certificate")?;
    rotation.publish_ca(&bundle).await;
    rotation.cert.load(&bundle.cert, &bundle.key)?;

    let front_proxy = Arc::new(FrontProxy::default());
    load_front_proxy(&client, &front_proxy).await;
    let handler_client = Arc::new(HandlerClient::default());
    publish_handler_certs(&client, &flags, &handler_client, &bundle).await;
    let state = AppState {
        config,
        accounts: flags.accounts(),
        client: Some(client.clone()),
        front_proxy: front_proxy.clone(),
        handlers: Some(Handlers {
            client: handler_client.clone(),
            namespace: flags.namespace.clone(),
            port: flags.console_server_port,
        }),
    };
    let server = Server::bind(
        flags.listen,
        rotation.cert.clone(),
        state,
        Limits::default(),
    )
    .await?;
    let rotation = Rotation {
        front_proxy: Some(front_proxy),
        handler_client: Some(handler_client),
        ..rotation
    };
    let rotating = tokio::spawn(rotation.run(bundle));
    server.run(shutdown).await;
    rotating.abort();
    if let Some(w) = config_watch {
        w.abort();
    }
    Ok(ExitCode::SUCCESS)
}

struct Rotation {
    secret: CertSecret,
    names: Vec<String>,
    flags: Flags,
    client: kube::Client,
    cert: Arc<ReloadableCert>,
    /// Re-read with the Secret: the apiserver may rotate its front-proxy CA.
    front_proxy: Option<Arc<FrontProxy>>,
    /// virt-api's client certificate for virt-handler, re-issued when the CA changes.
    handler_client: Option<Arc<HandlerClient>>,
}

/// Issues virt-api's client certificate for virt-handler and keeps the handler's certificate
/// Secret current (its serving pair, the CA bundle, and the client pair its migration proxies
/// present as a migration's source) (errors are logged: the next round tries again; until then the
/// VMI subresources answer what the handler call fails with).
async fn publish_handler_certs(
    client: &kube::Client,
    flags: &Flags,
    handler_client: &HandlerClient,
    bundle: &Bundle,
) {
    if let Err(e) = handler_client.load(bundle, now()) {
        warn!(
            reason = e.label(),
            "virt-api's client certificate for virt-handler: {e}"
        );
    }
    if let Err(e) = sync_handler_secret(
        client,
        &flags.namespace,
        bundle,
        now(),
        flags.validity().cert,
    )
    .await
    {
        warn!("virt-handler's certificate Secret: {e}");
    }
}

/// Reads the requestheader settings into `front_proxy` (errors are logged: until they can be
/// read, every subresource request is refused with 401).
async fn load_front_proxy(client: &kube::Client, front_proxy: &FrontProxy) {
    match auth::read(client).await.map(|s| front_proxy.load(s)) {
        Ok(Ok(true)) => info!("requestheader client CA loaded"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => warn!("requestheader settings: {e}"),
        Err(e) => warn!("requestheader settings: {e}"),
    }
}

impl Rotation {
    /// Writes the bundle's CAs into both webhook configurations and the APIServices (errors are logged: the next
    /// round tries again, and the server keeps serving with what it has).
    async fn publish_ca(&self, bundle: &Bundle) {
        let pem = bundle.ca_bundle(now());
        for (kind, name) in [
            (
                ConfigurationKind::Mutating,
                &self.flags.mutating_configuration,
            ),
            (
                ConfigurationKind::Validating,
                &self.flags.validating_configuration,
            ),
        ] {
            if let Err(e) = sync_ca_bundle(&self.client, kind, name, &pem).await {
                warn!(reason = e.label(), "caBundle of {name}: {e}");
            }
        }
        for name in API_SERVICES {
            if let Err(e) = sync_api_service_ca_bundle(&self.client, name, &pem).await {
                warn!(reason = e.label(), "caBundle of APIService {name}: {e}");
            }
        }
    }

    /// Sleeps until the next renewal (at most [`RESYNC`]), then reads the Secret again and
    /// renews what is due: a new CA reaches the webhook configurations before the server
    /// presents a certificate signed by it.
    async fn run(self, mut current: Bundle) {
        loop {
            let wait = current
                .next_renewal()
                .map_or(RESYNC, |at| {
                    Duration::from_secs(u64::try_from(at - now()).unwrap_or(0))
                })
                .clamp(Duration::from_secs(1), RESYNC);
            tokio::time::sleep(wait).await;
            if let Some(fp) = &self.front_proxy {
                load_front_proxy(&self.client, fp).await;
            }
            let next = match self
                .secret
                .ensure(&self.names, now(), self.flags.validity())
                .await
            {
                Ok(next) => next,
                Err(e) => {
                    error!(reason = e.label(), "renewing the certificates: {e}");
                    continue;
                }
            };
            self.publish_ca(&next).await;
            if let Some(h) = &self.handler_client {
                publish_handler_certs(&self.client, &self.flags, h, &next).await;
            }
            if next != current {
                match self.cert.load(&next.cert, &next.key) {
                    Ok(()) => info!(
                        secret = %format!("{}/{}", self.flags.namespace, self.flags.cert_secret),
                        ca_rotated = next.ca_cert != current.ca_cert,
                        "serving the renewed certificate"
                    ),
                    Err(e) => error!(reason = e.label(), "loading the renewed certificate: {e}"),
                }
                current = next;
            }
        }
    }
}
