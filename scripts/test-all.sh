#!/usr/bin/env bash
# Runs every kvrs test: installs the system packages the end-to-end tests need (libvirt, QEMU from
# Debian), then the whole workspace's tests, doc tests included. Used by README.md and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
  bash scripts/install-test-deps.sh
else
  sudo bash scripts/install-test-deps.sh
fi

cargo test --workspace --all-targets
cargo test --workspace --doc
