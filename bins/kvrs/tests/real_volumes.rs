//! Every volume type a VM boots with, on the real node (issue 45, Deliver 4 without hotplug):
//! kvrs deployed as an operator deploys it (`common::real_node::Deployed`: a real
//! kube-apiserver, etcd, kube-controller-manager and kube-scheduler, the real kubelet +
//! containerd + runc, kvrs's images, the manifests of `bins/deploy`).
//!
//! Storage is what an operator without a provisioner has: static `local` PersistentVolumes made
//! by the test with node affinity to the node, bound by kube-controller-manager's PV binder
//! (each claim pinned to its volume, `storageClassName: ""`): a directory for a filesystem
//! claim and a loop device (`losetup`) for a block claim. The kubelet mounts them as it mounts
//! any local volume (fsGroup 107 for the directory); virt-launcher makes the filesystem claim's
//! `disk.img` at KubeVirt's size, the block claim reaches QEMU as the pod's device node.
//!
//! The guest (`kvrs_test_guest`, busybox) runs its checks from cloud-init `KVRS-RUN:` lines,
//! copies what it read from the ConfigMap, Secret, ServiceAccount and downwardAPI disks under
//! `/srv`, writes the results to `/srv/r` and then serves `/srv` with busybox httpd; the test
//! reads them over HTTP on the launcher pod's IP (the serial console has no reader on a real
//! node) and compares them with the API objects: the ConfigMap and Secret it created, the
//! namespace and cluster CA of the ServiceAccount (its token is checked with a TokenReview),
//! the launcher pod's labels.
//!
//! The guest writes the start of both claims; the VM is stopped and started through the
//! subresource API (a new launcher pod); the host writes a marker into both volumes between
//! the boots; the second guest finds its own data and the host's marker, and `disk.img` is the
//! same file.
//!
//! Bad input, three VMs at once: a claim on a 4 MiB tmpfs asked for 64 MiB (the handler's
//! `Synchronized` condition with KubeVirt's host-disk message, nothing made on the volume and
//! its file intact), a claim that does not exist (KubeVirt's `FailedPvcNotFound` condition and
//! VM status `ErrorPvcNotFound`, no pod; the VMI runs once the claim is made), a filesystem
//! claim pinned to a block volume (the PV binder refuses the mode, the launcher pod is
//! unschedulable with the scheduler's reason, the VM `ErrorUnschedulable`, the device's bytes
//! untouched — nothing formats it).
//!
//! Run it alone on the node: `flock /tmp/kvrs-real-node.lock cargo test -p kvrs --test
//! real_volumes`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::real_node::Deployed;
use common::volumes::{
    Cleanup, MIB, claim, guest_vm, kubevirt_disk_img_size, local_claim, loop_device, read_at,
    write_at,
};
use common::{http_get, kubectl_json};
use kvrs_test_cluster::wait_for;
use kvrs_test_guest::pod::is_root;
use serde_json::{Value, json};

const NS: &str = "kvrs-real-volumes";
/// The port of the guest's busybox httpd, serving `/srv`.
const GUEST_PORT: u16 = 8080;
/// What the guest writes at the start of each claim (12 bytes each).
const FS_DATA: &str = "KVRS-DATA-OK";
const BLOCK_DATA: &str = "KVRS-BLCK-OK";
/// What the host writes 1 MiB into each volume while the VM is stopped.
const HOST_MARKER: &str = "HOST-MARKER";
/// The ConfigMap's data, the Secret's `stringData`.
const GREETING: &str = "hello-from-configmap";
const APP_CONF: &str = "mode=real-node\nlevel=3\n";
const PASSWORD: &str = "s3cr3t-on-the-node";
/// The filesystem claim asks for less than its volume's capacity: KubeVirt's image takes the
/// request.
const FS_REQUEST: &str = "64Mi";
const FS_CAPACITY: &str = "128Mi";
const BLOCK_SIZE: u64 = 64 * MIB;

/// The guest's disks after the root and cloud-init disks (vda, vdb): `(disk name, device)`.
const DISKS: [(&str, &str); 7] = [
    ("data", "vdc"),
    ("blk", "vdd"),
    ("cfg", "vde"),
    ("sec", "vdf"),
    ("sa", "vdg"),
    ("scratch", "vdh"),
    ("podinfo", "vdi"),
];
const EMPTY_DISK_MIB: u64 = 16;
/// How much of the mismatched block volume the test compares before and after.
const KEPT_BYTES: usize = 2 * 1024 * 1024;

/// The guest's checks of every disk of [`DISKS`]; the results land in `/srv/r` (written last,
/// by a rename) and httpd serves `/srv`.
fn guest_checks() -> Vec<String> {
    let dev = |disk: &str| DISKS.iter().find(|(d, _)| *d == disk).unwrap().1;
    let mut run = vec!["mkdir -p /srv /mnt/cfg /mnt/sec /mnt/sa /mnt/podinfo".to_string()];
    for dir in ["cfg", "sec", "sa", "podinfo"] {
        run.push(format!(
            "mkdir -p /srv/{dir} && mount -t iso9660 -o ro /dev/{} /mnt/{dir} && cp /mnt/{dir}/* /srv/{dir}/ && echo \"{dir} mounted\" >>/srv/r.tmp",
            dev(dir)
        ));
    }
    run.push(format!(
        "echo \"emptydisk sectors=$(cat /sys/block/{}/size)\" >>/srv/r.tmp",
        dev("scratch")
    ));
    for (disk, data) in [("data", FS_DATA), ("blk", BLOCK_DATA)] {
        let d = dev(disk);
        run.push(format!(
            "echo \"{disk} sectors=$(cat /sys/block/{d}/size)\" >>/srv/r.tmp"
        ));
        run.push(format!(
            "echo \"{disk} marker=[$(dd if=/dev/{d} bs=1048576 skip=1 count=1 2>/dev/null | head -c {} | tr -d '\\000')]\" >>/srv/r.tmp",
            HOST_MARKER.len()
        ));
        run.push(format!(
            "echo \"{disk} before=[$(head -c {} /dev/{d} | tr -d '\\000')]\" >>/srv/r.tmp",
            data.len()
        ));
        run.push(format!(
            "printf {data} | dd of=/dev/{d} conv=fsync 2>/dev/null && echo '{disk} written' >>/srv/r.tmp"
        ));
    }
    run.push("echo 'checks done' >>/srv/r.tmp && mv /srv/r.tmp /srv/r".into());
    run.push(format!("httpd -p {GUEST_PORT} -h /srv"));
    run
}

/// The volumes of the main VM, in [`DISKS`] order.
fn volumes() -> String {
    format!(
        "        - name: data\n          persistentVolumeClaim:\n            claimName: data\n\
         \x20       - name: blk\n          persistentVolumeClaim:\n            claimName: blk\n\
         \x20       - name: cfg\n          configMap:\n            name: app-config\n\
         \x20       - name: sec\n          secret:\n            secretName: app-secret\n\
         \x20       - name: sa\n          serviceAccount:\n            serviceAccountName: guest-sa\n\
         \x20       - name: scratch\n          emptyDisk:\n            capacity: {EMPTY_DISK_MIB}Mi\n\
         \x20       - name: podinfo\n          downwardAPI:\n            fields:\n\
         \x20             - path: labels\n                fieldRef:\n                  fieldPath: metadata.labels\n"
    )
}

impl Deployed {
    /// Waits for VMI `name` Running and its guest's results; returns them and the pod.
    fn boot_results(&self, name: &str, round: &str) -> (BTreeMap<String, String>, Value) {
        let started = Instant::now();
        wait_for(
            &format!("the VMI {name} Running ({round})"),
            Duration::from_secs(300),
            || {
                self.get("vmi", name).filter(|v| {
                    v["status"]["phase"] == "Running"
                        && v["metadata"]["deletionTimestamp"].is_null()
                })
            },
            || self.logs(),
        );
        let pod = self
            .launcher_of(name)
            .unwrap_or_else(|| panic!("no launcher pod of {name}\n{}", self.logs()));
        let ip = pod["status"]["podIP"]
            .as_str()
            .expect("the pod's IP")
            .to_string();
        let text = wait_for(
            &format!("the guest's results on http://{ip}:{GUEST_PORT}/r ({round})"),
            Duration::from_secs(300),
            || {
                let r = http_get(&ip, GUEST_PORT, "/r");
                if r.is_none() {
                    std::thread::sleep(Duration::from_secs(1));
                }
                r
            },
            || self.logs(),
        );
        eprintln!(
            "real volumes: {round}: results after {:.1} s:\n{text}",
            started.elapsed().as_secs_f64()
        );
        assert!(text.contains("checks done"), "{text}");
        let results = text
            .lines()
            .map(|l| {
                l.split_once('=').map_or_else(
                    || (l.to_string(), String::new()),
                    |(k, v)| (k.to_string(), v.to_string()),
                )
            })
            .collect();
        (results, pod)
    }

    /// The VMI `name`'s condition `kind`, once `pick` accepts it.
    fn wait_condition(&self, name: &str, kind: &str, pick: impl Fn(&Value) -> bool) -> Value {
        wait_for(
            &format!("the VMI {name}'s {kind} condition"),
            Duration::from_secs(240),
            || {
                let vmi = self.get("vmi", name)?;
                vmi["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == kind && pick(c))
                    .cloned()
            },
            || {
                format!(
                    "{}\n{}",
                    self.get("vmi", name).unwrap_or_default(),
                    self.logs()
                )
            },
        )
    }
}

fn result<'a>(results: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    results
        .get(key)
        .unwrap_or_else(|| panic!("the guest reported no {key:?}: {results:?}"))
}

/// The labels of the downward API's `labels` file (`key="value"` lines, Go-quoted values).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("a label line: {l}"));
            let v: String = serde_json::from_str(v).unwrap_or_else(|e| panic!("{v}: {e}"));
            (k.to_string(), v)
        })
        .collect()
}

#[test]
fn every_volume_type_boots_on_the_real_node_and_claims_keep_their_data() {
    assert!(
        is_root(),
        "the real node runs containerd, runc and the kubelet, and the test makes loop devices: run as root"
    );
    let work = tempfile::Builder::new()
        .prefix("kvrs-real-volumes-")
        .tempdir_in("/var/tmp")
        .expect("a work directory");
    let fs_dir = work.path().join("data");
    std::fs::create_dir(&fs_dir).unwrap();
    let (block_dev, _block) = loop_device(&work.path().join("blk.img"), BLOCK_SIZE);
    let (mismatch_dev, _mismatch) = loop_device(&work.path().join("mismatch.img"), BLOCK_SIZE);
    let small_dir = work.path().join("small");
    std::fs::create_dir(&small_dir).unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&small_dir)
        .status()
        .expect("mount");
    assert!(mount.success(), "mounting a 4 MiB tmpfs");
    let _small = Cleanup::Unmount(small_dir.clone());

    let kvm = kvrs_node::host_devices::kvm_check().is_ok();
    let deployed = Deployed::start(NS, !kvm);
    let host = deployed.wait_schedulable_host();
    deployed.kubectl_ok(&["create", "namespace", NS]);

    // The objects the guest's disks come from.
    deployed.apply(&local_claim(
        NS,
        "data",
        &fs_dir,
        "Filesystem",
        FS_CAPACITY,
        FS_REQUEST,
        &host,
    ));
    deployed.apply(&local_claim(
        NS, "blk", &block_dev, "Block", "64Mi", "64Mi", &host,
    ));
    deployed.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "app-config", "namespace": NS},
             "data": {"greeting": GREETING, "app.conf": APP_CONF}},
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "app-secret", "namespace": NS},
             "stringData": {"password": PASSWORD}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "guest-sa", "namespace": NS}},
        ]})
        .to_string(),
    );
    for claim in ["data", "blk"] {
        deployed.wait_claim_bound(claim);
    }
    let data_pvc = deployed.get("pvc", "data").expect("the data claim");
    let img_size = kubevirt_disk_img_size(&data_pvc);

    let disks: Vec<&str> = DISKS.iter().map(|(d, _)| *d).collect();
    deployed.apply(&guest_vm(NS, "guest", &disks, &volumes(), &guest_checks()));

    // First boot: the config disks as the API holds them, empty claims written.
    let (first, pod) = deployed.boot_results("guest", "first boot");
    for dir in ["cfg", "sec", "sa", "podinfo"] {
        assert!(
            first.contains_key(&format!("{dir} mounted")),
            "{dir}: {first:?}"
        );
    }
    let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    let file = |path: &str| {
        http_get(&ip, GUEST_PORT, path)
            .unwrap_or_else(|| panic!("the guest serves {path}\n{first:?}"))
    };
    let cm = deployed
        .get("configmap", "app-config")
        .expect("the ConfigMap");
    assert_eq!(
        file("/cfg/greeting"),
        cm["data"]["greeting"].as_str().unwrap()
    );
    assert_eq!(
        file("/cfg/app.conf"),
        cm["data"]["app.conf"].as_str().unwrap()
    );
    assert_eq!(file("/sec/password"), PASSWORD);
    assert_eq!(
        file("/sa/namespace"),
        NS,
        "the ServiceAccount disk's namespace"
    );
    let root_ca = deployed
        .get("configmap", "kube-root-ca.crt")
        .expect("the namespace's kube-root-ca.crt");
    assert_eq!(
        file("/sa/ca.crt"),
        root_ca["data"]["ca.crt"].as_str().unwrap(),
        "the ServiceAccount disk's CA is the cluster's"
    );
    let review = deployed.cluster.kubectl_with_stdin(
        ["create", "-o", "json", "-f", "-"],
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": file("/sa/token").trim()}})
        .to_string(),
    );
    let review: Value = serde_json::from_slice(&review.stdout)
        .unwrap_or_else(|e| panic!("the TokenReview: {e}: {review:?}"));
    assert_eq!(
        review["status"]["user"]["username"],
        format!("system:serviceaccount:{NS}:guest-sa"),
        "the token on the ServiceAccount disk is guest-sa's: {review}"
    );
    // The labels the pod had when the launcher built the disk: each one the pod's, and the
    // VMI's own identity among them.
    let labels: BTreeMap<String, String> =
        serde_json::from_value(pod["metadata"]["labels"].clone()).expect("the pod's labels");
    let on_disk = parse_labels(&file("/podinfo/labels"));
    for (k, v) in &on_disk {
        assert_eq!(
            labels.get(k),
            Some(v),
            "label {k} on the downwardAPI disk: {labels:?}"
        );
    }
    let vmi = deployed.get("vmi", "guest").expect("the VMI");
    assert_eq!(
        on_disk.get("kubevirt.io/created-by").map(String::as_str),
        vmi["metadata"]["uid"].as_str(),
        "the downwardAPI disk names the VMI that made the pod: {on_disk:?}"
    );
    assert_eq!(
        result(&first, "emptydisk sectors"),
        (EMPTY_DISK_MIB * MIB / 512).to_string()
    );
    assert_eq!(result(&first, "data sectors"), (img_size / 512).to_string());
    assert_eq!(
        result(&first, "blk sectors"),
        (BLOCK_SIZE / 512).to_string()
    );
    for disk in ["data", "blk"] {
        assert_eq!(result(&first, &format!("{disk} before")), "[]", "{first:?}");
        assert_eq!(result(&first, &format!("{disk} marker")), "[]", "{first:?}");
        assert!(first.contains_key(&format!("{disk} written")), "{first:?}");
    }
    let img = fs_dir.join("disk.img");
    let meta = std::fs::metadata(&img).expect("virt-launcher made disk.img on the local PV");
    assert_eq!(
        meta.len(),
        img_size,
        "KubeVirt's size: the request, below the capacity"
    );
    assert!(meta.blocks() * 512 < meta.len(), "disk.img is sparse");
    assert_eq!(meta.uid(), 107, "disk.img is QEMU's");
    let inode = meta.ino();
    assert_eq!(read_at(&img, 0, FS_DATA.len()), FS_DATA.as_bytes());
    assert_eq!(
        read_at(&block_dev, 0, BLOCK_DATA.len()),
        BLOCK_DATA.as_bytes()
    );

    // Stop; the host marks both volumes; start: a new pod, the same data.
    deployed.vm_subresource("guest", "stop");
    deployed.wait_vm_down("guest");
    write_at(&img, MIB, HOST_MARKER.as_bytes());
    write_at(&block_dev, MIB, HOST_MARKER.as_bytes());
    deployed.vm_subresource("guest", "start");
    let (second, pod2) = deployed.boot_results("guest", "after stop and start");
    assert_ne!(
        pod2["metadata"]["uid"], pod["metadata"]["uid"],
        "the second boot runs in a new launcher pod"
    );
    assert_eq!(result(&second, "data before"), format!("[{FS_DATA}]"));
    assert_eq!(result(&second, "blk before"), format!("[{BLOCK_DATA}]"));
    for disk in ["data", "blk"] {
        assert_eq!(
            result(&second, &format!("{disk} marker")),
            format!("[{HOST_MARKER}]"),
            "{second:?}"
        );
    }
    let meta = std::fs::metadata(&img).unwrap();
    assert_eq!(
        (meta.ino(), meta.len()),
        (inode, img_size),
        "disk.img was not recreated"
    );
    deployed.kubectl_ok(&["delete", "vm", "-n", NS, "guest", "--wait=false"]);
    deployed.wait_vm_down("guest");

    let late_dir = work.path().join("late");
    std::fs::create_dir(&late_dir).unwrap();
    bad_input(&deployed, &host, &small_dir, &late_dir, &mismatch_dev);

    let mut deployed = deployed;
    let node = deployed.node.take().expect("the node");
    node.stop()
        .unwrap_or_else(|e| panic!("the node left something behind: {e}"));
}

/// Three VMs KubeVirt does not run, at once (the one whose claim is missing runs once the
/// claim is made); each volume keeps what it had.
fn bad_input(
    deployed: &Deployed,
    host: &str,
    small_dir: &Path,
    late_dir: &Path,
    mismatch_dev: &Path,
) {
    let keep = small_dir.join("keep.txt");
    std::fs::write(&keep, "kept by the test\n").unwrap();
    write_at(mismatch_dev, 0, b"KVRS-BLOCK-KEEP");
    let device_before = read_at(mismatch_dev, 0, KEPT_BYTES);

    deployed.apply(&local_claim(
        NS,
        "small",
        small_dir,
        "Filesystem",
        "64Mi",
        "64Mi",
        host,
    ));
    // A filesystem claim pinned to a block volume (the PV's mode differs from the claim's).
    let pv = local_claim(NS, "mismatch", mismatch_dev, "Block", "64Mi", "64Mi", host);
    let mut list: Value = serde_json::from_str(&pv).unwrap();
    list["items"][1] = claim(NS, "mismatch", "Filesystem", "64Mi");
    deployed.apply(&list.to_string());
    let one_disk = |claim: &str| {
        format!(
            "        - name: data\n          persistentVolumeClaim:\n            claimName: {claim}\n"
        )
    };
    for (name, claim) in [
        ("small", "small"),
        ("orphan", "late-claim"),
        ("mismatch", "mismatch"),
    ] {
        deployed.apply(&guest_vm(NS, name, &["data"], &one_disk(claim), &[]));
    }

    // Too small: the launcher refuses to make disk.img, the handler reports it.
    let small_pvc = deployed.wait_claim_bound("small");
    let demanded = kubevirt_disk_img_size(&small_pvc);
    let sync = deployed.wait_condition("small", "Synchronized", |c| c["status"] == "False");
    assert_eq!(
        sync["reason"], "Synchronizing with the Domain failed.",
        "{sync}"
    );
    eprintln!("real volumes: too small: {sync}");
    let message = sync["message"].as_str().unwrap_or_default();
    let expected = format!(
        "preparing host-disks failed: unable to create /var/run/kubevirt-private/vmi-disks/data/disk.img, \
         not enough space, demanded size {demanded} B is bigger than available space "
    );
    assert!(
        message.contains(&expected)
            && message.contains(" B, also after taking 10 % toleration into account"),
        "KubeVirt's host-disk message: {sync}"
    );
    assert!(
        !small_dir.join("disk.img").exists(),
        "no image made on the small volume"
    );
    assert_eq!(
        std::fs::read_to_string(&keep).unwrap(),
        "kept by the test\n"
    );

    // Missing: KubeVirt waits, with its condition and VM status, and makes no pod.
    let synced = deployed.wait_condition("orphan", "Synchronized", |c| c["status"] == "False");
    assert_eq!(synced["reason"], "FailedPvcNotFound", "{synced}");
    eprintln!("real volumes: missing claim: {synced}");
    assert_eq!(
        synced["message"],
        format!("PVC {NS}/late-claim does not exist, waiting for it to appear"),
        "{synced}"
    );
    wait_for(
        "the VM orphan's printableStatus ErrorPvcNotFound (KubeVirt's VirtualMachineStatusPvcNotFound)",
        Duration::from_secs(120),
        || {
            deployed
                .get("vm", "orphan")
                .filter(|v| v["status"]["printableStatus"] == "ErrorPvcNotFound")
        },
        || deployed.logs(),
    );
    assert!(
        deployed.launcher_of("orphan").is_none(),
        "no pod for a VMI whose claim is missing"
    );
    // The claim appears: the same VMI gets its pod and runs.
    deployed.apply(&local_claim(
        NS,
        "late-claim",
        late_dir,
        "Filesystem",
        "64Mi",
        "64Mi",
        host,
    ));
    wait_for(
        "the VMI orphan Running once its claim exists",
        Duration::from_secs(300),
        || {
            deployed
                .get("vmi", "orphan")
                .filter(|v| v["status"]["phase"] == "Running")
        },
        || deployed.logs(),
    );
    assert!(
        late_dir.join("disk.img").exists(),
        "the late claim got its disk.img"
    );

    // Mismatch: the PV binder refuses the mode, the pod cannot be scheduled.
    let event = wait_for(
        "the PV binder's VolumeMismatch event on the claim mismatch",
        Duration::from_secs(120),
        || {
            let events = kubectl_json(
                &deployed.cluster,
                &[
                    "get",
                    "events",
                    "-n",
                    NS,
                    "--field-selector",
                    "involvedObject.name=mismatch,involvedObject.kind=PersistentVolumeClaim",
                ],
            )?;
            events["items"]
                .as_array()?
                .iter()
                .find(|e| e["reason"] == "VolumeMismatch")
                .cloned()
        },
        || deployed.logs(),
    );
    assert!(
        event["message"]
            .as_str()
            .is_some_and(|m| m.contains("volumeMode")),
        "the binder names the mode: {event}"
    );
    assert_eq!(
        deployed.get("pvc", "mismatch").unwrap()["status"]["phase"],
        "Pending"
    );
    let scheduled = deployed.wait_condition("mismatch", "PodScheduled", |c| c["status"] == "False");
    wait_for(
        "the VM mismatch's printableStatus ErrorUnschedulable",
        Duration::from_secs(120),
        || {
            deployed
                .get("vm", "mismatch")
                .filter(|v| v["status"]["printableStatus"] == "ErrorUnschedulable")
        },
        || deployed.logs(),
    );
    assert_eq!(scheduled["reason"], "Unschedulable", "{scheduled}");
    eprintln!("real volumes: block volume, filesystem claim: {event}\n{scheduled}");
    assert!(
        scheduled["message"]
            .as_str()
            .is_some_and(|m| m.contains("unbound immediate PersistentVolumeClaims")),
        "the scheduler's reason: {scheduled}"
    );
    assert!(
        read_at(mismatch_dev, 0, KEPT_BYTES) == device_before,
        "the block volume's bytes are untouched (nothing formatted it)"
    );

    for name in ["small", "orphan", "mismatch"] {
        deployed.kubectl_ok(&["delete", "vm", "-n", NS, name, "--wait=false"]);
    }
    for name in ["small", "orphan", "mismatch"] {
        deployed.wait_vm_down(name);
    }
    assert_eq!(
        std::fs::read_to_string(&keep).unwrap(),
        "kept by the test\n"
    );
    assert!(read_at(mismatch_dev, 0, KEPT_BYTES) == device_before);
}
