#!/usr/bin/env bash
# Coverage-guided fuzzing of kvrs's input paths (tests/fuzz: cargo fuzz / libFuzzer):
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 30 (what CI runs); `bash scripts/fuzz.sh 3600` is the one-hour
# run of every target. Installs cargo-fuzz (crates.io, into ~/.cargo/bin) when it is missing,
# builds every target with the nightly toolchain (overflow checks and debug assertions on), seeds
# each from KubeVirt's oracle corpus (../shared/oracle, read in place, or $KVRS_SHARED_DIR/oracle)
# and the repository's fixtures, replays tests/fuzz/regressions/<target>/* (the known crashes,
# one file per class), then fuzzes each target for SECONDS and prints its executions, coverage
# (libFuzzer's cov: and ft:) and corpus size.
#
# Exits non-zero when any regression input or fuzzed input crashed, timed out (> 10 s) or ran
# out of memory (> 2 GiB), printing each reproducer's path and its panic message. Fuzzing goes on
# after a crash (libFuzzer's fork mode), so one run reports every class it finds.
#
# Nothing is written into the checkout: corpora, seeds, artefacts and logs go to
# ${KVRS_CACHE:-~/.cache/kvrs}/fuzz/<target>/, the build to ${KVRS_CACHE}/target-fuzz.
# Reproduce one input with `<binary> FILE`, shrink it with
# `cargo +nightly fuzz tmin --fuzz-dir tests/fuzz -s none TARGET FILE`.
set -euo pipefail

die() {
  echo "fuzz.sh: $*" >&2
  exit 2
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KVRS_CACHE:-$HOME/.cache/kvrs}
WORK=$CACHE/fuzz
TARGET_DIR=$CACHE/target-fuzz
CARGO_FUZZ_VERSION=0.13.2
ALL_TARGETS=(vmi_to_xml pod_render cmd_server_payloads notify_payloads libvirt_xdr_reply admission_review subresource_request)

SECONDS_PER_TARGET=${1:-30}
[[ $SECONDS_PER_TARGET =~ ^[1-9][0-9]*$ ]] || die "SECONDS_PER_TARGET must be a positive integer, not '$SECONDS_PER_TARGET'"
shift || true
if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  TARGETS=("${ALL_TARGETS[@]}")
fi
for t in "${TARGETS[@]}"; do
  [ -f "$ROOT/tests/fuzz/fuzz_targets/$t.rs" ] || die "no fuzz target '$t' (targets: ${ALL_TARGETS[*]})"
done

# The oracle corpus, found as kvrs-corpus finds it: $KVRS_SHARED_DIR/oracle, else shared/oracle
# beside the nearest ancestor of the checkout.
ORACLE=
if [ -n "${KVRS_SHARED_DIR:-}" ] && [ -d "$KVRS_SHARED_DIR/oracle" ]; then
  ORACLE=$KVRS_SHARED_DIR/oracle
else
  dir=$ROOT
  while [ "$dir" != / ]; do
    if [ -d "$dir/shared/oracle" ]; then
      ORACLE=$dir/shared/oracle
      break
    fi
    dir=$(dirname "$dir")
  done
fi
[ -n "$ORACLE" ] || die "KubeVirt's oracle corpus (shared/oracle beside the checkout, or \$KVRS_SHARED_DIR/oracle) is missing: the targets are seeded from it"

# Tooling: the nightly toolchain (libFuzzer's instrumentation needs -Z flags) and cargo-fuzz.
command -v rustup >/dev/null 2>&1 || die "rustup is not installed: cargo fuzz needs rustup's nightly toolchain"
rustup run nightly rustc --version >/dev/null 2>&1 ||
  die "no nightly toolchain: install it with 'rustup toolchain install nightly --profile minimal'"
export PATH=$HOME/.cargo/bin:$PATH
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION from crates.io"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
HOST=$(rustup run nightly rustc -vV | sed -n 's/^host: //p')
BIN_DIR=$TARGET_DIR/$HOST/release

echo "== building fuzz targets (nightly, overflow checks on) into $TARGET_DIR"
build_start=$(date +%s)
set +e
(cd "$ROOT" && CARGO_INCREMENTAL=0 cargo +nightly fuzz build --fuzz-dir tests/fuzz --sanitizer none \
  --target-dir "$TARGET_DIR" 2>&1) | grep -Ev '^\s+(Compiling|Downloaded|Downloading|Locking|Adding) '
build_status=${PIPESTATUS[0]}
set -e
[ "$build_status" = 0 ] || die "building the fuzz targets failed (cargo output above)"
echo "built in $(($(date +%s) - build_start)) s"

# Seeds: text targets take VMI/VM manifests, binary targets write their own encodings.
write_seeds() {
  local t=$1 seeds=$2
  rm -rf "$seeds"
  mkdir -p "$seeds"
  case $t in
    vmi_to_xml | pod_render)
      cp "$ORACLE"/*.vmi.json "$seeds"/
      for f in "$ROOT"/fixtures/vmi/*.yaml "$ROOT"/fixtures/vm/*.yaml "$ROOT"/fixtures/manifests/*.yaml "$ROOT"/fixtures/run/*.yaml; do
        [ -f "$f" ] && cp "$f" "$seeds/fixture-$(basename "$(dirname "$f")")-$(basename "$f")"
      done
      ;;
    *)
      KVRS_FUZZ_WRITE_SEEDS=$seeds KVRS_FUZZ_ORACLE=$ORACLE "$BIN_DIR/$t" >/dev/null 2>&1 ||
        die "$t could not write its seeds"
      ;;
  esac
}

# A libFuzzer dictionary for the text targets: every key and short string value of the oracle
# VMIs (so mutations insert real field names), plus values that have broken such code before:
# path components, control characters, quantities at integer limits.
write_dict() {
  local dict=$1
  {
    grep -oh '"[A-Za-z0-9_./:-]\{1,40\}"' "$ORACLE"/*.vmi.json | sort -u
    printf '%s\n' '"../"' '".."' '"/.."' '"\x00"' '"\x01"' '"\x1f"' '"\xef\xbf\xbf"' '"\x0a"' '"\x09"' \
      '"65536"' '"4294967295"' '"4294967296"' '"9223372036854775807"' '"18446744073709551615"' \
      '"8Ei"' '"1e400"' '"1e-400"' '"-1"' '"0"' '"Ki"' '"Mi"' '"Gi"' '"Ti"' '"m"' \
      '"kind: VirtualMachine\x0a"' '"kind: VirtualMachineInstance\x0a"' '"---\x0a"' '"- name: "'
  } >"$dict"
}

max_len() {
  case $1 in
    vmi_to_xml | pod_render) echo 16384 ;;
    *) echo 32768 ;;
  esac
}

# The panic message (or libFuzzer's reason) of one reproducer, on one line.
describe() {
  local bin=$1 input=$2 out
  out=$(timeout 60 "$bin" -timeout=10 -rss_limit_mb=2048 "$input" 2>&1 || true)
  printf '%s\n' "$out" | grep -A1 -m1 "panicked at" | tail -n1 | cut -c1-200 && return
  printf '%s\n' "$out" | grep -m1 -E "ERROR: libFuzzer|memory allocation of|SUMMARY" | cut -c1-200 ||
    echo "(no message)"
}

failures=0
summary=()
stamp=$(date +%Y%m%d-%H%M%S)
for t in "${TARGETS[@]}"; do
  dir=$WORK/$t
  bin=$BIN_DIR/$t
  corpus=$dir/corpus
  seeds=$dir/seeds
  artifacts=$dir/artifacts/$stamp
  log=$dir/fuzz-$stamp.log
  mkdir -p "$corpus" "$artifacts"
  write_seeds "$t" "$seeds"

  echo "== $t"
  # The known crash classes: each still crashing is a failure, reported with its message.
  regressions=$ROOT/tests/fuzz/regressions/$t
  if [ -d "$regressions" ]; then
    for input in "$regressions"/*; do
      [ -f "$input" ] || continue
      if ! timeout 60 "$bin" -timeout=10 -rss_limit_mb=2048 "$input" >/dev/null 2>&1; then
        echo "  regression still fails: $input"
        echo "    $(describe "$bin" "$input")"
        failures=$((failures + 1))
      fi
    done
  fi

  dict_flag=()
  case $t in
    vmi_to_xml | pod_render)
      write_dict "$dir/text.dict"
      dict_flag=(-dict="$dir/text.dict")
      ;;
  esac

  # Fork mode with crashes, timeouts and OOMs ignored: the run lasts SECONDS whatever it finds
  # and every reproducer lands in $artifacts.
  "$bin" "$corpus" "$seeds" \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$(max_len "$t")" "${dict_flag[@]}" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    >"$log" 2>&1 || true

  # Last status line of fork mode: "#EXECS: cov: C ft: F corp: N exec/s: R oom/timeout/crash: ...".
  stats=$(grep -E '^#[0-9]+: cov:' "$log" | tail -n1 || true)
  [ -n "$stats" ] || {
    tail -n 20 "$log" >&2
    die "$t: libFuzzer printed no statistics (log: $log)"
  }
  execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$stats")
  cov=$(sed -E 's/.* cov: ([0-9]+).*/\1/' <<<"$stats")
  ft=$(sed -E 's/.* ft: ([0-9]+).*/\1/' <<<"$stats")
  rate=$(sed -E 's/.* exec\/s: ([0-9]+).*/\1/' <<<"$stats")
  corpus_files=$(find "$corpus" -type f | wc -l)
  corpus_kib=$(du -sk "$corpus" | cut -f1)
  found=$(find "$artifacts" -type f | wc -l)
  line=$(printf '%-20s execs: %-9s exec/s: %-6s cov: %-6s ft: %-7s corpus: %s files (%s KiB)  reproducers: %s' \
    "$t" "$execs" "$rate" "$cov" "$ft" "$corpus_files" "$corpus_kib" "$found")
  echo "  $line"
  summary+=("$line")
  if [ "$found" -gt 0 ]; then
    failures=$((failures + found))
    shown=0
    while IFS= read -r input; do
      if [ $shown -lt 10 ]; then
        echo "  reproducer: $input"
        echo "    $(describe "$bin" "$input")"
      fi
      shown=$((shown + 1))
    done < <(find "$artifacts" -type f | sort)
    [ $shown -le 10 ] || echo "  ... and $((shown - 10)) more in $artifacts"
  else
    rmdir "$artifacts" 2>/dev/null || true
  fi
done

echo "== fuzzing: $SECONDS_PER_TARGET s per target"
printf '%s\n' "${summary[@]}"
if [ "$failures" -gt 0 ]; then
  echo "fuzz.sh: $failures failing input(s): crash, timeout or out-of-memory (reproducers above)" >&2
  exit 1
fi
echo "fuzz.sh: no crash, timeout or out-of-memory"
