//! What this node's devices really offer, found by using them rather than by reading mode bits.
//!
//! A launcher pod gets its own device node, which virt-handler hands to QEMU's user
//! ([`claim_devices`](crate::claim_devices)); the host node's owner and mode (0600 root on some
//! hosts, 0660 root:kvm on a stock Debian one) say nothing about whether QEMU in the pod can use
//! it. Whether KVM works is whether the kernel lets this (privileged) process create a VM with
//! hardware virtualisation behind it — a paravirtual KVM such as `kvm_pvm` creates VMs too, but
//! an ordinary guest kernel hangs on it — which is also what the device plugins advertise and
//! what `kvrs run` decides emulation by.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The KVM device.
pub const KVM_DEVICE: &str = "/dev/kvm";
/// The TUN/TAP clone device.
pub const TUN_DEVICE: &str = "/dev/net/tun";
/// The vhost-net device (module `vhost_net`): virtio-net's data path in the host kernel.
pub const VHOST_NET_DEVICE: &str = "/dev/vhost-net";
/// The vhost-vsock device (module `vhost_vsock`).
pub const VHOST_VSOCK_DEVICE: &str = "/dev/vhost-vsock";

/// Why KVM cannot be used here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvmUnusable {
    /// `/dev/kvm` could not be opened (absent, no permission, no module).
    #[error("opening {KVM_DEVICE}: {0}")]
    Open(String),
    /// The device opened but the kernel refused to create a VM (nested virtualisation off,
    /// firmware disabled, ...).
    #[error("creating a VM on {KVM_DEVICE}: {0}")]
    CreateVm(String),
    /// KVM creates VMs but without hardware virtualisation: the CPU has neither `vmx` nor `svm`
    /// and `/dev/kvm` is backed by a paravirtual module (e.g. `kvm_pvm`, which runs only guest
    /// kernels built for it: an ordinary guest hangs early in its boot).
    #[error(
        "{KVM_DEVICE} creates VMs but without hardware virtualisation (no vmx/svm{backend}), and an ordinary guest kernel does not boot on it"
    )]
    NoHardwareVirtualization {
        /// `; kvm_pvm` when that module is loaded, else empty.
        backend: String,
    },
}

/// Whether hardware virtualisation works here: `/dev/kvm` opens, `KVM_CREATE_VM` succeeds (the
/// VM is closed again at once) and, on x86, the CPU offers `vmx` or `svm` (see
/// [`hardware_virtualization`]) — with the reason when it does not.
pub fn kvm_check() -> Result<(), KvmUnusable> {
    kvm_check_at(Path::new(KVM_DEVICE))
}

/// [`kvm_check`] through another path to the KVM device: the host's `/dev/kvm` seen from a
/// container (`/proc/1/root/dev/kvm`, as virt-handler looks at the host's devices), or a test's
/// stand-in. The reason names `path` when it is not [`KVM_DEVICE`].
pub fn kvm_check_at(path: &Path) -> Result<(), KvmUnusable> {
    use std::os::unix::ffi::OsStrExt;
    let at = |e: String| {
        if path == Path::new(KVM_DEVICE) {
            e
        } else {
            format!("{}: {e}", path.display())
        }
    };
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| KvmUnusable::Open(at(e.to_string())))?;
    let kvm =
        kvm_ioctls::Kvm::new_with_path(c_path).map_err(|e| KvmUnusable::Open(at(e.to_string())))?;
    let vm = kvm
        .create_vm()
        .map_err(|e| KvmUnusable::CreateVm(at(e.to_string())))?;
    drop(vm);
    // A paravirtual KVM (kvm_pvm) creates VMs too, yet an ordinary guest kernel hangs on it.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if !hardware_virtualization(std::env::consts::ARCH, &cpuinfo) {
        let pvm = Path::new("/sys/module/kvm_pvm").exists();
        return Err(KvmUnusable::NoHardwareVirtualization {
            backend: if pvm {
                "; kvm_pvm".into()
            } else {
                String::new()
            },
        });
    }
    Ok(())
}

/// Whether `/proc/cpuinfo` of an `arch` machine shows hardware virtualisation: on x86 the `vmx`
/// (Intel) or `svm` (AMD) flag, which KVM's `kvm_intel` / `kvm_amd` need. On other
/// architectures a VM KVM creates is taken as one that runs.
pub fn hardware_virtualization(arch: &str, cpuinfo: &str) -> bool {
    if !matches!(arch, "x86_64" | "x86") {
        return true;
    }
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

/// Whether hardware virtualisation works here (see [`kvm_check`]).
pub fn kvm_works() -> bool {
    match kvm_check() {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("KVM not usable: {e}");
            false
        }
    }
}

/// Whether `path` is a character device node on this host (e.g. [`VHOST_NET_DEVICE`], which
/// exists only where the `vhost_net` module is loaded or built in).
pub fn device_present(path: impl AsRef<Path>) -> bool {
    std::fs::metadata(path.as_ref()).is_ok_and(|m| m.file_type().is_char_device())
}

/// Whether this host's cgroups are the unified v2 hierarchy (`/sys/fs/cgroup` is a cgroup2
/// file system). Device plugins then grant `rwm` rather than `rw`: runc's eBPF device filter on
/// cgroup v2 denies even `access(2)` on a device without `m`, and libvirt probes the nodes so.
pub fn cgroup2_unified() -> bool {
    nix::sys::statfs::statfs("/sys/fs/cgroup")
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_or_a_missing_path_is_no_device() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vhost-net");
        std::fs::write(&file, b"").unwrap();
        assert!(!device_present(&file));
        assert!(!device_present(dir.path().join("absent")));
        assert!(!device_present(dir.path()));
    }

    #[test]
    fn hardware_virtualization_is_the_vmx_or_svm_flag_on_x86() {
        let intel = "processor\t: 0\nflags\t\t: fpu vme vmx sse\n";
        let amd = "flags\t\t: fpu svm\n";
        let pvm = "processor\t: 0\nflags\t\t: fpu vme hypervisor sse\n";
        assert!(hardware_virtualization("x86_64", intel));
        assert!(hardware_virtualization("x86_64", amd));
        assert!(!hardware_virtualization("x86_64", pvm));
        assert!(!hardware_virtualization("x86_64", ""));
        assert!(!hardware_virtualization("x86_64", "flags\t: vmxfoo\n"));
        assert!(hardware_virtualization("aarch64", ""));
    }

    #[test]
    fn dev_null_is_a_device() {
        assert!(device_present("/dev/null"));
    }

    #[test]
    fn a_file_that_is_no_kvm_device_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kvm");
        std::fs::write(&file, b"").unwrap();
        let err = kvm_check_at(&file).unwrap_err();
        assert!(
            err.to_string().contains(&file.display().to_string()),
            "{err}"
        );
        let err = kvm_check_at(&dir.path().join("absent")).unwrap_err();
        assert!(matches!(err, KvmUnusable::Open(_)), "{err}");
    }

    #[test]
    fn cgroup2_unified_agrees_with_the_mount_table() {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let v2 = mounts.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&"/sys/fs/cgroup") && f.get(2) == Some(&"cgroup2")
        });
        assert_eq!(cgroup2_unified(), v2);
    }

    /// On any host: either KVM works or the reason names the device.
    #[test]
    fn kvm_check_agrees_with_the_host() {
        match kvm_check() {
            Ok(()) => assert!(kvm_works()),
            Err(e) => {
                assert!(e.to_string().contains("/dev/kvm"), "{e}");
                assert!(!kvm_works());
            }
        }
    }
}
