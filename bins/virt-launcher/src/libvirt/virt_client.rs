//! The launcher's libvirt client over libvirt.so, through the `virt` crate (feature
//! `libvirt-virt`): the measured alternative to the remote-protocol client (see `mod.rs`).
//!
//! Every libvirt call blocks its thread until the daemon answers, so each goes through
//! `tokio::task::spawn_blocking`, not one dedicated thread: libvirt's client is thread-safe and
//! keeps several calls in flight on one connection, and a migration's `virDomainMigrateToURI3`
//! blocks for the whole migration while job stats, abort and state calls must still get through
//! (a single thread would queue them behind it). The launcher's runtime is current-thread, so
//! the blocking pool is also what keeps gRPC serving while libvirt works.
//!
//! Events come from libvirt's default event loop on a thread of its own
//! (`kvrs-libvirt-events`), registered before the connection opens.
//!
//! Calls the `virt` crate 0.5 does not wrap (`virDomainGetGuestInfo`, `virDomainFSFreeze`/`Thaw`,
//! `virDomainGetDiskErrors`, `virDomainAbortJob`, `virDomainMigrateStartPostCopy`, and the
//! QEMU agent pass-through without its `qemu` feature, which links libvirt-qemu.so too) answer
//! [`LibvirtError::Unsupported`]; typed migration parameters would need `MigrateParameters`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use virt::connect::Connect;
use virt::domain::Domain;

use super::{
    DiskError, DomainInfo, DomainRef, Event, JobStats, Libvirt, LibvirtError, LifecycleEvent,
    TypedParam, WireParam,
};

/// `VIR_DOMAIN_XML_MIGRATABLE`.
const XML_MIGRATABLE: u32 = 8;
/// `VIR_DOMAIN_UNDEFINE_NVRAM`.
const UNDEFINE_NVRAM: u32 = 4;

/// A libvirt.so connection; cheap to share behind an `Arc`.
pub struct VirtClient {
    inner: Arc<Inner>,
}

/// What a call on the blocking pool needs.
struct Inner {
    conn: Connect,
    /// The event channel's sender, shared with the event callbacks; `close` takes it so the
    /// launcher's event forwarder sees the channel end (the XDR client's reader ends it when
    /// the daemon closes the socket).
    events: EventSender,
    /// Domain handles by name: the launcher passes `DomainRef`s, libvirt.so wants its own
    /// objects, and looking one up per call would add a round trip to every call.
    domains: Mutex<HashMap<String, Domain>>,
}

impl From<virt::error::Error> for LibvirtError {
    fn from(e: virt::error::Error) -> Self {
        LibvirtError::Remote {
            code: i32::try_from(e.code().to_raw()).unwrap_or(-1),
            message: e.message().to_string(),
        }
    }
}

/// The remote-driver URI for the daemon at `socket`: `qemu:///session` becomes
/// `qemu+unix:///session?socket=PATH`, so libvirt.so neither picks a socket of its own nor
/// starts a daemon.
fn socket_uri(socket: &Path, uri: &str) -> Result<String, LibvirtError> {
    let rest = uri.strip_prefix("qemu://").ok_or_else(|| {
        LibvirtError::Connection(format!(
            "uri {uri:?}: expected qemu:///session or qemu:///system"
        ))
    })?;
    Ok(format!("qemu+unix://{rest}?socket={}", socket.display()))
}

fn domain_ref(d: &Domain) -> Result<DomainRef, LibvirtError> {
    Ok(DomainRef {
        name: d.name()?,
        uuid: *d.uuid()?.as_bytes(),
        // libvirt's -1 for an inactive domain is `None` here.
        id: d.id().and_then(|id| i32::try_from(id).ok()).unwrap_or(-1),
    })
}

impl VirtClient {
    /// Runs `f` on the blocking pool with this connection.
    async fn blocking<T, F>(&self, f: F) -> Result<T, LibvirtError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, LibvirtError> + Send + 'static,
    {
        let me = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|e| LibvirtError::Connection(format!("libvirt call thread: {e}")))?
    }

    /// Runs `f` on the blocking pool with `d`'s handle.
    async fn on_domain<T, F>(&self, d: &DomainRef, f: F) -> Result<T, LibvirtError>
    where
        T: Send + 'static,
        F: FnOnce(&Domain) -> Result<T, virt::error::Error> + Send + 'static,
    {
        let d = d.clone();
        self.blocking(move |c| Ok(f(&c.domain(&d)?)?)).await
    }
}

impl Inner {
    /// The libvirt.so handle of `d`, from the cache or looked up by name.
    fn domain(&self, d: &DomainRef) -> Result<Domain, LibvirtError> {
        if let Some(dom) = self
            .domains
            .lock()
            .ok()
            .and_then(|m| m.get(&d.name).cloned())
        {
            return Ok(dom);
        }
        let dom = self.conn.lookup_domain_by_name(&d.name)?;
        self.remember(&d.name, &dom);
        Ok(dom)
    }

    fn remember(&self, name: &str, dom: &Domain) {
        if let Ok(mut m) = self.domains.lock() {
            m.insert(name.to_string(), dom.clone());
        }
    }
}

type EventSender = Arc<Mutex<Option<mpsc::UnboundedSender<Event>>>>;

fn send(events: &EventSender, e: Event) {
    if let Some(tx) = events.lock().ok().as_ref().and_then(|g| g.as_ref()) {
        let _ = tx.send(e);
    }
}

fn unsupported(call: &str) -> LibvirtError {
    LibvirtError::Unsupported(call.to_string())
}

impl Libvirt for VirtClient {
    async fn open(
        socket: &Path,
        uri: &str,
    ) -> Result<(Arc<VirtClient>, mpsc::UnboundedReceiver<Event>), LibvirtError> {
        kvrs_libvirt_events::start_event_loop().map_err(LibvirtError::Connection)?;
        // libvirt.so prints every error to stderr by default; the launcher logs the ones that
        // matter itself (an expected "domain not found" is not one).
        virt::error::clear_error_callback();
        let uri = socket_uri(socket, uri)?;
        let conn = tokio::task::spawn_blocking(move || Connect::open(Some(&uri)))
            .await
            .map_err(|e| LibvirtError::Connection(e.to_string()))??;
        let (events, rx) = mpsc::unbounded_channel();
        Ok((
            Arc::new(VirtClient {
                inner: Arc::new(Inner {
                    conn,
                    events: Arc::new(Mutex::new(Some(events))),
                    domains: Mutex::default(),
                }),
            }),
            rx,
        ))
    }

    async fn register_lifecycle_events(&self) -> Result<(), LibvirtError> {
        let tx = self.inner.events.clone();
        kvrs_libvirt_events::register_lifecycle(
            &self.inner.conn,
            Box::new(move |e| {
                if let kvrs_libvirt_events::EventKind::Lifecycle { event, detail } = e.kind {
                    send(
                        &tx,
                        Event::Lifecycle(LifecycleEvent {
                            domain: DomainRef {
                                name: e.name,
                                uuid: e.uuid,
                                id: e.id,
                            },
                            event,
                            detail,
                        }),
                    );
                }
            }),
        )?;
        Ok(())
    }

    async fn register_agent_events(&self) -> Result<(), LibvirtError> {
        let tx = self.inner.events.clone();
        kvrs_libvirt_events::register_agent(
            &self.inner.conn,
            Box::new(move |e| {
                if let kvrs_libvirt_events::EventKind::Agent { state } = e.kind {
                    send(
                        &tx,
                        Event::Agent(super::AgentEvent {
                            domain: DomainRef {
                                name: e.name,
                                uuid: e.uuid,
                                id: e.id,
                            },
                            connected: state == 1,
                        }),
                    );
                }
            }),
        )?;
        Ok(())
    }

    async fn guest_info(
        &self,
        _d: &DomainRef,
        _types: u32,
    ) -> Result<Vec<TypedParam>, LibvirtError> {
        Err(unsupported("virDomainGetGuestInfo"))
    }

    async fn agent_command(&self, _d: &DomainRef, _command: &str) -> Result<String, LibvirtError> {
        Err(unsupported("virDomainQemuAgentCommand"))
    }

    async fn hypervisor_version(&self) -> Result<u64, LibvirtError> {
        self.blocking(|c| Ok(u64::from(c.conn.hyp_version()?)))
            .await
    }

    async fn domain_capabilities(&self, arch: &str) -> Result<String, LibvirtError> {
        let arch = arch.to_string();
        self.blocking(move |c| {
            Ok(c.conn
                .domain_capabilities(None, Some(&arch), None, None, 0)?)
        })
        .await
    }

    async fn define_xml(&self, xml: &str) -> Result<DomainRef, LibvirtError> {
        let xml = xml.to_string();
        self.blocking(move |c| {
            let dom = c.conn.define_domain_xml(&xml)?;
            let r = domain_ref(&dom)?;
            c.remember(&r.name, &dom);
            Ok(r)
        })
        .await
    }

    async fn lookup(&self, name: &str) -> Result<DomainRef, LibvirtError> {
        let name = name.to_string();
        self.blocking(move |c| {
            let dom = c.conn.lookup_domain_by_name(&name)?;
            c.remember(&name, &dom);
            domain_ref(&dom)
        })
        .await
    }

    async fn create(&self, d: &DomainRef) -> Result<(), LibvirtError> {
        self.on_domain(d, |d| d.create().map(drop)).await
    }
    async fn destroy(&self, d: &DomainRef) -> Result<(), LibvirtError> {
        self.on_domain(d, Domain::destroy).await
    }
    async fn shutdown(&self, d: &DomainRef) -> Result<(), LibvirtError> {
        self.on_domain(d, Domain::shutdown).await
    }
    async fn suspend(&self, d: &DomainRef) -> Result<(), LibvirtError> {
        self.on_domain(d, Domain::suspend).await
    }
    async fn resume(&self, d: &DomainRef) -> Result<(), LibvirtError> {
        self.on_domain(d, Domain::resume).await
    }
    async fn reboot(&self, d: &DomainRef, flags: u32) -> Result<(), LibvirtError> {
        self.on_domain(d, move |d| d.reboot(flags)).await
    }
    async fn reset(&self, d: &DomainRef) -> Result<(), LibvirtError> {
        self.on_domain(d, Domain::reset).await
    }
    async fn fs_freeze(&self, _d: &DomainRef) -> Result<i32, LibvirtError> {
        Err(unsupported("virDomainFSFreeze"))
    }
    async fn fs_thaw(&self, _d: &DomainRef) -> Result<i32, LibvirtError> {
        Err(unsupported("virDomainFSThaw"))
    }
    async fn undefine(&self, d: &DomainRef) -> Result<(), LibvirtError> {
        let name = d.name.clone();
        let r = self
            .on_domain(d, |d| d.undefine_flags(UNDEFINE_NVRAM))
            .await;
        if let Ok(mut m) = self.inner.domains.lock() {
            m.remove(&name);
        }
        r
    }
    async fn state(&self, d: &DomainRef) -> Result<(i32, i32), LibvirtError> {
        self.on_domain(d, |d| {
            // virt 0.5's `state()` drops virDomainGetState's error (a vanished domain
            // reads as state -1): ask `info()` then, which reports it.
            let (state, reason) = d.state()?;
            let raw = i32::try_from(state.to_raw()).unwrap_or(-1);
            if raw < 0 {
                d.info()?;
            }
            Ok((raw, reason_raw(&reason)))
        })
        .await
    }
    async fn disk_errors(&self, _d: &DomainRef) -> Result<Vec<DiskError>, LibvirtError> {
        Err(unsupported("virDomainGetDiskErrors"))
    }
    async fn xml_desc(&self, d: &DomainRef) -> Result<String, LibvirtError> {
        self.on_domain(d, |d| d.xml_desc(0)).await
    }
    async fn info(&self, d: &DomainRef) -> Result<DomainInfo, LibvirtError> {
        self.on_domain(d, |d| {
            let i = d.info()?;
            Ok(DomainInfo {
                state: i.state.to_raw(),
                max_mem_kib: i.max_mem,
                memory_kib: i.memory,
                vcpus: i.nr_virt_cpu,
                cpu_time_ns: i.cpu_time,
            })
        })
        .await
    }
    async fn migratable_xml(&self, d: &DomainRef) -> Result<String, LibvirtError> {
        self.on_domain(d, |d| d.xml_desc(XML_MIGRATABLE)).await
    }
    async fn migrate_perform3_params(
        &self,
        _d: &DomainRef,
        _dconnuri: &str,
        _params: &[WireParam],
        _flags: u32,
    ) -> Result<(), LibvirtError> {
        Err(unsupported(
            "virDomainMigrateToURI3 with the launcher's typed parameters",
        ))
    }
    async fn job_stats(&self, _d: &DomainRef) -> Result<JobStats, LibvirtError> {
        Err(unsupported("virDomainGetJobStats as typed parameters"))
    }
    async fn job_type(&self, d: &DomainRef) -> Result<i32, LibvirtError> {
        self.on_domain(d, |d| Ok(d.job_info()?.r#type)).await
    }
    async fn abort_job(&self, _d: &DomainRef) -> Result<(), LibvirtError> {
        Err(unsupported("virDomainAbortJob"))
    }
    async fn migrate_set_max_downtime(&self, d: &DomainRef, ms: u64) -> Result<(), LibvirtError> {
        self.on_domain(d, move |d| d.migrate_set_max_downtime(ms, 0))
            .await
    }
    async fn migrate_start_post_copy(&self, _d: &DomainRef) -> Result<(), LibvirtError> {
        Err(unsupported("virDomainMigrateStartPostCopy"))
    }
    async fn close(&self) {
        // Ends the event channel; libvirt.so closes the connection when the last `Connect`
        // drops.
        if let Ok(mut tx) = self.inner.events.lock() {
            tx.take();
        }
    }
}

/// The raw `virDomain*Reason` of a state reason.
fn reason_raw(r: &virt::domain::DomainStateReasonEnum) -> i32 {
    use virt::domain::DomainStateReason as R;
    use virt::enumutil::Enum;
    let raw = match r {
        Enum::Unknown(v) => return *v,
        Enum::Known(k) => match k {
            R::NoState(e) => e.to_raw(),
            R::Running(e) => e.to_raw(),
            R::Blocked(e) => e.to_raw(),
            R::Paused(e) => e.to_raw(),
            R::Shutdown(e) => e.to_raw(),
            R::Shutoff(e) => e.to_raw(),
            R::Crashed(e) => e.to_raw(),
            R::PMSuspended(e) => e.to_raw(),
        },
    };
    i32::try_from(raw).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_uri_names_the_pod_socket() {
        assert_eq!(
            socket_uri(
                Path::new("/var/run/libvirt/virtqemud-sock"),
                "qemu:///session"
            )
            .unwrap(),
            "qemu+unix:///session?socket=/var/run/libvirt/virtqemud-sock"
        );
        let err = socket_uri(Path::new("/s"), "xen:///").unwrap_err();
        assert!(err.to_string().contains("xen:///"), "{err}");
    }
}
