//! How the tests start and follow `kvrs run`: the command line (the fixture's guest images,
//! a state and a pods directory of the test's own), its output collected line by line while it
//! runs, signals, and its end. Used by `run.rs`, `run_hooks.rs`, `run_volumes.rs` and
//! `run_killed.rs` (included by path: it needs nothing else of `common`).
//!
//! A [`Running`] run that the test drops while it still runs (a failed assertion) is stopped the
//! way a user stops it, SIGTERM, so that it stops its VM and cleans up.

#![allow(dead_code)] // each test binary uses its part

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvrs_test_guest::pod::{launcher_binaries, repo_root, target_dir};

/// One VM at a time in a test binary: the 2-core machine boots one TCG guest comfortably, and
/// each run starts a whole stack.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `fixtures/run/guest-vm.yaml`: the kvrs-test-guest VM.
pub fn fixture() -> PathBuf {
    repo_root().join("fixtures/run/guest-vm.yaml")
}

/// The guest images, built once per target directory.
pub fn images() -> PathBuf {
    let dir = target_dir().join("kvrs-run-images");
    kvrs_test_guest::write_images(&target_dir(), &dir).expect("the guest images");
    dir
}

/// The state directory of the test's run `tag`.
pub fn state_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/kvrs-run-{tag}-{}", std::process::id()))
}

/// Its pods directory: short, the launcher socket path under it must fit 107 bytes.
pub fn pods_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/kp{tag}{}", std::process::id() % 10_000))
}

/// `kvrs run MANIFEST --images IMAGES --state-dir S --pods-dir P` with the directories of
/// `tag`, standard input closed; the caller adds its flags.
pub fn command(manifest: &Path, tag: &str) -> Command {
    // kvrs run starts the launcher from next to itself.
    let (monitor, _) = launcher_binaries();
    assert_eq!(
        monitor.parent(),
        Path::new(env!("CARGO_BIN_EXE_kvrs")).parent(),
        "the launcher binaries are built beside kvrs"
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvrs"));
    cmd.arg("run")
        .arg(manifest)
        .arg("--images")
        .arg(images())
        .arg("--state-dir")
        .arg(state_dir(tag))
        .arg("--pods-dir")
        .arg(pods_dir(tag))
        .stdin(Stdio::null());
    cmd
}

/// How a run ended and what it printed.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Standard output, then standard error after a `--- stderr ---` line: for messages.
    pub fn text(&self) -> String {
        format!("{}\n--- stderr ---\n{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` to its end.
pub fn output(mut cmd: Command) -> Output {
    let out = cmd.output().expect("run kvrs");
    Output {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A `kvrs run` child: its standard output as lines (read in the background), its standard
/// error drained in the background.
pub struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    /// Standard error as read so far, and its reader.
    stderr: Arc<Mutex<String>>,
    stderr_reader: JoinHandle<()>,
    status: Option<ExitStatus>,
}

impl Running {
    /// Starts `cmd` with its output piped.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kvrs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_reader = std::thread::spawn({
            let stderr = stderr.clone();
            move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = err.read(&mut buf) {
                    stderr
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
            stderr,
            stderr_reader,
            status: None,
        }
    }

    /// The `kvrs run` process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines printed so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// Takes the lines printed so far (at most `wait` for one more); whether the output ended.
    fn collect(&mut self, wait: Duration) -> bool {
        match self.lines.recv_timeout(wait) {
            Ok(line) => {
                self.seen.push(line);
                self.seen.extend(self.lines.try_iter());
                false
            }
            Err(RecvTimeoutError::Disconnected) => true,
            Err(RecvTimeoutError::Timeout) => false,
        }
    }

    /// Waits (at most `within`) for a line containing `text`, calling `tick` about every 200 ms
    /// meanwhile; the line, or `None` when the run's output ended first or the time is up.
    pub fn wait_for_line(
        &mut self,
        text: &str,
        within: Duration,
        mut tick: impl FnMut(),
    ) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(text)) {
                return Some(l.clone());
            }
            tick();
            let ended = self.collect(Duration::from_millis(200));
            if let Some(l) = self.seen.iter().find(|l| l.contains(text)) {
                return Some(l.clone());
            }
            if ended || Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// [`wait_for_line`](Self::wait_for_line), failing the test with the run's output when the
    /// line does not come (the run is stopped with SIGTERM first).
    pub fn expect_line(&mut self, text: &str, within: Duration, tick: impl FnMut()) -> String {
        match self.wait_for_line(text, within, tick) {
            Some(l) => l,
            None => {
                self.signal("TERM");
                let out = self.finish(|| {});
                panic!("no {text:?} within {within:?}:\n{}", out.text());
            }
        }
    }

    /// Sends `signal` (`TERM`, `KILL`, ...) to the `kvrs run` process, if it has not ended.
    pub fn signal(&mut self, signal: &str) {
        if self.has_ended() {
            return;
        }
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
    }

    /// Whether the process has ended (it is reaped then).
    pub fn has_ended(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_some()
    }

    /// Waits for the end, calling `tick` about every 200 ms meanwhile; how it ended and
    /// everything it printed.
    pub fn finish(&mut self, mut tick: impl FnMut()) -> Output {
        while !self.has_ended() {
            tick();
            self.collect(Duration::from_millis(200));
        }
        // The readers see the end of the pipes once every holder is gone; a killed run's
        // children (its containers' runc) may hold them on: what came within 5 s.
        let until = Instant::now() + Duration::from_secs(5);
        while !self.collect(Duration::from_millis(200)) && Instant::now() < until {}
        while !self.stderr_reader.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let stderr = self
            .stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Output {
            status: self.status.expect("ended"),
            stdout: self.seen.join("\n"),
            stderr,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.has_ended() {
            self.signal("TERM");
            let _ = self.child.wait();
        }
    }
}
