#!/usr/bin/env bash
# Serial console round trip of a VM under `kvrs run`.
#
# What: the time from sending one character on the VMI's serial console to reading its echo,
# SAMPLES times (default 200), p50 / p99. The path is the one `virtctl console` takes:
# the run's API server's `console` subresource (WebSocket, subprotocol plain.kubevirt.io) →
# the in-process virt-handler's console proxy → the launcher pod's serial socket → QEMU → the
# guest's tty (busybox `sh -i`, which echoes) and back.
#
# How: builds release kvrs, the launcher binaries and the kvrs-test-guest images, boots
# fixtures/run/guest-vm.yaml with a shell on its serial console (one extra cloud-init line, the
# KVRS-RUN hook bins/kvrs/tests/run_virtctl.rs uses), waits for the guest agent, then runs
# `kvrs-bench-console-rtt` (benches/bin/console_rtt/) with the run's kubeconfig: it waits until
# the shell answers a command, then times SAMPLES characters (each erased again, untimed).
# The run is stopped with SIGTERM at the end (or on any failure): nothing is left behind.
#
# Caveats: the guest runs under QEMU's TCG emulation on these machines (no usable KVM), so the
# guest's side of the echo is emulated; the machine is a shared 2-core one. KubeVirt's console
# path cannot run here — no KubeVirt virt-handler / virt-launcher on this stack — so this is a
# kvrs-only figure. Needs root (as `kvrs run` does) and scripts/install-test-deps.sh.
# Not run by CI.
#
# usage: benches/console-rtt.sh [SAMPLES [--quickack]]   (--quickack: a diagnostic, the client
# acknowledges every segment at once; see kvrs-bench-console-rtt --help)
set -euo pipefail
cd "$(dirname "$0")/.."
samples=${1:-200}
shift || true

cargo build -q --release -p kvrs -p virt-launcher -p virt-launcher-monitor -p kvrs-test-guest
cargo build -q --release -p kvrs-benches --bin kvrs-bench-console-rtt
target_dir=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d)
state=/tmp/kvrs-run-rtt-$$
pods=/tmp/krt$$
run_pid=""
cleanup() {
  if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
    kill -TERM "$run_pid"
    wait "$run_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"$target_dir/release/kvrs-guest-images" "$work/images" >/dev/null
# A shell on the guest's serial console: cloud-init's KVRS-RUN line (the test guest runs it).
python3 - fixtures/run/guest-vm.yaml "$work/vm.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
line = "              KVRS-E2E: hello from cloud-init\n"
if line not in text:
    sys.exit(f"console-rtt.sh: {sys.argv[1]} no longer has the line the shell hook goes after")
open(sys.argv[2], "w").write(text.replace(line, line + "              KVRS-RUN: sh -i </dev/ttyS0 >/dev/ttyS0 2>&1\n"))
PY

"$target_dir/release/kvrs" run "$work/vm.yaml" --images "$work/images" --state-dir "$state" \
  --pods-dir "$pods" --timeout-seconds 240 >"$work/run.out" 2>"$work/run.err" </dev/null &
run_pid=$!
for _ in $(seq 1200); do
  grep -q "guest agent connected" "$work/run.out" && break
  kill -0 "$run_pid" 2>/dev/null || { cat "$work/run.out" "$work/run.err" >&2; echo "console-rtt.sh: kvrs run ended" >&2; exit 1; }
  sleep 0.2
done
grep -q "guest agent connected" "$work/run.out" || { cat "$work/run.out" >&2; echo "console-rtt.sh: the guest did not come up in 240 s" >&2; exit 1; }
cat "$work/run.out" >&2

"$target_dir/release/kvrs-bench-console-rtt" --kubeconfig "$state/kubeconfig" --samples "$samples" "$@"

kill -TERM "$run_pid"
status=0
wait "$run_pid" || status=$?
run_pid=""
grep -q "stopped; nothing left behind" "$work/run.out" || { cat "$work/run.out" "$work/run.err" >&2; echo "console-rtt.sh: kvrs run did not stop cleanly (exit $status)" >&2; exit 1; }
