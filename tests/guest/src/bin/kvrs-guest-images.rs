//! Writes the test guest as the two images `kvrs run --images DIR` maps its fixture VM
//! (`fixtures/run/guest-vm.yaml`) to: the kernel-boot container and an empty container disk,
//! each a directory named after its image reference (see `kvrs_test_guest::write_images`).
//!
//! usage: kvrs-guest-images DIR
//! The guest is built once (Debian packages, cached next to this binary) and copied on each run.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: kvrs-guest-images DIR");
        return ExitCode::from(2);
    };
    let target = match std::env::current_exe() {
        Ok(exe) => exe.parent().map(PathBuf::from).unwrap_or_default(),
        Err(e) => {
            eprintln!("kvrs-guest-images: locating this binary: {e}");
            return ExitCode::from(1);
        }
    };
    match kvrs_test_guest::write_images(&target, &out) {
        Ok(()) => {
            println!("{}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kvrs-guest-images: {e}");
            ExitCode::from(1)
        }
    }
}
