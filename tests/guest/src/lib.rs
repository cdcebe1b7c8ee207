//! A guest for the end-to-end tests: the Debian cloud kernel and a busybox initramfs, built from
//! Debian packages fetched with `apt-get download` and unpacked with `dpkg-deb -x` (nothing is
//! installed on the host), cached per target directory.
//!
//! Its `/init` prints marker lines on the serial console: [`BOOT_MARKER`] once the power-button
//! listeners run (so an ACPI shutdown after it is never lost), the cloud-init NoCloud disk's
//! `KVRS-E2E` lines, and — when the VM has a NIC — the DHCP lease it got ([`LEASE_MARKER`]) and
//! whether the gateway answered a ping ([`PING_MARKER`]). Each `KVRS-RUN: <shell>` line of the
//! cloud-init user-data runs in the background at boot (a test's workload, e.g. disk writes).
//!
//! It also runs the real QEMU guest agent (`qemu-ga` from Debian's qemu-guest-agent package,
//! with the shared libraries it links copied from the host) on the `org.qemu.guest_agent.0`
//! virtio port, and carries an `/etc/os-release` naming it [`OS_PRETTY_NAME`], so the guest's
//! OS and interfaces reach the VMI's status the way they do for a real distribution.
//!
//! [`pod`] holds what the launcher-pod tests share: the binaries, the sandboxed monitor command.

pub mod pod;
pub mod ticks;
pub mod virtctl;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Printed once the power-button listeners run.
pub const BOOT_MARKER: &str = "KVRS-E2E: init running";
/// Printed when the guest sees the ACPI power button.
pub const POWER_MARKER: &str = "KVRS-E2E: power button";
/// Followed by `ip=<a.b.c.d> mask=<n> router=<r> mtu=<m> dns=<d>` once DHCP configured eth0.
pub const LEASE_MARKER: &str = "KVRS-E2E: lease";
/// Printed when the DHCP router answered a ping.
pub const PING_MARKER: &str = "KVRS-E2E: gateway answers ping";
/// Printed when DHCP gave no lease on eth0.
pub const NO_LEASE_MARKER: &str = "KVRS-E2E: no lease";
/// Printed when the guest agent asks the guest to reboot (`virtctl softreboot`, KubeVirt's
/// agent path): qemu-ga runs `/sbin/shutdown -r +0 ...`, which this guest answers itself.
pub const AGENT_REBOOT_MARKER: &str = "KVRS-E2E: agent reboot";
/// Printed once qemu-ga runs on the agent's virtio port.
pub const AGENT_MARKER: &str = "KVRS-E2E: guest agent started";
/// The guest's `/etc/os-release` `ID`, as the agent reports it.
pub const OS_ID: &str = "kvrs-e2e";
/// The guest's `/etc/os-release` `PRETTY_NAME`.
pub const OS_PRETTY_NAME: &str = "kvrs e2e guest (busybox)";

/// The guest's kernel and initramfs.
#[derive(Clone, Debug)]
pub struct Guest {
    /// `vmlinuz`.
    pub kernel: PathBuf,
    /// `initramfs.gz`.
    pub initrd: PathBuf,
}

use pod::run;

/// The kernel-boot image of `fixtures/run/guest-vm.yaml`.
pub const KERNEL_IMAGE: &str = "kvrs.local/test-guest-kernel:v6";
/// The (empty) container-disk image of `fixtures/run/guest-vm.yaml`.
pub const DISK_IMAGE: &str = "kvrs.local/empty-disk:64m";

/// How `kvrs run --images DIR` names an image's directory: the reference with `/` and `:` as `_`.
pub fn image_dir_name(reference: &str) -> String {
    reference.replace(['/', ':'], "_")
}

/// Writes the guest built for `target_dir` as the two image directories `kvrs run --images
/// out` maps the fixture VM's images to: [`KERNEL_IMAGE`] (`boot/vmlinuz`,
/// `boot/initramfs.gz`) and [`DISK_IMAGE`] (`disk/disk.qcow2`, 64 MiB, empty).
pub fn write_images(target_dir: &Path, out: &Path) -> std::io::Result<()> {
    let guest = guest(target_dir);
    let boot = out.join(image_dir_name(KERNEL_IMAGE)).join("boot");
    let disk = out.join(image_dir_name(DISK_IMAGE)).join("disk");
    std::fs::create_dir_all(&boot)?;
    std::fs::create_dir_all(&disk)?;
    std::fs::copy(&guest.kernel, boot.join("vmlinuz"))?;
    std::fs::copy(&guest.initrd, boot.join("initramfs.gz"))?;
    let qcow2 = disk.join("disk.qcow2");
    if !qcow2.is_file() {
        let status = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&qcow2)
            .arg("64M")
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "qemu-img create {} failed ({status})",
                qcow2.display()
            )));
        }
    }
    Ok(())
}

/// Modules loaded in this order (dependencies first); missing ones are skipped.
const MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_pci_modern_dev",
    "drivers/virtio/virtio_pci_legacy_dev",
    "drivers/virtio/virtio_pci",
    "drivers/char/virtio_console",
    "drivers/block/virtio_blk",
    // Hotplugged disks arrive on KubeVirt's virtio-scsi controller (its default hotplug bus).
    "drivers/scsi/scsi_common",
    "drivers/scsi/scsi_mod",
    "drivers/scsi/sd_mod",
    "drivers/scsi/virtio_scsi",
    "drivers/cdrom/cdrom",
    "fs/isofs/isofs",
    "drivers/acpi/button",
    "drivers/input/evdev",
    "net/core/failover",
    "drivers/net/net_failover",
    "drivers/net/virtio_net",
    "drivers/net/ethernet/intel/e1000/e1000",
];

/// The udhcpc hook: configures eth0 from the lease and prints it.
const UDHCPC_SCRIPT: &str = "#!/bin/sh\ncase \"$1\" in\n  bound|renew)\n    ip addr flush dev \"$interface\"\n    ip addr add \"$ip/$mask\" dev \"$interface\"\n    [ -n \"$mtu\" ] && ip link set dev \"$interface\" mtu \"$mtu\"\n    for r in $router; do ip route add default via \"$r\" dev \"$interface\"; break; done\n    echo \"KVRS-E2E: lease ip=$ip mask=$mask router=$router mtu=$mtu dns=$dns\" >/dev/console\n    ;;\nesac\nexit 0\n";

/// Copies the dynamically linked `binary` to `init/dest`, with every shared library `ldd` says
/// it loads (from the host: the same Debian release as the package) at the same path.
fn copy_with_libraries(binary: &Path, init: &Path, dest: &str) {
    std::fs::copy(binary, init.join(dest)).unwrap();
    let ldd = run(Command::new("ldd").arg(binary));
    for line in ldd.lines() {
        assert!(
            !line.contains("not found"),
            "{}: a library is missing on this host: {line}",
            binary.display()
        );
        // `libx.so => /lib/.../libx.so (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`
        let path = line
            .split("=>")
            .last()
            .and_then(|r| r.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(path) = path {
            let to = init.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(path, &to).unwrap();
        }
    }
}

/// Which Debian kernel the guest boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `linux-image-cloud-amd64`: small, virtio drivers only. Every test but the slirp one.
    Cloud,
    /// `linux-image-amd64`: Debian's generic kernel, whose `e1000` driver the guest loads. QEMU's
    /// user network (KubeVirt's slirp binding) offers the guest only an e1000 or rtl8139 NIC,
    /// and the cloud kernel has neither driver.
    Generic,
}

impl Kernel {
    fn metapackage(self) -> &'static str {
        match self {
            Kernel::Cloud => "linux-image-cloud-amd64",
            Kernel::Generic => "linux-image-amd64",
        }
    }

    fn dir_name(self) -> &'static str {
        // Versioned: a change of /init below must not reuse an old cached initramfs.
        match self {
            Kernel::Cloud => "kvrs-e2e-guest-v9",
            Kernel::Generic => "kvrs-e2e-guest-generic-v9",
        }
    }
}

/// Builds the guest (Debian's cloud kernel) once per `target_dir` (e.g. `target/debug`).
pub fn guest(target_dir: &Path) -> Guest {
    guest_with(target_dir, Kernel::Cloud)
}

/// Builds the guest booting `kernel` once per `target_dir`.
pub fn guest_with(target_dir: &Path, flavour: Kernel) -> Guest {
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = target_dir.join(flavour.dir_name());
    let (kernel, initrd) = (dir.join("vmlinuz"), dir.join("initramfs.gz"));
    if kernel.is_file() && initrd.is_file() {
        return Guest { kernel, initrd };
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The kernel package the metapackage points at.
    let meta = flavour.metapackage();
    let depends = run(Command::new("apt-cache").args(["depends", meta]));
    let kpkg = depends
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Depends: ")
                .filter(|p| p.starts_with("linux-image-"))
        })
        .unwrap_or_else(|| panic!("{meta} depends on a kernel package"))
        .to_string();
    let debs = dir.join("debs");
    std::fs::create_dir_all(&debs).unwrap();
    run(Command::new("apt-get").current_dir(&debs).args([
        "download",
        "-q",
        &kpkg,
        "busybox-static",
        "qemu-guest-agent",
    ]));
    let root = dir.join("root");
    for deb in std::fs::read_dir(&debs).unwrap().map(|e| e.unwrap().path()) {
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    }
    let vmlinuz = std::fs::read_dir(root.join("boot"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("vmlinuz-")
        })
        .expect("the kernel package has /boot/vmlinuz-*");
    std::fs::copy(&vmlinuz, &kernel).unwrap();

    let init = dir.join("initrd");
    for sub in [
        "bin",
        "sbin",
        "lib/modules",
        "proc",
        "sys",
        "dev",
        "ci",
        "etc",
    ] {
        std::fs::create_dir_all(init.join(sub)).unwrap();
    }
    std::fs::copy(root.join("bin/busybox"), init.join("bin/busybox")).unwrap();
    let modules_root = std::fs::read_dir(root.join("lib/modules"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("kernel");
    let mut names = Vec::new();
    for m in MODULES {
        let src = modules_root.join(format!("{m}.ko"));
        let name = Path::new(m)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if src.is_file() {
            std::fs::copy(&src, init.join(format!("lib/modules/{name}.ko"))).unwrap();
            names.push(name);
        }
    }
    std::fs::write(init.join("bin/udhcpc.script"), UDHCPC_SCRIPT).unwrap();
    // busybox has no `shutdown`; qemu-ga's guest-shutdown execs `/sbin/shutdown FLAG +0 MESSAGE`
    // (FLAG -P, -H or -r), as on a distribution. This guest reboots that way; it refuses to power
    // off or halt (exit 1), so the agent reports the failure and libvirt falls back to the ACPI
    // power button: every shutdown test sees the same path whether or not the agent is up.
    std::fs::write(
        init.join("sbin/shutdown"),
        format!(
            "#!/bin/sh\ncase \" $* \" in\n  *\" -r \"*) echo '{AGENT_REBOOT_MARKER}' >/dev/console; reboot -f ;;\n  \
             *) exit 1 ;;\nesac\n"
        ),
    )
    .unwrap();
    copy_with_libraries(&root.join("usr/sbin/qemu-ga"), &init, "bin/qemu-ga");
    std::fs::write(
        init.join("etc/os-release"),
        format!(
            "ID={OS_ID}\nNAME=\"kvrs e2e guest\"\nPRETTY_NAME=\"{OS_PRETTY_NAME}\"\nVERSION_ID=6\n"
        ),
    )
    .unwrap();
    let script = format!(
        "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nexport PATH=/bin\n\
         mount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t devtmpfs dev /dev\n\
         for m in {}; do insmod /lib/modules/$m.ko 2>/dev/null; done\n\
         for e in /dev/input/event*; do ( head -c 1 \"$e\" >/dev/null && echo '{POWER_MARKER}' && poweroff -f ) & done\n\
         sleep 1\n\
         echo '{BOOT_MARKER}'\n\
         for p in /sys/class/virtio-ports/*; do if [ \"$(cat $p/name 2>/dev/null)\" = org.qemu.guest_agent.0 ]; then\n\
           mkdir -p /var/run /tmp; hostname kvrs-e2e; qemu-ga -m virtio-serial -p /dev/${{p##*/}} >/dev/null 2>&1 &\n\
           echo '{AGENT_MARKER}'; fi; done\n\
         if mount -t iso9660 -o ro /dev/vdb /ci 2>/dev/null; then grep -h '^KVRS-E2E' /ci/user-data; sed -n 's/^KVRS-RUN: //p' /ci/user-data >/run.sh; else echo 'KVRS-E2E: no cloud-init disk'; fi\n\
         if [ -s /run.sh ]; then sh /run.sh & fi\n\
         if [ -e /sys/class/net/eth0 ]; then (\n\
           ip link set lo up; ip link set eth0 up\n\
           if udhcpc -i eth0 -s /bin/udhcpc.script -q -n -t 20 -T 1 -O mtu -O dns >/dev/null 2>&1; then\n\
             gw=$(ip route | sed -n 's/^default via \\([0-9.]*\\).*/\\1/p')\n\
             if ping -c 1 -W 2 \"$gw\" >/dev/null 2>&1 || ping -c 3 -W 2 \"$gw\" >/dev/null 2>&1; then echo '{PING_MARKER}'; fi\n\
           else echo '{NO_LEASE_MARKER}'; fi\n\
         ) & fi\n\
         while true; do sleep 3600; done\n",
        names.join(" ")
    );
    std::fs::write(init.join("init"), script).unwrap();
    run(Command::new("chmod")
        .arg("755")
        .arg(init.join("init"))
        .arg(init.join("bin/udhcpc.script"))
        .arg(init.join("sbin/shutdown")));
    run(Command::new("sh")
        .current_dir(&init)
        .arg("-c")
        .arg("find . | cpio -o -H newc --quiet | gzip -1 > ../initramfs.gz"));
    Guest { kernel, initrd }
}

/// The directory `scripts/hooks-harness.sh` builds (or finds) KubeVirt's own hook sidecar in
/// (`sidecar-shim`, `bin/onDefineDomain`, the hook manager). Panics when Go or the build fails:
/// a test that needs KubeVirt's sidecar never skips.
pub fn hooks_harness() -> PathBuf {
    let out = Command::new("bash")
        .arg(pod::repo_root().join("scripts/hooks-harness.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run scripts/hooks-harness.sh");
    assert!(
        out.status.success(),
        "scripts/hooks-harness.sh failed (Go >= 1.26 and the Go module proxy are needed)"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(text.lines().last().expect("the harness directory").trim())
}
