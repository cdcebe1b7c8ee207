//! virt-launcher-monitor: PID 1 of the compute container.
//!
//! It starts `virt-launcher` with the flags it was given (minus `--keep-after-failure`), reaps
//! every zombie (QEMU and the libvirt daemons are re-parented to it: it is PID 1 in a pod and marks
//! itself a child subreaper elsewhere), forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to the launcher,
//! kills the launcher when it outlives the grace period, and exits with the launcher's status once
//! the launcher and what it left behind are gone.
//!
//! It only ever signals the launcher it started and processes libvirt reports by PID file (QEMU,
//! libvirtd, virtlogd) that are its own children — never processes found by name.
//!
//! Single-threaded, no async runtime: a signalfd polled with a timeout is the whole event loop.

mod reported;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// The longest grace period the monitor keeps a deadline for; a longer one (up to `u64::MAX`
/// seconds on the command line) waits this long, which is forever for a pod.
const MAX_GRACE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// When the launcher is killed after a termination signal at `now`: `now + grace`, without
/// overflowing `Instant` for absurd grace periods.
fn kill_deadline(now: Instant, grace: Duration) -> Instant {
    now.checked_add(grace.min(MAX_GRACE)).unwrap_or(now)
}

/// KubeVirt's default termination grace period when the flag is absent.
const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// How long the leftovers of an exited launcher get after SIGTERM before SIGKILL.
const CLEANUP_TERM: Duration = Duration::from_millis(1500);
/// How long after SIGKILL the monitor still waits for its children before giving up.
const CLEANUP_KILL: Duration = Duration::from_secs(3);

/// What the monitor needs from its command line; everything is passed on to the launcher.
struct Options {
    launcher: PathBuf,
    launcher_args: Vec<OsString>,
    grace: Duration,
}

fn parse_options(args: Vec<OsString>) -> Options {
    let mut grace = DEFAULT_GRACE;
    let mut launcher_args = Vec::with_capacity(args.len());
    let mut iter = args.into_iter().peekable();
    while let Some(arg) = iter.next() {
        let text = arg.to_string_lossy();
        if text == "--keep-after-failure" {
            continue;
        }
        let value = if text == "--grace-period-seconds" {
            iter.peek().map(|v| v.to_string_lossy().into_owned())
        } else {
            text.strip_prefix("--grace-period-seconds=")
                .map(str::to_string)
        };
        if let Some(secs) = value.and_then(|v| v.parse::<u64>().ok()) {
            grace = Duration::from_secs(secs);
        }
        launcher_args.push(arg);
    }
    Options {
        launcher: launcher_path(),
        launcher_args,
        grace,
    }
}

/// `virt-launcher` beside this binary (a cargo target dir, an install prefix), else KubeVirt's path.
fn launcher_path() -> PathBuf {
    if let Some(p) = std::env::var_os("KVRS_VIRT_LAUNCHER") {
        return PathBuf::from(p);
    }
    if let Ok(me) = std::env::current_exe()
        && let Some(dir) = me.parent()
    {
        let sibling = dir.join("virt-launcher");
        if sibling.is_file() {
            return sibling;
        }
    }
    PathBuf::from("/usr/bin/virt-launcher")
}

fn log(msg: std::fmt::Arguments<'_>) {
    eprintln!(
        "{{\"component\":\"virt-launcher-monitor\",\"level\":\"info\",\"msg\":\"{}\"}}",
        msg.to_string().replace('"', "'")
    );
}

/// Exit status of a child as a shell would report it.
fn status_code(status: WaitStatus) -> Option<u8> {
    match status {
        WaitStatus::Exited(_, code) => Some(u8::try_from(code).unwrap_or(1)),
        WaitStatus::Signaled(_, sig, _) => Some(128u8.saturating_add(sig as u8)),
        _ => None,
    }
}

/// The monitor's state between wake-ups.
struct Monitor {
    launcher: Pid,
    launcher_status: Option<u8>,
    grace: Duration,
    /// Set when a termination signal arrived: the launcher is killed at this instant.
    kill_launcher_at: Option<Instant>,
    /// Set once the launcher exited: when leftovers get SIGTERM, then SIGKILL, then are given up.
    cleanup: Option<Cleanup>,
    no_children: bool,
}

struct Cleanup {
    term_sent: bool,
    kill_at: Instant,
    give_up_at: Instant,
    kill_sent: bool,
}

impl Monitor {
    /// Reaps every exited child; notes the launcher's status.
    fn reap(&mut self) {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return,
                Ok(status) => {
                    if status.pid() == Some(self.launcher)
                        && let Some(code) = status_code(status)
                    {
                        log(format_args!("virt-launcher exited with status {code}"));
                        self.launcher_status = Some(code);
                    }
                }
                Err(Errno::ECHILD) => {
                    self.no_children = true;
                    return;
                }
                Err(Errno::EINTR) => {}
                Err(e) => {
                    log(format_args!("waitpid: {e}"));
                    return;
                }
            }
        }
    }

    fn on_termination_signal(&mut self, sig: Signal) {
        if self.launcher_status.is_some() {
            return;
        }
        log(format_args!(
            "received {sig}, forwarding to virt-launcher (grace period {}s)",
            self.grace.as_secs()
        ));
        let _ = kill(self.launcher, sig);
        if self.kill_launcher_at.is_none() {
            self.kill_launcher_at = Some(kill_deadline(Instant::now(), self.grace));
        }
    }

    /// Acts on deadlines; returns the time until the next one.
    fn tick(&mut self, now: Instant) -> Option<Duration> {
        if self.launcher_status.is_none() {
            if let Some(at) = self.kill_launcher_at {
                if now >= at {
                    log(format_args!(
                        "grace period over, killing virt-launcher and QEMU"
                    ));
                    let _ = kill(self.launcher, Signal::SIGKILL);
                    reported::signal_reported_children(Signal::SIGKILL);
                    self.kill_launcher_at = None;
                    return Some(Duration::from_millis(100));
                }
                return Some(at - now);
            }
            return None;
        }
        let cleanup = self.cleanup.get_or_insert_with(|| Cleanup {
            term_sent: false,
            kill_at: now + CLEANUP_TERM,
            give_up_at: now + CLEANUP_TERM + CLEANUP_KILL,
            kill_sent: false,
        });
        if !cleanup.term_sent {
            cleanup.term_sent = true;
            reported::signal_reported_children(Signal::SIGTERM);
        }
        if now >= cleanup.kill_at && !cleanup.kill_sent {
            cleanup.kill_sent = true;
            reported::signal_reported_children(Signal::SIGKILL);
        }
        let next = if cleanup.kill_sent {
            cleanup.give_up_at
        } else {
            cleanup.kill_at
        };
        Some(
            next.saturating_duration_since(now)
                .max(Duration::from_millis(10)),
        )
    }

    fn finished(&self, now: Instant) -> bool {
        match (&self.launcher_status, &self.cleanup) {
            (Some(_), _) if self.no_children => true,
            (Some(_), Some(c)) => now >= c.give_up_at,
            _ => false,
        }
    }
}

fn run() -> Result<u8, String> {
    let opts = parse_options(std::env::args_os().skip(1).collect());
    // Outside a PID namespace, orphans (QEMU, libvirt daemons) must come back to us, not to init.
    if nix::unistd::getpid().as_raw() != 1 {
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| format!("set child subreaper: {e}"))?;
    }
    let child = Command::new(&opts.launcher)
        .args(&opts.launcher_args)
        .spawn()
        .map_err(|e| format!("start {}: {e}", opts.launcher.display()))?;
    let launcher =
        Pid::from_raw(i32::try_from(child.id()).map_err(|_| "pid out of range".to_string())?);
    // The Child handle is not waited on: every child is reaped by waitpid(-1) below.
    drop(child);
    log(format_args!(
        "started {} as pid {launcher}",
        opts.launcher.display()
    ));

    // Blocked only after the launcher started: a spawned child inherits the blocked mask (std does
    // not reset it) and Rust offers no safe hook between fork and exec. A SIGCHLD that arrives
    // before the block is not lost either: the loop reaps before its first wait.
    let mut mask = SigSet::empty();
    for sig in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        mask.add(sig);
    }
    mask.thread_block()
        .map_err(|e| format!("block signals: {e}"))?;
    let sfd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| format!("signalfd: {e}"))?;

    let mut m = Monitor {
        launcher,
        launcher_status: None,
        grace: opts.grace,
        kill_launcher_at: None,
        cleanup: None,
        no_children: false,
    };
    loop {
        m.reap();
        let now = Instant::now();
        let wait = m.tick(now);
        if m.finished(Instant::now()) {
            return Ok(m.launcher_status.unwrap_or(1));
        }
        let timeout = match wait {
            Some(d) => PollTimeout::try_from(d.as_millis().min(60_000) as i32 + 1)
                .unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let Ok(sig) = Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(-1)) else {
                continue;
            };
            match sig {
                Signal::SIGCHLD => {}
                other => m.on_termination_signal(other),
            }
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => {
            log(format_args!("exiting with status {code}"));
            ExitCode::from(code)
        }
        Err(e) => {
            log(format_args!("error: {e}"));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn flags_pass_through_except_keep_after_failure() {
        let o = parse_options(os(&[
            "--qemu-timeout",
            "5s",
            "--keep-after-failure",
            "--grace-period-seconds",
            "7",
            "--name",
            "x",
        ]));
        assert_eq!(
            o.launcher_args,
            os(&[
                "--qemu-timeout",
                "5s",
                "--grace-period-seconds",
                "7",
                "--name",
                "x"
            ])
        );
        assert_eq!(o.grace, Duration::from_secs(7));
        // An absurd grace period is accepted and never overflows the deadline (it panicked
        // with "overflow when adding duration to instant" on SIGTERM).
        let huge = parse_options(os(&["--grace-period-seconds", &u64::MAX.to_string()]));
        assert_eq!(huge.grace, Duration::from_secs(u64::MAX));
        let now = Instant::now();
        assert_eq!(kill_deadline(now, huge.grace), now + MAX_GRACE);
        assert_eq!(
            kill_deadline(now, Duration::from_secs(3)),
            now + Duration::from_secs(3)
        );
        let o = parse_options(os(&["--grace-period-seconds=12"]));
        assert_eq!(o.grace, Duration::from_secs(12));
        assert_eq!(
            parse_options(os(&["--grace-period-seconds", "bad"])).grace,
            DEFAULT_GRACE
        );
    }

    #[test]
    fn status_codes_follow_shell_convention() {
        let p = Pid::from_raw(10);
        assert_eq!(status_code(WaitStatus::Exited(p, 3)), Some(3));
        assert_eq!(
            status_code(WaitStatus::Signaled(p, Signal::SIGKILL, false)),
            Some(137)
        );
        assert_eq!(status_code(WaitStatus::StillAlive), None);
    }
}
