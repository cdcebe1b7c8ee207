# shellcheck shell=bash
# Shared by the scripts that build Go code into ${KVRS_CACHE:-$HOME/.cache/kvrs}:
#   gh_harness     the whole job of a one-binary harness (gotags.sh, instancetype-harness.sh,
#                  diff-harness.sh, mixed-harness.sh): tests/<name> hashed and built once
#   gh_build       the cached, locked build of one binary (gh_harness; kvlauncher-harness.sh)
#   gh_components  the stamped build of several binaries into one bin/ directory, a progress line
#                  per binary with its time (kube-components.sh, node-components.sh)
#   gh_find_go, gh_sums, gh_module_sums, gh_need_libvirt, gh_lock, die   the pieces they are made of
# Each script keeps what differs: which files its cache hash covers, cgo, the modules the
# checksum database does not know. Paths printed on stdout (the LAST line is the result); progress
# on stderr, each line prefixed with the script's name.

GH_SCRIPT=${0##*/}
GH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# A script may define its own `die` before sourcing this file.
if ! declare -F die >/dev/null; then
  die() {
    echo "$GH_SCRIPT: $*" >&2
    exit 1
  }
fi

# Sets GO_CMD and GO_VERSION: $GO, else go on PATH, else /usr/local/go/bin/go.
gh_find_go() {
  if [ -n "${GO:-}" ]; then
    GO_CMD=$GO
  elif command -v go >/dev/null 2>&1; then
    GO_CMD=$(command -v go)
  elif [ -x /usr/local/go/bin/go ]; then
    GO_CMD=/usr/local/go/bin/go
  else
    die "no Go toolchain found (set GO=/path/to/go or put go on PATH); Go >= 1.26 is needed"
  fi
  GO_VERSION=$("$GO_CMD" env GOVERSION) || die "'$GO_CMD env GOVERSION' failed"
}

# Dies unless libvirt's C headers are there (the cgo harnesses link KubeVirt's launcher packages).
gh_need_libvirt() {
  command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libvirt ||
    die "libvirt's C headers are needed (cgo, libvirt.org/go/libvirt): apt-get install libvirt-dev pkg-config"
}

# gh_sums PATTERN...: the sha256sum lines of the files below the current directory whose names
# match one of the find(1) PATTERNs, sorted by path (-print0 keeps odd names intact).
gh_sums() {
  local expr=() p
  for p in "$@"; do
    [ ${#expr[@]} -eq 0 ] || expr+=(-o)
    expr+=(-name "$p")
  done
  find . \( "${expr[@]}" \) -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
}

# gh_module_sums: the sha256sum lines of the Go module in the current directory: its Go files,
# then go.mod and go.sum.
gh_module_sums() {
  gh_sums '*.go'
  sha256sum go.mod go.sum
}

# gh_lock DIR: creates DIR and holds DIR/lock (on fd 9, until the shell exits), saying so on
# stderr when another build holds it first.
gh_lock() {
  mkdir -p "$1"
  exec 9>"$1/lock"
  if ! flock -n 9; then
    echo "$GH_SCRIPT: another build holds $1/lock; waiting" >&2
    flock 9
  fi
}

# gh_build SCRIPT PREFIX BIN_NAME HASH MOD_DIR CGO WHAT: builds MOD_DIR into
# ${KVRS_CACHE:-$HOME/.cache/kvrs}/PREFIX-HASH/BIN_NAME unless it is there (a lock serializes
# concurrent builds), removes builds of older sources, and prints the binary's path as the last
# line of stdout; progress goes to stderr. WHAT describes the build in the progress line.
gh_build() {
  local script=$1 prefix=$2 name=$3 hash=$4 mod_dir=$5 cgo=$6 what=$7
  local cache_dir="${KVRS_CACHE:-$HOME/.cache/kvrs}/$prefix-$hash"
  local bin="$cache_dir/$name"
  if [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi
  gh_lock "$cache_dir"
  if [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi
  local log="$cache_dir/build.log" start
  : >"$log"
  echo "$script: building $name with $GO_VERSION $what (GOPROXY=$("$GO_CMD" env GOPROXY))" >&2
  start=$(date +%s)
  if ! (cd "$mod_dir" && CGO_ENABLED=$cgo GOFLAGS="-mod=readonly -buildvcs=false" \
    "$GO_CMD" build -trimpath -ldflags="-s -w" -o "$bin.tmp.$$" .) >>"$log" 2>&1; then
    rm -f "$bin.tmp.$$"
    tail -n 40 "$log" >&2
    die "go build of ${mod_dir##*/tests/} failed (GOPROXY=$("$GO_CMD" env GOPROXY)); full log: $log"
  fi
  mv "$bin.tmp.$$" "$bin"
  # Builds of older harness sources (tens of MB each) are not needed any more.
  local old
  for old in "${cache_dir%/*}/$prefix"-*; do
    if [ "$old" != "$cache_dir" ] && { [ -f "$old/$name" ] || [ -f "$old/lock" ]; }; then rm -rf "$old"; fi
  done
  echo "$script: built in $(($(date +%s) - start)) s: $bin" >&2
  echo "$bin"
}

# gh_harness NAME BIN_NAME CGO WHAT [SUMS]: builds the Go module tests/NAME into
# ${KVRS_CACHE:-$HOME/.cache/kvrs}/NAME-<hash>/BIN_NAME (gh_build) and prints the binary's path
# as the last line of stdout. <hash> covers what the function SUMS prints in the module's
# directory (default gh_module_sums: its Go files, go.mod and go.sum), the Go version, CGO and the
# build flags.
gh_harness() {
  local name=$1 bin_name=$2 cgo=$3 what=$4 sums=${5:-gh_module_sums}
  local mod_dir="$GH_ROOT/tests/$name" hash
  [ -f "$mod_dir/go.mod" ] && [ -f "$mod_dir/go.sum" ] || die "missing $mod_dir/go.mod or go.sum"
  gh_find_go
  hash=$(
    cd "$mod_dir" || exit
    {
      "$sums"
      echo "go=$GO_VERSION cgo=$cgo flags=-trimpath -ldflags=-s -w"
    } | sha256sum | cut -c1-16
  )
  gh_build "$GH_SCRIPT" "$name" "$bin_name" "$hash" "$mod_dir" "$cgo" "$what"
}

# gh_components CACHE_DIR WANT WHAT [AFTER]: the stamped build of several binaries from the Go
# module in MOD_DIR into CACHE_DIR/bin. The caller sets MOD_DIR, TARGETS (one
# "name|package|cgo|tags|ldflags|extra build flags" a binary, name relative to bin/) and OUTPUTS
# (every file bin/ must hold: the targets' names and what AFTER makes), and has run gh_find_go.
# When CACHE_DIR/stamp holds WANT and every output is there (non-empty), it prints CACHE_DIR/bin at
# once. Otherwise, under CACHE_DIR/lock: fetches the modules, builds each target into a fresh
# directory with a progress line before and after (its time), runs the function AFTER DIR LOG if
# given (the caller's other outputs, into DIR), checks the outputs, swaps the directory in, writes
# WANT into the stamp and prints CACHE_DIR/bin as the last line of stdout. WHAT describes the
# whole build in the first progress line; the tools' own output goes to CACHE_DIR/build.log.
gh_components() {
  local cache_dir=$1 want=$2 what=$3 after=${4:-}
  local bin_dir="$cache_dir/bin" stamp="$cache_dir/stamp" log="$cache_dir/build.log"
  if gh_components_current "$bin_dir" "$stamp" "$want"; then
    echo "$bin_dir"
    return 0
  fi
  gh_lock "$cache_dir"
  # Another run may have finished the build while this one waited.
  if gh_components_current "$bin_dir" "$stamp" "$want"; then
    echo "$bin_dir"
    return 0
  fi
  : >"$log"
  cd "$MOD_DIR" || die "cannot enter $MOD_DIR"
  export GOFLAGS="-mod=readonly -buildvcs=false"
  local t name pkg cgo tags ldflags extra pkgs=() fetch_cgo=0
  for t in "${TARGETS[@]}"; do
    IFS='|' read -r _ pkg cgo _ <<<"$t"
    pkgs+=("$pkg")
    [ "$cgo" = 0 ] || fetch_cgo=1
  done

  local proxy start total_start i=0 n=${#TARGETS[@]}
  proxy=$("$GO_CMD" env GOPROXY)
  echo "$GH_SCRIPT: fetching Go modules for tests/${MOD_DIR##*/} (GOPROXY=$proxy)" >&2
  start=$(date +%s)
  if ! "$GO_CMD" mod download >>"$log" 2>&1 ||
    ! CGO_ENABLED=$fetch_cgo "$GO_CMD" list -deps "${pkgs[@]}" >/dev/null 2>>"$log"; then
    tail -n 30 "$log" >&2
    die "could not fetch or resolve the Go modules of tests/${MOD_DIR##*/} (GOPROXY=$proxy); full log: $log"
  fi
  echo "$GH_SCRIPT: Go modules ready in $(($(date +%s) - start)) s" >&2

  GH_TMP_BIN="$cache_dir/bin.tmp.$$"
  rm -rf "$GH_TMP_BIN"
  mkdir -p "$GH_TMP_BIN"
  trap 'rm -rf "$GH_TMP_BIN"' EXIT
  echo "$GH_SCRIPT: building $what" >&2
  total_start=$(date +%s)
  for t in "${TARGETS[@]}"; do
    IFS='|' read -r name pkg cgo tags ldflags extra <<<"$t"
    i=$((i + 1))
    echo "$GH_SCRIPT: [$i/$n] building $name" >&2
    mkdir -p "$(dirname "$GH_TMP_BIN/$name")"
    start=$(date +%s)
    # shellcheck disable=SC2086 # $extra is empty or one flag
    if ! CGO_ENABLED=$cgo "$GO_CMD" build -trimpath $extra -tags "$tags" -ldflags "$ldflags" \
      -o "$GH_TMP_BIN/$name" "$pkg" >>"$log" 2>&1; then
      tail -n 40 "$log" >&2
      die "go build of $pkg failed; full log: $log"
    fi
    echo "$GH_SCRIPT: [$i/$n] $name built in $(($(date +%s) - start)) s" >&2
  done
  if [ -n "$after" ]; then
    "$after" "$GH_TMP_BIN" "$log"
  fi

  local b
  for b in "${OUTPUTS[@]}"; do
    [ -s "$GH_TMP_BIN/$b" ] || die "the build produced no $b in $GH_TMP_BIN"
  done
  rm -rf "$bin_dir"
  mv "$GH_TMP_BIN" "$bin_dir"
  echo "$want" >"$stamp"
  echo "$GH_SCRIPT: built in $(($(date +%s) - total_start)) s into $bin_dir" >&2
  echo "$bin_dir"
}

# gh_components_current BIN_DIR STAMP WANT: whether STAMP holds WANT and BIN_DIR every OUTPUTS.
gh_components_current() {
  local bin_dir=$1 stamp=$2 want=$3 b
  [ -f "$stamp" ] || return 1
  [ "$(cat "$stamp")" = "$want" ] || return 1
  for b in "${OUTPUTS[@]}"; do
    [ -s "$bin_dir/$b" ] || return 1
  done
}
