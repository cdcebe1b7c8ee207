//! The launcher's libvirt path against a real (private, session-mode) libvirtd, through the
//! [`Libvirt`] trait the launcher's one client (`Connection`, the XDR client) implements.
//! Declared in main.rs, not in `libvirt/mod.rs`: `examples/libvirt-floor.rs` includes that
//! module by path, without the launcher's `hooks` this test borrows its daemon from.

use std::time::Duration;

use crate::hooks::tests_libvirt::Session;
use crate::libvirt::{Connection, Event, Libvirt};

/// The smallest domain QEMU starts under TCG on this host's architecture: no disks, no
/// devices the session daemon must create.
fn xml() -> String {
    format!(
        "<domain type='qemu'><name>ns_live</name><memory unit='MiB'>32</memory><vcpu>1</vcpu>\
         <os><type arch='{}'>hvm</type></os><devices/></domain>",
        std::env::consts::ARCH
    )
}

/// `VIR_DOMAIN_EVENT_STARTED`, `VIR_DOMAIN_EVENT_STOPPED`, `VIR_DOMAIN_RUNNING`.
const STARTED: i32 = 2;
const STOPPED: i32 = 5;
const RUNNING: i32 = 1;

async fn next_lifecycle(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Event>, want: i32) -> i32 {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match rx.recv().await.expect("the event channel stays open") {
                Event::Lifecycle(ev) if ev.event == want => {
                    assert_eq!(ev.domain.name, "ns_live");
                    return ev.event;
                }
                _ => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no lifecycle event {want} within 30 s"))
}

#[tokio::test(flavor = "current_thread")]
async fn define_start_events_state_destroy_undefine() {
    let session = Session::start("live");
    let (conn, mut events) = Connection::open(&session.socket(), "qemu:///session")
        .await
        .expect("connect to the session libvirtd");
    conn.register_lifecycle_events().await.expect("register");
    assert!(conn.hypervisor_version().await.unwrap() > 1_000_000);
    let caps = conn
        .domain_capabilities(std::env::consts::ARCH)
        .await
        .unwrap();
    assert!(caps.contains("<domainCapabilities>"), "{caps}");

    let dom = conn.define_xml(&xml()).await.expect("define");
    assert_eq!(dom.name, "ns_live");
    assert_eq!(dom.id, -1, "a defined domain has no runtime id yet");
    assert_eq!(conn.lookup("ns_live").await.unwrap().uuid, dom.uuid);
    conn.create(&dom).await.expect("start");
    assert_eq!(next_lifecycle(&mut events, STARTED).await, STARTED);
    assert_eq!(conn.state(&dom).await.unwrap().0, RUNNING);
    assert_eq!(conn.info(&dom).await.unwrap().memory_kib, 32 * 1024);
    assert!(
        conn.xml_desc(&dom)
            .await
            .unwrap()
            .contains("<name>ns_live</name>")
    );

    conn.destroy(&dom).await.expect("destroy");
    assert_eq!(next_lifecycle(&mut events, STOPPED).await, STOPPED);
    conn.undefine(&dom).await.expect("undefine");
    let gone = conn.lookup("ns_live").await.unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
    let gone = conn.state(&dom).await.unwrap_err();
    assert!(gone.is_not_found(), "state of an undefined domain: {gone}");
    conn.close().await;
}
