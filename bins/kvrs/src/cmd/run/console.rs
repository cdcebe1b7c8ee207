//! The guest's serial console as `kvrs run` shows it: the log QEMU writes next to the console
//! socket (`virt-serial0-log` in the pod's private directory, what KubeVirt's guest-console-log
//! container tails), read line by line; with `--console`, what is typed goes to the console
//! socket itself.
//!
//! Reading the log rather than holding the socket leaves the console free for `virtctl
//! console`-style clients and loses nothing printed before `kvrs run` looked.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Where the pod's `private` emptyDir keeps the console files of the VMI with `vmi_uid`.
pub fn console_dir(pods_dir: &Path, pod_uid: &str, vmi_uid: &str) -> PathBuf {
    pods_dir
        .join(pod_uid)
        .join("volumes/kubernetes.io~empty-dir/private")
        .join(vmi_uid)
}

/// Follows a growing log file; a file that does not exist yet reads as empty.
#[derive(Debug)]
pub struct ConsoleTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl ConsoleTail {
    /// Follows `path` from its start.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The complete lines written since the last call (without their line ends; carriage
    /// returns the guest sends are dropped).
    pub fn poll(&mut self) -> Vec<String> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let mut new = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err() || file.read_to_end(&mut new).is_err() {
            return Vec::new();
        }
        self.offset += new.len() as u64;
        self.partial.extend_from_slice(&new);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).replace('\r', "");
            lines.push(text);
        }
        lines
    }
}

/// Forwards standard input, line by line, to the console socket `socket` until stdin closes.
/// Runs on its own thread: stdin has no async reader in this build.
pub fn forward_stdin(socket: PathBuf) {
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let mut conn: Option<std::os::unix::net::UnixStream> = None;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if conn.is_none() {
                conn = std::os::unix::net::UnixStream::connect(&socket).ok();
            }
            let sent = conn
                .as_mut()
                .map(|c| c.write_all(format!("{line}\n").as_bytes()).is_ok());
            if sent != Some(true) {
                eprintln!("kvrs: console {} is not accepting input", socket.display());
                conn = None;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn yields_complete_lines_as_the_log_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("virt-serial0-log");
        let mut tail = ConsoleTail::new(path.clone());
        assert!(tail.poll().is_empty(), "a missing log reads as empty");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"[    0.0] Linux version\r\nKVRS-E2E: ini")
            .unwrap();
        assert_eq!(tail.poll(), ["[    0.0] Linux version"]);
        f.write_all(b"t running\n").unwrap();
        assert_eq!(tail.poll(), ["KVRS-E2E: init running"]);
        assert!(tail.poll().is_empty());
    }

    #[test]
    fn the_console_lives_in_the_pods_private_empty_dir() {
        assert_eq!(
            console_dir(Path::new("/var/lib/kvrs/pods"), "p-uid", "v-uid"),
            Path::new("/var/lib/kvrs/pods/p-uid/volumes/kubernetes.io~empty-dir/private/v-uid")
        );
    }
}
