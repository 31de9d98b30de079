#!/usr/bin/env bash
# redislock benchmark suite (`make bench`).
#
# Six parts, in this order:
#   suite   two throw-away redis-server processes on free loopback ports — one
#           with the module just built, one without (for the overhead figure) —
#           and bench/suite.py against them: bench/results.md, results-raw.txt
#           (results-partial.* when BENCH_ONLY names some of the pairs only).
#   callgrind  bench/callgrind.py on every server of the matrix (needs
#           valgrind): instructions per command, bench/callgrind.md.
#   stalls  bench/stalls.py on every server of the matrix: bench/stalls.md.
#   native  bench/native.py on every server of the matrix: the module's basic
#           commands against the server's own lock commands, side by side:
#           bench/native.md, native-raw.txt.
#   waiting bench/waiting.py on every server of the matrix: waiting in the
#           server against a BLPOP mutex and minimal modules (bench/floor/):
#           the hot lock, memory per waiter, what a burst of waiters leaves,
#           stalls while waiters disconnect (the process holding them killed
#           while the server runs: exclusive, shared, semaphore and multi-key
#           waiters against the blocking floor and BLPOP) and while leases end
#           together (about 11 minutes per server): bench/waiting.md.
#   million bench/million.py on every server of the matrix: a million locks
#           against a million SET NX PX strings (about 2 minutes per server):
#           bench/million.md.
# Every server is stopped on any exit.
#
# Environment: BENCH_REPS, BENCH_SCALE, BENCH_CONTENTION_S (see suite.py),
# BENCH_NATIVE_REPS (see native.py), BENCH_WAITING_REPS, BENCH_WAITING_DISCONNECT_REPS and BENCH_WAITING_STALL_REPS
# (see waiting.py),
# BENCH_MILLION_REPS (see million.py); BENCH_ONLY=LIST runs only what LIST (comma
# separated) names: suite pairs (1,2,...,6b) and/or the parts `callgrind`,
# `stalls`, `native`, `waiting` and `million`; BENCH_PIN=0 to not pin the servers to CPU 0 and the
# clients to CPU 1.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
MODULE=$ROOT/target/release/libredislock.so
[ -f "$MODULE" ] || { echo "bench: $MODULE not found; run 'make build' first" >&2; exit 1; }
for tool in redis-server redis-cli redis-benchmark python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench: $tool not found" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/redislock-bench.XXXXXX")
PIDS=()

DRIVER=""
cleanup() {
    local pid
    if [ -n "$DRIVER" ]; then kill "$DRIVER" 2>/dev/null || true; fi
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        # wait up to ~5 s, then insist
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A snapshot of the module: cargo may rebuild it under us while we run.
cp "$MODULE" "$WORK/libredislock.so"

SERVER_PIN=()
CLIENT_CPUS=""
SERVER_CPUS=""
if [ "${BENCH_PIN:-1}" != 0 ] && command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    SERVER_PIN=(taskset -c 0)
    CLIENT_CPUS=1
    SERVER_CPUS=0
    export BENCH_SERVER_CPUS=0
fi

# What BENCH_ONLY selects: the suite's pairs (any other word) and the parts.
ONLY=${BENCH_ONLY:-}
PAIRS=$(tr ',' '\n' <<<"$ONLY" | grep -vx -e callgrind -e stalls -e native -e waiting -e million -e '' | paste -sd, - || true)
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server NAME [extra redis-server args...]; sets PORT
start_server() {
    local name=$1; shift
    mkdir -p "$WORK/$name"
    local try pid
    for try in 1 2 3 4 5; do
        PORT=$(free_port)
        "${SERVER_PIN[@]}" redis-server --port "$PORT" --bind 127.0.0.1 \
            --save '' --appendonly no --daemonize no \
            --dir "$WORK/$name" --dbfilename snapshot.rdb \
            --enable-debug-command local \
            --logfile "$WORK/$name.log" "$@" &
        pid=$!
        PIDS+=("$pid")
        for _ in $(seq 100); do
            if redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1; then
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill "$pid" 2>/dev/null || true
        echo "bench: $name server did not start on port $PORT (try $try):" >&2
        tail -n 3 "$WORK/$name.log" >&2 || true
    done
    echo "bench: could not start the $name server" >&2
    exit 1
}

status=0
# The drivers run in the background, so that a signal runs the trap at once
# (bash defers traps until a foreground child exits).
if [ -z "$ONLY" ] || [ -n "$PAIRS" ]; then
    start_server native --loadmodule "$WORK/libredislock.so"
    NATIVE_PORT=$PORT
    start_server plain
    PLAIN_PORT=$PORT

    if ! redis-cli -h 127.0.0.1 -p "$NATIVE_PORT" MODULE LIST | grep -qx redislock; then
        echo "bench: the module did not load" >&2
        exit 1
    fi
    echo "bench: server with module on 127.0.0.1:$NATIVE_PORT, without on 127.0.0.1:$PLAIN_PORT"
    python3 "$ROOT/bench/suite.py" \
        --native-port "$NATIVE_PORT" --plain-port "$PLAIN_PORT" \
        --module "$WORK/libredislock.so" --out-dir "$ROOT/bench" \
        --client-cpus "$CLIENT_CPUS" --only "$PAIRS" &
    DRIVER=$!
    wait "$DRIVER" || status=1
    DRIVER=""
fi

# The matrix (scripts/servers.sh; redis-server alone when scripts/clients.sh
# has not installed the others; REDISLOCK_SERVERS replaces the list).
if ! mapfile -t servers < <(scripts/servers.sh 2>/dev/null) || ((${#servers[@]} == 0)); then
    servers=(redis-server)
fi

# Instructions per command (bench/callgrind.py, a server of its own under
# valgrind): native lock commands against the module's, and where the
# module's instructions go, on every server of the matrix. Counts do not
# move with other load on the machine.
if want callgrind; then
    if command -v valgrind >/dev/null 2>&1; then
        {
            echo "# Instructions per command, native lock commands and the module's"
            echo
            echo "Written by \`bench/callgrind.py\` (\`make bench\`, or \`BENCH_ONLY=callgrind bench/run.sh\`):"
            echo "each server runs under valgrind's callgrind with the module loaded; ${BENCH_CALLGRIND_N:-20000}"
            echo "commands per workload through \`redis-cli --pipe\`, 32-byte tokens, keys \`lock:%012d\`."
            echo "Release and extend run on prefilled keys; every call matches. Module: sha256 $(sha256sum "$WORK/libredislock.so" | cut -c1-16)…"
        } >"$ROOT/bench/callgrind.md"
        for server in "${servers[@]}"; do
            python3 "$ROOT/bench/callgrind.py" --server "$server" \
                --module "$WORK/libredislock.so" --out "$ROOT/bench/callgrind.md" >/dev/null &
            DRIVER=$!
            wait "$DRIVER" || { echo "bench: callgrind failed on $server" >&2; status=1; DRIVER=""; break; }
            DRIVER=""
        done
        echo "bench: wrote bench/callgrind.md"
    else
        echo "bench: valgrind not found, instruction counts skipped (apt-get install valgrind)" >&2
    fi
fi

# Stalls (bench/stalls.py, servers of its own): the worst PING while the
# module works outside a command, next to the server's own expiry of as many
# plain keys, on every server. Writes bench/stalls.md (a scenario over the
# margin is marked OVER).
if want stalls; then
    : >"$ROOT/bench/stalls.md"
    for server in "${servers[@]}"; do
        python3 "$ROOT/bench/stalls.py" --server "$server" \
            --module "$WORK/libredislock.so" --out "$ROOT/bench/stalls.md" &
        DRIVER=$!
        wait "$DRIVER" || status=1
        DRIVER=""
    done
fi

# Native lock commands (bench/native.py, servers of its own): server CPU per
# operation of SET NX PX / SET IFEQ / DELIFEQ against LOCK.ACQUIRE / EXTEND /
# RELEASE on one server process, plain, with AOF and with a replica, and memory
# per key, on every server. Writes bench/native.md and bench/native-raw.txt.
if want native; then
    server_args=()
    for server in "${servers[@]}"; do server_args+=(--server "$server"); done
    python3 "$ROOT/bench/native.py" "${server_args[@]}" \
        --module "$WORK/libredislock.so" --out-dir "$ROOT/bench" \
        --server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" &
    DRIVER=$!
    wait "$DRIVER" || status=1
    DRIVER=""
fi
# Waiting (bench/waiting.py, servers of its own): the module's FIFO lock side
# by side with a BLPOP mutex on one server process (server CPU per handoff,
# memory per blocked waiter and what serving a burst of them leaves, stalls
# while waiters disconnect and while leases end together), and minimal
# modules (bench/floor/) for the module API's own floor, on every server.
# Writes bench/waiting.md.
if want waiting; then
    server_args=()
    for server in "${servers[@]}"; do server_args+=(--server "$server"); done
    python3 "$ROOT/bench/waiting.py" "${server_args[@]}" \
        --module "$WORK/libredislock.so" --out "$ROOT/bench/waiting.md" \
        --server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" &
    DRIVER=$!
    wait "$DRIVER" || status=1
    DRIVER=""
fi
# A million locks (bench/million.py, servers of its own): LOCK.ACQUIRE side by
# side with SET NX PX strings and a minimal module type on one server process
# (creation CPU, RDB bytes, DEBUG RELOAD, memory), on every server. Writes
# bench/million.md.
if want million; then
    server_args=()
    for server in "${servers[@]}"; do server_args+=(--server "$server"); done
    python3 "$ROOT/bench/million.py" "${server_args[@]}" \
        --module "$WORK/libredislock.so" --out "$ROOT/bench/million.md" \
        --server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" &
    DRIVER=$!
    wait "$DRIVER" || status=1
    DRIVER=""
fi
exit "$status"
