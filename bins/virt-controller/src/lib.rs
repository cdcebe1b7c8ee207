//! kvrs virt-controller: KubeVirt v1.9.0's VM, VMI and migration controllers on kube-rs,
//! leader-elected.
//!
//! Thin wiring: flags, a client, the leader election, the caches, the workers, the metrics and
//! health endpoints. What each sync does is decided by `kvrs-decide`, from a world built by
//! `kvrs_runtime::world` (the simulator's too) and executed by `kvrs-runtime`; nothing here knows
//! KubeVirt's rules.
//!
//! A standby replica runs nothing but the election (and its health endpoints). A leader that
//! loses its lease exits at once, so two replicas never write at the same time for longer than
//! one in-flight request.

mod caches;
mod config;
mod evacuation;
mod events;
pub mod flags;
mod metrics;
mod migration_cache;
mod policy_cache;
mod random;
mod storage_cache;
mod workers;

pub use crate::flags::Flags;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kvrs_pod::PodInputs;
use kvrs_queue::ShutdownMode;
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::daemon::DaemonMetrics;
use kvrs_runtime::kube::kubevirt_config::{self, Reporting};
use kvrs_runtime::kube::lease::{LeaderElector, LeaseConfig};
use tracing::{error, info};

use crate::caches::Shared;
use crate::metrics::ControllerMetrics;
use crate::workers::Controllers;
use kvrs_runtime::spawn_workers;

/// The `source.component` of the controller's events: KubeVirt's VM, VMI and migration
/// controllers all record as `virtualmachine-controller`.
pub const EVENT_SOURCE: &str = "virtualmachine-controller";

/// Serves `/metrics`, `/healthz`, `/readyz` and `/leader`: over HTTPS with KubeVirt's
/// certificate under KubeVirt's command line ([`Flags::health_tls`]), where `/leader` also
/// answers as KubeVirt's does (200 on a standby: its Deployment's readiness probe), else over
/// plain HTTP. Returns the address bound and whether it is HTTPS.
pub async fn serve_health(
    flags: &Flags,
    metrics: &DaemonMetrics,
) -> anyhow::Result<(std::net::SocketAddr, bool)> {
    let addr = flags.health_addr();
    match flags.health_tls() {
        Some(pair) => {
            let tls = kvrs_runtime::kube::https::server_config(&pair)
                .context("the health endpoints' certificate")?;
            metrics.set_kubevirt_leader_probe(true);
            let bound = metrics.serve_https(addr, tls).await?;
            info!(%bound, cert = %pair.cert.display(), "health endpoints over HTTPS");
            Ok((bound, true))
        }
        None => Ok((metrics.serve(addr).await?, false)),
    }
}

/// Runs the controllers with `client` until `shutdown` resolves (the binary passes SIGTERM or
/// Ctrl-C; `kvrs run` its own stop), then drains the in-flight syncs and releases the lease.
///
/// A leader that loses its lease exits the process: nothing else is safe.
pub async fn run(
    flags: Flags,
    client: kube::Client,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    let mut shutdown = std::pin::pin!(shutdown);
    let identity = flags.identity();
    let unused = flags.kubevirt_only.given();
    if !unused.is_empty() {
        info!(
            flags = %unused.join(" "),
            "KubeVirt's flags accepted without effect in kvrs"
        );
    }
    if flags.webhooks_in_front() && !flags.virt_api_webhooks {
        info!(
            "KubeVirt's operator's command line: its virt-api's webhooks admit the VMIs created here (as with --virt-api-webhooks)"
        );
    }
    let metrics = Arc::new(ControllerMetrics::new());
    serve_health(&flags, &metrics).await?;

    let mut elector = flags.leader_elect.then(|| {
        let mut config = LeaseConfig::kubevirt(&flags.namespace, &flags.lease_name, &identity);
        (
            config.lease_duration,
            config.renew_deadline,
            config.retry_period,
        ) = flags.lease_timings();
        LeaderElector::new(client.clone(), config)
    });
    if let Some(el) = elector.as_mut() {
        metrics.watch_leading(el.leading());
        metrics.set_ready(true);
        info!(identity, lease = %format!("{}/{}", flags.namespace, flags.lease_name), "standby: waiting for the lease");
        tokio::select! {
            acquired = el.acquire() => acquired.context("leader election")?,
            _ = &mut shutdown => return Ok(ExitCode::SUCCESS),
        }
    } else {
        metrics.set_leading(true);
    }
    info!(
        identity,
        "leading: starting the VM, VMI, migration and evacuation controllers"
    );
    metrics.set_ready(false);

    let shared = Arc::new(Shared::new(&metrics));
    let (caches, watches) = caches::start(&client, shared.clone()).await;
    caches
        .wait_until_ready()
        .await
        .context("waiting for the caches to sync")?;
    metrics.set_ready(true);
    info!("caches synced");

    let pod_inputs = PodInputs {
        qemu_timeout_seconds: flags.qemu_timeout_seconds,
        ..PodInputs::default()
    };
    let api = Arc::new(
        KubeApi::new(client.clone(), "virt-controller").with_event_source(EVENT_SOURCE, None),
    );
    // The KubeVirt CR of the install namespace, applied live; the flags override it.
    let refused = metrics.clone();
    let (config, config_watch) = kubevirt_config::watch(
        &client,
        &flags.namespace,
        config::overrides(&flags)?,
        move |cr| config::derive(cr, &pod_inputs),
        Reporting {
            events: Some(api.clone()),
            refused: Box::new(move |label| refused.config_refused(label)),
        },
    )
    .await;
    let controllers = Arc::new(Controllers {
        caches,
        shared: shared.clone(),
        events: events::BackgroundEvents::new(api.clone()),
        api,
        config,
        metrics: metrics.clone(),
    });
    let vm = controllers.clone();
    let mut workers = spawn_workers(
        "vm",
        shared.vm_queue.clone(),
        flags.vm_workers,
        move |key| {
            let c = vm.clone();
            async move { c.sync_vm(&key).await }
        },
    );
    let vmi = controllers.clone();
    workers.extend(spawn_workers(
        "vmi",
        shared.vmi_queue.clone(),
        flags.vmi_workers,
        move |key| {
            let c = vmi.clone();
            async move { c.sync_vmi(&key).await }
        },
    ));
    let migration = controllers.clone();
    workers.extend(spawn_workers(
        "migration",
        shared.migration_queue.clone(),
        flags.migration_workers,
        move |key| {
            let c = migration.clone();
            async move { c.sync_migration(&key).await }
        },
    ));

    // The evacuation controller (KubeVirt's, beside the migration controller): its own caches.
    let (evacuation, evacuation_watches) = evacuation::start(&client, controllers.clone());
    evacuation
        .wait_until_ready()
        .await
        .context("waiting for the evacuation caches to sync")?;
    let evac = evacuation.clone();
    workers.extend(spawn_workers(
        "evacuation",
        evacuation.queue.clone(),
        evacuation::WORKERS,
        move |key| {
            let e = evac.clone();
            async move { e.sync_node(&key).await }
        },
    ));

    let lost = async {
        match elector.as_mut() {
            Some(el) => el.hold().await,
            None => std::future::pending().await,
        }
    };
    let had_cdi = controllers.caches.data_volumes.is_some();
    tokio::select! {
        why = lost => {
            // Fencing: another replica may already be writing. Stop at once, write nothing more.
            error!(?why, "lost the lease: exiting without another write");
            std::process::exit(1);
        }
        _ = &mut shutdown => info!("stopping"),
        has = caches::data_volume_api_changed(&client, had_cdi) => {
            // KubeVirt's words: its controller re-initialises on the same change.
            if has {
                info!("Reinitialize virt-controller, cdi api has been introduced: restarting");
            } else {
                info!("Reinitialize virt-controller, cdi api has been removed: restarting");
            }
        }
    }
    shared.vm_queue.shutdown(ShutdownMode::InFlightOnly);
    shared.vmi_queue.shutdown(ShutdownMode::InFlightOnly);
    shared.migration_queue.shutdown(ShutdownMode::InFlightOnly);
    evacuation.queue.shutdown(ShutdownMode::InFlightOnly);
    let drained =
        tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(workers)).await;
    if drained.is_err() {
        error!("workers did not finish within 10 s");
    }
    // The watches stop with the workers: embedded in one process with its API server (`kvrs
    // run`), they would otherwise outlive the server and log its disappearance as errors.
    for watch in watches
        .iter()
        .chain(&config_watch)
        .chain(&evacuation_watches)
    {
        watch.abort();
    }
    if let Some(el) = elector.as_mut() {
        // Hand the lease over now rather than after it expires.
        if let Err(e) = el.release().await {
            error!("releasing the lease: {e}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
