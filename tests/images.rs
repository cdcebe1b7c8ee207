//! kvrs's container images (`scripts/images.sh`, `scripts/lib/oci_image.py`).
//!
//! * `writer_is_reproducible`: the OCI writer gives the same digest (and the same bytes) for the
//!   same tree twice, whatever the files' mtimes, and writes a layout that checks out against the
//!   image spec (digests, sizes, diff_ids, the names containerd reads);
//! * `images_build_and_hold_what_their_pods_run`: builds every image with the dev binaries
//!   (`KVRS_IMAGE_PROFILE=dev`) and checks each archive the same way, then unpacks it and checks
//!   the files its pods run are there (paths, modes, owners), that every dynamically linked
//!   program finds its libraries *in the image* (the image's own loader lists them, in a chroot),
//!   that libvirtd, QEMU and qemu-img start there, and that `container-disk` runs in an empty
//!   root (it is run inside container-disk images). Needs root (mmdebstrap, chroot); it fails,
//!   never skips, when the build cannot run.

use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// One checked image: its config and its layers unpacked into one root.
struct Image {
    config: serde_json::Value,
    root: PathBuf,
    /// The layer blobs (gzip tars), in order.
    layers: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

/// Checks `archive` against the OCI image-layout spec and unpacks its layers (in order) into a
/// directory; `name` is the reference containerd must name it by.
fn open_archive(archive: &Path, name: &str, tag: &str) -> Image {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(&layout));

    let read_json = |p: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    assert_eq!(
        read_json(&layout.join("oci-layout")),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    // A blob, checked against its descriptor (digest and size).
    let blob = |desc: &serde_json::Value| -> PathBuf {
        let digest = desc["digest"].as_str().expect("descriptor digest");
        let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
        let path = layout.join("blobs/sha256").join(hex);
        let mut f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("blob {digest}: {e}"));
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            size += n as u64;
            h.update(&buf[..n]);
        }
        assert_eq!(
            format!("{:x}", h.finalize()),
            hex,
            "blob content vs its digest"
        );
        assert_eq!(Some(size), desc["size"].as_u64(), "blob {digest}: size");
        path
    };

    let index = read_json(&layout.join("index.json"));
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let manifests = index["manifests"].as_array().expect("index manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    let m = &manifests[0];
    assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(
        m["annotations"]["io.containerd.image.name"], name,
        "{index}"
    );
    assert_eq!(
        m["annotations"]["org.opencontainers.image.ref.name"], tag,
        "{index}"
    );
    assert_eq!(
        m["platform"],
        serde_json::json!({"architecture": "amd64", "os": "linux"})
    );
    let manifest = read_json(&blob(m));
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config = read_json(&blob(&manifest["config"]));
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["os"], "linux");
    assert_eq!(config["rootfs"]["type"], "layers");
    let layers = manifest["layers"].as_array().expect("manifest layers");
    let diff_ids = config["rootfs"]["diff_ids"].as_array().expect("diff_ids");
    assert!(!layers.is_empty());
    assert_eq!(layers.len(), diff_ids.len());

    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let mut blobs = Vec::new();
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        assert_eq!(
            layer["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let path = blob(layer);
        blobs.push(path.clone());
        // diff_id: the digest of the uncompressed tar.
        let mut gz = Command::new("gzip")
            .arg("-dc")
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut h = Sha256::new();
        std::io::copy(gz.stdout.as_mut().unwrap(), &mut h).unwrap();
        assert!(gz.wait().unwrap().success());
        assert_eq!(
            diff_id.as_str().unwrap(),
            format!("sha256:{:x}", h.finalize()),
            "diff_id"
        );
        let mut tar = Command::new("tar");
        tar.arg("-xzf")
            .arg(&path)
            .arg("-C")
            .arg(&root)
            .arg("--numeric-owner");
        if is_root() {
            tar.arg("--same-owner");
        }
        run(&mut tar);
    }
    Image {
        config,
        root,
        layers: blobs,
        _dir: dir,
    }
}

fn writer() -> PathBuf {
    repo().join("scripts/lib/oci_image.py")
}

#[test]
fn writer_is_reproducible() {
    let t = tempfile::tempdir().unwrap();
    let rootfs = t.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("disk")).unwrap();
    std::fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
    std::fs::write(rootfs.join("disk/disk.img"), vec![0u8; 4096]).unwrap();
    std::fs::write(rootfs.join("usr/bin/tool"), b"#!/bin/true\n").unwrap();
    std::fs::set_permissions(
        rootfs.join("usr/bin/tool"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    std::os::unix::fs::symlink("tool", rootfs.join("usr/bin/alias")).unwrap();
    std::fs::hard_link(rootfs.join("usr/bin/tool"), rootfs.join("usr/bin/hard")).unwrap();

    let write = |out: &str| -> String {
        let out = t.path().join(out);
        let printed = run(Command::new("python3")
            .arg(writer())
            .args(["--rootfs"])
            .arg(&rootfs)
            .args(["--ref", "kvrs.local/empty-disk:64m", "--out"])
            .arg(&out)
            .args([
                "--entrypoint",
                r#"["/usr/bin/tool"]"#,
                "--env",
                "A=1",
                "--user",
                "107:107",
            ])
            .args([
                "--label",
                "x=y",
                "--owner",
                "/disk=107:107",
                "--owner",
                "/disk/disk.img=107:107",
            ]));
        printed.trim().to_string()
    };
    let first = write("a.tar");
    // Touching every file changes nothing: mtimes are clamped to SOURCE_DATE_EPOCH.
    run(Command::new("touch")
        .arg(rootfs.join("disk/disk.img"))
        .arg(rootfs.join("usr/bin/tool")));
    let second = write("b.tar");
    assert_eq!(first, second);
    assert!(
        first.starts_with("kvrs.local/empty-disk:64m@sha256:"),
        "{first}"
    );
    assert_eq!(
        std::fs::read(t.path().join("a.tar")).unwrap(),
        std::fs::read(t.path().join("b.tar")).unwrap(),
        "same tree, same archive bytes"
    );
    // The printed digest is the manifest's.
    let img = open_archive(&t.path().join("a.tar"), "kvrs.local/empty-disk:64m", "64m");
    assert_eq!(
        img.config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/tool"])
    );
    assert_eq!(img.config["config"]["Env"], serde_json::json!(["A=1"]));
    assert_eq!(img.config["config"]["User"], "107:107");
    assert_eq!(
        img.config["config"]["Labels"],
        serde_json::json!({"x": "y"})
    );
    assert_eq!(img.config["created"], "2023-11-14T22:13:20Z");

    // Owners, modes and links as the layer lists them (no root needed to read them).
    assert_eq!(img.layers.len(), 1);
    let listing = run(Command::new("tar")
        .env("TZ", "UTC")
        .args(["-tzv", "--numeric-owner", "--full-time", "-f"])
        .arg(&img.layers[0]));
    let line = |path: &str| -> String {
        listing
            .lines()
            .find(|l| l.split_whitespace().nth(5) == Some(path))
            .unwrap_or_else(|| panic!("{path} not in the layer:\n{listing}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        line("disk/disk.img").starts_with("-rw-r--r-- 107/107 4096 2023-11-14 22:13:20"),
        "{listing}"
    );
    assert!(line("disk/").starts_with("drwxr-xr-x 107/107"), "{listing}");
    // The first path of a hard-linked inode (in sorted order) carries the data, the others link to it.
    assert!(
        line("usr/bin/hard").starts_with("-rwsr-xr-x 0/0"),
        "{listing}"
    );
    assert!(
        line("usr/bin/tool").ends_with("usr/bin/tool link to usr/bin/hard"),
        "{listing}"
    );
    assert!(
        line("usr/bin/alias").ends_with("usr/bin/alias -> tool"),
        "{listing}"
    );
    // Entries sorted by path.
    let paths: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    let mut sorted = paths.clone();
    sorted.sort_unstable();
    assert_eq!(paths, sorted);

    // Names: containerd's annotation is the normalized reference, the OCI one the tag.
    let name = |r: &str| -> String {
        let out = run(Command::new("python3")
            .arg(writer())
            .arg("--rootfs")
            .arg(&rootfs)
            .args(["--ref", r, "--out"])
            .arg(t.path().join("n.tar")));
        out.trim().split('@').next().unwrap().to_string()
    };
    assert_eq!(
        name("kvrs/virt-handler:v0.1.0"),
        "docker.io/kvrs/virt-handler:v0.1.0"
    );
    assert_eq!(name("pause:1"), "docker.io/library/pause:1");
    assert_eq!(name("localhost:5000/a/b:c"), "localhost:5000/a/b:c");
    // Bad input: one line naming the problem, exit 2.
    let bad = Command::new("python3")
        .arg(writer())
        .arg("--rootfs")
        .arg(&rootfs)
        .args(["--ref", "kvrs/x", "--out"])
        .arg(t.path().join("bad.tar"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing :TAG"));
    let bad = Command::new("python3")
        .arg(writer())
        .arg("--rootfs")
        .arg(&rootfs)
        .args(["--ref", "kvrs/x:1", "--owner", "/nope=1:1", "--out"])
        .arg(t.path().join("bad.tar"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nope"));
}

/// `chroot ROOT ARGS...` (root only).
fn chroot(root: &Path, args: &[&str]) -> String {
    run(Command::new("chroot").arg(root).args(args))
}

/// Asserts `path` is a file in the image with mode bits `mode` (and executable).
fn has_file(img: &Image, path: &str, mode: u32) -> std::fs::Metadata {
    let p = img.root.join(path.trim_start_matches('/'));
    let md = std::fs::symlink_metadata(&p)
        .unwrap_or_else(|e| panic!("{path} missing from the image: {e}"));
    let md = if md.file_type().is_symlink() {
        std::fs::metadata(&p).unwrap_or_else(|e| panic!("{path}: dangling link: {e}"))
    } else {
        md
    };
    assert!(md.is_file(), "{path} is not a file");
    assert_eq!(
        md.mode() & 0o7777,
        mode,
        "{path}: mode {:o}",
        md.mode() & 0o7777
    );
    md
}

/// The program interpreter (PT_INTERP) of an ELF file, if it is dynamically linked.
fn interpreter(file: &Path) -> Option<String> {
    let out = run(Command::new("readelf").arg("-lW").arg(file));
    out.lines().find_map(|l| {
        l.split("[Requesting program interpreter: ")
            .nth(1)
            .map(|r| r.trim_end_matches(']').to_string())
    })
}

/// Checks, in a chroot of the image, that the image's own loader finds every library `path`
/// needs (readelf's NEEDED list is also checked against what it resolved).
fn libraries_resolve(img: &Image, path: &str) {
    let file = img.root.join(path.trim_start_matches('/'));
    let interp = interpreter(&file).unwrap_or_else(|| panic!("{path} is not dynamically linked"));
    assert!(
        img.root.join(interp.trim_start_matches('/')).exists(),
        "{path}: its loader {interp} is not in the image"
    );
    let listed = chroot(&img.root, &[&interp, "--list", path]);
    assert!(
        !listed.contains("not found"),
        "{path} in the image:\n{listed}"
    );
    let dynamic = run(Command::new("readelf").arg("-dW").arg(&file));
    for needed in dynamic.lines().filter_map(|l| {
        l.contains("(NEEDED)")
            .then(|| {
                l.split('[')
                    .nth(1)
                    .map(|r| r.trim_end_matches(']').to_string())
            })
            .flatten()
    }) {
        assert!(
            listed.lines().any(|l| {
                // "libx.so.1 => /path (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
                let first = l.split_whitespace().next().unwrap_or_default();
                first.rsplit('/').next() == Some(needed.as_str()) && !l.contains("not found")
            }),
            "{path}: NEEDED {needed} not resolved in the image:\n{listed}"
        );
    }
}

#[test]
fn images_build_and_hold_what_their_pods_run() {
    assert!(
        is_root(),
        "this test builds the launcher's Debian base (mmdebstrap --mode=root) and runs the images' \
         programs in chroots: run it as root"
    );
    let repo = repo();
    let out = Command::new("bash")
        .arg(repo.join("scripts/images.sh"))
        .env("KVRS_IMAGE_PROFILE", "dev")
        .current_dir(&repo)
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/images.sh");
    assert!(
        out.status.success(),
        "scripts/images.sh failed ({})",
        out.status
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let archives: BTreeMap<String, PathBuf> = stdout
        .lines()
        .map(|l| {
            let p = PathBuf::from(l);
            assert!(p.is_file(), "images.sh printed {l}, not an archive");
            (p.file_name().unwrap().to_string_lossy().into_owned(), p)
        })
        .collect();
    let version = env!("CARGO_PKG_VERSION");
    let tag = format!("v{version}");
    let get = |file: &str| -> &PathBuf {
        archives
            .get(file)
            .unwrap_or_else(|| panic!("no {file} among {:?}", archives.keys()))
    };
    assert_eq!(archives.len(), 6, "{stdout}");

    // virt-controller: distroless, nonroot 65532, no shell.
    let c = open_archive(
        get(&format!("kvrs_virt-controller_{tag}.oci.tar")),
        &format!("docker.io/kvrs/virt-controller:{tag}"),
        &tag,
    );
    has_file(&c, "/usr/bin/virt-controller", 0o755);
    assert_eq!(
        c.config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/virt-controller"])
    );
    assert_eq!(c.config["config"]["User"], "65532:65532");
    let passwd = std::fs::read_to_string(c.root.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{passwd}"
    );
    for sh in ["bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash"] {
        assert!(
            !c.root.join(sh).exists(),
            "the controller image has a shell: {sh}"
        );
    }
    libraries_resolve(&c, "/usr/bin/virt-controller");
    drop(c);

    // virt-api: distroless as the controller, nonroot 65532, no shell.
    let a = open_archive(
        get(&format!("kvrs_virt-api_{tag}.oci.tar")),
        &format!("docker.io/kvrs/virt-api:{tag}"),
        &tag,
    );
    has_file(&a, "/usr/bin/virt-api", 0o755);
    assert_eq!(
        a.config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/virt-api"])
    );
    assert_eq!(a.config["config"]["User"], "65532:65532");
    for sh in ["bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash"] {
        assert!(
            !a.root.join(sh).exists(),
            "the virt-api image has a shell: {sh}"
        );
    }
    libraries_resolve(&a, "/usr/bin/virt-api");
    drop(a);

    // virt-handler: the binary, ip and nft with their libraries.
    let h = open_archive(
        get(&format!("kvrs_virt-handler_{tag}.oci.tar")),
        &format!("docker.io/kvrs/virt-handler:{tag}"),
        &tag,
    );
    has_file(&h, "/usr/bin/virt-handler", 0o755);
    assert_eq!(
        h.config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/virt-handler"])
    );
    libraries_resolve(&h, "/usr/bin/virt-handler");
    for tool in ["ip", "nft"] {
        let path = ["/usr/bin", "/usr/sbin"]
            .iter()
            .map(|d| format!("{d}/{tool}"))
            .find(|p| h.root.join(p.trim_start_matches('/')).is_file())
            .unwrap_or_else(|| panic!("no {tool} in /usr/bin or /usr/sbin of the handler image"));
        libraries_resolve(&h, &path);
        // It runs there (nft and ip print their versions without touching the kernel).
        let v = chroot(&h.root, &[&path, "-V"]);
        assert!(!v.is_empty(), "{tool} -V printed nothing");
    }
    drop(h);

    // virt-launcher: libvirt + QEMU + kvrs's binaries where the pod renderer points.
    let l = open_archive(
        get(&format!("kvrs_virt-launcher_{tag}.oci.tar")),
        &format!("docker.io/kvrs/virt-launcher:{tag}"),
        &tag,
    );
    for p in [
        "/usr/bin/virt-launcher-monitor",
        "/usr/bin/virt-launcher",
        "/usr/bin/virt-tail",
        "/usr/bin/container-disk",
        "/usr/sbin/libvirtd",
        "/usr/sbin/virtlogd",
        "/usr/bin/qemu-system-x86_64",
        "/usr/bin/qemu-img",
        "/usr/bin/xorrisofs",
        "/usr/bin/swtpm",
        "/usr/bin/swtpm_setup",
    ] {
        has_file(&l, p, 0o755);
    }
    assert!(l.root.join("usr/share/OVMF").is_dir(), "no /usr/share/OVMF");
    let passwd = std::fs::read_to_string(l.root.join("etc/passwd")).unwrap();
    assert!(
        passwd.lines().any(|x| x.starts_with("qemu:x:107:107:")),
        "{passwd}"
    );
    assert_eq!(l.config["config"]["User"], "107:107");
    for p in [
        "/usr/bin/virt-launcher-monitor",
        "/usr/bin/virt-launcher",
        "/usr/sbin/libvirtd",
        "/usr/sbin/virtlogd",
        "/usr/bin/qemu-system-x86_64",
        "/usr/bin/qemu-img",
        "/usr/bin/swtpm",
    ] {
        libraries_resolve(&l, p);
    }
    let v = chroot(&l.root, &["/usr/sbin/libvirtd", "--version"]);
    assert!(
        v.contains("libvirt") && v.split_whitespace().last().unwrap().starts_with("11."),
        "{v}"
    );
    let v = chroot(&l.root, &["/usr/bin/qemu-system-x86_64", "--version"]);
    assert!(v.starts_with("QEMU emulator version 10."), "{v}");
    chroot(&l.root, &["/usr/bin/qemu-img", "--version"]);
    // No docs, manuals or locales.
    for d in ["usr/share/man", "usr/share/locale"] {
        let n = std::fs::read_dir(l.root.join(d))
            .map(|r| r.count())
            .unwrap_or(0);
        assert_eq!(n, 0, "/{d} is not empty");
    }
    // container-disk and virt-tail are static; container-disk runs in an empty root, as it does
    // inside a container-disk image.
    for p in ["usr/bin/container-disk", "usr/bin/virt-tail"] {
        assert_eq!(
            interpreter(&l.root.join(p)),
            None,
            "/{p} is dynamically linked"
        );
    }
    let empty = tempfile::tempdir().unwrap();
    std::fs::copy(
        l.root.join("usr/bin/container-disk"),
        empty.path().join("container-disk"),
    )
    .unwrap();
    chroot(empty.path(), &["/container-disk", "--no-op"]);
    drop(l);

    // The test guest as a kernel-boot container and a containerDisk.
    let k = open_archive(
        get("kvrs.local_test-guest-kernel_v6.oci.tar"),
        "kvrs.local/test-guest-kernel:v6",
        "v6",
    );
    for p in ["/boot/vmlinuz", "/boot/initramfs.gz"] {
        let md = has_file(&k, p, 0o644);
        assert!(
            md.len() > 1_000_000 || p.ends_with(".gz"),
            "{p}: {} bytes",
            md.len()
        );
    }
    let d = open_archive(
        get("kvrs.local_empty-disk_64m.oci.tar"),
        "kvrs.local/empty-disk:64m",
        "64m",
    );
    let files: Vec<_> = std::fs::read_dir(d.root.join("disk"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files.len(),
        1,
        "a containerDisk holds exactly one file in /disk: {files:?}"
    );
    let md = has_file(&d, &format!("/disk/{}", files[0]), 0o644);
    assert_eq!((md.uid(), md.gid()), (107, 107), "/disk/{} owner", files[0]);
    let info = run(Command::new("qemu-img")
        .args(["info", "--output=json"])
        .arg(d.root.join("disk").join(&files[0])));
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["virtual-size"], 64 * 1024 * 1024, "{info}");

    // Unchanged inputs (the same binaries: no cargo this time) rebuild nothing and print the
    // same archives.
    let digests = |a: &BTreeMap<String, PathBuf>| -> Vec<String> {
        a.values()
            .map(|p| sha256_hex(&std::fs::read(p).unwrap()))
            .collect()
    };
    let before = digests(&archives);
    let again = Command::new("bash")
        .arg(repo.join("scripts/images.sh"))
        .env("KVRS_IMAGE_PROFILE", "dev")
        .env("KVRS_IMAGE_NO_BUILD", "1")
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(again.status.success());
    assert_eq!(String::from_utf8(again.stdout).unwrap(), stdout);
    let log = String::from_utf8_lossy(&again.stderr);
    assert_eq!(log.matches(": cached (").count(), 6, "{log}");
    assert_eq!(digests(&archives), before);
}
