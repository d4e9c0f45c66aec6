#!/usr/bin/env bash
# One command from a fresh clone to a running cluster: installs what krate needs,
# builds the release binary and runs `krate server` on the embedded store.
# Extra arguments go to `krate server` (e.g. --data-dir /tmp/krate --secure-port 6444).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "==> building krate (release)"
cargo build --release --locked -p krate
data_dir=/var/lib/krate
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --data-dir) data_dir="${args[i + 1]:-$data_dir}" ;;
        --data-dir=*) data_dir="${args[i]#--data-dir=}" ;;
    esac
done
cat <<MSG
==> starting krate server
    kubeconfig: $data_dir/admin.kubeconfig (written once the API server is ready)
    use it:     export KUBECONFIG=$data_dir/admin.kubeconfig; kubectl get namespaces
MSG
exec ./target/release/krate server "$@"
