#!/usr/bin/env bash
# Builds KubeVirt v1.9.0's own virt-controller and virt-api (and the small `manifests` program beside this
# script, which prints the CRDs and RBAC KubeVirt's operator would install) from a KubeVirt
# source snapshot with its vendor/ directory, for the side-by-side benchmarks. Not run by CI.
#
# The Go module proxy refuses modules KubeVirt's commands import (kubevirt.io/virt-template-*),
# so `go build` cannot fetch them; KubeVirt's repository vendors them. The snapshot is found
# through one of (never copied into this repository):
#   KVRS_KUBEVIRT_SRC  a KubeVirt v1.9.0 source tree (with vendor/), used in place;
#   KVRS_KUBEVIRT_GIT  a git directory holding tag v1.9.0 (e.g. the one the search tool's
#                      `fetch github:kubevirt/kubevirt` returns), exported once into
#                      ~/.cache/kvrs/kubevirt-v1.9.0-src.
# Prints the directory holding the binaries (bin/virt-controller, bin/virt-api,
# bin/kvrs-bench-manifests) as its last line. Builds are cached: a second run with the same sources builds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tag=v1.9.0
cache=${KVRS_CACHE:-$HOME/.cache/kvrs}

if [ -n "${KVRS_KUBEVIRT_SRC:-}" ]; then
  src=$KVRS_KUBEVIRT_SRC
elif [ -n "${KVRS_KUBEVIRT_GIT:-}" ]; then
  src=$cache/kubevirt-$tag-src
  if [ ! -f "$src/.exported" ]; then
    rm -rf "$src" && mkdir -p "$src"
    git --git-dir="$KVRS_KUBEVIRT_GIT" archive "$tag" | tar -x -C "$src"
    touch "$src/.exported"
  fi
else
  echo "build.sh: set KVRS_KUBEVIRT_SRC (a KubeVirt $tag tree with vendor/) or KVRS_KUBEVIRT_GIT" \
       "(a git directory with tag $tag, e.g. from \`fetch github:kubevirt/kubevirt\`)" >&2
  exit 2
fi
[ -f "$src/vendor/modules.txt" ] || { echo "build.sh: $src has no vendor/modules.txt" >&2; exit 2; }

# Our program is compiled as a command of KubeVirt's module (it needs the vendored modules); it
# is placed in the snapshot's tree, which is a build directory, not this repository.
mkdir -p "$src/cmd/kvrs-bench-manifests" "$src/bin"
cp "$here/manifests/main.go" "$src/cmd/kvrs-bench-manifests/main.go"

cd "$src"
export GOFLAGS="-mod=vendor -buildvcs=false"
echo "build.sh: building KubeVirt $tag's virt-controller and virt-api in $src" >&2
go build -o bin/virt-controller ./cmd/virt-controller
go build -o bin/virt-api ./cmd/virt-api
go build -o bin/kvrs-bench-manifests ./cmd/kvrs-bench-manifests
echo "$src/bin"
