//! The root filesystem of a container that runs a command (KubeVirt's launcher `compute`
//! container, a network binding sidecar): which files below `/usr` it sees.
//!
//! The container's root is always a directory of the pod's own (mount points and the `bin`,
//! `sbin`, `lib`, `lib64` → `usr/...` links), with the pod's `/etc`, its own `/run`, `/tmp`,
//! `/dev` and `/var`; what differs is where `/usr` — the programs, libraries and data — comes
//! from ([`RootSource`]):
//! - **the container's image, unpacked**, when its reference resolves through the image map to
//!   a directory: the image's `/usr` read-only, and its own `/etc/ld.so.cache` and
//!   `/etc/alternatives` (they describe the image's files, not the host's). A Debian image is
//!   merged-`/usr` (`/bin` etc. are links into it), so its `/usr` is all of its programs,
//!   libraries and data; its other top-level directories are state (`/var/lib/dpkg`) the
//!   launcher never reads. Nothing of the host's `/usr` is there: the host's binaries, its
//!   `/usr/local` and `/usr/src`, are out of reach. Bound rather than copied: no file is
//!   duplicated per pod and the image's directory is never written (runc makes the mount points
//!   in the pod's own directory).
//! - **the host's, narrowed to what the launcher needs**, when it does not: [`HOST_DIRS`]
//!   whole (shared libraries, QEMU's modules and firmware, libvirt's helpers and schemas,
//!   zoneinfo) and only the programs of [`HOST_PROGRAMS`] from `/usr/bin` and `/usr/sbin`.
//!   The rest of `/usr/bin` and `/usr/sbin` (the host's administration tools, its other
//!   runtimes, `runc` itself), `/usr/local`, `/usr/src` and `/usr/include` are not there.
//!
//! Both keep the host's `/etc/resolv.conf` and `/etc/localtime` (the node's DNS and time zone,
//! as a kubelet gives a pod), bound read-only over the pod's `/etc` placeholders.

use std::path::{Path, PathBuf};

use crate::pod_exec::{BindMount, MountKind, Propagation};

/// Host directories below `/usr` bound whole when the container has no image: the shared
/// libraries and the dynamic loader (`lib`, `lib64`), libvirt's and QEMU's helpers
/// (`libexec`; Debian keeps most in `lib/libvirt` and `lib/x86_64-linux-gnu/qemu`), and
/// `share` (QEMU's firmware and keymaps, SeaBIOS and OVMF, libvirt's CPU maps and schemas,
/// zoneinfo, locales). Each is optional: a host without `/usr/lib64` or `/usr/libexec` just
/// does not get it.
pub const HOST_DIRS: [&str; 4] = ["/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/share"];

/// The host programs the launcher runs (or has libvirt run) when the container has no image,
/// each bound read-only at its own path if the host has it:
/// - `virtqemud`, `libvirtd` (whichever the host's libvirt has) and `virtlogd`: the daemons
///   the launcher starts;
/// - `qemu-system-x86_64`: the emulator libvirt starts; `qemu-pr-helper`: libvirt's persistent
///   reservation helper for SCSI LUNs;
/// - `qemu-img` (disk images, backing files) and `xorrisofs` (cloud-init and config-drive
///   ISOs): what the launcher itself runs;
/// - `swtpm`, `swtpm_setup`, `swtpm_ioctl`, `swtpm_localca`, `swtpm_cert` and `certtool`
///   (which `swtpm_localca` runs): libvirt's TPM emulator and its first-start set-up;
/// - `passt`: the user-mode network backend of KubeVirt's passt binding.
pub const HOST_PROGRAMS: [&str; 14] = [
    "/usr/sbin/virtqemud",
    "/usr/sbin/libvirtd",
    "/usr/sbin/virtlogd",
    "/usr/bin/qemu-system-x86_64",
    "/usr/bin/qemu-pr-helper",
    "/usr/bin/qemu-img",
    "/usr/bin/xorrisofs",
    "/usr/bin/swtpm",
    "/usr/bin/swtpm_setup",
    "/usr/bin/swtpm_ioctl",
    "/usr/bin/swtpm_localca",
    "/usr/bin/swtpm_cert",
    "/usr/bin/certtool",
    "/usr/bin/passt",
];

/// Files of the image's `/etc` that describe its own files, bound over the pod's `/etc`
/// placeholders instead of the host's.
pub const IMAGE_ETC: [&str; 2] = ["ld.so.cache", "alternatives"];

/// Where a container's `/usr` comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootSource {
    /// The container's image, unpacked in `dir`.
    Image {
        /// The image reference.
        reference: String,
        /// The directory standing for it.
        dir: PathBuf,
    },
    /// The host's [`HOST_DIRS`] and [`HOST_PROGRAMS`], read-only: the image did not resolve.
    Host {
        /// Why not the image (for the log).
        why: String,
    },
}

impl std::fmt::Display for RootSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Image { reference, dir } => {
                write!(f, "image {reference} ({})", dir.display())
            }
            Self::Host { why } => write!(
                f,
                "the host's /usr narrowed to the launcher's libraries, data and programs ({why})"
            ),
        }
    }
}

impl RootSource {
    /// The root of a container of `reference`: its image when `candidate` (the image map's
    /// directory for it) is a directory (`is_dir`), else the narrowed host.
    pub fn choose(
        reference: &str,
        candidate: Option<PathBuf>,
        is_dir: impl Fn(&Path) -> bool,
    ) -> Self {
        match candidate {
            Some(dir) if is_dir(&dir) => Self::Image {
                reference: reference.to_string(),
                dir,
            },
            Some(dir) => Self::Host {
                why: format!("no directory {} for image {reference:?}", dir.display()),
            },
            None => Self::Host {
                why: format!("image {reference:?} is not in the image map"),
            },
        }
    }

    /// The image's directory, when the root is an image.
    pub fn image_dir(&self) -> Option<&Path> {
        match self {
            Self::Image { dir, .. } => Some(dir),
            Self::Host { .. } => None,
        }
    }

    /// The read-only mounts that make `/usr` (and the image's own `/etc` files), parents
    /// before children once sorted by target.
    pub fn mounts(&self) -> Vec<BindMount> {
        let bind = |source: PathBuf, target: &str, kind| BindMount {
            source,
            target: target.into(),
            read_only: true,
            propagation: Propagation::Private,
            kind,
        };
        match self {
            Self::Image { dir, .. } => {
                let mut m = vec![bind(dir.join("usr"), "/usr", MountKind::System)];
                for f in IMAGE_ETC {
                    m.push(bind(
                        dir.join("etc").join(f),
                        &format!("/etc/{f}"),
                        MountKind::OptionalSystem,
                    ));
                }
                m
            }
            Self::Host { .. } => HOST_DIRS
                .iter()
                .map(|d| bind(d.into(), d, MountKind::OptionalSystem))
                .chain(
                    HOST_PROGRAMS
                        .iter()
                        .map(|p| bind(p.into(), p, MountKind::OptionalBinary)),
                )
                .collect(),
        }
    }

    /// Whether the host file `path` is already in the container at the same path (so a mapped
    /// binary there needs no mount of its own): below a bound host directory or one of the
    /// bound programs; never with an image root.
    pub fn shows_host_path(&self, path: &Path) -> bool {
        match self {
            Self::Image { .. } => false,
            Self::Host { .. } => {
                HOST_DIRS.iter().any(|d| path.starts_with(d))
                    || HOST_PROGRAMS.iter().any(|p| path == Path::new(p))
            }
        }
    }

    /// Whether a mapped host binary at `path` is bound into the container at that path: not
    /// when the root already shows it ([`Self::shows_host_path`]), nor below `/usr` over an
    /// image's `/usr` (the image's own file at that path is what runs there; a mount point
    /// cannot be made in the image's read-only `/usr`, and the host's `/usr` stays out).
    pub fn binds_host_binary(&self, path: &Path) -> bool {
        match self {
            Self::Image { .. } => !path.starts_with("/usr"),
            Self::Host { .. } => !self.shows_host_path(path),
        }
    }

    /// The host `/etc` files bound over the pod's placeholders: the image's own take
    /// [`IMAGE_ETC`]'s places.
    pub fn host_etc<'a>(&self, candidates: &[&'a str]) -> Vec<&'a str> {
        candidates
            .iter()
            .copied()
            .filter(|f| self.image_dir().is_none() || !IMAGE_ETC.contains(f))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_image_directory_is_the_root_else_the_narrowed_host() {
        let dir = PathBuf::from("/img/kvrs_virt-launcher_v1");
        let image = RootSource::choose("kvrs/virt-launcher:v1", Some(dir.clone()), |_| true);
        assert_eq!(image.image_dir(), Some(dir.as_path()));
        let missing = RootSource::choose("kvrs/virt-launcher:v1", Some(dir), |_| false);
        assert!(matches!(missing, RootSource::Host { .. }));
        assert!(
            missing
                .to_string()
                .contains("no directory /img/kvrs_virt-launcher_v1")
        );
        let unmapped = RootSource::choose("x/y:z", None, |_| true);
        assert!(unmapped.to_string().contains("not in the image map"));
    }

    #[test]
    fn an_image_root_binds_its_usr_and_its_own_etc_files_only() {
        let root = RootSource::Image {
            reference: "r".into(),
            dir: "/img/r".into(),
        };
        let m: Vec<(String, String, MountKind)> = root
            .mounts()
            .into_iter()
            .map(|m| {
                assert!(m.read_only);
                (
                    m.source.display().to_string(),
                    m.target.display().to_string(),
                    m.kind,
                )
            })
            .collect();
        assert_eq!(
            m,
            [
                ("/img/r/usr".into(), "/usr".into(), MountKind::System),
                (
                    "/img/r/etc/ld.so.cache".into(),
                    "/etc/ld.so.cache".into(),
                    MountKind::OptionalSystem
                ),
                (
                    "/img/r/etc/alternatives".into(),
                    "/etc/alternatives".into(),
                    MountKind::OptionalSystem
                ),
            ]
        );
        assert!(!root.shows_host_path(Path::new("/usr/lib/x")));
        assert!(root.binds_host_binary(Path::new("/opt/kvrs/virt-launcher")));
        assert!(!root.binds_host_binary(Path::new("/usr/bin/python3")));
        assert_eq!(
            root.host_etc(&["resolv.conf", "ld.so.cache", "localtime", "alternatives"]),
            ["resolv.conf", "localtime"]
        );
    }

    #[test]
    fn the_narrowed_host_never_binds_usr_whole_nor_its_bin_directories() {
        let root = RootSource::Host { why: "x".into() };
        let mounts = root.mounts();
        let sources: Vec<&Path> = mounts.iter().map(|m| m.source.as_path()).collect();
        for never in ["/", "/usr", "/usr/bin", "/usr/sbin", "/usr/local"] {
            assert!(!sources.contains(&Path::new(never)), "{never}");
        }
        assert!(mounts.iter().all(|m| m.read_only && m.source == m.target));
        assert!(root.shows_host_path(Path::new("/usr/lib/python3.11/os.py")));
        assert!(root.shows_host_path(Path::new("/usr/bin/qemu-img")));
        assert!(!root.shows_host_path(Path::new("/usr/bin/python3")));
        assert!(!root.shows_host_path(Path::new("/usr/sbin/runc")));
        assert!(!root.shows_host_path(Path::new("/usr/library")));
        assert!(root.binds_host_binary(Path::new("/usr/bin/python3")));
        assert!(!root.binds_host_binary(Path::new("/usr/lib/x")));
        assert_eq!(root.host_etc(&["ld.so.cache"]), ["ld.so.cache"]);
    }
}
