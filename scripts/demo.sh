#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the demo: a three-node cluster (the
# lab of ovs-tests/lab/three-nodes.toml) driven by one `svcflow run`, a service posted over REST
# and reached by ClusterIP and NodePort across nodes, every node's health-check node port
# answered through its switch, traced with `svcflow trace` on the real switches, and one node's
# ovs-vswitchd restarted.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --quiet -p svcflow -p ovs-tests --bins
# The demo tears its lab down itself, also when it fails. Should it be stopped midway (Ctrl-C),
# this removes what it left: its namespaces, switches and directories carry its process id.
trap './target/debug/svcflow-demo --clean-up' EXIT
./target/debug/svcflow-demo
