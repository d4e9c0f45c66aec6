#!/usr/bin/env bash
# The whole test suite: unit, backend suite (SQLite and real etcd), crash tests,
# and everything else the workspace holds. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "==> cargo test --workspace"
cargo test --workspace --locked "$@"
