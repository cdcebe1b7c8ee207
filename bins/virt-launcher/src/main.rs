//! virt-launcher: runs libvirt and QEMU for one VMI inside its pod and serves KubeVirt's `Cmd`
//! gRPC on `<share dir>/sockets/launcher-sock`.
//!
//! In order: create the pod's directories, start virtlogd and the libvirt daemon, connect to it,
//! subscribe to domain events, serve the cmd socket (bound as `launcher-init-sock`, renamed to
//! `launcher-sock` once it answers), then supervise: exit with an error when no domain is defined
//! within `--qemu-timeout`; exit 0 once the domain is deleted (or stayed stopped for a while);
//! on SIGTERM shut the guest down within the grace period, then destroy it.
//!
//! One thread (tokio's current-thread runtime): the launcher waits on libvirt and sockets, it
//! never computes much, and every thread costs memory in every VM's pod.

mod agent;
mod daemons;
mod efi;
mod events;
mod flags;
mod fs_freeze;
mod hooks;
mod host;
mod host_disk;
mod hotplug;
mod image_volume;
mod libvirt;
#[cfg(test)]
#[path = "libvirt/tests_live.rs"]
mod libvirt_tests_live;
mod log;
mod migration;
mod network;
mod paths;
mod prestart;
mod reboot;
mod service;
mod state;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use kvrs_ipc::{LauncherService, ServeOptions, VmiCommand, layout, serve_launcher};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::daemons::{Daemons, LibvirtLayout};
use crate::events::Lifecycle;
use crate::flags::Flags;
use crate::libvirt::Libvirt;
use crate::service::Launcher;

/// After the domain stopped without being deleted, how long to wait for the delete.
const FINAL_DELETE_WAIT: Duration = Duration::from_secs(30);

/// Shuts the guest down (ACPI), waits up to the grace period for it to stop, then destroys it.
async fn graceful_stop(
    launcher: &Launcher,
    lifecycle: &mut mpsc::UnboundedReceiver<Lifecycle>,
    grace: Duration,
) {
    if launcher.get_domain().await.ok().flatten().is_none() {
        return;
    }
    log::info(format_args!(
        "shutting the domain down (grace period {}s)",
        grace.as_secs()
    ));
    if launcher.shutdown(VmiCommand::default()).await.is_ok() {
        let deadline = tokio::time::sleep(grace);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                ev = lifecycle.recv() => match ev {
                    Some(Lifecycle::Stopped | Lifecycle::Undefined) | None => return,
                    Some(_) => {}
                },
            }
        }
    }
    log::info(format_args!("grace period over, destroying the domain"));
    let _ = launcher.kill(VmiCommand::default()).await;
}

/// Waits for the end of the launcher's job; `Err` is an abnormal end.
async fn supervise(
    launcher: &Launcher,
    daemons: &mut Daemons,
    lifecycle: &mut mpsc::UnboundedReceiver<Lifecycle>,
    flags: &Flags,
    started: Instant,
) -> Result<(), String> {
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT handler: {e}"))?;
    let mut defined = false;
    let mut stopped_at: Option<Instant> = None;
    let mut health = tokio::time::interval(Duration::from_secs(1));
    loop {
        let wake = if !defined {
            // Bounded by the flag parser (Go's duration range): no overflow.
            started.checked_add(flags.qemu_timeout)
        } else {
            stopped_at.map(|t| t + FINAL_DELETE_WAIT)
        };
        let timer = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sigterm.recv() => {
                log::info(format_args!("received SIGTERM"));
                graceful_stop(launcher, lifecycle, launcher.guest_grace()).await;
                return Ok(());
            }
            _ = sigint.recv() => {
                log::info(format_args!("received SIGINT"));
                graceful_stop(launcher, lifecycle, launcher.guest_grace()).await;
                return Ok(());
            }
            ev = lifecycle.recv() => match ev {
                None => return Err("lost the connection to libvirt".into()),
                Some(Lifecycle::Defined) => defined = true,
                Some(Lifecycle::Running) => { defined = true; stopped_at = None; }
                Some(Lifecycle::Stopped) => stopped_at = Some(Instant::now()),
                Some(Lifecycle::Undefined) => {
                    if launcher.get_domain().await.ok().flatten().is_none() {
                        log::info(format_args!("domain deleted, exiting"));
                        return Ok(());
                    }
                }
                Some(Lifecycle::Other) => {}
            },
            _ = timer => {
                if !defined {
                    return Err(format!(
                        "timed out after {:?} (--qemu-timeout) waiting for a domain to be defined: no SyncVirtualMachine arrived",
                        flags.qemu_timeout
                    ));
                }
                log::info(format_args!("domain stayed stopped for {FINAL_DELETE_WAIT:?} without a delete, exiting"));
                return Ok(());
            }
            _ = health.tick() => {
                if let Some(name) = daemons.exited() {
                    return Err(format!("{name} exited unexpectedly"));
                }
            }
        }
    }
}

async fn run(flags: Flags) -> Result<(), String> {
    let started = Instant::now();
    if flags.simulate_crash {
        return Err("--simulate-crash: crashing on purpose".into());
    }
    prestart::create_directories(&flags)?;
    // As KubeVirt's launcher: every requested hook sidecar answers before libvirt starts.
    let owner = format!("{}/{}", flags.namespace, flags.name);
    let hooks = Arc::new(
        hooks::collect(
            &hooks::hooks_dir(),
            flags.hook_sidecars,
            flags.qemu_timeout,
            hooks::Timeouts::default(),
            &owner,
        )
        .await
        .map_err(|e| format!("hook sidecars ({}): {e}", e.label()))?,
    );
    // KubeVirt's wait for the domain (--qemu-timeout) starts once the sidecars answered.
    let collected = Instant::now();
    let libvirt_layout = LibvirtLayout::from_env();
    let mut daemons = Daemons::start(&libvirt_layout, &flags.libvirt_log_filters)
        .map_err(|e| format!("start libvirt: {e}"))?;
    let result = async {
        let (conn, events) = daemons.connect(libvirt_layout.uri()).await?;
        // Have libvirt probe QEMU (about a second) from the first moment, rather than inside
        // the first SyncVirtualMachine: the define waits for it in libvirt either way. The calls
        // below go to libvirt meanwhile; it serves a client's calls concurrently.
        let probe = conn.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            match probe.domain_capabilities(std::env::consts::ARCH).await {
                Ok(_) => log::info(format_args!(
                    "libvirt probed QEMU in {:?} (from {:?} after the launcher's start)",
                    t.elapsed(),
                    t.duration_since(started)
                )),
                Err(e) => log::warn(format_args!("capabilities probe: {e}")),
            }
        });
        daemons.link_kubevirt_socket_name();
        conn.register_lifecycle_events()
            .await
            .map_err(|e| format!("subscribe to domain events: {e}"))?;
        conn.register_agent_events()
            .await
            .map_err(|e| format!("subscribe to guest agent events: {e}"))?;
        log::info(format_args!(
            "connected to libvirt after {:?}",
            started.elapsed()
        ));

        let (agent_changed_tx, agent_changed) = mpsc::unbounded_channel();
        let agent = Arc::new(agent::AgentStore::new(agent_changed_tx));
        let launcher = Arc::new(Launcher::new(
            conn.clone(),
            flags.clone(),
            agent,
            hooks.clone(),
        ));
        let socket = layout::launcher_socket(&flags.kubevirt_share_dir);
        let server = serve_launcher(&socket, launcher.clone(), ServeOptions::default())
            .await
            .map_err(|e| format!("serve {}: {e}", socket.display()))?;
        log::info(format_args!(
            "Marked as ready: {} after {:?}",
            socket.display(),
            started.elapsed()
        ));

        let (tx, mut lifecycle) = mpsc::unbounded_channel();
        let notify = layout::notify_pipe_socket(&flags.kubevirt_share_dir);
        let forwarder = tokio::spawn(events::forward(
            events,
            agent_changed,
            launcher.clone(),
            conn.clone(),
            notify,
            tx,
        ));
        let result = supervise(&launcher, &mut daemons, &mut lifecycle, &flags, collected).await;
        let _ = server.shutdown().await;
        // let the last events reach the handler
        drop(lifecycle);
        conn.close().await;
        let _ = tokio::time::timeout(Duration::from_secs(2), forwarder).await;
        result
    }
    .await;
    daemons.stop().await;
    // Let the sidecars end with the launcher (KubeVirt's Shutdown hook point).
    hooks.shutdown().await;
    result
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log::error(format_args!("tokio runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(flags)) {
        Ok(()) => {
            log::info(format_args!("exiting"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            log::error(format_args!("{e}"));
            ExitCode::from(1)
        }
    }
}
