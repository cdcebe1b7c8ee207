//! The helpers kvrs's virt-launcher image carries next to `virt-launcher` and
//! `virt-launcher-monitor`, at the paths the launcher pod renders (`kvrs-pod`):
//!
//! * `/usr/bin/container-disk` — the command of every container-disk and kernel-boot init
//!   container, run from the launcher image mounted as an image volume at
//!   `/container-disk-binary` but *inside the container-disk image's root*, which has no libc:
//!   `scripts/images.sh` builds it statically (`-C target-feature=+crt-static`).
//!   `--no-op` exits at once (image-volume mode: the container only makes the kubelet pull the
//!   image); `--copy-path P` listens on `P.sock` until SIGTERM, the socket virt-handler looks
//!   for in the non-image-volume mode.
//! * `/usr/bin/virt-tail --logfile F` — the `guest-console-log` sidecar: prints the guest's
//!   serial log `F` to stdout as it grows (waiting for it to appear, starting over when it is
//!   replaced or truncated) until SIGTERM.
//!
//! Both exit 0 on SIGTERM or SIGINT, also as PID 1.

use nix::sys::signal::{SigSet, Signal};

/// Blocks SIGTERM and SIGINT in this thread (call before spawning any thread, so every thread
/// inherits the mask) and returns the set to wait on.
pub fn block_stop_signals() -> std::io::Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().map_err(std::io::Error::from)?;
    Ok(set)
}

/// Waits for one of `set`'s signals.
pub fn wait_for(set: &SigSet) -> std::io::Result<Signal> {
    set.wait().map_err(std::io::Error::from)
}

/// A helper's command line: flags with values and switches, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args<'a> {
    /// `(flag, value)` for each `--flag VALUE` or `--flag=VALUE`.
    pub values: Vec<(&'a str, &'a str)>,
    /// Each switch given.
    pub switches: Vec<&'a str>,
}

impl Args<'_> {
    /// The last value given to `flag`.
    pub fn value(&self, flag: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| *k == flag)
            .map(|(_, v)| *v)
    }

    /// Whether `switch` was given.
    pub fn has(&self, switch: &str) -> bool {
        self.switches.contains(&switch)
    }
}

/// Parses `args` (without the program name): `known` are the flags taking a value, `switches`
/// the flags without one; anything else is an error naming it.
pub fn parse<'a>(
    args: &'a [String],
    known: &[&str],
    switches: &[&str],
) -> Result<Args<'a>, String> {
    let mut out = Args::default();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if let Some((k, v)) = a.split_once('=')
            && known.contains(&k)
        {
            out.values.push((k, v));
        } else if known.contains(&a) {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("{a} needs a value"))?;
            out.values.push((a, v.as_str()));
            i += 1;
        } else if switches.contains(&a) {
            out.switches.push(a);
        } else {
            return Err(format!("unknown argument {a:?}"));
        }
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_string()).collect()
    }

    #[test]
    fn flags_with_values_and_switches() {
        let a = s(&["--copy-path", "/x/disk_0", "--no-op", "--logfile=/l"]);
        let p = parse(&a, &["--copy-path", "--logfile"], &["--no-op"]).unwrap();
        assert_eq!(
            p.values,
            [("--copy-path", "/x/disk_0"), ("--logfile", "/l")]
        );
        assert_eq!(p.value("--logfile"), Some("/l"));
        assert!(p.has("--no-op") && !p.has("--help"));
        assert!(parse(&s(&["--bogus"]), &[], &[]).is_err());
        assert!(parse(&s(&["--logfile"]), &["--logfile"], &[]).is_err());
    }
}
