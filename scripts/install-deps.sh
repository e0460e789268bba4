#!/usr/bin/env bash
# Installs what svcflow's demo and tests need on a fresh Debian machine (run as root).
# Installs only what is missing, so a second run costs nothing.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have ovs-vswitchd || need+=(openvswitch-switch)
have ovs-ofctl || need+=(openvswitch-common)
have ethtool || need+=(ethtool)
have ip || need+=(iproute2)
have curl || need+=(curl)
have ping || need+=(iputils-ping)
have pgrep || need+=(procps)
have python3 || need+=(python3-minimal) # the refusal-flood test's sender
have prlimit || need+=(util-linux)      # the descriptor-exhaustion test
have nft || need+=(nftables)            # a node's own processes reaching its node ports
have chromium || need+=(chromium)       # the status page's headless-browser test

if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing ${need[*]}, and installing them needs root" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! have cargo; then
  echo "install-deps: cargo is not on PATH; svcflow needs a Rust toolchain (1.85 or newer)" >&2
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: the OVS tests and the demo create network namespaces and need root" >&2
  exit 1
fi
