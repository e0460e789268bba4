#!/usr/bin/env bash
# README command 2: install what is missing, then run every test in the workspace,
# including the suites that run a real Open vSwitch. Fails if any sandbox is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

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
