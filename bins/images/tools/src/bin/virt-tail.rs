//! `virt-tail --logfile FILE`: see the crate documentation.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(250);

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match kvrs_image_tools::parse(&argv, &["--logfile"], &["-h", "--help"]) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("virt-tail: {e} (usage: virt-tail --logfile FILE)");
            return ExitCode::from(2);
        }
    };
    if !args.switches.is_empty() {
        println!("usage: virt-tail --logfile FILE\n  prints FILE as it grows until SIGTERM");
        return ExitCode::SUCCESS;
    }
    let Some(file) = args.value("--logfile").map(str::to_string) else {
        eprintln!("virt-tail: --logfile FILE is required");
        return ExitCode::from(2);
    };
    let signals = match kvrs_image_tools::block_stop_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("virt-tail: blocking signals: {e}");
            return ExitCode::from(1);
        }
    };
    std::thread::spawn(move || follow(Path::new(&file)));
    match kvrs_image_tools::wait_for(&signals) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("virt-tail: waiting for a signal: {e}");
            ExitCode::from(1)
        }
    }
}

/// Copies `path` to stdout forever, following growth, replacement and truncation.
fn follow(path: &Path) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = std::io::stdout().lock();
    loop {
        let Ok(mut f) = File::open(path) else {
            std::thread::sleep(POLL);
            continue;
        };
        let ino = f.metadata().map(|m| m.ino()).unwrap_or(0);
        let mut pos = 0u64;
        loop {
            match f.read(&mut buf) {
                Ok(0) => {
                    let _ = out.flush();
                    std::thread::sleep(POLL);
                    match std::fs::metadata(path) {
                        // Replaced (rotated, recreated): start over with the new file.
                        Ok(m) if m.ino() != ino => break,
                        // Truncated: read it again from its start.
                        Ok(m) if m.len() < pos => {
                            pos = 0;
                            if f.seek(SeekFrom::Start(0)).is_err() {
                                break;
                            }
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                Ok(n) => {
                    pos += n as u64;
                    if out.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
    }
}
