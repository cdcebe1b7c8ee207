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

/// `virDomainAttachDeviceFlags` / `virDomainDetachDeviceFlags` (procedures 160 and 161) with
/// KubeVirt's live-and-config flags: a hotplug disk as the launcher writes it (the converter's
/// model, [`crate::hotplug::disk_xml`]) lands on the running domain's SCSI bus under its user
/// alias and in its definition, leaves both on detach, and a disk whose file is missing is
/// refused by libvirt without a trace in the domain.
#[tokio::test(flavor = "current_thread")]
async fn hotplug_disks_attach_and_detach_live_and_in_the_definition() {
    use crate::libvirt::DEVICE_MODIFY_LIVE_AND_CONFIG;
    use kvrs_converter::domain::{Alias, Disk, DiskDriver};

    let session = Session::start("live-hotplug");
    let (conn, _events) = Connection::open(&session.socket(), "qemu:///session")
        .await
        .expect("connect to the session libvirtd");
    let files = tempfile::tempdir().unwrap();
    std::process::Command::new("chmod")
        .arg("755")
        .arg(files.path())
        .status()
        .unwrap();
    let image = files.path().join("hp1.img");
    std::fs::write(&image, vec![0u8; 1 << 20]).unwrap();
    std::process::Command::new("chown")
        .arg("107:107")
        .arg(&image)
        .status()
        .unwrap();
    let disk = |file: &std::path::Path, volume: &str, dev: &str| {
        let mut d = Disk {
            device: "disk".into(),
            kind: "file".into(),
            alias: Some(Alias::user(volume)),
            driver: Some(DiskDriver {
                name: "qemu".into(),
                kind: "raw".into(),
                ..DiskDriver::default()
            }),
            ..Disk::default()
        };
        d.target.bus = Some("scsi".into());
        d.target.dev = Some(dev.to_string().into());
        d.source.file = Some(file.display().to_string().into());
        crate::hotplug::disk_xml(&d).unwrap()
    };
    let xml = format!(
        "<domain type='qemu'><name>ns_live</name><memory unit='MiB'>32</memory><vcpu>1</vcpu>\
         <os><type arch='{}'>hvm</type></os><devices><controller type='scsi' model='virtio-scsi'/></devices></domain>",
        std::env::consts::ARCH
    );
    let dom = conn.define_xml(&xml).await.expect("define");
    conn.create(&dom).await.expect("start");
    let hp1 = disk(&image, "hp1", "sda");
    conn.attach_device(&dom, &hp1, DEVICE_MODIFY_LIVE_AND_CONFIG)
        .await
        .unwrap_or_else(|e| panic!("attach {hp1}: {e}"));
    let live = conn.xml_desc(&dom).await.unwrap();
    assert!(
        live.contains("<alias name='ua-hp1'/>") && live.contains("<target dev='sda' bus='scsi'/>"),
        "{live}"
    );

    let missing = disk(&files.path().join("hp2.img"), "hp2", "sdb");
    let err = conn
        .attach_device(&dom, &missing, DEVICE_MODIFY_LIVE_AND_CONFIG)
        .await
        .expect_err("a disk whose file is missing");
    assert!(err.to_string().contains("hp2.img"), "{err}");
    assert!(!conn.xml_desc(&dom).await.unwrap().contains("ua-hp2"));

    // In the definition too (CONFIG): stopped and started again, the domain still has it.
    conn.destroy(&dom).await.expect("destroy");
    let defined = conn.xml_desc(&dom).await.unwrap();
    assert!(defined.contains("ua-hp1"), "{defined}");
    conn.create(&dom).await.expect("start again");
    assert!(conn.xml_desc(&dom).await.unwrap().contains("ua-hp1"));

    conn.detach_device(&dom, &hp1, DEVICE_MODIFY_LIVE_AND_CONFIG)
        .await
        .unwrap_or_else(|e| panic!("detach {hp1}: {e}"));
    let live = conn.xml_desc(&dom).await.unwrap();
    assert!(!live.contains("ua-hp1"), "{live}");

    conn.destroy(&dom).await.expect("destroy");
    // The definition lost it too: a restart of the domain would not bring it back.
    let defined = conn.xml_desc(&dom).await.unwrap();
    assert!(!defined.contains("ua-hp1"), "{defined}");
    conn.undefine(&dom).await.expect("undefine");
    conn.close().await;
}
