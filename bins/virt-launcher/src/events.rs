//! libvirt lifecycle events -> the handler's notify socket (`HandleDomainEvent` with the domain
//! JSON and the watch event type), and a coarse copy to the launcher's supervisor.
//!
//! The guest agent's connect/disconnect events start and stop the agent poller (as does
//! suspend/resume) and are notified as the domain MODIFIED (its channel state changed); so is
//! every change the poller finds in the guest's OS, interfaces or freeze state.
//!
//! Notifications are sent one at a time, in order. While the notify socket is absent (the handler has
//! not placed it yet, or is restarting) each event is retried for a while, as KubeVirt does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvrs_ipc::notify::event_type;
use kvrs_ipc::{DomainEvent, NotifyClient};
use tokio::sync::mpsc;

use crate::agent::Poller;
use crate::libvirt::{Connection, Event, Libvirt, LifecycleEvent};
use crate::log;
use crate::service::Launcher;
use crate::state::{deleted_domain_json, domain_json, rfc3339_now};

/// `VIR_DOMAIN_EVENT_SUSPENDED` / `RESUMED`.
const EVENT_SUSPENDED: i32 = 3;
const EVENT_RESUMED: i32 = 4;
/// `VIR_DOMAIN_EVENT_SUSPENDED_IOERROR`: paused by the disk error policy (`stop`).
const SUSPENDED_IOERROR: i32 = 2;

/// The warning KubeVirt's launcher records on the VMI for one disk error (reason `IOerror`),
/// naming the volume behind the disk; `None` for a disk without an error.
pub fn io_error_message(error: i32, volume: &str) -> Option<String> {
    match error {
        crate::libvirt::DISK_ERROR_NO_SPACE => Some(format!(
            "VM Paused due to not enough space on volume: {volume}"
        )),
        crate::libvirt::DISK_ERROR_UNSPEC => {
            Some(format!("VM Paused due to IO error at the volume: {volume}"))
        }
        _ => None,
    }
}

/// The volume of the disk libvirt names by target (`vda`): KubeVirt's user alias `ua-<volume>`.
pub fn volume_of_target(domain: &kvrs_converter::Domain, target: &str) -> String {
    domain
        .devices
        .disks
        .iter()
        .find(|d| d.target.dev.as_deref() == Some(target))
        .and_then(|d| d.alias.as_ref())
        .map(|a| a.name.strip_prefix("ua-").unwrap_or(&a.name).to_string())
        .unwrap_or_default()
}

/// `core/v1.Event` JSON on the VMI, as KubeVirt's notify client sends it.
pub fn k8s_event_json(
    owner: &crate::state::Owner,
    warning: bool,
    reason: &str,
    message: &str,
) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "metadata": {"creationTimestamp": null},
        "involvedObject": {
            "kind": "VirtualMachineInstance",
            "namespace": owner.namespace,
            "name": owner.name,
            "uid": owner.uid,
            "apiVersion": "kubevirt.io/v1"
        },
        "reason": reason,
        "message": message,
        "source": {},
        "firstTimestamp": null,
        "lastTimestamp": null,
        "eventTime": null,
        "reportingComponent": "",
        "reportingInstance": "",
        "type": if warning { "Warning" } else { "Normal" }
    }))
    .unwrap_or_default()
}

/// What the notifier sends next.
#[derive(Debug)]
pub(crate) enum Notice {
    /// A lifecycle event: ADDED for a new definition, MODIFIED otherwise.
    Lifecycle(LifecycleEvent),
    /// The domain as it is now, MODIFIED (agent connected/disconnected, agent data changed, a
    /// sync started it); the sender, if any, hears when it has been sent (or given up).
    Refresh(Option<tokio::sync::oneshot::Sender<()>>),
}

/// How long one event is retried while the notify socket is missing or refusing.
const NOTIFY_RETRY_FOR: Duration = Duration::from_secs(30);
const NOTIFY_RETRY_EVERY: Duration = Duration::from_millis(100);

/// What the supervisor needs to know about our domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Defined (new or updated).
    Defined,
    /// Undefined.
    Undefined,
    /// Started or resumed.
    Running,
    /// Stopped, shut off or crashed.
    Stopped,
    /// Anything else (suspended, shutdown requested, ...).
    Other,
}

impl Lifecycle {
    fn of(event: i32) -> Lifecycle {
        match event {
            0 => Lifecycle::Defined,
            1 => Lifecycle::Undefined,
            2 | 4 => Lifecycle::Running,
            5 | 8 => Lifecycle::Stopped,
            _ => Lifecycle::Other,
        }
    }
}

/// Forwards events until libvirt's connection closes (the supervisor sees its channel close).
///
/// The supervisor hears of every event at once; the notifications go through a second, ordered
/// queue, so a handler that is not listening delays neither the supervisor nor later events'
/// arrival. Each notification reads the domain's state right before it is sent (once connected):
/// a state read at event time and sent late would tell the handler a domain that has started
/// meanwhile is still shut off — and the handler deletes an inactive domain of a VMI that is
/// not final.
pub async fn forward(
    mut events: mpsc::UnboundedReceiver<Event>,
    mut agent_changed: mpsc::UnboundedReceiver<()>,
    launcher: Arc<Launcher>,
    conn: Arc<Connection>,
    notify_socket: PathBuf,
    supervisor: mpsc::UnboundedSender<Lifecycle>,
) {
    let (queue, pending) = mpsc::unbounded_channel::<Notice>();
    launcher.attach_notices(&queue);
    let notifier = tokio::spawn(notify_in_order(
        pending,
        launcher.clone(),
        conn.clone(),
        notify_socket,
    ));
    let mut poller = Poller::default();
    let mut agent_connected = false;
    loop {
        let ev = tokio::select! {
            ev = events.recv() => match ev {
                Some(ev) => ev,
                None => break,
            },
            Some(()) = agent_changed.recv() => {
                let _ = queue.send(Notice::Refresh(None));
                continue;
            }
        };
        match ev {
            Event::Lifecycle(ev) => {
                if ev.domain.name != launcher.domain_name() {
                    continue;
                }
                let kind = Lifecycle::of(ev.event);
                log::info(format_args!(
                    "domain event {kind:?} (libvirt event {} detail {}) for {}",
                    ev.event, ev.detail, ev.domain.name
                ));
                // A paused guest cannot answer its agent: KubeVirt stops polling meanwhile.
                match ev.event {
                    EVENT_SUSPENDED => poller.stop(),
                    EVENT_RESUMED if agent_connected => poller.start(
                        &conn,
                        &ev.domain,
                        launcher.agent(),
                        launcher.agent_intervals(),
                    ),
                    _ => {}
                }
                if kind == Lifecycle::Stopped || kind == Lifecycle::Undefined {
                    agent_connected = false;
                    poller.stop();
                }
                let _ = supervisor.send(kind);
                let _ = queue.send(Notice::Lifecycle(ev));
            }
            Event::Agent(ev) => {
                if ev.domain.name != launcher.domain_name() {
                    continue;
                }
                log::info(format_args!(
                    "guest agent {} in {}",
                    if ev.connected {
                        "connected"
                    } else {
                        "disconnected"
                    },
                    ev.domain.name
                ));
                agent_connected = ev.connected;
                if ev.connected {
                    poller.start(
                        &conn,
                        &ev.domain,
                        launcher.agent(),
                        launcher.agent_intervals(),
                    );
                } else {
                    poller.stop();
                }
                let _ = queue.send(Notice::Refresh(None));
            }
        }
    }
    poller.stop();
    drop(queue);
    let _ = notifier.await;
}

/// Sends the notification of each event, in order.
async fn notify_in_order(
    mut pending: mpsc::UnboundedReceiver<Notice>,
    launcher: Arc<Launcher>,
    conn: Arc<Connection>,
    notify_socket: PathBuf,
) {
    let mut client: Option<NotifyClient> = None;
    while let Some(notice) = pending.recv().await {
        if client.is_none() && notify_socket.exists() {
            match NotifyClient::connect(&notify_socket).await {
                Ok(c) => client = Some(c),
                Err(e) => log::warn(format_args!(
                    "notify socket {}: {e}",
                    notify_socket.display()
                )),
            }
        }
        let owner = launcher.owner();
        let ev = match notice {
            Notice::Lifecycle(ev) => ev,
            Notice::Refresh(done) => {
                // `done` (dropped on every path) tells a waiting sync this notice is through.
                let _done = done;
                // No domain (yet, or any more): its lifecycle events tell the handler.
                let Ok(domain) = conn.lookup(&launcher.domain_name()).await else {
                    continue;
                };
                match domain_json(&conn, &domain, &owner, launcher.agent_status()).await {
                    Ok(json) => {
                        let event = DomainEvent {
                            event_type: event_type::MODIFIED.to_string(),
                            domain_json: json,
                            status_json: Vec::new(),
                        };
                        send(&mut client, &notify_socket, event).await;
                    }
                    Err(e) => log::warn(format_args!("could not read domain for event: {e}")),
                }
                continue;
            }
        };
        if ev.event == EVENT_SUSPENDED && ev.detail == SUSPENDED_IOERROR {
            report_disk_errors(
                &conn,
                &launcher,
                &ev.domain,
                &owner,
                &mut client,
                &notify_socket,
            )
            .await;
        }
        let kind = Lifecycle::of(ev.event);
        let json = if kind == Lifecycle::Undefined {
            match conn.lookup(&ev.domain.name).await {
                // still running as a transient domain
                Ok(d) => domain_json(&conn, &d, &owner, launcher.agent_status())
                    .await
                    .unwrap_or_else(|_| deleted_domain_json(&owner, rfc3339_now())),
                Err(_) => deleted_domain_json(&owner, rfc3339_now()),
            }
        } else {
            match domain_json(&conn, &ev.domain, &owner, launcher.agent_status()).await {
                Ok(j) => j,
                Err(e) if e.is_not_found() => deleted_domain_json(&owner, rfc3339_now()),
                Err(e) => {
                    log::warn(format_args!("could not read domain for event: {e}"));
                    continue;
                }
            }
        };
        // KubeVirt: a newly defined domain is ADDED, everything else MODIFIED (a deleted domain
        // is MODIFIED with a deletion timestamp).
        let event_type = if ev.event == 0 && ev.detail == 0 {
            event_type::ADDED
        } else {
            event_type::MODIFIED
        };
        let event = DomainEvent {
            event_type: event_type.to_string(),
            domain_json: json,
            status_json: Vec::new(),
        };
        send(&mut client, &notify_socket, event).await;
    }
}

/// A domain paused on an IO error: one `IOerror` warning per failing disk, before the domain
/// event, so the VMI says which volume is full.
async fn report_disk_errors(
    conn: &Connection,
    launcher: &Launcher,
    dom: &crate::libvirt::DomainRef,
    owner: &crate::state::Owner,
    client: &mut Option<NotifyClient>,
    socket: &PathBuf,
) {
    let mut errors = match conn.disk_errors(dom).await {
        Ok(e) => e,
        Err(e) => {
            log::warn(format_args!("could not get the disks with errors: {e}"));
            Vec::new()
        }
    };
    // A sync may have resumed the domain (clearing libvirt's record) before this event was
    // handled: it kept the errors it saw.
    let kept = launcher.take_disk_errors();
    if errors.is_empty() {
        errors = kept;
    }
    if errors.is_empty() {
        log::warn(format_args!(
            "domain paused on an IO error, but libvirt names no failing disk"
        ));
    }
    let spec = match conn.xml_desc(dom).await {
        Ok(xml) => kvrs_converter::Domain::from_xml(&xml).unwrap_or_default(),
        Err(_) => kvrs_converter::Domain::default(),
    };
    for e in errors {
        let volume = volume_of_target(&spec, &e.disk);
        let Some(message) = io_error_message(e.error, &volume) else {
            continue;
        };
        log::warn(format_args!("{message} (disk {})", e.disk));
        let json = k8s_event_json(owner, true, "IOerror", &message);
        if let Some(c) = client.as_ref() {
            if let Err(err) = c.send_k8s_event(json).await {
                log::warn(format_args!("failed to send the IOerror event: {err}"));
                *client = None;
            }
        } else if socket.exists() {
            match NotifyClient::connect(socket).await {
                Ok(c) => {
                    if let Err(err) = c.send_k8s_event(json).await {
                        log::warn(format_args!("failed to send the IOerror event: {err}"));
                    } else {
                        *client = Some(c);
                    }
                }
                Err(err) => log::warn(format_args!("notify socket {}: {err}", socket.display())),
            }
        }
    }
}

async fn send(client: &mut Option<NotifyClient>, socket: &PathBuf, event: DomainEvent) {
    let give_up = Instant::now() + NOTIFY_RETRY_FOR;
    loop {
        if client.is_none() && socket.exists() {
            match NotifyClient::connect(socket).await {
                Ok(c) => *client = Some(c),
                Err(e) => log::warn(format_args!("notify socket {}: {e}", socket.display())),
            }
        }
        if let Some(c) = client.as_ref() {
            match c.send_domain_event(event.clone()).await {
                Ok(()) => return,
                Err(e) => {
                    log::warn(format_args!("failed to notify domain event: {e}"));
                    *client = None;
                }
            }
        }
        if Instant::now() >= give_up {
            log::error(format_args!(
                "dropping domain event {}: notify socket {} unavailable",
                event.event_type,
                socket.display()
            ));
            return;
        }
        tokio::time::sleep(NOTIFY_RETRY_EVERY).await;
    }
}
