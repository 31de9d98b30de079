#!/usr/bin/env bash
# `make test` after the build: on every server of the matrix (scripts/servers.sh: Redis 7.0 and
# 8.2, Valkey 8.1 and 9.1) the integration tests, one server after the other, and the client
# libraries' suites (scripts/client-tests.sh), two servers' at a time beside them: every suite
# starts its own servers on free ports and mostly waits on them, so on 2 cores they overlap well.
# After each server's integration tests, the Rust client's tests against that server (`cargo test
# -p redislock-client`, with its unit tests and doc examples on the first server).
# On the first server `cargo test --profile tests` (Cargo.toml: the release profile without its
# whole-program LTO, for the test binaries; the module they load is the release build) also runs
# the unit tests and the torture tests
# (tests/torture.rs, tests/multi_torture.rs); make stress runs them on the others. The client
# libraries' Cluster tests run on the first and last server only (`make test-clients` runs them
# on every server). Every run goes to its end, whatever failed before it (`--no-fail-fast`:
# a failing test binary does not hide the others'); the exit status is non-zero if any failed,
# and the last lines name what failed. CLIENT_JOBS (2) sets how many client runs overlap.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo=${CARGO:-cargo}
client_jobs=${CLIENT_JOBS:-2}

servers=$(scripts/servers.sh) || exit 1
first=$(head -n 1 <<<"$servers")
last=$(tail -n 1 <<<"$servers")
# Build every test binary first, so that compiler output does not mix with the runs.
"$cargo" test --profile tests --no-run || exit 1

logs=$(mktemp -d "${TMPDIR:-/tmp}/redislock-matrix.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$logs"' EXIT

# The Rust client's (clients/rust) test binaries and examples, in the dev profile (the release
# profile's whole-program LTO is the module's, and would only make them slower to build), build
# beside the first server's tests, which mostly wait on their servers (on a fresh clone that
# hides most of a minute): cargo holds the build directory's lock only while it builds, and the
# module's `cargo test` below has found its binaries built within the first seconds.
(
    sleep 5
    "$cargo" test -p redislock-client --no-run >"$logs/client-build" 2>&1
    echo $? >"$logs/client-build.status"
) &
client_build=$!
started=$(date +%s)
label() { "$1" --version | cut -d' ' -f1-3; }

# The client suites: a background queue that keeps `client_jobs` of them running. Each writes
# its log and, when it ends, its exit status.
(
    i=0
    for server in $servers; do
        clients_env=()
        [ "$server" != "$first" ] && clients_env+=(REDISLOCK_SKIP_TYPECHECK=1)
        [ "$server" != "$first" ] && [ "$server" != "$last" ] && clients_env+=(REDISLOCK_SKIP_CLUSTER=1)
        while (($(jobs -rp | wc -l) >= client_jobs)); do wait -n; done
        (
            env "${clients_env[@]}" scripts/client-tests.sh "$server" >"$logs/clients.$i" 2>&1
            echo $? >"$logs/clients.$i.status"
        ) &
        i=$((i + 1))
    done
    wait
) &
queue=$!

failed=()
for server in $servers; do
    if [ "$server" = "$first" ]; then tests=(); else tests=(--test suite --test deps); fi
    echo "# integration tests on $(label "$server")"
    echo "REDIS_SERVER=$server $cargo test --profile tests --no-fail-fast ${tests[*]}"
    REDIS_SERVER=$server "$cargo" test --profile tests --no-fail-fast "${tests[@]}" \
        || failed+=("$(label "$server"): cargo test")
    # The Rust client: its unit tests and doc examples (compiled; those that need a server are
    # `no_run`) on the first server's run, its tests against servers on each.
    if [ "$server" = "$first" ]; then
        client=()
        wait "$client_build"
        if [ "$(cat "$logs/client-build.status" 2>/dev/null)" != 0 ]; then
            cat "$logs/client-build"
            failed+=("the Rust client's build")
        fi
    else
        client=(--test servers)
    fi
    # Its tests mostly wait for leases to end, each on servers of its own: twice as many at a time.
    client_threads=$((${RUST_TEST_THREADS:-4} * 2))
    echo "REDIS_SERVER=$server RUST_TEST_THREADS=$client_threads $cargo test -p redislock-client --no-fail-fast ${client[*]}"
    REDIS_SERVER=$server RUST_TEST_THREADS=$client_threads "$cargo" test -p redislock-client --no-fail-fast "${client[@]}" \
        || failed+=("$(label "$server"): cargo test -p redislock-client")
done
wait "$queue"
i=0
for server in $servers; do
    cat "$logs/clients.$i"
    [ "$(cat "$logs/clients.$i.status" 2>/dev/null)" = 0 ] || failed+=("$(label "$server"): client suites")
    i=$((i + 1))
done
echo "redislock: make test ran for $(($(date +%s) - started)) s after the build"
if ((${#failed[@]})); then
    printf 'redislock: failed on %s\n' "${failed[@]}" >&2
    exit 1
fi
