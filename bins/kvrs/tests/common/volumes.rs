//! Storage for the real-node tests, as an operator without a provisioner has it: static `local`
//! PersistentVolumes made by the test with node affinity to the node (a directory for a
//! filesystem claim, a loop device for a block claim), each claim pinned to its volume; the
//! fixture guest VM with extra disks and `KVRS-RUN:` lines; byte reads and writes of a volume
//! from the host; and the `Deployed` calls these tests make in their namespace.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kvrs_test_cluster::wait_for;
use kvrs_test_guest::pod::repo_root;
use serde_json::{Value, json};

use super::kubectl_json;
use super::real_node::Deployed;

pub const MIB: u64 = 1024 * 1024;

/// A loop device detached, or a mount point unmounted, when the test ends.
pub enum Cleanup {
    Loop(PathBuf),
    Unmount(PathBuf),
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = match self {
            Cleanup::Loop(dev) => Command::new("losetup").arg("-d").arg(dev).status(),
            Cleanup::Unmount(dir) => Command::new("umount").arg(dir).status(),
        };
    }
}

/// A `size`-byte sparse file behind a new loop device; the device detached on drop.
pub fn loop_device(backing: &Path, size: u64) -> (PathBuf, Cleanup) {
    assert!(
        Path::new("/dev/loop-control").exists(),
        "no /dev/loop-control: this machine cannot make the loop device a block PV needs"
    );
    std::fs::File::create(backing)
        .and_then(|f| f.set_len(size))
        .expect("the loop device's backing file");
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(backing)
        .output()
        .expect("running losetup");
    assert!(out.status.success(), "losetup --find --show: {out:?}");
    let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (dev.clone(), Cleanup::Loop(dev))
}

/// Writes `text` at `offset` of a file or device and syncs it.
pub fn write_at(path: &Path, offset: u64, text: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(text).unwrap();
    f.sync_all().unwrap();
}

/// `len` bytes at `offset` of a file or device.
pub fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut f =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = vec![0; len];
    f.read_exact(&mut buf).unwrap();
    buf
}

/// A `local` PV named `<ns>-<name>` on node `host` (`path`: a directory, or a block device with
/// `mode` Block) and the claim `name` in `ns` pinned to it, as one `List`.
pub fn local_claim(
    ns: &str,
    name: &str,
    path: &Path,
    mode: &str,
    capacity: &str,
    request: &str,
    host: &str,
) -> String {
    let pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("{ns}-{name}")},
        "spec": {
            "capacity": {"storage": capacity},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "local": {"path": path.to_str().unwrap()},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
            ]}]}}
        }
    });
    json!({"apiVersion": "v1", "kind": "List", "items": [pv, claim(ns, name, mode, request)]})
        .to_string()
}

/// The claim `name` in `ns`, pinned to the PV `<ns>-<name>`.
pub fn claim(ns: &str, name: &str, mode: &str, request: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "storageClassName": "",
            "volumeName": format!("{ns}-{name}"),
            "resources": {"requests": {"storage": request}}
        }
    })
}

/// The fixture VM (`fixtures/run/guest-vm.yaml`) named `name` in `ns`, with `disks` (virtio,
/// after the cloud-init disk), `volumes` (YAML list items, 8-space indented) and `run` as the
/// guest's `KVRS-RUN:` lines.
pub fn guest_vm(ns: &str, name: &str, disks: &[&str], volumes: &str, run: &[String]) -> String {
    let fixture = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the fixture VM");
    let cloud_init_disk =
        "            - name: cloudinitdisk\n              disk:\n                bus: virtio\n";
    let hello = "              KVRS-E2E: hello from cloud-init\n";
    for part in [
        cloud_init_disk,
        hello,
        "  name: guest\n",
        "namespace: default",
    ] {
        assert!(fixture.contains(part), "the fixture has {part:?}");
    }
    let disks: String = disks
        .iter()
        .map(|d| {
            format!("            - name: {d}\n              disk:\n                bus: virtio\n")
        })
        .collect();
    let run: String = run
        .iter()
        .map(|l| format!("              KVRS-RUN: {l}\n"))
        .collect();
    fixture
        .replace("namespace: default", &format!("namespace: {ns}"))
        .replacen("  name: guest\n", &format!("  name: {name}\n"), 1)
        .replace(cloud_init_disk, &format!("{cloud_init_disk}{disks}"))
        .replace(hello, &format!("{hello}{run}"))
        + volumes
}

/// The `storage` quantity `q` in bytes; only the binary suffixes the tests' objects use.
pub fn storage_bytes(q: &Value) -> u64 {
    let q = q
        .as_str()
        .unwrap_or_else(|| panic!("a storage quantity: {q}"));
    let (n, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = n.parse().unwrap_or_else(|_| panic!("quantity {q}"));
    n * match unit {
        "" => 1,
        "Ki" => 1024,
        "Mi" => MIB,
        "Gi" => 1024 * MIB,
        other => panic!("unexpected unit {other} in {q}"),
    }
}

/// KubeVirt's `disk.img` size for a bound claim (host-disk): the request, or the capacity when
/// smaller, rounded down to a whole MiB.
pub fn kubevirt_disk_img_size(pvc: &Value) -> u64 {
    let request = storage_bytes(&pvc["spec"]["resources"]["requests"]["storage"]);
    let capacity = storage_bytes(&pvc["status"]["capacity"]["storage"]);
    let size = request.min(capacity);
    size - size % MIB
}

impl Deployed {
    /// `kubectl apply` of `text` (JSON or YAML).
    pub fn apply(&self, text: &str) {
        let out = self.cluster.kubectl_with_stdin(["apply", "-f", "-"], text);
        assert!(
            out.status.success(),
            "kubectl apply: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The `kind` object `name` in the test's namespace, if it exists.
    pub fn get(&self, kind: &str, name: &str) -> Option<Value> {
        kubectl_json(&self.cluster, &["get", kind, "-n", self.ns, name])
    }

    /// `PUT` of the VM subresource `verb` (`start`, `stop`, ...) with `body` through the
    /// aggregated API: kubectl's output, or its error text.
    pub fn try_vm_subresource(&self, name: &str, verb: &str, body: &str) -> Result<(), String> {
        let path = format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{}/virtualmachines/{name}/{verb}",
            self.ns
        );
        let out = self
            .cluster
            .kubectl_with_stdin(["replace", "--raw", &path, "-f", "-"], body);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `PUT` of the VM subresource `verb` with an empty body; panics when refused.
    pub fn vm_subresource(&self, name: &str, verb: &str) {
        if let Err(e) = self.try_vm_subresource(name, verb, "{}") {
            panic!("{verb} of {name}: {e}\n{}", self.logs());
        }
    }

    /// The live launcher pod of VMI `name`, if any.
    pub fn launcher_of(&self, name: &str) -> Option<Value> {
        let pods = kubectl_json(
            &self.cluster,
            &[
                "get",
                "pods",
                "-n",
                self.ns,
                "-l",
                &format!("vm.kubevirt.io/name={name}"),
            ],
        )?;
        pods["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["deletionTimestamp"].is_null())
            .cloned()
    }

    /// Waits until VM `name` has no VMI and no launcher pod.
    pub fn wait_vm_down(&self, name: &str) {
        wait_for(
            &format!("the VM {name} stopped: no VMI, no launcher pod"),
            Duration::from_secs(240),
            || (self.get("vmi", name).is_none() && self.launcher_of(name).is_none()).then_some(()),
            || self.logs(),
        );
    }

    /// Waits until the claim `name` is Bound by kube-controller-manager's PV binder.
    pub fn wait_claim_bound(&self, name: &str) -> Value {
        wait_for(
            &format!("the claim {name} Bound by the PV binder"),
            Duration::from_secs(120),
            || {
                self.get("pvc", name)
                    .filter(|p| p["status"]["phase"] == "Bound")
            },
            || self.logs(),
        )
    }
}
