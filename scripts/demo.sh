#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --quiet -p ovs-tests --bins
exec ./target/debug/sandbox-demo
