#!/usr/bin/env bash
# The whole test suite: unit, backend suite (SQLite and real etcd), crash tests,
# and everything else the workspace holds. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "==> cargo test --workspace"
cargo test --workspace --locked "$@"
# The kubectl end-to-end tests again with the second kubectl (1.37), so every command
# family is checked with both versions.
KUBECTL_137=/opt/krate-test/kubectl-1.37/bin/kubectl
if [ -x "$KUBECTL_137" ]; then
    echo "==> kubectl end-to-end tests with $("$KUBECTL_137" version --client | head -1)"
    # The e2e binary's kubectl modules are all named e2e_kubectl*.
    KUBECTL="$KUBECTL_137" cargo test -p krate --locked --test e2e "$@" -- e2e_kubectl
fi
