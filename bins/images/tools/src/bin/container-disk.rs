//! `container-disk [--no-op] [--copy-path P]`: see the crate documentation.

use std::os::unix::net::UnixListener;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match kvrs_image_tools::parse(&argv, &["--copy-path"], &["--no-op", "-h", "--help"])
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("container-disk: {e} (usage: container-disk [--no-op] [--copy-path PATH])");
            return ExitCode::from(2);
        }
    };
    if args.has("-h") || args.has("--help") {
        println!(
            "usage: container-disk [--no-op] [--copy-path PATH]\n  --no-op: exit at once\n  --copy-path PATH: listen on PATH.sock until SIGTERM"
        );
        return ExitCode::SUCCESS;
    }
    if args.has("--no-op") {
        return ExitCode::SUCCESS;
    }
    let signals = match kvrs_image_tools::block_stop_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("container-disk: blocking signals: {e}");
            return ExitCode::from(1);
        }
    };
    let socket = args.value("--copy-path").map(|v| format!("{v}.sock"));
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
        let listener = match UnixListener::bind(path) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("container-disk: listening on {path}: {e}");
                return ExitCode::from(1);
            }
        };
        // Connections only tell the peer this process is alive; each is closed at once.
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                drop(conn);
            }
        });
    }
    let result = kvrs_image_tools::wait_for(&signals);
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
    }
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("container-disk: waiting for a signal: {e}");
            ExitCode::from(1)
        }
    }
}
