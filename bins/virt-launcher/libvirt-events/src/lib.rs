//! Domain lifecycle and guest-agent lifecycle events from libvirt.so.
//!
//! Why this crate: the `virt` crate 0.5 wraps libvirt's event loop (`virEventRegisterDefaultImpl`,
//! `virEventRunDefaultImpl`) but not `virConnectDomainEventRegisterAny`, and the kvrs workspace
//! forbids `unsafe`. The two registrations the launcher needs are here, each `unsafe` block
//! with the reason it is sound, so the launcher's `virt` client stays safe code.
//!
//! libvirt calls the callbacks on the thread running its event loop ([`start_event_loop`]);
//! they copy the domain's name, UUID and id out and hand a [`DomainEvent`] to the sink.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

use virt::connect::Connect;
use virt::error::Error;

/// A domain event, with the domain as libvirt names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainEvent {
    /// The domain's name.
    pub name: String,
    /// Raw UUID.
    pub uuid: [u8; 16],
    /// Runtime id (-1 when inactive).
    pub id: i32,
    /// What happened.
    pub kind: EventKind,
}

/// The two event kinds the launcher forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// `VIR_DOMAIN_EVENT_ID_LIFECYCLE`: `virDomainEventType` and its detail.
    Lifecycle {
        /// `VIR_DOMAIN_EVENT_*`.
        event: i32,
        /// Event-specific detail.
        detail: i32,
    },
    /// `VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE`: the guest agent connected (1) or not (2).
    Agent {
        /// `virConnectDomainEventAgentLifecycleState`.
        state: i32,
    },
}

/// Where events go; called on libvirt's event-loop thread, so it must not block.
pub type Sink = Box<dyn Fn(DomainEvent) + Send + Sync>;

static EVENT_LOOP: OnceLock<Result<(), String>> = OnceLock::new();

/// Registers libvirt's default event loop and runs it on a thread of its own, once per
/// process. Must run before the connection opens: libvirt's remote driver only watches its
/// socket for events when an event implementation is registered at open time.
pub fn start_event_loop() -> Result<(), String> {
    EVENT_LOOP
        .get_or_init(|| {
            virt::event::event_register_default_impl().map_err(|e| e.to_string())?;
            std::thread::Builder::new()
                .name("libvirt-events".into())
                .spawn(|| {
                    // Each call waits for and dispatches one round of fd and timer events.
                    while virt::event::event_run_default_impl().is_ok() {}
                })
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .clone()
}

/// Subscribes `sink` to lifecycle events of every domain on `conn`; the callback id.
pub fn register_lifecycle(conn: &Connect, sink: Sink) -> Result<i32, Error> {
    register(
        conn,
        virt_sys::VIR_DOMAIN_EVENT_ID_LIFECYCLE,
        Kind::Lifecycle,
        sink,
    )
}

/// Subscribes `sink` to guest-agent connect/disconnect events of every domain on `conn`.
pub fn register_agent(conn: &Connect, sink: Sink) -> Result<i32, Error> {
    register(
        conn,
        virt_sys::VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE,
        Kind::Agent,
        sink,
    )
}

#[derive(Clone, Copy)]
enum Kind {
    Lifecycle,
    Agent,
}

struct Registration {
    kind: Kind,
    sink: Sink,
}

/// The shape of both callbacks: `virConnectDomainEventCallback` (lifecycle: event, detail) and
/// `virConnectDomainEventAgentLifecycleCallback` (state, reason) take the same arguments.
type TwoIntCallback = unsafe extern "C" fn(
    virt_sys::virConnectPtr,
    virt_sys::virDomainPtr,
    c_int,
    c_int,
    *mut c_void,
);

fn register(
    conn: &Connect,
    event_id: virt_sys::virDomainEventID,
    kind: Kind,
    sink: Sink,
) -> Result<i32, Error> {
    let opaque = Box::into_raw(Box::new(Registration { kind, sink })).cast::<c_void>();
    let cb: TwoIntCallback = on_event;
    // SAFETY: libvirt calls the generic callback with the arguments of the event id's own
    // callback type; for LIFECYCLE and AGENT_LIFECYCLE that is `TwoIntCallback`, so the
    // transmuted pointer is only ever called with its real signature (libvirt's documented
    // VIR_DOMAIN_EVENT_CALLBACK pattern). Both are `extern "C"` function pointers of one size.
    let generic = unsafe {
        std::mem::transmute::<
            TwoIntCallback,
            unsafe extern "C" fn(virt_sys::virConnectPtr, virt_sys::virDomainPtr, *mut c_void),
        >(cb)
    };
    let id_arg = c_int::try_from(event_id).unwrap_or(c_int::MAX);
    // SAFETY: `conn.as_ptr()` is the live connection `conn` owns; a null domain means every
    // domain; `opaque` is the boxed Registration, which libvirt passes back to `on_event`
    // until it calls `free_registration` once on deregistration or connection close.
    let ret = unsafe {
        virt_sys::virConnectDomainEventRegisterAny(
            conn.as_ptr(),
            std::ptr::null_mut(),
            id_arg,
            Some(generic),
            opaque,
            Some(free_registration),
        )
    };
    if ret < 0 {
        // SAFETY: libvirt did not take `opaque` (registration failed), so it is still ours.
        drop(unsafe { Box::from_raw(opaque.cast::<Registration>()) });
        return Err(Error::last_error());
    }
    Ok(ret)
}

unsafe extern "C" fn free_registration(opaque: *mut c_void) {
    // SAFETY: `opaque` is the Box::into_raw of `register`, freed by libvirt exactly once.
    drop(unsafe { Box::from_raw(opaque.cast::<Registration>()) });
}

unsafe extern "C" fn on_event(
    _conn: virt_sys::virConnectPtr,
    dom: virt_sys::virDomainPtr,
    a: c_int,
    b: c_int,
    opaque: *mut c_void,
) {
    // SAFETY: `opaque` is the live Registration of `register` (freed only after the last
    // callback); libvirt gives only shared access to it across calls.
    let reg = unsafe { &*opaque.cast::<Registration>() };
    // SAFETY: `dom` is valid for the duration of the callback.
    let Some(event) = (unsafe { domain_event(dom, reg.kind, a, b) }) else {
        return;
    };
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (reg.sink)(event)));
}

/// Copies the domain's identity out of `dom`.
///
/// # Safety
/// `dom` must be a valid domain pointer for the duration of the call.
unsafe fn domain_event(
    dom: virt_sys::virDomainPtr,
    kind: Kind,
    a: c_int,
    b: c_int,
) -> Option<DomainEvent> {
    // SAFETY: `dom` is valid (caller); the name is owned by `dom` and copied before return.
    let name_ptr = unsafe { virt_sys::virDomainGetName(dom) };
    if name_ptr.is_null() {
        return None;
    }
    // SAFETY: libvirt returns a NUL-terminated string, checked non-null above.
    let name = unsafe { CStr::from_ptr(name_ptr) }
        .to_string_lossy()
        .into_owned();
    let mut uuid = [0u8; 16];
    // SAFETY: `uuid` has VIR_UUID_BUFLEN (16) bytes, which is what libvirt writes.
    if unsafe { virt_sys::virDomainGetUUID(dom, uuid.as_mut_ptr()) } < 0 {
        return None;
    }
    // SAFETY: `dom` is valid (caller).
    let raw_id = unsafe { virt_sys::virDomainGetID(dom) };
    // libvirt answers (unsigned)-1 for an inactive domain: the wire protocol's -1.
    let id = i32::try_from(raw_id).unwrap_or(-1);
    let kind = match kind {
        Kind::Lifecycle => EventKind::Lifecycle {
            event: a,
            detail: b,
        },
        Kind::Agent => EventKind::Agent { state: a },
    };
    Some(DomainEvent {
        name,
        uuid,
        id,
        kind,
    })
}
