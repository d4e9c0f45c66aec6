#!/usr/bin/env bash
# Installs the system packages krate builds, runs and tests with (Debian 12, as root).
set -euo pipefail

packages=(
    etcd-server etcd-client # the etcd backend and its tests
    protobuf-compiler       # protoc, for the gRPC clients (etcd, CRI)
    pkg-config ca-certificates
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "==> installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo (Rust 1.89 or newer) is needed to build krate; install a Rust toolchain first" >&2
    exit 1
fi
