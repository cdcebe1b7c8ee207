//! kvrs virt-handler: KubeVirt v1.9.0's node daemon on kube-rs.
//!
//! Thin wiring: flags, a client, this node's VMI watch, the domain sources (the notify server
//! and the periodic `GetDomain` resync), the workers, the heartbeat, the metrics endpoints.
//! What each sync does is decided by `kvrs_decide::handler`, from facts gathered by
//! `kvrs_runtime::world::handler_inputs` (the simulator's too), and executed by `kvrs-runtime`;
//! the node-side preparation (pod network, devices, container disks) is `kvrs-node`; the
//! kubelet's device plugins for KubeVirt's device resources are [`device_plugins`]; the REST
//! server virt-api forwards the VMI subresources to is [`rest`]. Live migration: the VMIs migrating
//! to this node are watched too, each sync also runs the migration source and target decisions,
//! and their proxy steps run on [`migration::Proxies`] ([`migration_proxy`]).

mod config;
pub mod device_plugins;
mod domains;
pub mod flags;
mod heartbeat;
pub mod hotplug;
pub mod kubevirt_ca;
mod launchers;
mod metrics;
pub mod migration;
pub mod migration_proxy;
pub mod node_labeller;
mod options;
mod podcache;
pub mod rest;
mod sync;
mod vmis;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use kvrs_ipc::ServeOptions;
use kvrs_queue::{AsyncQueue, ShutdownMode, WorkQueue};
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::daemon::DaemonMetrics;
use tracing::{error, info, warn};

use crate::domains::{DomainCache, Notifications};
pub use crate::flags::Flags;
use crate::launchers::Launchers;
use crate::metrics::HandlerMetrics;
use crate::migration_proxy::{MigrationCertDir, TlsSource};
use crate::sync::Handler;

/// A poisoned lock still guards consistent data (every update is a single call).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves `/metrics`, `/healthz` and `/readyz`: over HTTPS with KubeVirt's certificate under
/// KubeVirt's command line ([`Flags::health_tls`]), else over plain HTTP. Returns the address
/// bound and whether it is HTTPS.
pub async fn serve_health(
    flags: &Flags,
    metrics: &DaemonMetrics,
) -> anyhow::Result<(std::net::SocketAddr, bool)> {
    let addr = flags.health_addr();
    match flags.health_tls() {
        Some(pair) => {
            let tls = kvrs_runtime::kube::https::server_config(&pair)
                .context("the health endpoints' certificate")?;
            let bound = metrics.serve_https(addr, tls).await?;
            info!(%bound, cert = %pair.cert.display(), "health endpoints over HTTPS");
            Ok((bound, true))
        }
        None => Ok((metrics.serve(addr).await?, false)),
    }
}

/// Runs the handler for this node with `client` until `shutdown` resolves (the binary passes
/// SIGTERM or Ctrl-C; `kvrs run` its own stop), then drains the in-flight syncs and marks the
/// node unschedulable. Launchers keep running: a handler restart must not stop VMs.
pub async fn run(
    flags: Flags,
    client: kube::Client,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    let node = flags.node_name()?;
    let overrides = config::overrides(&flags)?;
    let unused = flags.kubevirt_only.given();
    if !unused.is_empty() {
        info!(
            flags = %unused.join(" "),
            "KubeVirt's flags accepted without effect in kvrs"
        );
    }
    let metrics = Arc::new(HandlerMetrics::new());
    serve_health(&flags, &metrics).await?;

    std::fs::create_dir_all(&flags.kubevirt_share_dir)
        .with_context(|| format!("creating {}", flags.kubevirt_share_dir.display()))?;
    std::fs::create_dir_all(&flags.private_dir)
        .with_context(|| format!("creating {}", flags.private_dir.display()))?;

    // The kubelet's device plugins (KubeVirt starts its device manager with the VMI controller).
    let device_plugins = flags.device_plugins.then(|| {
        let vsock = flags
            .feature_gates
            .iter()
            .any(|g| g == device_plugins::plan::VSOCK_GATE);
        device_plugins::DevicePlugins::start(device_plugins::DevicePluginConfig::for_host(
            flags.device_plugin_dir.clone(),
            flags.max_devices,
            vsock,
        ))
    });

    let queue = AsyncQueue::from_queue(WorkQueue::new().with_metrics(metrics.queue_hooks()));
    let domains = Arc::new(DomainCache::default());

    // Launchers push domain events here (through the pipe socket placed in each pod).
    let notify_socket = kvrs_ipc::layout::handler_notify_socket(&flags.kubevirt_share_dir);
    let _ = std::fs::remove_file(&notify_socket);
    let (launcher_events, launcher_events_rx) = tokio::sync::mpsc::unbounded_channel();
    let notifications = Arc::new(Notifications {
        cache: domains.clone(),
        queue: queue.clone(),
        launcher_events,
    });
    let _notify = kvrs_ipc::serve_notify(&notify_socket, notifications, ServeOptions::default())
        .await
        .with_context(|| format!("serving notifications on {}", notify_socket.display()))?;
    info!(socket = %notify_socket.display(), "notify server up");

    // The domains of launchers already running (a restarted handler), before the first sync.
    domains::resync(&flags.pods_dir, &domains, &queue).await;

    let (vmis, vmi_watch) = vmis::start(
        &client,
        &vmis::node_selector(&node),
        queue.clone(),
        domains.clone(),
    );
    let (targets, target_watch) = vmis::start(
        &client,
        &vmis::target_selector(&node),
        queue.clone(),
        domains.clone(),
    );
    vmis.wait_until_ready()
        .await
        .context("waiting for the VMI cache to sync")?;
    targets
        .wait_until_ready()
        .await
        .context("waiting for the migration target VMI cache to sync")?;
    let (proxies, migration_address) = migration_setup(&flags, &client, &node).await?;
    // The KubeVirt CR of the install namespace, applied live; the flags override it. A refused
    // configuration is logged and counted here, its event recorded by virt-controller alone.
    let refused = metrics.clone();
    let (live_config, config_watch) = kvrs_runtime::kube::kubevirt_config::watch(
        &client,
        &flags.namespace,
        overrides,
        config::derive,
        kvrs_runtime::kube::kubevirt_config::Reporting {
            events: None,
            refused: Box::new(move |label| refused.config_refused(label)),
        },
    )
    .await;
    metrics.set_ready(true);
    info!(node, selector = %vmis::node_selector(&node), "VMI cache synced");

    // One client for the sync and the launcher events: clones share the event correlator, so a
    // repeated event is counted on the one stored whichever path records it.
    let api =
        KubeApi::new(client.clone(), "virt-handler").with_event_source("virt-handler", Some(&node));
    let events_task = tokio::spawn(domains::forward_launcher_events(
        launcher_events_rx,
        vmis.clone(),
        api.clone(),
    ));

    // virt-api's way to this node's launchers (pause, guest-agent queries), when asked for.
    let rest = match flags.console_server_port {
        Some(port) => {
            let source = Arc::new(rest::server::NodeVmis {
                store: vmis.clone(),
                node: node.clone(),
                pods_dir: flags.pods_dir.clone(),
            });
            let addr = std::net::SocketAddr::new(flags.rest_ip(), port);
            let server = rest::server::RestServer::bind(addr, source)
                .await
                .with_context(|| format!("binding the REST server on {addr}"))?;
            let ca_fallback = flags.private_dir.join(kubevirt_ca::FALLBACK_FILE);
            let certs = tokio::spawn({
                let (dir, tls) = (flags.server_cert_dir.clone(), server.tls());
                let fallback = ca_fallback.clone();
                async move { rest::server::watch_certs(&dir, Some(&fallback), tls).await }
            });
            // KubeVirt's layout (the operator's Secret has no `ca.crt`): the CA from its
            // ConfigMap, kept in the fallback file.
            tokio::spawn(kubevirt_ca::sync(
                client.clone(),
                kubevirt_ca::own_namespace(),
                flags.ca_configmap_name.clone(),
                flags.server_cert_dir.clone(),
                ca_fallback,
            ));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let serving = tokio::spawn(server.run(async move {
                let _ = stopped.await;
            }));
            Some((stop, serving, certs))
        }
        None => None,
    };

    let handler = Arc::new(Handler {
        node: node.clone(),
        vmis,
        targets,
        proxies: proxies.clone(),
        migration_address,
        domains: domains.clone(),
        launchers: Launchers::new(
            flags.pods_dir.clone(),
            flags.kubevirt_share_dir.clone(),
            node.clone(),
        ),
        queue: queue.clone(),
        api,
        config: live_config,
        private_dir: flags.private_dir.clone(),
        own_writes: Mutex::new(HashMap::new()),
        io_error_retries: Mutex::new(HashMap::new()),
        metrics: metrics.clone(),
        hotplug: hotplug::HotplugNode::new(
            &flags.node_mount_namespace,
            flags.kubelet_pods_dir.as_deref(),
            &flags.pods_dir,
            &flags.private_dir,
        ),
    });

    let workers = kvrs_runtime::spawn_workers("virt-handler", queue.clone(), flags.workers, {
        let handler = handler.clone();
        move |key: String| {
            let handler = handler.clone();
            async move { handler.sync(&key).await }
        }
    });

    let resync = {
        let (pods_dir, domains, queue) = (flags.pods_dir.clone(), domains.clone(), queue.clone());
        let period = Duration::from_secs(flags.resync_period_seconds.max(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                domains::resync(&pods_dir, &domains, &queue).await;
            }
        })
    };
    // The node labeller's labels, read once (from the DaemonSet's init container's files).
    let labeller_labels =
        node_labeller::load_labels(&flags.node_labeller_dir, node_labeller::realtime_capable());
    let heartbeat = tokio::spawn(heartbeat::run(
        client.clone(),
        node.clone(),
        Duration::from_secs(flags.heartbeat_seconds.max(1)),
        labeller_labels,
    ));

    shutdown.await;
    info!("stopping");
    proxies.initiate_graceful_shutdown();
    if let Some((stop, serving, certs)) = rest {
        certs.abort();
        let _ = stop.send(());
        let _ = serving.await;
    }
    heartbeat.abort();
    resync.abort();
    events_task.abort();
    queue.shutdown(ShutdownMode::InFlightOnly);
    let drained =
        tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(workers)).await;
    if drained.is_err() {
        error!("workers did not finish within 10 s");
    }
    // Stopped with the workers, so it does not outlive an API server embedded in the same
    // process (`kvrs run`) and log its disappearance as errors.
    vmi_watch.abort();
    target_watch.abort();
    if let Some(watch) = config_watch {
        watch.abort();
    }
    // A node without a running handler must not receive VMIs.
    if let Err(e) = heartbeat::beat(&client, &node, false, None).await {
        error!(node, "marking the node unschedulable: {e}");
    }
    if let Some(plugins) = device_plugins {
        plugins.stop().await;
    }
    let _ = std::fs::remove_file(&notify_socket);
    Ok(ExitCode::SUCCESS)
}

/// The node's migration proxies (with the certificates of `--migration-cert-dir`, when given,
/// read again at each connection) and its migration address (see
/// [`migration::migration_address`]).
async fn migration_setup(
    flags: &Flags,
    client: &kube::Client,
    node: &str,
) -> anyhow::Result<(migration::Proxies, String)> {
    let tls = match &flags.migration_cert_dir {
        Some(dir) => {
            // Read at each connection (rotation): the Secret may only be written by virt-api
            // after this handler starts, so missing files are no reason to stop here.
            let certs = Arc::new(MigrationCertDir::new(dir));
            if let Err(e) = certs.current() {
                warn!(
                    "migration certificates not usable yet (migrations with TLS wait for them): {e}"
                );
            }
            Some(TlsSource::Dir(certs))
        }
        None => {
            info!(
                "no --migration-cert-dir: only migrations with migrations.disableTLS run on this node"
            );
            None
        }
    };
    // The pod's libvirt and QEMU connect to the source sockets as the QEMU user.
    let proxies = migration::Proxies::new(tls, Some(launchers::QEMU_USER));
    let pod_ip = flags
        .pod_ip_address
        .clone()
        .or_else(|| std::env::var("MY_POD_IP").ok());
    let needs_node = flags.migration_address.is_none()
        && pod_ip.as_deref().is_none_or(str::is_empty)
        && migration::migration_interface_address().is_none();
    let internal_ip = if needs_node {
        node_internal_ip(client, node).await
    } else {
        None
    };
    let address = migration::migration_address(
        flags.migration_address.as_deref(),
        migration::migration_interface_address(),
        pod_ip.as_deref(),
        internal_ip.as_deref(),
    );
    match &address {
        Some(a) => info!(node, address = %a, "migration address"),
        None => error!(
            node,
            "no migration address (no --migration-address, migration0 interface, pod IP or node InternalIP): migrations to this node cannot be reached"
        ),
    }
    Ok((proxies, address.unwrap_or_default()))
}

/// The Node's `InternalIP` address, when it has one.
async fn node_internal_ip(client: &kube::Client, node: &str) -> Option<String> {
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let found = match api.get_opt(node).await {
        Ok(found) => found?,
        Err(e) => {
            error!(node, "reading the Node for its InternalIP: {e}");
            return None;
        }
    };
    found
        .status?
        .addresses?
        .into_iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address)
}
