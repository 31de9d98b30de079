#!/usr/bin/env bash
# Runs redis-py's own lock tests (tests/test_lock.py and tests/test_asyncio/test_lock.py of the
# redis-py release installed in target/pyenv) with lock_class swapped to redislock's, against a
# throw-away server with the module (loopback, a free port). The tests are not part of this
# repository: they are taken at run time from that release's source distribution on PyPI
# (pip download), into target/redis-py-suite/. Prints pytest's summary (every failure by name);
# docs/clients.md says which failures cannot apply and why. Part of `make stress`, not of
# `make test`. REDIS_SERVER selects the server binary.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

module=${REDISLOCK_MODULE:-target/release/libredislock.so}
server=${REDIS_SERVER:-redis-server}
work=target/redis-py-suite
venv=$work/venv
[ -x target/pyenv/bin/python ] || scripts/clients.sh
[ -f "$module" ] || { echo "redislock: no module at $module (cargo build --release)" >&2; exit 1; }

version=$(target/pyenv/bin/python -c 'import redis; print(redis.__version__)')
src=$work/redis-$version
mkdir -p "$work"
if [ ! -d "$src/tests" ]; then
    target/pyenv/bin/python -m pip download --disable-pip-version-check -q --no-deps \
        --no-binary :all: "redis==$version" -d "$work"
    tar -xzf "$work/redis-$version.tar.gz" -C "$work"
fi
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "redis==$version" pytest \
        pytest-asyncio pytest-timeout packaging
fi

# The two files, with their lock_class swapped: the sync tests take redis.lock.Lock, the
# asyncio tests redis.asyncio.lock.Lock; both then pass lock_class=Lock to r.lock().
rm -rf "$work/swapped"
mkdir -p "$work/swapped"
tests=$work/swapped/tests # named tests: the files import tests.conftest
cp -r "$src/tests" "$tests"
sed -i 's/^from redis\.lock import Lock$/from redislock import Lock/' "$tests/test_lock.py"
sed -i 's/^from redis\.asyncio\.lock import Lock$/from redislock.asyncio import Lock/' \
    "$tests/test_asyncio/test_lock.py"
grep -q '^from redislock import Lock$' "$tests/test_lock.py"
grep -q '^from redislock.asyncio import Lock$' "$tests/test_asyncio/test_lock.py"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
"$server" --bind 127.0.0.1 --port "$port" --dir "$dir" --save "" --appendonly no \
    --loadmodule "$root/$module" --daemonize no --logfile "$dir/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05 # waiting for the server to listen: no event to await
done

# The tests that cannot apply to a lock served by the module, each with why; any other failure
# fails the run.
#   GET: reads the lock's key with GET, which holds a lock of the module, not a string
#        (WRONGTYPE); the same tests' acquire, token and release checks pass in tests of ours.
#   sleeps: counts the sleeps of redis-py's polling loop under a fake clock; this lock waits in
#        the server and does not sleep.
cannot_apply=(
    "tests/test_lock.py::TestLock::test_lock GET"
    "tests/test_lock.py::TestLock::test_lock_token GET"
    "tests/test_lock.py::TestLock::test_lock_token_thread_local_false GET"
    "tests/test_lock.py::TestLock::test_context_manager GET"
    "tests/test_lock.py::TestLock::test_blocking_timeout sleeps"
    "tests/test_lock.py::TestLock::test_context_manager_blocking_timeout sleeps"
)
for mode in single pool; do
    for t in test_lock test_lock_token test_lock_token_thread_local_false test_context_manager; do
        cannot_apply+=("tests/test_asyncio/test_lock.py::TestLock::$t[$mode] GET")
    done
    cannot_apply+=("tests/test_asyncio/test_lock.py::TestLock::test_blocking_timeout[$mode] sleeps")
done

echo "# redis-py $version lock tests, lock_class=redislock.Lock / redislock.asyncio.Lock, on $("$server" --version | cut -d' ' -f1-3)"
log=$work/last-run.txt
(cd "$work/swapped" && PYTHONPATH="${REDISLOCK_PYTHON_SRC:-$root/clients/python/src}:$root/$work/swapped" \
    "$root/$venv/bin/python" -m pytest -q -p no:cacheprovider -o addopts= -o log_cli=false \
    --rootdir="$root/$work/swapped" -c /dev/null -o asyncio_mode=auto -o timeout=30 \
    --redis-url="redis://127.0.0.1:$port" -rf --tb=line "$@" \
    tests/test_lock.py tests/test_asyncio/test_lock.py) >"$log" 2>&1 || true
summary=$(grep -E '^[=]* ?[0-9]+ (passed|failed)' "$log" | tail -1 | tr -d '=')
echo "${summary# }"
[ -n "$summary" ] || { cat "$log"; exit 1; }
status=0
while read -r failed; do
    reason=""
    for entry in "${cannot_apply[@]}"; do
        [ "${entry% *}" = "$failed" ] && reason=${entry##* }
    done
    if [ -n "$reason" ]; then
        echo "  cannot apply ($reason): $failed"
    else
        echo "  FAILED: $failed"
        status=1
    fi
done < <(sed -n 's/^FAILED \([^ ]*\).*/\1/p' "$log")
[ $status = 0 ] || echo "redislock: redis-py's lock tests failed where they apply (details in $log)" >&2
exit $status
