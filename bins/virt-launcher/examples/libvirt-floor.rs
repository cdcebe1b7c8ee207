//! libvirt's own time for one domain: the floor under the launcher's SyncVirtualMachine ->
//! Running (benches/compare-launchers.sh runs it in the same pod set-up as both launchers).
//!
//! It does what the launcher does around libvirt and nothing else, with the launcher's own code
//! (its daemon start-up, connect loop and remote-protocol client, included below by path): start
//! virtlogd and a fresh libvirt daemon, connect, subscribe to lifecycle events, define the given
//! XML and start it -> Running, one after another, as plain libvirt clients do (`virsh define`,
//! `virsh start`). Each step is timed; the result is one JSON line on stdout:
//!
//! `{"libvirt_floor": {"connect_ms": .., "probe_define_ms": .., "probe_ms": .., "define_ms": ..,
//!   "start_ms": .., "started_event_ms": ..}}`
//!
//! On a fresh daemon the first define probes QEMU's capabilities (about a second here):
//! `probe_define_ms` is that define. Once started, the same XML is defined again (libvirt has
//! probed by then): `define_ms`, and `probe_ms` = `probe_define_ms` - `define_ms`. The launcher
//! asks for the domain capabilities instead, to start the probe before the Sync arrives; that
//! call also formats them, which a floor has no need of. `start_ms` is `virDomainCreate` until
//! its reply (libvirt answers once the vCPUs run); `started_event_ms` is the same call until the
//! `Started` lifecycle event.
//!
//! Before the clock starts it makes what the XML refers to and the launcher would have prepared
//! (qcow2 overlays over backing images, the directories of disk files and serial sockets/logs).
//! Afterwards it destroys and undefines the domain and stops the daemons.
//!
//! usage: libvirt-floor DOMAIN.xml   (run as the launcher runs: the pod's user and environment)

#[path = "../src/daemons.rs"]
#[allow(dead_code)]
mod daemons;
#[path = "../src/libvirt/mod.rs"]
#[allow(dead_code, unused_imports)]
mod libvirt;
#[path = "../src/log.rs"]
#[allow(dead_code)]
mod log;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kvrs_converter::Domain;

use crate::daemons::{Daemons, LibvirtLayout};
use crate::libvirt::{Event, Libvirt};

/// `VIR_DOMAIN_EVENT_STARTED`.
const EVENT_STARTED: i32 = 2;

fn mkdir_parent(path: &str) -> Result<(), String> {
    match Path::new(path).parent() {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))
        }
        None => Ok(()),
    }
}

/// The files the launcher's disk preparation makes for this XML (untimed).
fn prepare(domain: &Domain) -> Result<(), String> {
    for disk in &domain.devices.disks {
        let Some(file) = disk.source.file.as_deref() else {
            continue;
        };
        mkdir_parent(file)?;
        let backing = disk
            .backing_store
            .as_ref()
            .and_then(|b| Some((b.source.as_ref()?.file.as_deref()?, b.format.as_ref())));
        if let Some((backing, format)) = backing
            && !Path::new(file).exists()
        {
            let format = format.map(|f| f.kind.to_string()).unwrap_or("raw".into());
            let out = std::process::Command::new("qemu-img")
                .args(["create", "-f", "qcow2", "-b", backing, "-F", &format, file])
                .output()
                .map_err(|e| format!("run qemu-img: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "qemu-img create {file}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    for serial in &domain.devices.serials {
        if let Some(path) = serial.source.as_ref().and_then(|s| s.path.as_deref()) {
            mkdir_parent(path)?;
        }
        if let Some(file) = serial.log.as_ref().and_then(|l| l.file.as_deref()) {
            mkdir_parent(file)?;
        }
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run(xml_path: &str) -> Result<serde_json::Value, String> {
    let xml = std::fs::read_to_string(xml_path).map_err(|e| format!("read {xml_path}: {e}"))?;
    let domain = Domain::from_xml(&xml).map_err(|e| format!("parse {xml_path}: {e}"))?;
    prepare(&domain)?;

    let layout = LibvirtLayout::from_env();
    let t0 = Instant::now();
    let mut daemons = Daemons::start(&layout, "").map_err(|e| format!("start libvirt: {e}"))?;
    let result = async {
        let (conn, mut events) = daemons.connect(layout.uri()).await?;
        conn.register_lifecycle_events()
            .await
            .map_err(|e| format!("subscribe to domain events: {e}"))?;
        let connected = t0.elapsed();
        // When the Started event arrives (it may come before the create's reply).
        let name = domain.name.to_string();
        let started_at = tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                if let Event::Lifecycle(ev) = ev
                    && ev.domain.name == name
                    && ev.event == EVENT_STARTED
                {
                    return Some(Instant::now());
                }
            }
            None
        });

        let t = Instant::now();
        let dom = conn
            .define_xml(&xml)
            .await
            .map_err(|e| format!("define: {e}"))?;
        let probe_define = t.elapsed();

        let t = Instant::now();
        conn.create(&dom).await.map_err(|e| format!("start: {e}"))?;
        let start = t.elapsed();
        let started_event = match tokio::time::timeout(Duration::from_secs(30), started_at).await {
            Ok(Ok(Some(at))) => at.duration_since(t),
            Ok(_) => return Err("libvirt closed the connection before the Started event".into()),
            Err(_) => return Err("no Started event within 30 s of the start".into()),
        };
        let (state, _) = conn
            .state(&dom)
            .await
            .map_err(|e| format!("domain state: {e}"))?;
        if state != 1 {
            return Err(format!("domain state {state} after the start, not running"));
        }
        // The define again, QEMU probed: the define's own time.
        let t = Instant::now();
        conn.define_xml(&xml)
            .await
            .map_err(|e| format!("define again: {e}"))?;
        let define = t.elapsed();
        let _ = conn.destroy(&dom).await;
        let _ = conn.undefine(&dom).await;
        conn.close().await;
        Ok(serde_json::json!({"libvirt_floor": {
            "connect_ms": ms(connected),
            "probe_define_ms": ms(probe_define),
            "probe_ms": ms(probe_define.saturating_sub(define)),
            "define_ms": ms(define),
            "start_ms": ms(start),
            "started_event_ms": ms(started_event),
        }}))
    }
    .await;
    daemons.stop().await;
    result
}

fn main() -> ExitCode {
    let Some(xml_path) = std::env::args().nth(1) else {
        eprintln!("usage: libvirt-floor DOMAIN.xml");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("libvirt-floor: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(&xml_path)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("libvirt-floor: {e}");
            ExitCode::from(1)
        }
    }
}
