#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the demo: one Open vSwitch node in
# a sandbox, three pods, and `svcflow run` programming a service posted over REST with curl.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --quiet -p svcflow -p ovs-tests --bins
exec ./target/debug/svcflow-demo
