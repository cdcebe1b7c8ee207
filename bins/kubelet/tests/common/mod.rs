//! What the runner's tests that start real containers share: root, and a fixed runc.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether this process runs as root (namespaces, cgroups, UID 107 need it).
#[allow(dead_code)] // each test binary compiles this module; the runtime check needs no root
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// `name` on `PATH` (or in `/usr/sbin`, `/usr/bin`).
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The runc `kvrs run` and `kvrs kubelet` use by default ([`kvrs_kubelet::runc::default_runtime`]:
/// the runc 1.5.3 `scripts/node-components.sh` builds into `~/.cache/kvrs/node/bin`, else
/// `runc` on `PATH`), which must carry the November 2025 fixes, as the kubelet demands at start.
/// When it does not, the repository's `scripts/install-test-deps.sh` is run (Debian's packages,
/// then runc 1.5.3 through `scripts/node-components.sh` when a Go toolchain is there; a no-op
/// when everything is there); a machine where that fails fails the test.
pub fn runc() -> PathBuf {
    let fixed = || {
        let p = kvrs_kubelet::runc::default_runtime();
        let p = if p.components().count() > 1 {
            Some(p).filter(|p| p.is_file())
        } else {
            on_path(&p.to_string_lossy())
        }?;
        kvrs_kubelet::runc::check_blocking(&p, false)
            .ok()
            .filter(|c| matches!(c, kvrs_kubelet::runc::RuntimeCheck::Fixed(_)))
            .map(|_| p)
    };
    if let Some(p) = fixed() {
        return p;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-test-deps.sh");
    let status = Command::new("bash")
        .arg(&script)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        status.success(),
        "{} failed ({status}): runc is needed to run pods",
        script.display()
    );
    fixed().unwrap_or_else(|| {
        panic!(
            "no runc with the fixes of {} after {}: the pod runner refuses older ones",
            kvrs_kubelet::runc::CVES.join(", "),
            script.display()
        )
    })
}

/// Makes `dir` a merged-`/usr` container image holding only a static busybox
/// (`usr/bin/busybox`, Debian's busybox-static, which `scripts/install-test-deps.sh` installs)
/// and a link for each of its applets (`usr/bin/sh`, `id`, `sleep`, ...), with `bin`, `sbin`
/// and `lib` linked into `usr` as in a Debian image: a pod on it has a shell and the usual
/// tools, and nothing of the host's.
#[allow(dead_code)] // each test binary compiles this module; not every one makes an image
pub fn busybox_image(dir: &Path) {
    let busybox = ["/usr/bin/busybox", "/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .expect("busybox (busybox-static, scripts/install-test-deps.sh)");
    assert!(
        !has_interpreter(busybox),
        "the image holds one program, so busybox must be static: {}",
        busybox.display()
    );
    let bin = dir.join("usr/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(busybox, bin.join("busybox")).unwrap();
    let list = Command::new(busybox).arg("--list").output().unwrap();
    assert!(list.status.success(), "busybox --list: {list:?}");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" && !applet.contains('/') && !applet.is_empty() {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
    }
    for (link, target) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib")] {
        std::os::unix::fs::symlink(target, dir.join(link)).unwrap();
    }
}

/// Whether the ELF64 file at `path` names a program interpreter (a `PT_INTERP` header: it is
/// dynamically linked).
fn has_interpreter(path: &Path) -> bool {
    let elf = std::fs::read(path).unwrap();
    assert_eq!(
        &elf[..5],
        b"\x7fELF\x02",
        "{} is an ELF64 file",
        path.display()
    );
    let u16_at = |o: usize| usize::from(u16::from_le_bytes([elf[o], elf[o + 1]]));
    let phoff = usize::try_from(u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap())).unwrap();
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).any(|i| {
        let o = phoff + i * size;
        u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) == 3
    })
}
