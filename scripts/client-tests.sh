#!/usr/bin/env bash
# Runs the client libraries' test suites against one server binary: $1, else $REDIS_SERVER, else
# redis-server (a valkey-server works too). The suites start their own servers with the module
# target/release/libredislock.so (REDISLOCK_MODULE selects another) on free loopback ports.
#   clients/python   pytest (also replays the manual's redis-cli examples, docs/ and README.md)
#   clients/node     node --test, with ioredis and node-redis; tsc --noEmit checks index.d.ts
# and mypy --strict the Python package, its examples and tests (once per run of the matrix).
# scripts/clients.sh installs what they need. Both suites run, side by side; the exit status is
# non-zero if either failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

server=${1:-${REDIS_SERVER:-redis-server}}
label=$("$server" --version 2>/dev/null | cut -d' ' -f1-3)
[ -n "$label" ] || { echo "redislock: $server does not run" >&2; exit 1; }
status=0

if [ -z "${REDISLOCK_SKIP_TYPECHECK:-}" ]; then
    echo "# clients/node: tsc --noEmit (index.d.ts)"
    (cd clients/node && node_modules/.bin/tsc --noEmit -p .) || status=1
    echo "# clients/python: mypy --strict (the package, its examples and tests)"
    (cd clients/python && "$root/target/pyenv/bin/python" -m mypy) || status=1
fi

# The two suites run side by side (each starts its own servers on free ports, and mostly waits
# on them); their output is shown one after the other.
logs=$(mktemp -d "${TMPDIR:-/tmp}/redislock-clients.XXXXXX")
trap 'rm -rf "$logs"' EXIT
(
    echo "# clients/python on $label: REDIS_SERVER=$server target/pyenv/bin/python -m pytest clients/python"
    cd clients/python && REDIS_SERVER=$server "$root/target/pyenv/bin/python" -m pytest -q -rs -p no:cacheprovider
) >"$logs/python" 2>&1 &
python=$!
(
    echo "# clients/node on $label: REDIS_SERVER=$server node --test clients/node/test/*.test.js"
    # A test that times out leaves its promises pending: where node knows how, the file's
    # process exits once its tests are done, so a timeout is a failure reported, never a hang.
    force_exit=()
    node --help 2>/dev/null | grep -q -- --test-force-exit && force_exit=(--test-force-exit)
    cd clients/node && REDIS_SERVER=$server node --test --test-concurrency=1 "${force_exit[@]}" test/*.test.js
) >"$logs/node" 2>&1 &
node=$!
wait "$python" || status=1
cat "$logs/python"
wait "$node" || status=1
cat "$logs/node"

exit $status
