//! Which runc runs the pods, and whether it carries the November 2025 runc fixes.
//!
//! Three runc flaws published together in November 2025 let a container's creation be turned
//! against the host: CVE-2025-31133 (the `/dev/null` runc binds over masked paths can be swapped
//! for a symlink, so runc binds a host file of the attacker's choice read-write), CVE-2025-52565
//! (the same race on the `/dev/console` bind) and CVE-2025-52881 (runc's writes to `/proc`, e.g.
//! the LSM label, redirected through a racing shared mount to any procfs file). They are fixed in
//! runc 1.2.8, 1.3.3 and 1.4.0-rc.3 (and every later release); Debian 12's runc 1.1.5 has
//! none of them. The kubelet therefore prefers the runc 1.5.3 that `scripts/node-components.sh`
//! builds from Go modules ([`default_runtime`]) and refuses, at start, a runc older than the
//! fixed releases unless told to accept it ([`check`]).
//!
//! Why refuse rather than warn: issue 43's point is that a launcher pod is a container a
//! compromised QEMU cannot leave; the three flaws are exactly ways out during a container's
//! creation (a pod's sidecars are created while its launcher, UID 107, already runs and shares
//! the `sockets` emptyDir with them). A warning in a log nobody reads would leave that boundary
//! silently weaker; an explicit opt-out (`--allow-vulnerable-runtime`) keeps Debian's runc usable
//! on a machine that cannot build a newer one, and the opt-out still logs the CVEs loudly.
//!
//! The version parsing and the verdict are pure ([`RuncVersion::parse_output`],
//! [`RuncVersion::verdict`]); [`check`] runs `runc --version`.

use std::path::{Path, PathBuf};

use tracing::{info, warn};

/// The November 2025 runc advisories a runc older than [`FIXED_IN`] is open to.
pub const CVES: [&str; 3] = ["CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"];

/// The first fixed release of each affected series (every later series is fixed).
pub const FIXED_IN: &str = "1.2.8, 1.3.3, 1.4.0-rc.3";

/// Where `scripts/node-components.sh` puts its runc, below the cache root
/// (`$KVRS_CACHE`, else `~/.cache/kvrs`).
pub const CACHED_RUNC: &str = "node/bin/runc";

/// A runc release: `major.minor.patch`, and its release candidate number when it is one.
/// Ordered as runc's releases are: `1.4.0-rc.3` < `1.4.0` < `1.4.1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuncVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
    /// `Candidate(n)` for `-rc.n` (or the older `-rcN`), else `Release`.
    pub stage: Stage,
}

/// Whether a version is a release candidate (ordered before its release).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// `-rc.N` / `-rcN`.
    Candidate(u32),
    /// The release itself (a distribution's revision suffix, `+ds1` or `-0ubuntu1`, is one).
    Release,
}

/// What [`RuncVersion::verdict`] says of a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It carries the fixes of [`CVES`].
    Fixed,
    /// It predates them.
    Vulnerable,
}

/// Why `runc --version`'s output could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("runc --version printed {line:?}: {reason}")]
pub struct VersionError {
    /// The first line of the output.
    pub line: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl VersionError {
    /// A stable name of the error.
    pub fn label(&self) -> &'static str {
        "runtime-version"
    }
}

impl std::fmt::Display for RuncVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Stage::Candidate(n) = self.stage {
            write!(f, "-rc.{n}")?;
        }
        Ok(())
    }
}

impl RuncVersion {
    /// The version in `runc --version`'s first line, `runc version 1.1.5+ds1` (Debian),
    /// `runc version 1.5.3`, `runc version 1.4.0-rc.3`, `runc version 1.0.0-rc92`: build
    /// metadata after `+` is ignored, `-rc.N` / `-rcN` is a candidate, any other `-` suffix
    /// is a distribution's revision of the release.
    pub fn parse_output(output: &str) -> Result<Self, VersionError> {
        let line = output.lines().next().unwrap_or_default().trim();
        let bad = |reason| VersionError {
            line: line.to_string(),
            reason,
        };
        let version = line
            .strip_prefix("runc version ")
            .ok_or_else(|| bad("not runc's version line (expected \"runc version X.Y.Z\")"))?
            .trim();
        let version = version.split_once('+').map_or(version, |(v, _)| v);
        let (core, suffix) = match version.split_once('-') {
            Some((c, s)) => (c, Some(s)),
            None => (version, None),
        };
        let mut parts = core.split('.');
        let mut number = || -> Result<u32, VersionError> {
            parts
                .next()
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| bad("the version is not MAJOR.MINOR.PATCH"))
        };
        let (major, minor, patch) = (number()?, number()?, number()?);
        if parts.next().is_some() {
            return Err(bad("the version is not MAJOR.MINOR.PATCH"));
        }
        let stage = match suffix.and_then(|s| s.strip_prefix("rc")) {
            Some(n) => {
                let n = n.strip_prefix('.').unwrap_or(n);
                Stage::Candidate(
                    n.parse()
                        .map_err(|_| bad("a release candidate without a number"))?,
                )
            }
            None => Stage::Release,
        };
        Ok(Self {
            major,
            minor,
            patch,
            stage,
        })
    }

    /// Whether this release has the fixes of [`CVES`]: 1.2.x from 1.2.8, 1.3.x from 1.3.3,
    /// 1.4.x from 1.4.0-rc.3, every series after 1.4; none before 1.2.
    pub fn verdict(&self) -> Verdict {
        let first_fixed = |minor, patch, stage| Self {
            major: 1,
            minor,
            patch,
            stage,
        };
        let fixed = match (self.major, self.minor) {
            (0, _) => false,
            (1, 0 | 1) => false,
            (1, 2) => *self >= first_fixed(2, 8, Stage::Release),
            (1, 3) => *self >= first_fixed(3, 3, Stage::Release),
            (1, 4) => *self >= first_fixed(4, 0, Stage::Candidate(3)),
            _ => true,
        };
        if fixed {
            Verdict::Fixed
        } else {
            Verdict::Vulnerable
        }
    }
}

/// The runc built by `scripts/node-components.sh` for a cache root `$KVRS_CACHE` (`cache`)
/// or `$HOME/.cache/kvrs` (`home`). Pure: whether it exists is the caller's to check.
pub fn cached_runc(cache: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let root = match (cache, home) {
        (Some(c), _) if !c.as_os_str().is_empty() => c.to_path_buf(),
        (_, Some(h)) if !h.as_os_str().is_empty() => h.join(".cache/kvrs"),
        _ => return None,
    };
    Some(root.join(CACHED_RUNC))
}

/// The runtime the kubelet uses when none is given: the cached runc 1.5.3 when it is there,
/// else `runc` from `PATH` (which [`check`] then judges).
pub fn default_runtime() -> PathBuf {
    let cache = std::env::var_os("KVRS_CACHE").map(PathBuf::from);
    let home = std::env::var_os("HOME").map(PathBuf::from);
    cached_runc(cache.as_deref(), home.as_deref())
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("runc"))
}

/// Why the kubelet will not run pods with its runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `runc --version` could not be run.
    #[error("cannot run `{program} --version`: {reason}")]
    NotRunnable {
        /// The runtime.
        program: PathBuf,
        /// Why.
        reason: String,
    },
    /// It is a runc that predates the November 2025 fixes.
    #[error(
        "{program} is runc {version}, which lacks the fixes of {cves} (fixed in runc {fixed} and later): \
         build runc 1.5.3 with `bash scripts/node-components.sh` (used automatically from \
         ~/.cache/kvrs/{cached}), pass --runtime PATH to a fixed runc, or accept the risk with \
         --allow-vulnerable-runtime",
        cves = CVES.join(", "),
        fixed = FIXED_IN,
        cached = CACHED_RUNC
    )]
    Vulnerable {
        /// The runtime.
        program: PathBuf,
        /// Its version.
        version: RuncVersion,
    },
}

impl RuntimeError {
    /// A stable name of the variant.
    pub fn label(&self) -> &'static str {
        match self {
            Self::NotRunnable { .. } => "runtime-not-runnable",
            Self::Vulnerable { .. } => "runtime-vulnerable",
        }
    }
}

/// What [`check`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeCheck {
    /// A runc with the fixes.
    Fixed(RuncVersion),
    /// A runc without them, accepted because the operator said so (logged as a warning).
    AcceptedVulnerable(RuncVersion),
    /// Not runc (crun, say) or a version line this parser does not know: not judged.
    Unjudged(String),
}

/// Runs `program --version` and judges it: a runc older than [`FIXED_IN`] is refused unless
/// `allow_vulnerable`, when it is accepted with a warning naming [`CVES`]; a runtime that is not
/// runc (crun) is accepted with a warning that its fixes were not checked.
pub async fn check(program: &Path, allow_vulnerable: bool) -> Result<RuntimeCheck, RuntimeError> {
    let out = tokio::process::Command::new(program)
        .arg("--version")
        .output()
        .await;
    judge(program, allow_vulnerable, out)
}

/// [`check`] for a caller without an async runtime (`kvrs run`'s checks before it starts
/// anything).
pub fn check_blocking(
    program: &Path,
    allow_vulnerable: bool,
) -> Result<RuntimeCheck, RuntimeError> {
    let out = std::process::Command::new(program)
        .arg("--version")
        .output();
    judge(program, allow_vulnerable, out)
}

/// Judges what `program --version` gave (see [`check`]).
fn judge(
    program: &Path,
    allow_vulnerable: bool,
    out: std::io::Result<std::process::Output>,
) -> Result<RuntimeCheck, RuntimeError> {
    let not_runnable = |reason: String| RuntimeError::NotRunnable {
        program: program.to_path_buf(),
        reason,
    };
    let out = out.map_err(|e| not_runnable(e.to_string()))?;
    if !out.status.success() {
        return Err(not_runnable(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let runtime = program.display();
    let version = match RuncVersion::parse_output(&text) {
        Ok(v) => v,
        Err(e) => {
            warn!(runtime = %runtime, error = %e, label = e.label(),
                "the OCI runtime is not a runc this kubelet can judge: whether it has the fixes of {} is unchecked",
                CVES.join(", "));
            return Ok(RuntimeCheck::Unjudged(e.line));
        }
    };
    match version.verdict() {
        Verdict::Fixed => {
            info!(runtime = %runtime, version = %version, "OCI runtime");
            Ok(RuntimeCheck::Fixed(version))
        }
        Verdict::Vulnerable if allow_vulnerable => {
            warn!(runtime = %runtime, version = %version,
                "RUNNING PODS WITH A VULNERABLE runc {version}: it lacks the fixes of {} (fixed in {}); \
                 a container's creation can be raced into writing host files (--allow-vulnerable-runtime)",
                CVES.join(", "), FIXED_IN);
            Ok(RuntimeCheck::AcceptedVulnerable(version))
        }
        Verdict::Vulnerable => Err(RuntimeError::Vulnerable {
            program: program.to_path_buf(),
            version,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> RuncVersion {
        RuncVersion::parse_output(&format!("runc version {s}\ncommit: x\nspec: 1.0.2\n"))
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn debian_upstream_and_candidate_versions_parse() {
        let debian = "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\ngo: go1.19.8\nlibseccomp: 2.5.4\n";
        let d = RuncVersion::parse_output(debian).unwrap();
        assert_eq!(
            (d.major, d.minor, d.patch, d.stage),
            (1, 1, 5, Stage::Release)
        );
        assert_eq!(v("1.5.3").to_string(), "1.5.3");
        assert_eq!(v("1.4.0-rc.3").stage, Stage::Candidate(3));
        assert_eq!(v("1.0.0-rc92").stage, Stage::Candidate(92));
        assert_eq!(v("1.1.12-0ubuntu2~22.04.1").stage, Stage::Release);
        assert_eq!(v("1.2.0-rc.1+dev").to_string(), "1.2.0-rc.1");
    }

    #[test]
    fn lines_that_are_not_runcs_are_errors_naming_the_line() {
        for bad in [
            "crun version 1.8.1",
            "",
            "runc version 1.2",
            "runc version 1.2.3.4",
            "runc version x.y.z",
            "runc version 1.4.0-rc",
            "runc version 1.-2.3",
        ] {
            let e = RuncVersion::parse_output(bad).unwrap_err();
            assert_eq!(e.line, bad.lines().next().unwrap_or_default(), "{bad}");
            assert_eq!(e.label(), "runtime-version");
        }
    }

    #[test]
    fn the_fixed_releases_are_the_advisories_ones() {
        for vulnerable in [
            "1.0.0-rc92",
            "1.1.5+ds1",
            "1.1.15",
            "1.2.0",
            "1.2.7",
            "1.3.0-rc.1",
            "1.3.2",
            "1.4.0-rc.1",
            "1.4.0-rc.2",
        ] {
            assert_eq!(v(vulnerable).verdict(), Verdict::Vulnerable, "{vulnerable}");
        }
        for fixed in [
            "1.2.8",
            "1.2.9",
            "1.3.3",
            "1.3.4",
            "1.4.0-rc.3",
            "1.4.0",
            "1.4.1",
            "1.5.0-rc.1",
            "1.5.3",
            "2.0.0",
        ] {
            assert_eq!(v(fixed).verdict(), Verdict::Fixed, "{fixed}");
        }
    }

    #[test]
    fn the_cached_runc_follows_kvrs_cache_then_home() {
        assert_eq!(
            cached_runc(Some(Path::new("/c")), Some(Path::new("/root"))),
            Some(PathBuf::from("/c/node/bin/runc"))
        );
        assert_eq!(
            cached_runc(Some(Path::new("")), Some(Path::new("/root"))),
            Some(PathBuf::from("/root/.cache/kvrs/node/bin/runc"))
        );
        assert_eq!(cached_runc(None, None), None);
    }

    #[test]
    fn the_refusal_names_every_cve_and_the_ways_out() {
        let e = RuntimeError::Vulnerable {
            program: "/usr/sbin/runc".into(),
            version: v("1.1.5+ds1"),
        };
        let text = e.to_string();
        for needle in CVES.iter().copied().chain([
            "1.1.5",
            "node-components.sh",
            "--runtime",
            "--allow-vulnerable-runtime",
        ]) {
            assert!(text.contains(needle), "{needle} in {text}");
        }
        assert_eq!(e.label(), "runtime-vulnerable");
    }

    fn any_version() -> impl proptest::strategy::Strategy<Value = RuncVersion> {
        use proptest::prelude::*;
        (
            0u32..4,
            0u32..8,
            0u32..12,
            prop_oneof![Just(Stage::Release), (0u32..6).prop_map(Stage::Candidate)],
        )
            .prop_map(|(major, minor, patch, stage)| RuncVersion {
                major,
                minor,
                patch,
                stage,
            })
    }

    proptest::proptest! {
        #[test]
        fn a_printed_version_parses_back_to_itself(a in any_version()) {
            proptest::prop_assert_eq!(v(&a.to_string()), a);
            proptest::prop_assert_eq!(v(&format!("{a}+ds1")), a);
        }

        /// Within a series a later release never loses a fix.
        #[test]
        fn fixes_are_kept_by_later_releases_of_a_series(a in any_version(), b in any_version()) {
            let b = RuncVersion { major: a.major, minor: a.minor, ..b };
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            if lo.verdict() == Verdict::Fixed {
                proptest::prop_assert_eq!(hi.verdict(), Verdict::Fixed, "{} then {}", lo, hi);
            }
        }
    }
}
