//! End to end: volume hotplug through kvrs's virt-launcher, real libvirt and QEMU (TCG).
//!
//! The test plays virt-handler (as `e2e_launcher` does, in the same pod-like sandbox): it puts a
//! filesystem claim's `disk.img` where virt-handler mounts it (`<pod>/kubevirt/hotplug-disks/
//! <volume>.img`, the launcher's `/var/run/kubevirt/hotplug-disks`), and sends SyncVirtualMachine
//! with the VMI carrying the hotplugged volume and its SCSI disk and the volume status virt-handler
//! would have written. The guest (the busybox test guest, which loads virtio-scsi at
//! boot) watches `/sys/block/sd*` and prints on its serial console each disk that appears,
//! with what the disk holds at offset 0 (the test's marker) and at 4 KiB (what the guest wrote on
//! an earlier attach), then writes there itself.
//!
//! Checked: a volume not yet mounted (`AttachedToNode`) is not attached; a volume reported
//! `MountedToPod` whose file is missing is not attached, the sync still succeeds and the
//! launcher says why (KubeVirt's launcher skips such a disk until the next sync); once mounted,
//! the domain gains `ua-<volume>` on the SCSI bus and the guest reads the marker; a sync without
//! it detaches it, the guest loses the device, and the file keeps the marker and the guest's
//! write; attached again, the guest reads both back, the disk with KubeVirt's cache mode; a
//! domain started again while the volume is hotplugged has the disk from the start.

#[path = "common/kernel_boot.rs"]
mod kernel_boot;
#[path = "common/notify.rs"]
#[allow(dead_code)] // each test reads the events its own way
mod notify;
#[path = "common/wait.rs"]
mod wait;

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kernel_boot::kernel_boot_vmi;
use kvrs_ipc::{LauncherClient, VirtualMachineOptions};
use kvrs_test_guest::BOOT_MARKER;
use kvrs_test_guest::pod::{PodDir, is_root, launcher_binaries, run};
use notify::serve_recorder;
use wait::wait_for;

const VMI_UID: &str = "6a1f3c2e-0000-4000-8000-00000000e2e7";
const SCSI_READY: &str = "KVRS-HP: scsi ready";
/// The guest's watch over its SCSI disks (its init loaded virtio-scsi): once a second prints each
/// `sd*` that appeared (`attached <dev> marker=<bytes at 0> guest=<bytes at 4096>`, NULs
/// dropped), writes `guest-wrote-<dev>` at 4 KiB of it (`wrote <dev>` once synced: the test
/// waits for it before detaching, or a slow guest's write would race the unplug), and prints
/// each that went away.
const WATCH: &str = "KVRS-RUN: echo 'KVRS-HP: scsi ready'; prev=''; while true; do cur=''; for d in /sys/block/sd*; do [ -e \"$d\" ] || continue; n=${d##*/}; cur=\"$cur $n\"; case \" $prev \" in *\" $n \"*) ;; *) m=$(head -c 32 /dev/$n | tr -d '\\000'); g=$(dd if=/dev/$n bs=512 skip=8 count=1 2>/dev/null | tr -d '\\000' | head -c 32); echo \"KVRS-HP: attached $n marker=$m guest=$g.\"; printf 'guest-wrote-%s' $n | dd of=/dev/$n bs=512 seek=8 conv=notrunc,fsync 2>/dev/null; sync; echo \"KVRS-HP: wrote $n\" ;; esac; done; for n in $prev; do case \" $cur \" in *\" $n \"*) ;; *) echo \"KVRS-HP: detached $n\" ;; esac; done; prev=$cur; sleep 1; done";
const MARKER: &str = "KVRS-HOTPLUG-MARKER-42";
const VOLUME: &str = "hp1";
const MISSING: &str = "hp2";

/// The VMI; with `hotplug`, the volumes `(name, phase)` as hotplugged claims with SCSI disks
/// and the hotplug volume status virt-handler writes.
fn vmi(hotplug: &[(&str, &str)]) -> kvrs_core::VirtualMachineInstance {
    let mut v = kernel_boot_vmi("hp", VMI_UID, &[WATCH]);
    for (i, (name, phase)) in hotplug.iter().enumerate() {
        v["spec"]["volumes"].as_array_mut().unwrap().push(serde_json::json!({
            "name": name,
            "persistentVolumeClaim": {"claimName": format!("claim-{name}"), "hotpluggable": true}
        }));
        v["spec"]["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": name, "serial": name, "disk": {"bus": "scsi"}}));
        let statuses = v["status"]["volumeStatus"].as_array().cloned();
        let mut statuses = statuses.unwrap_or_default();
        statuses.push(serde_json::json!({
            "name": name,
            "target": "",
            "phase": phase,
            "reason": "",
            "hotplugVolume": {"attachPodName": format!("hp-volume-{i}"), "attachPodUID": format!("00000000-0000-4000-8000-00000000000{i}")},
            "persistentVolumeClaimInfo": {"claimName": format!("claim-{name}"), "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}
        }));
        v["status"]["volumeStatus"] = serde_json::Value::Array(statuses);
    }
    let vmi: kvrs_core::VirtualMachineInstance = serde_json::from_value(v).unwrap();
    kvrs_core::admission::admit(vmi, &kvrs_core::ClusterConfig::default())
        .expect("the hotplug VMI is admitted")
}

/// The domain's disks as `(alias, bus, target, source file)`, from GetDomain: KubeVirt's domain
/// JSON, whose user aliases carry the volume name (the XML's `ua-<volume>` without its prefix).
async fn disks(client: &LauncherClient) -> Vec<(String, String, String, String)> {
    let json = client
        .get_domain()
        .await
        .expect("GetDomain")
        .expect("a domain");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["Spec"]["Devices"]["Disks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            let s = |x: &serde_json::Value| x.as_str().unwrap_or("").to_string();
            (
                s(&d["Alias"]["Name"]),
                s(&d["Target"]["Bus"]),
                s(&d["Target"]["Device"]),
                s(&d["Source"]["File"]),
            )
        })
        .collect()
}

/// The `<driver cache>` of the domain's disk of `volume`.
async fn driver_cache(client: &LauncherClient, volume: &str) -> String {
    let json = client
        .get_domain()
        .await
        .expect("GetDomain")
        .expect("a domain");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["Spec"]["Devices"]["Disks"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["Alias"]["Name"] == volume))
        .and_then(|d| d["Driver"]["Cache"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn has_alias(disks: &[(String, String, String, String)], alias: &str) -> bool {
    disks.iter().any(|d| d.0 == alias)
}

/// The serial console's `KVRS-HP: attached` lines (whole lines, trimmed).
fn attached_lines(pod: &PodDir) -> Vec<String> {
    pod.serial_log()
        .lines()
        .filter(|l| l.contains("KVRS-HP: attached"))
        .map(|l| l.trim().to_string())
        .collect()
}

fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).unwrap();
    buf
}

#[tokio::test(flavor = "current_thread")]
async fn hotplugged_disks_attach_detach_and_keep_their_data() {
    assert!(
        is_root(),
        "e2e_hotplug needs root (mount namespace, UID 107); run scripts/test-all.sh as root"
    );
    launcher_binaries();
    let pod = PodDir::with_test_guest("e2e-hotplug", VMI_UID);
    let hp_dir = pod.path("kubevirt/hotplug-disks");
    std::fs::create_dir_all(&hp_dir).unwrap();
    run(Command::new("chown").arg("107:107").arg(&hp_dir));
    let (_recorder, notify) = serve_recorder(pod.path("kubevirt/domain-notify-pipe.sock")).await;
    let _monitor = pod.start_monitor("kvrs", "hp", |m| m.qemu_timeout = "60s".into());
    let socket = pod.path("kubevirt/sockets/launcher-sock");
    wait_for("launcher-sock", Duration::from_secs(30), async || {
        socket.exists().then_some(())
    })
    .await;
    let client = LauncherClient::connect(&socket)
        .await
        .expect("connect to launcher-sock");
    let sync = async |vmi: &kvrs_core::VirtualMachineInstance, what: &str| {
        client
            .sync_vmi(vmi, VirtualMachineOptions::default())
            .await
            .unwrap_or_else(|e| panic!("SyncVirtualMachine ({what}): {e}\n{}", pod.launcher_log()));
    };

    // The guest runs, without hotplugged volumes, and watches its SCSI bus.
    sync(&vmi(&[]), "no hotplug volume").await;
    wait_for(
        "the guest's SCSI watch",
        Duration::from_secs(180),
        async || {
            let log = pod.serial_log();
            (log.contains(BOOT_MARKER) && log.contains(SCSI_READY)).then_some(())
        },
    )
    .await;
    let base = disks(&client).await;
    assert!(has_alias(&base, "rootdisk"), "{base:?}");

    // The claim's disk.img as virt-handler mounts it: the marker at offset 0, 16 MiB.
    let image = hp_dir.join(format!("{VOLUME}.img"));
    std::fs::write(&image, MARKER).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .and_then(|f| f.set_len(16 << 20))
        .unwrap();
    run(Command::new("chown").arg("107:107").arg(&image));

    // Not yet mounted into the pod (AttachedToNode), and mounted but its file missing: neither
    // is attached, the sync succeeds, and the launcher says why for the missing one.
    sync(
        &vmi(&[(VOLUME, "AttachedToNode"), (MISSING, "MountedToPod")]),
        "hp1 AttachedToNode, hp2 MountedToPod without its file",
    )
    .await;
    let now = disks(&client).await;
    assert_eq!(
        now, base,
        "no disk attached for unmounted or missing volumes"
    );
    let log = pod.launcher_log();
    assert!(
        log.contains(&format!("hotplug volume {MISSING} is reported mounted"))
            && log.contains(&format!("/var/run/kubevirt/hotplug-disks/{MISSING}.img")),
        "the launcher names the missing volume and its path:\n{log}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        attached_lines(&pod).is_empty(),
        "the guest saw no SCSI disk: {:?}",
        attached_lines(&pod)
    );

    // Mounted: attached live, on the SCSI bus, under the user alias; the guest reads the
    // marker. The missing one stays out.
    sync(
        &vmi(&[(VOLUME, "MountedToPod"), (MISSING, "MountedToPod")]),
        "hp1 MountedToPod",
    )
    .await;
    let now = disks(&client).await;
    let hp = now
        .iter()
        .find(|d| d.0 == VOLUME)
        .unwrap_or_else(|| panic!("{VOLUME} in the domain: {now:?}"))
        .clone();
    assert_eq!(hp.1, "scsi", "{hp:?}");
    assert!(hp.2.starts_with("sd"), "an sdX target: {hp:?}");
    assert_eq!(
        hp.3,
        format!("/var/run/kubevirt/hotplug-disks/{VOLUME}.img")
    );
    assert!(!has_alias(&now, MISSING), "{now:?}");
    let first = wait_for(
        "the guest sees the hotplugged disk",
        Duration::from_secs(60),
        async || attached_lines(&pod).into_iter().next(),
    )
    .await;
    assert!(
        first.contains(&format!("marker={MARKER} guest=.")),
        "the guest read the marker from a fresh disk: {first}"
    );
    // A repeated sync changes nothing.
    sync(
        &vmi(&[(VOLUME, "Ready"), (MISSING, "MountedToPod")]),
        "hp1 Ready",
    )
    .await;
    assert_eq!(disks(&client).await, now);

    // Removed from the spec: detached; the guest loses the device; the file keeps the marker
    // and what the guest wrote.
    let guest_dev = first
        .split("KVRS-HP: attached ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the guest's device name")
        .to_string();
    wait_for(
        "the guest's write to the disk is synced",
        Duration::from_secs(60),
        async || {
            pod.serial_log()
                .contains(&format!("KVRS-HP: wrote {guest_dev}"))
                .then_some(())
        },
    )
    .await;
    sync(&vmi(&[]), "hp1 removed").await;
    assert_eq!(disks(&client).await, base, "back to the disks before");
    wait_for(
        "the guest loses the disk",
        Duration::from_secs(60),
        async || {
            pod.serial_log()
                .contains(&format!("KVRS-HP: detached {guest_dev}"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(read_at(&image, 0, MARKER.len()), MARKER.as_bytes());
    let wrote = format!("guest-wrote-{guest_dev}");
    assert_eq!(
        read_at(&image, 4096, wrote.len()),
        wrote.as_bytes(),
        "the guest's write reached the file"
    );

    // Attached again: the same data, the marker and the guest's earlier write.
    sync(&vmi(&[(VOLUME, "MountedToPod")]), "hp1 again").await;
    assert!(has_alias(&disks(&client).await, VOLUME));
    let second = wait_for(
        "the guest sees the disk again",
        Duration::from_secs(60),
        async || attached_lines(&pod).into_iter().nth(1),
    )
    .await;
    assert!(
        second.contains(&format!("marker={MARKER} guest={wrote}.")),
        "the data survived detach and attach: {second}"
    );

    // The cache mode KubeVirt picks: `none` where the file opens with O_DIRECT, else
    // `writethrough`.
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(0o40000) // O_DIRECT on x86_64
            .open(&image)
        {
            Ok(_) => true,
            Err(e) if e.raw_os_error() == Some(22) => false, // EINVAL
            Err(e) => panic!("O_DIRECT probe of {}: {e}", image.display()),
        }
    };
    assert_eq!(
        driver_cache(&client, VOLUME).await,
        if direct { "none" } else { "writethrough" }
    );

    // Stopped and started again with the volume still hotplugged (Ready): the new domain has
    // the disk from the start, with its data.
    let v = vmi(&[(VOLUME, "Ready")]);
    client.kill(&v).await.expect("KillVirtualMachine");
    let boots = pod.serial_log().matches(BOOT_MARKER).count();
    sync(&v, "restart with hp1 Ready").await;
    assert!(has_alias(&disks(&client).await, VOLUME));
    let third = wait_for(
        "the restarted guest sees the disk",
        Duration::from_secs(180),
        async || {
            (pod.serial_log().matches(BOOT_MARKER).count() > boots)
                .then(|| attached_lines(&pod).into_iter().nth(2))
                .flatten()
        },
    )
    .await;
    assert!(
        third.contains(&format!("marker={MARKER} guest=guest-wrote-")),
        "the data is there after a restart: {third}"
    );

    client.kill(&v).await.expect("KillVirtualMachine");
    client.delete(&v).await.expect("DeleteVirtualMachine");
    drop(notify);
}
