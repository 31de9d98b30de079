#!/usr/bin/env bash
# `make test` after the build: on every server of the matrix (scripts/servers.sh: Redis 7.0 and
# 8.2, Valkey 8.1 and 9.1), one server after the other, the integration tests and, side by side
# with them, the client libraries' suites (scripts/client-tests.sh; each suite starts its own
# servers on free ports and mostly waits on them). On the first server `cargo test --release`
# also runs the unit tests and the torture tests (tests/torture.rs, tests/multi_torture.rs);
# make stress runs them on the others; the client libraries' Cluster tests run on the first and last server only. Every
# server is tried; the exit status is non-zero if any run failed, and the last
# lines name what failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo=${CARGO:-cargo}

servers=$(scripts/servers.sh) || exit 1
last=$(tail -n 1 <<<"$servers")
# Build every test binary first, so that compiler output does not mix with the runs.
"$cargo" test --release --no-run || exit 1

logs=$(mktemp -d "${TMPDIR:-/tmp}/redislock-matrix.XXXXXX")
trap 'rm -rf "$logs"' EXIT
failed=()
first=1
for server in $servers; do
    label=$("$server" --version | cut -d' ' -f1-3)
    if ((first)); then
        clients_env=()
        tests=()
    else
        clients_env=(REDISLOCK_SKIP_TYPECHECK=1)
        tests=(--test suite --test deps)
    fi
    # The client libraries' Cluster tests (a 6-node cluster each) run on the first and the last
    # server; `make test-clients` runs them on every server.
    if ((!first)) && [ "$server" != "$last" ]; then
        clients_env+=(REDISLOCK_SKIP_CLUSTER=1)
    fi
    env "${clients_env[@]}" scripts/client-tests.sh "$server" >"$logs/clients" 2>&1 &
    clients=$!
    echo "# integration tests on $label"
    echo "REDIS_SERVER=$server $cargo test --release ${tests[*]}"
    REDIS_SERVER=$server "$cargo" test --release "${tests[@]}" || failed+=("$label: cargo test")
    wait "$clients" || failed+=("$label: client suites")
    cat "$logs/clients"
    first=0
done
if ((${#failed[@]})); then
    printf 'redislock: failed on %s\n' "${failed[@]}" >&2
    exit 1
fi
