//! Volume hotplug on the real node (issue 45, Deliver 3 and the hotplug part of Deliver 4): kvrs
//! deployed as an operator deploys it (`common::real_node::Deployed`), a static local
//! filesystem claim (`common::volumes`), and a running VM that gets it through virt-api's `addvolume` / `removevolume` — the calls
//! KubeVirt's `virtctl addvolume` makes — with KubeVirt v1.9.0's default
//! `DeclarativeHotplugVolumes`: the VM's template gains the volume, the VM controller carries it
//! to the VMI, the VMI controller runs KubeVirt's attachment pod, virt-handler makes the claim
//! visible in the launcher pod, the launcher attaches it to the running domain on the
//! virtio-scsi controller.
//!
//! The guest (`kvrs_test_guest`, busybox, virtio-scsi loaded) runs one loop from cloud-init:
//! every second it lists its SCSI disks with their size, the first bytes of each and the
//! bytes 1 MiB in, writes `KVRS-HP-<sectors>` at the start of a disk that begins empty, and
//! publishes the list at `/s` with busybox httpd on the pod IP. A disk whose size cannot be read
//! that round (it is appearing or going away) is left out of that round, not labelled.
//!
//! What is checked: the claim appears in the guest (as KubeVirt's `disk.img`, at KubeVirt's
//! size, owned by QEMU's UID), the guest's write reaches the volume on the host, the VMI's `volumeStatus` reaches `Ready` with
//! the guest's target and the attachment pod's name; a second add of an attached volume (same
//! name, or another name for the same claim) is refused with KubeVirt's message and changes
//! nothing; an unplug removes the disk from the guest and the mount from the node, the data
//! stays; the host marks the detached volume; plugged again, the guest reads its own data and
//! the host's marker. At the end no hotplug mount is left on the node.
//!
//! A block claim (a loop device behind a local block PV) is hotplugged beside the filesystem
//! one: the launcher pod gets a device node with the claim's numbers, owned by QEMU's UID and
//! allowed in its device cgroup (the handler sees the node's cgroups through its DaemonSet's
//! `/sys/fs/cgroup` mount); the guest writes it, the host reads the write on the loop device's
//! backing file; unplugged, the node is gone from the pod and the launcher's cgroup denies the
//! device again.
//!
//! Run it alone on the node: `flock /tmp/kvrs-real-node.lock cargo test -p kvrs --test
//! real_hotplug`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use common::real_node::Deployed;
use common::volumes::{
    MIB, guest_vm, kubevirt_disk_img_size, local_claim, loop_device, read_at, write_at,
};
use common::{http_get, kubectl_json};
use kvrs_test_cluster::wait_for;
use kvrs_test_guest::pod::is_root;
use serde_json::{Value, json};

const NS: &str = "kvrs-real-hotplug";
/// The port of the guest's busybox httpd, serving `/srv`.
const GUEST_PORT: u16 = 8080;
/// The filesystem claim asks for less than its volume's capacity: KubeVirt's image takes the
/// request.
const FS_REQUEST: &str = "64Mi";
const FS_CAPACITY: &str = "128Mi";
/// What the host writes 1 MiB into the filesystem claim's image while it is unplugged.
const HOST_MARKER: &str = "HOST-MARKER";
/// The block claim's loop device: a size no other disk of the guest has.
const BLOCK_SIZE: u64 = 48 * MIB;

/// The guest's loop (see the module documentation) and its web server.
fn guest_loop() -> Vec<String> {
    let body = format!(
        "i=0; while true; do i=$((i+1)); : >/srv/s.tmp; \
         for b in /sys/block/sd*; do [ -e \"$b\" ] || continue; d=${{b##*/}}; n=$(cat $b/size 2>/dev/null); \
         case \"$n\" in ''|0|*[!0-9]*) continue;; esac; \
         h=$(head -c 16 /dev/$d 2>/dev/null | tr -d '\\000'); \
         if [ -z \"$h\" ]; then printf KVRS-HP-$n | dd of=/dev/$d conv=fsync 2>/dev/null; h=$(head -c 16 /dev/$d 2>/dev/null | tr -d '\\000'); fi; \
         m=$(dd if=/dev/$d bs=1048576 skip=1 count=1 2>/dev/null | head -c {} | tr -d '\\000'); \
         echo \"disk $d $n [$h] [$m]\" >>/srv/s.tmp; done; \
         echo \"round $i\" >>/srv/s.tmp; mv /srv/s.tmp /srv/s; sleep 1; done",
        HOST_MARKER.len()
    );
    // /srv exists before httpd starts: busybox httpd gives up on a missing home directory.
    vec![
        "mkdir -p /srv".to_string(),
        format!("( {body} ) &"),
        format!("httpd -p {GUEST_PORT} -h /srv"),
    ]
}

/// One SCSI disk as the guest lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GuestDisk {
    dev: String,
    sectors: u64,
    head: String,
    marker: String,
}

/// The guest's `/s`: its round counter and its disks.
fn parse_state(text: &str) -> (u64, Vec<GuestDisk>) {
    let mut round = 0;
    let mut disks = Vec::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("round ") {
            round = n.trim().parse().unwrap_or(0);
        } else if let Some(rest) = line.strip_prefix("disk ") {
            let mut parts = rest.splitn(3, ' ');
            let (Some(dev), Some(sectors), Some(tail)) = (parts.next(), parts.next(), parts.next())
            else {
                panic!("a disk line of the guest: {line:?}");
            };
            // `[head] [marker]`, either possibly empty.
            let (head, marker) = tail
                .strip_prefix('[')
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.split_once("] ["))
                .unwrap_or_else(|| panic!("a disk line of the guest: {line:?}"));
            disks.push(GuestDisk {
                dev: dev.to_string(),
                sectors: sectors
                    .parse()
                    .unwrap_or_else(|_| panic!("sectors in {line:?}")),
                head: head.to_string(),
                marker: marker.to_string(),
            });
        }
    }
    (round, disks)
}

/// virt-api's `AddVolumeOptions` as `virtctl addvolume VM --volume-name=CLAIM` sends it for a
/// claim (KubeVirt's defaults: disk on the SCSI bus, serial = the volume's name).
fn add_volume_body(name: &str, claim: &str) -> String {
    json!({
        "name": name,
        "disk": {"name": name, "disk": {"bus": "scsi"}, "serial": name},
        "volumeSource": {"persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}}
    })
    .to_string()
}

struct Hotplug<'a> {
    deployed: &'a Deployed,
    ip: String,
}

impl Hotplug<'_> {
    fn add(&self, name: &str, claim: &str) {
        if let Err(e) =
            self.deployed
                .try_vm_subresource("guest", "addvolume", &add_volume_body(name, claim))
        {
            panic!("addvolume {name}: {e}\n{}", self.deployed.logs());
        }
    }

    fn remove(&self, name: &str) {
        let body = json!({"name": name}).to_string();
        if let Err(e) = self
            .deployed
            .try_vm_subresource("guest", "removevolume", &body)
        {
            panic!("removevolume {name}: {e}\n{}", self.deployed.logs());
        }
    }

    fn vmi(&self) -> Value {
        self.deployed.get("vmi", "guest").expect("the VMI")
    }

    /// The VMI's `volumeStatus` entry `name`, once `Ready`.
    fn wait_ready(&self, name: &str) -> Value {
        let started = Instant::now();
        let entry = wait_for(
            &format!("the VMI's volumeStatus {name} Ready"),
            Duration::from_secs(300),
            || {
                self.vmi()["status"]["volumeStatus"]
                    .as_array()?
                    .iter()
                    .find(|v| v["name"] == name && v["phase"] == "Ready")
                    .cloned()
            },
            || format!("{}\n{}", self.vmi(), self.deployed.logs()),
        );
        eprintln!(
            "real hotplug: {name} Ready after {:.1} s: {entry}",
            started.elapsed().as_secs_f64()
        );
        entry
    }

    /// Waits until the VMI has no `volumeStatus` entry and no spec volume `name`.
    fn wait_gone(&self, name: &str) {
        wait_for(
            &format!("the VMI without the volume {name}"),
            Duration::from_secs(300),
            || {
                let vmi = self.vmi();
                let has = |list: &Value| {
                    list.as_array()
                        .is_some_and(|l| l.iter().any(|v| v["name"] == name))
                };
                (!has(&vmi["spec"]["volumes"]) && !has(&vmi["status"]["volumeStatus"]))
                    .then_some(())
            },
            || format!("{}\n{}", self.vmi(), self.deployed.logs()),
        );
    }

    /// The guest's disk list once `pick` accepts it (a fresh round each time).
    fn wait_guest(&self, what: &str, pick: impl Fn(&[GuestDisk]) -> bool) -> Vec<GuestDisk> {
        let text = wait_for(
            &format!("the guest: {what}"),
            Duration::from_secs(240),
            || {
                let text = http_get(&self.ip, GUEST_PORT, "/s");
                if text.is_none() {
                    std::thread::sleep(Duration::from_secs(1));
                }
                let text = text?;
                let (_, disks) = parse_state(&text);
                if pick(&disks) {
                    Some(text)
                } else {
                    std::thread::sleep(Duration::from_millis(500));
                    None
                }
            },
            || {
                let last = http_get(&self.ip, GUEST_PORT, "/s").unwrap_or_default();
                format!("the guest's last list:\n{last}\n{}", self.deployed.logs())
            },
        );
        parse_state(&text).1
    }

    /// Live attachment pods in the namespace with the claims each mounts.
    fn attachment_pods(&self) -> Vec<(String, Vec<String>)> {
        let pods = kubectl_json(
            &self.deployed.cluster,
            &["get", "pods", "-n", NS, "-l", "kubevirt.io=hotplug-disk"],
        )
        .unwrap_or_default();
        pods["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .map(|p| {
                        let claims = p["spec"]["volumes"]
                            .as_array()
                            .map(|vs| {
                                vs.iter()
                                    .filter_map(|v| {
                                        v["persistentVolumeClaim"]["claimName"]
                                            .as_str()
                                            .map(str::to_string)
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        (
                            p["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            claims,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The VM's template volumes by name.
    fn template_volumes(&self) -> BTreeMap<String, Value> {
        let vm = self.deployed.get("vm", "guest").expect("the VM");
        vm["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .map(|vs| {
                vs.iter()
                    .map(|v| {
                        (
                            v["name"].as_str().unwrap_or_default().to_string(),
                            v.clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Mount points on this host (the node's mount namespace) whose path is in a launcher pod's
/// hotplug directory.
fn hotplug_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("/proc/self/mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.contains("hotplug-disks/"))
        .map(str::to_string)
        .collect()
}

/// The node's v1 device cgroups whose `devices.list` names block device `rdev` itself (a
/// pod-level `a *:* rwm` does not count: the kubelet leaves those open).
fn device_cgroups_allowing(rdev: u64) -> Vec<String> {
    let line = format!("b {}:{} rwm", nix_major(rdev), nix_minor(rdev));
    let mut found = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from("/sys/fs/cgroup/devices")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
        if std::fs::read_to_string(dir.join("devices.list"))
            .is_ok_and(|l| l.lines().any(|l| l == line))
        {
            found.push(dir.display().to_string());
        }
    }
    found
}

/// glibc's `major()` / `minor()` of a `dev_t`.
fn nix_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)
}

fn nix_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)
}

#[test]
fn claims_hotplugged_into_a_running_vm_appear_in_the_guest_and_keep_their_data() {
    assert!(
        is_root(),
        "the real node runs containerd, runc and the kubelet, and the test makes loop devices: run as root"
    );
    let work = tempfile::Builder::new()
        .prefix("kvrs-real-hotplug-")
        .tempdir_in("/var/tmp")
        .expect("a work directory");
    let fs_dir = work.path().join("hp");
    std::fs::create_dir(&fs_dir).unwrap();

    let blk_backing = work.path().join("hpb.img");
    let (blk_dev, _blk) = loop_device(&blk_backing, BLOCK_SIZE);
    let kvm = kvrs_node::host_devices::kvm_check().is_ok();
    let deployed = Deployed::start(NS, !kvm);
    let host = deployed.wait_schedulable_host();
    deployed.kubectl_ok(&["create", "namespace", NS]);
    deployed.apply(&local_claim(
        NS,
        "hp",
        &fs_dir,
        "Filesystem",
        FS_CAPACITY,
        FS_REQUEST,
        &host,
    ));
    deployed.apply(&local_claim(
        NS, "hpb", &blk_dev, "Block", "48Mi", "48Mi", &host,
    ));
    let fs_pvc = deployed.wait_claim_bound("hp");
    deployed.wait_claim_bound("hpb");
    let img_size = kubevirt_disk_img_size(&fs_pvc);
    let fs_sectors = img_size / 512;

    deployed.apply(&guest_vm(NS, "guest", &[], "", &guest_loop()));
    wait_for(
        "the VMI guest Running",
        Duration::from_secs(300),
        || {
            deployed
                .get("vmi", "guest")
                .filter(|v| v["status"]["phase"] == "Running")
        },
        || deployed.logs(),
    );
    let pod = deployed
        .launcher_of("guest")
        .unwrap_or_else(|| panic!("no launcher pod\n{}", deployed.logs()));
    let hp = Hotplug {
        deployed: &deployed,
        ip: pod["status"]["podIP"]
            .as_str()
            .expect("the pod's IP")
            .to_string(),
    };
    let none = hp.wait_guest("booted, no SCSI disk yet", |d| d.is_empty());
    assert!(none.is_empty());

    // The filesystem claim: KubeVirt's disk.img, in the guest as a new SCSI disk.
    let fs_head = format!("KVRS-HP-{fs_sectors}");
    hp.add("hp", "hp");
    let template = hp.template_volumes();
    assert_eq!(
        template["hp"]["persistentVolumeClaim"],
        json!({"claimName": "hp", "hotpluggable": true}),
        "DeclarativeHotplugVolumes: the VM's template holds the volume: {template:?}"
    );
    let entry = hp.wait_ready("hp");
    let fs_target = entry["target"].as_str().unwrap_or_default().to_string();
    assert!(fs_target.starts_with("sd"), "a SCSI target: {entry}");
    let attach_pod = entry["hotplugVolume"]["attachPodName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(attach_pod.starts_with("hp-volume-"), "{entry}");
    let pods = hp.attachment_pods();
    assert!(
        pods.iter()
            .any(|(name, claims)| *name == attach_pod && claims.contains(&"hp".to_string())),
        "the attachment pod {attach_pod} mounts the claim: {pods:?}"
    );
    let disks = hp.wait_guest("the filesystem claim written", |d| {
        d.iter()
            .any(|d| d.sectors == fs_sectors && d.head == fs_head)
    });
    let fs_disk = disks.iter().find(|d| d.sectors == fs_sectors).unwrap();
    assert_eq!(
        fs_disk.dev, fs_target,
        "the guest's device is the VMI's target"
    );
    let img = fs_dir.join("disk.img");
    let meta = std::fs::metadata(&img).expect("disk.img made on the claim");
    assert_eq!(meta.len(), img_size, "KubeVirt's size: the request");
    assert_eq!(meta.uid(), 107, "disk.img is QEMU's");
    let inode = meta.ino();
    assert_eq!(read_at(&img, 0, fs_head.len()), fs_head.as_bytes());

    // Bad input: an attached volume again, by name and by claim — KubeVirt's conflicts.
    let vmi_before = hp.vmi();
    let err = deployed
        .try_vm_subresource("guest", "addvolume", &add_volume_body("hp", "hp"))
        .expect_err("a second add of hp is refused");
    assert!(
        err.contains("Unable to add volume [hp] because volume with that name already exists"),
        "{err}"
    );
    let err = deployed
        .try_vm_subresource("guest", "addvolume", &add_volume_body("hp2", "hp"))
        .expect_err("the claim under another name is refused");
    assert!(
        err.contains("Unable to add volume source [hp] because it already exists"),
        "{err}"
    );
    let vmi_after = hp.vmi();
    assert_eq!(
        vmi_after["spec"]["volumes"], vmi_before["spec"]["volumes"],
        "the refused adds changed nothing"
    );
    assert_eq!(
        hp.template_volumes().len(),
        template.len(),
        "the refused adds left the VM's template as it was"
    );

    // The block claim beside it: a device node in the launcher pod, allowed in its device
    // cgroup; the guest's write reaches the loop device.
    let blk_sectors = BLOCK_SIZE / 512;
    let blk_head = format!("KVRS-HP-{blk_sectors}");
    hp.add("hpb", "hpb");
    let entry = hp.wait_ready("hpb");
    let blk_target = entry["target"].as_str().unwrap_or_default().to_string();
    assert!(
        blk_target.starts_with("sd") && blk_target != fs_target,
        "a SCSI target of its own: {entry}"
    );
    let disks = hp.wait_guest("the block claim written", |d| {
        d.iter()
            .any(|d| d.sectors == blk_sectors && d.head == blk_head)
    });
    let blk_disk = disks.iter().find(|d| d.sectors == blk_sectors).unwrap();
    assert_eq!(
        blk_disk.dev, blk_target,
        "the guest's device is the VMI's target"
    );
    assert_eq!(
        read_at(&blk_backing, 0, blk_head.len()),
        blk_head.as_bytes(),
        "the guest's write is on the claim's device"
    );
    let launcher_uid = pod["metadata"]["uid"].as_str().expect("the pod's UID");
    let blk_node = std::path::Path::new(kvrs_test_cluster::node::KUBELET_ROOT)
        .join("pods")
        .join(launcher_uid)
        .join("volumes/kubernetes.io~empty-dir/hotplug-disks/hpb");
    let node_meta = std::fs::symlink_metadata(&blk_node)
        .unwrap_or_else(|e| panic!("{}: {e}", blk_node.display()));
    use std::os::unix::fs::FileTypeExt;
    assert!(node_meta.file_type().is_block_device(), "{node_meta:?}");
    assert_eq!(
        node_meta.rdev(),
        std::fs::metadata(&blk_dev).unwrap().rdev(),
        "the launcher's node is the claim's device"
    );
    assert_eq!(node_meta.uid(), 107, "the device node is QEMU's");
    let rdev = node_meta.rdev();
    // The attachment pod's container has the device as its own volumeDevice (the runtime
    // allows it there); the launcher's container has it through the handler.
    let launcher_cgroups = |allowing: Vec<String>| -> Vec<String> {
        let pod_dir = format!("/pod{launcher_uid}/");
        allowing
            .into_iter()
            .filter(|p| p.contains(&pod_dir))
            .collect()
    };
    let allowing = device_cgroups_allowing(rdev);
    assert_eq!(
        launcher_cgroups(allowing.clone()).len(),
        1,
        "the launcher container's device cgroup allows the claim: {allowing:?}"
    );

    // Unplugged: gone from the guest and the launcher pod, the data stays on the device.
    hp.remove("hpb");
    hp.wait_gone("hpb");
    hp.wait_guest("the block claim unplugged", |d| {
        !d.iter().any(|d| d.sectors == blk_sectors)
    });
    wait_for(
        "the block device node gone from the launcher pod",
        Duration::from_secs(60),
        || (!blk_node.exists()).then_some(()),
        || deployed.logs(),
    );
    assert_eq!(
        launcher_cgroups(device_cgroups_allowing(rdev)),
        Vec::<String>::new(),
        "the launcher's device cgroup denies the unplugged claim again"
    );
    assert_eq!(
        read_at(&blk_backing, 0, blk_head.len()),
        blk_head.as_bytes()
    );

    // Unplug the filesystem claim: gone from the guest, the VMI, the node; the data stays.
    hp.remove("hp");
    hp.wait_gone("hp");
    hp.wait_guest("the filesystem claim unplugged", |d| {
        !d.iter().any(|d| d.sectors == fs_sectors)
    });
    assert!(
        !hp.template_volumes().contains_key("hp"),
        "the VM's template lost the volume"
    );
    wait_for(
        "no attachment pod mounting hp",
        Duration::from_secs(120),
        || {
            (!hp.attachment_pods()
                .iter()
                .any(|(_, claims)| claims.contains(&"hp".to_string())))
            .then_some(())
        },
        || format!("{:?}\n{}", hp.attachment_pods(), deployed.logs()),
    );
    wait_for(
        "hp.img unmounted from the launcher pod",
        Duration::from_secs(60),
        || (!hotplug_mounts().iter().any(|m| m.ends_with("/hp.img"))).then_some(()),
        || format!("{:?}", hotplug_mounts()),
    );
    assert_eq!(read_at(&img, 0, fs_head.len()), fs_head.as_bytes());
    write_at(&img, MIB, HOST_MARKER.as_bytes());

    // Plugged again: the guest's own data and the host's marker.
    hp.add("hp", "hp");
    hp.wait_ready("hp");
    let disks = hp.wait_guest("the filesystem claim back with its data", |d| {
        d.iter()
            .any(|d| d.sectors == fs_sectors && d.head == fs_head && d.marker == HOST_MARKER)
    });
    eprintln!("real hotplug: the guest's disks after the re-plug: {disks:?}");
    let meta = std::fs::metadata(&img).unwrap();
    assert_eq!(
        (meta.ino(), meta.len()),
        (inode, img_size),
        "disk.img was not recreated"
    );

    // Unplugged again, the VM deleted: nothing mounted is left, the data stays.
    hp.remove("hp");
    hp.wait_gone("hp");
    hp.wait_guest("no SCSI disk left", |d| d.is_empty());
    deployed.kubectl_ok(&["delete", "vm", "-n", NS, "guest", "--wait=false"]);
    deployed.wait_vm_down("guest");
    wait_for(
        "no hotplug mount left on the node",
        Duration::from_secs(60),
        || hotplug_mounts().is_empty().then_some(()),
        || format!("{:?}", hotplug_mounts()),
    );
    assert_eq!(read_at(&img, 0, fs_head.len()), fs_head.as_bytes());

    let mut deployed = deployed;
    let node = deployed.node.take().expect("the node");
    node.stop()
        .unwrap_or_else(|e| panic!("the node left something behind: {e}"));
}
