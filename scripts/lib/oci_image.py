#!/usr/bin/env python3
"""Writes an OCI image-layout tar archive from root filesystem directories, without a registry
or a container engine (stdlib only).

    python3 scripts/lib/oci_image.py --rootfs DIR [--rootfs DIR2 ...] --ref NAME:TAG --out FILE.tar
        [--entrypoint JSON] [--cmd JSON] [--env K=V]... [--user UID:GID] [--workdir DIR]
        [--label K=V]... [--owner PATH=UID:GID]... [--arch amd64]

Each --rootfs becomes one gzip layer, in order (the later one wins where paths repeat, as with
any layer stack; no whiteouts are written). The archive holds `oci-layout`, `index.json` and
`blobs/sha256/` (config, manifest, layers) and is what `ctr -n k8s.io images import FILE.tar`,
`podman load`, `skopeo copy oci-archive:FILE.tar ...` accept.

Naming (what containerd's importer reads): the index entry carries
  * `io.containerd.image.name` = the FULL normalized reference (`kvrs/virt-handler:v0.1.0` ->
    `docker.io/kvrs/virt-handler:v0.1.0`, `pause:1` -> `docker.io/library/pause:1`,
    `kvrs.local/pause:1` unchanged). containerd names the image by this annotation first and uses
    it verbatim, so it must be the normalized form the CRI plugin (and so the kubelet) looks up;
  * `org.opencontainers.image.ref.name` = the tag alone, as the image-spec intends and as
    `ctr images export` writes it (ctr joins a bare tag to `--base-name` when the annotation
    above is missing; a full reference there would be dropped unless it matched that prefix).

Reproducible: entries sorted by path, every mtime clamped to SOURCE_DATE_EPOCH (default
1700000000), numeric owners from the rootfs (lstat) unless `--owner PATH=UID:GID` says otherwise
(so `/disk/disk.img` can be 107:107 without chown on the host), no user/group names, gzip with
mtime 0 and no file name, the config's `created` from the same epoch. The same input gives the
same manifest digest (printed on stdout as `NAME@sha256:...`).

Kept from the rootfs: regular files, directories, symlinks, hard links (as tar links to the first
path in sorted order), character/block devices and FIFOs; sockets are skipped. Permission bits
including setuid/setgid/sticky are kept; extended attributes (file capabilities, SELinux labels)
are not.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import stat
import sys
import tarfile
import tempfile
import time

DEFAULT_EPOCH = 1700000000  # 2023-11-14T22:13:20Z; any fixed value works, this one is documented
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def fail(msg):
    print(f"oci_image.py: {msg}", file=sys.stderr)
    sys.exit(2)


def normalize_ref(ref):
    """NAME:TAG -> (full normalized name, tag), as Docker's reference parser normalizes names.

    Only tagged references are accepted (a digest reference cannot name a new image)."""
    if "@" in ref:
        fail(f"--ref {ref!r}: a digest reference cannot name a built image; use NAME:TAG")
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon <= slash:
        fail(f"--ref {ref!r}: missing :TAG")
    name, tag = ref[:colon], ref[colon + 1:]
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag):
        fail(f"--ref {ref!r}: invalid tag {tag!r}")
    parts = name.split("/")
    first = parts[0]
    if len(parts) == 1 or not ("." in first or ":" in first or first == "localhost"):
        # No registry host: Docker Hub, and `library/` for a one-component name.
        if len(parts) == 1:
            parts = ["library"] + parts
        parts = ["docker.io"] + parts
    path = "/".join(parts[1:])
    if not re.fullmatch(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*", path):
        fail(f"--ref {ref!r}: invalid repository path {path!r} (lower case, digits, . _ - separators)")
    return "/".join(parts) + ":" + tag, tag


def key_value(s, what):
    if "=" not in s:
        fail(f"{what} {s!r}: expected K=V")
    k, v = s.split("=", 1)
    if not k:
        fail(f"{what} {s!r}: empty key")
    return k, v


def uid_gid(s, what):
    m = re.fullmatch(r"(\d+):(\d+)", s)
    if not m:
        fail(f"{what} {s!r}: expected UID:GID (numbers)")
    return int(m.group(1)), int(m.group(2))


def json_list(s, what):
    try:
        v = json.loads(s)
    except json.JSONDecodeError as e:
        fail(f"{what}: not JSON ({e}): {s!r}")
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        fail(f"{what}: expected a JSON array of strings, got {s!r}")
    return v


class HashWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `inner`."""

    def __init__(self, inner):
        self.inner = inner
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self):
        return True

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        self.inner.write(b)
        return len(b)


def walk_sorted(root):
    """Every path under root (relative, '/'-separated, root itself excluded), sorted bytewise,
    without following symlinks."""
    out = []
    stack = [""]
    while stack:
        rel = stack.pop()
        full = os.path.join(root, rel) if rel else root
        with os.scandir(full) as it:
            for e in it:
                r = f"{rel}/{e.name}" if rel else e.name
                out.append(r)
                if e.is_dir(follow_symlinks=False):
                    stack.append(r)
    out.sort(key=lambda p: p.encode("utf-8", "surrogateescape"))
    return out


def write_layer(root, dest, epoch, owners, level):
    """Writes root as a gzip tar layer to the open binary file `dest`.

    Returns (diff_id, digest, size, uncompressed size, owner paths used)."""
    if not os.path.isdir(root):
        fail(f"--rootfs {root!r}: not a directory")
    compressed = HashWriter(dest)
    gz = gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=level)
    uncompressed = HashWriter(gz)
    seen_inodes = {}
    used_owners = set()
    with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel in walk_sorted(root):
            full = os.path.join(root, rel)
            st = os.lstat(full)
            mode = st.st_mode
            ti = tarfile.TarInfo(rel)
            ti.mode = stat.S_IMODE(mode)
            ti.mtime = min(int(st.st_mtime), epoch)
            ti.uid, ti.gid = st.st_uid, st.st_gid
            o = owners.get("/" + rel)
            if o is not None:
                ti.uid, ti.gid = o
                used_owners.add("/" + rel)
            ti.uname = ti.gname = ""
            data = None
            if stat.S_ISDIR(mode):
                ti.type = tarfile.DIRTYPE
            elif stat.S_ISLNK(mode):
                ti.type = tarfile.SYMTYPE
                ti.linkname = os.readlink(full)
            elif stat.S_ISREG(mode):
                if st.st_nlink > 1:
                    key = (st.st_dev, st.st_ino)
                    if key in seen_inodes:
                        ti.type = tarfile.LNKTYPE
                        ti.linkname = seen_inodes[key]
                    else:
                        seen_inodes[key] = rel
                if ti.type != tarfile.LNKTYPE:
                    ti.type = tarfile.REGTYPE
                    ti.size = st.st_size
                    data = full
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                ti.type = tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE
                ti.devmajor, ti.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
            elif stat.S_ISFIFO(mode):
                ti.type = tarfile.FIFOTYPE
            else:
                print(f"oci_image.py: skipping socket or unknown file /{rel}", file=sys.stderr)
                continue
            if data is None:
                tar.addfile(ti)
            else:
                with open(data, "rb") as f:
                    tar.addfile(ti, f)
    gz.close()
    return (
        "sha256:" + uncompressed.sha.hexdigest(),
        "sha256:" + compressed.sha.hexdigest(),
        compressed.size,
        uncompressed.size,
        used_owners,
    )


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def add_bytes(tar, name, data, epoch):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = epoch
    ti.mode = 0o644
    ti.uname = ti.gname = ""
    tar.addfile(ti, io.BytesIO(data))


def main(argv=None):
    p = argparse.ArgumentParser(description="Write an OCI image-layout tar archive from rootfs directories.")
    p.add_argument("--rootfs", action="append", required=True, help="a directory; one layer each, in order")
    p.add_argument("--ref", required=True, help="NAME:TAG (normalized as Docker does)")
    p.add_argument("--out", required=True, help="the archive to write (FILE.tar)")
    p.add_argument("--entrypoint", help='JSON array, e.g. \'["/usr/bin/virt-controller"]\'')
    p.add_argument("--cmd", help="JSON array")
    p.add_argument("--env", action="append", default=[], help="K=V (repeatable)")
    p.add_argument("--user", help="UID:GID (or a name the image's /etc/passwd has)")
    p.add_argument("--workdir")
    p.add_argument("--label", action="append", default=[], help="K=V (repeatable)")
    p.add_argument("--owner", action="append", default=[], help="/PATH=UID:GID: owner of that entry in the layers (repeatable)")
    p.add_argument("--arch", default="amd64", help="image architecture (default amd64)")
    p.add_argument("--compress-level", type=int, default=6, help="gzip level 1-9 (default 6)")
    p.add_argument("--stats", help="also write a JSON file: reference, digest, compressed and uncompressed layer bytes")
    a = p.parse_args(argv)

    full_name, tag = normalize_ref(a.ref)
    epoch_s = os.environ.get("SOURCE_DATE_EPOCH", "")
    if epoch_s and not epoch_s.isdigit():
        fail(f"SOURCE_DATE_EPOCH={epoch_s!r}: expected seconds since 1970")
    epoch = int(epoch_s) if epoch_s else DEFAULT_EPOCH
    owners = {}
    for o in a.owner:
        path, ug = key_value(o, "--owner")
        if not path.startswith("/"):
            fail(f"--owner {o!r}: PATH must be absolute (as in the image)")
        owners[path.rstrip("/") or "/"] = uid_gid(ug, "--owner")

    cfg = {}
    if a.entrypoint is not None:
        cfg["Entrypoint"] = json_list(a.entrypoint, "--entrypoint")
    if a.cmd is not None:
        cfg["Cmd"] = json_list(a.cmd, "--cmd")
    if a.env:
        for e in a.env:
            key_value(e, "--env")
        cfg["Env"] = list(a.env)
    if a.user:
        cfg["User"] = a.user
    if a.workdir:
        if not a.workdir.startswith("/"):
            fail(f"--workdir {a.workdir!r}: must be absolute")
        cfg["WorkingDir"] = a.workdir
    if a.label:
        cfg["Labels"] = dict(key_value(lb, "--label") for lb in a.label)

    out_dir = os.path.dirname(os.path.abspath(a.out))
    os.makedirs(out_dir, exist_ok=True)
    layers = []
    tmp_files = []
    used = set()
    uncompressed_sizes = []
    try:
        for root in a.rootfs:
            fd, tmp = tempfile.mkstemp(prefix=".layer-", dir=out_dir)
            tmp_files.append(tmp)
            with os.fdopen(fd, "wb") as f:
                diff_id, digest, size, usize, u = write_layer(root, f, epoch, owners, a.compress_level)
            used |= u
            layers.append((diff_id, digest, size, tmp))
            uncompressed_sizes.append(usize)
        unused = sorted(set(owners) - used)
        if unused:
            fail(f"--owner for paths in no layer: {', '.join(unused)}")

        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
        config = {
            "architecture": a.arch,
            "os": "linux",
            "created": created,
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [d for d, _, _, _ in layers]},
            "history": [{"created": created, "created_by": "kvrs scripts/lib/oci_image.py"} for _ in layers],
        }
        config_b = canonical(config)
        config_d = "sha256:" + hashlib.sha256(config_b).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": config_d, "size": len(config_b)},
            "layers": [{"mediaType": MT_LAYER, "digest": d, "size": s} for _, d, s, _ in layers],
        }
        manifest_b = canonical(manifest)
        manifest_d = "sha256:" + hashlib.sha256(manifest_b).hexdigest()
        index = {
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [{
                "mediaType": MT_MANIFEST,
                "digest": manifest_d,
                "size": len(manifest_b),
                "platform": {"architecture": a.arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": full_name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }],
        }

        fd, tmp_out = tempfile.mkstemp(prefix=".image-", dir=out_dir)
        tmp_files.append(tmp_out)
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
            add_bytes(tar, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}), epoch)
            add_bytes(tar, "index.json", canonical(index), epoch)
            for d in ("blobs", "blobs/sha256"):
                dirs = tarfile.TarInfo(d)
                dirs.type = tarfile.DIRTYPE
                dirs.mode = 0o755
                dirs.mtime = epoch
                dirs.uname = dirs.gname = ""
                tar.addfile(dirs)
            add_bytes(tar, f"blobs/sha256/{config_d[7:]}", config_b, epoch)
            add_bytes(tar, f"blobs/sha256/{manifest_d[7:]}", manifest_b, epoch)
            written = set()
            for _, d, s, path in layers:
                if d in written:
                    continue
                written.add(d)
                ti = tarfile.TarInfo(f"blobs/sha256/{d[7:]}")
                ti.size = s
                ti.mtime = epoch
                ti.mode = 0o644
                ti.uname = ti.gname = ""
                with open(path, "rb") as lf:
                    tar.addfile(ti, lf)
        os.replace(tmp_out, a.out)
        tmp_files.remove(tmp_out)
    finally:
        for t in tmp_files:
            try:
                os.unlink(t)
            except FileNotFoundError:
                pass
    if a.stats:
        with open(a.stats, "w") as f:
            json.dump({
                "reference": full_name,
                "digest": manifest_d,
                "compressed_bytes": sum(s for _, _, s, _ in layers),
                "uncompressed_bytes": sum(uncompressed_sizes),
                "archive_bytes": os.path.getsize(a.out),
            }, f, indent=1, sort_keys=True)
            f.write("\n")
    print(f"{full_name}@{manifest_d}")


if __name__ == "__main__":
    main()
