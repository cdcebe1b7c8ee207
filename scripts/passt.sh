#!/usr/bin/env bash
# Builds passt (https://passt.top) with vhost-user support and prints the directory holding the
# `passt` binary as the LAST line of stdout (progress goes to stderr). With `--install`, also
# installs it as /usr/bin/passt (root), where libvirt finds it, on the host and in `kvrs run`'s
# launcher containers.
#
# Why not Debian's package: KubeVirt v1.9.0's passt binding plugin sidecar
# (cmd/sidecars/network-passt-binding) writes `<interface type='vhostuser'>` with
# `<backend type='passt'/>`, which libvirt (>= 11.1) runs as `passt --vhost-user`. Bookworm's passt
# (0.0~git20230309) has no vhost-user mode, and bookworm-backports carries no passt; vhost-user
# landed in passt 2024_11_21. Installed at /usr/bin/passt, the path of Debian's package and of
# the launcher image: `kvrs kubelet` gives a launcher container without an image only the host
# programs it names (bins/kubelet/src/root.rs), /usr/bin/passt among them, and no /usr/local.
# A /usr/bin/passt that a Debian package owns is not overwritten (remove the package first).
#
# Environment:
#   KVRS_PASST_SRC   a git repository (URL or local directory) holding the tag below, instead
#                    of the default: the upstream tarball of that tag as Debian 13 (trixie)
#                    ships it, from Debian's archive (reachable wherever apt is), checked against
#                    its SHA-256 below
#   KVRS_CACHE       default $HOME/.cache/kvrs; the build goes to $KVRS_CACHE/passt-<tag>
# Needs git, make and a C compiler (gcc, libc6-dev); passt has no other build dependency.
set -euo pipefail

TAG=2025_05_03.587980c
DEBIAN_ORIG=http://deb.debian.org/debian/pool/main/p/passt/passt_0.0~git20250503.587980c.orig.tar.xz
DEBIAN_ORIG_SHA256=69d5eb843f7d648c2cc60bfbca6ea7b5014c6b6f07cdee362c2a8cf490515a49
SRC=${KVRS_PASST_SRC:-}
dir="${KVRS_CACHE:-$HOME/.cache/kvrs}/passt-$TAG"
install=false
case "${1:-}" in
  --install) install=true ;;
  "") ;;
  *)
    echo "passt.sh: unknown argument $1 (usage: passt.sh [--install])" >&2
    exit 2
    ;;
esac

if [ ! -x "$dir/passt" ]; then
  command -v make >/dev/null && command -v cc >/dev/null ||
    { echo "passt.sh: make and a C compiler are needed (apt-get install make gcc libc6-dev)" >&2; exit 1; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "passt.sh: building passt $TAG from ${SRC:-the Debian archive}" >&2
  if [ -z "$SRC" ]; then
    echo "passt.sh: fetching $DEBIAN_ORIG" >&2
    curl -fsSL -o "$work/orig.tar.xz" "$DEBIAN_ORIG" ||
      { echo "passt.sh: could not download $DEBIAN_ORIG (set KVRS_PASST_SRC to a passt git repository)" >&2; exit 1; }
    echo "$DEBIAN_ORIG_SHA256  $work/orig.tar.xz" | sha256sum -c --quiet - >&2 ||
      { echo "passt.sh: $DEBIAN_ORIG does not have the expected SHA-256" >&2; exit 1; }
    tar -xJf "$work/orig.tar.xz" -C "$work" --strip-components=1
    rm "$work/orig.tar.xz"
  elif [ -d "$SRC" ]; then
    git -C "$SRC" archive "$TAG" | tar -x -C "$work"
  else
    git clone --quiet --depth 1 --branch "$TAG" "$SRC" "$work/src"
    mv "$work/src"/* "$work/"
  fi
  # VERSION: passt prints it with --version (the tarball has no .git to derive it from).
  make -C "$work" passt VERSION="$TAG" >"$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log" >&2; echo "passt.sh: the build failed" >&2; exit 1; }
  help=$("$work/passt" --help 2>&1 || true)
  [[ $help == *--vhost-user* ]] ||
    { echo "passt.sh: the built passt has no --vhost-user" >&2; exit 1; }
  mkdir -p "$dir"
  install -m 0755 "$work/passt" "$dir/passt.new"
  mv "$dir/passt.new" "$dir/passt"
  echo "passt.sh: built $dir/passt" >&2
fi
if $install; then
  if [ "$(id -u)" != 0 ]; then
    echo "passt.sh: --install must run as root" >&2
    exit 1
  fi
  target=/usr/bin/passt
  if owner=$(dpkg-query -S "$target" 2>/dev/null); then
    echo "passt.sh: $target belongs to a Debian package (${owner%%:*}), too old for vhost-user: apt-get remove ${owner%%:*} first" >&2
    exit 1
  fi
  if ! cmp -s "$dir/passt" "$target"; then
    install -m 0755 "$dir/passt" "$target"
    echo "passt.sh: installed $target ($TAG)" >&2
  fi
fi
echo "$dir"
