//! Writes the test guest as the two images `kvrs run --images DIR` maps its fixture VM to:
//! the kernel-boot container (`boot/vmlinuz`, `boot/initramfs.gz`) and an empty qcow2 container
//! disk (`disk/disk.qcow2`), each a directory named after its image reference.
//!
//! usage: kvrs-guest-images DIR
//! The guest is built once (Debian packages, cached next to this binary) and copied on each run.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The image references of `fixtures/run/guest-vm.yaml`.
const KERNEL_IMAGE: &str = "kvrs.local/test-guest-kernel:v4";
const DISK_IMAGE: &str = "kvrs.local/empty-disk:64m";

/// How `kvrs run --images DIR` names an image's directory: the reference with `/` and `:` as `_`.
fn dir_name(reference: &str) -> String {
    reference.replace(['/', ':'], "_")
}

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: kvrs-guest-images DIR");
        return ExitCode::from(2);
    };
    let exe = std::env::current_exe().expect("current executable");
    let target = exe.parent().expect("binary directory").to_path_buf();
    let guest = kvrs_test_guest::guest(&target);

    let boot = out.join(dir_name(KERNEL_IMAGE)).join("boot");
    let disk = out.join(dir_name(DISK_IMAGE)).join("disk");
    for d in [&boot, &disk] {
        if let Err(e) = std::fs::create_dir_all(d) {
            eprintln!("kvrs-guest-images: creating {}: {e}", d.display());
            return ExitCode::from(1);
        }
    }
    for (from, to) in [
        (&guest.kernel, boot.join("vmlinuz")),
        (&guest.initrd, boot.join("initramfs.gz")),
    ] {
        if let Err(e) = std::fs::copy(from, &to) {
            eprintln!("kvrs-guest-images: copying {}: {e}", to.display());
            return ExitCode::from(1);
        }
    }
    let qcow2 = disk.join("disk.qcow2");
    if !qcow2.is_file() {
        let status = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&qcow2)
            .arg("64M")
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("kvrs-guest-images: qemu-img create {} failed", qcow2.display());
            return ExitCode::from(1);
        }
    }
    println!("{}", out.display());
    ExitCode::SUCCESS
}
