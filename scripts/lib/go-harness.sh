# shellcheck shell=bash
# Shared by the Go build scripts (mixed-harness.sh, diff-harness.sh, gotags.sh,
# instancetype-harness.sh, kvlauncher-harness.sh; kube-components.sh uses gh_find_go only):
# finding the Go toolchain, and the cached, locked build. Each script keeps what differs — which
# files its cache hash covers, cgo, the modules the checksum database does not know — and sources
# this file. The caller defines `die`.

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
  mkdir -p "$cache_dir"
  exec 9>"$cache_dir/lock"
  if ! flock -n 9; then
    echo "$script: another build holds $cache_dir/lock; waiting" >&2
    flock 9
  fi
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
