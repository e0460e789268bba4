#!/usr/bin/env bash
# README command 2: install what is missing, then run every test in the workspace,
# including the suites that run a real Open vSwitch. Fails if any sandbox is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

# A build of the workspace's tests from nothing takes about 5 GB (2026-11-29); on a fuller disk
# it fails deep in a link ("No space left on device", or the linker's bus error), so say so
# before building.
target=${CARGO_TARGET_DIR:-target}
need_gb=6
[[ -d $target/debug/deps ]] && need_gb=2
mkdir -p "$target"
free_kb=$(df -Pk "$target" | awk 'NR == 2 { print $4 }')
if ((free_kb < need_gb * 1024 * 1024)); then
  echo "test.sh: $((free_kb / 1024)) MB free for $target; building the tests needs about ${need_gb} GB" >&2
  exit 1
fi

status=0
# The daemon's end-to-end test (ovs-tests/tests/daemon.rs) runs target/debug/svcflow, which
# `cargo test` does not build for another package: build it first.
cargo build -p svcflow
cargo test --workspace "$@" || status=$?

# Every sandbox names its namespaces and directories svcf-<pid>-<n>.
leftovers=$(ip netns list | grep -E '^svcf-' || true)
daemons=$(pgrep -af 'ovs(db-server|-vswitchd).*/svcf-' || true)
if [[ -n $leftovers || -n $daemons ]]; then
  echo "test.sh: the tests left sandboxes behind:" >&2
  [[ -n $leftovers ]] && echo "$leftovers" >&2
  [[ -n $daemons ]] && echo "$daemons" >&2
  status=1
fi
exit $status
