#!/usr/bin/env bash
# Runs the integration tests and the client libraries' suites again on every server of the
# matrix after the first (scripts/servers.sh --others: Redis 8.2, Valkey 8.1, Valkey 9.1), each
# server in turn. The torture test runs on the first server only (make test), and on every server
# in make stress. Every server is tried; the exit status is non-zero if any run failed, and
# the last lines name the servers that failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

servers=$(scripts/servers.sh --others) || exit 1
failed=()
for server in $servers; do
    label=$("$server" --version | cut -d' ' -f1-3)
    echo "# integration tests again, on $label"
    echo "REDIS_SERVER=$server ${CARGO:-cargo} test --release --test suite --test deps"
    REDIS_SERVER=$server "${CARGO:-cargo}" test --release --test suite --test deps ||
        failed+=("$label: integration tests")
    REDISLOCK_SKIP_TYPECHECK=1 scripts/client-tests.sh "$server" || failed+=("$label: client suites")
done
if ((${#failed[@]})); then
    printf 'redislock: failed on %s\n' "${failed[@]}" >&2
    exit 1
fi
