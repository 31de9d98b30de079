#!/usr/bin/env bash
# Checks what `make dist` wrote into dist/, each artifact installed into a clean temporary place
# as a user would, against every server of the matrix (scripts/servers.sh):
#   SHA256SUMS   sha256sum -c accepts every artifact
#   module       in the tarball and in the .deb the same file; objdump -T: no symbol of a glibc
#                newer than 2.17, and no library besides glibc's own
#   tarball      unpacked; redis-server started with a config made of redislock.conf (its
#                loadmodule path pointed at the unpacked module): MODULE LIST and INFO show the
#                release, LOCK.ACQUIRE then LOCK.RELEASE work
#   .deb         its fields; unpacked with dpkg -x; the module at /usr/lib/redis/modules loaded
#                with --loadmodule, the same smoke test
#   wheel        pip install into a fresh venv (with the redis-py the tests pin); the sdist's
#                examples/quickstart.py run with it against each server; a wheel built from the
#                sdist has the same files; pip install ./clients/python (the checkout) writes
#                nothing into the checkout
#   npm tarball  npm install into a fresh folder (with the ioredis the tests pin); the
#                package's version, and examples/quickstart.js run with it against each server
#   .crate       unpacked; its version; a fresh `cargo new` project depending on it by path (with
#                the versions of the repository's Cargo.lock) builds its examples/quickstart.rs
#                as its main, which runs against each server and prints what it should
# Ends with "dist-check: N passed, M failed"; exits 1 if any check failed. Loopback only; every
# server it starts is stopped, the temporary directory removed.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dist=$root/dist
triple_glibc=2.17

fail_early() {
    echo "redislock: $*" >&2
    exit 1
}

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
number=$(awk -F. '{ print $1 * 10000 + $2 * 100 + $3 }' <<<"$version")
tarball=$dist/redislock-$version-linux-x86_64.tar.gz
deb=$dist/redislock_${version}_amd64.deb
wheel=$dist/redislock-$version-py3-none-any.whl
sdist=$dist/redislock-$version.tar.gz
npm_tgz=$dist/redislock-$version.tgz
crate=$dist/redislock-client-$version.crate
for f in "$tarball" "$deb" "$wheel" "$sdist" "$npm_tgz" "$crate" "$dist/SHA256SUMS"; do
    [ -f "$f" ] || fail_early "no ${f#"$root"/}; run make dist first"
done
servers=$(scripts/servers.sh) || exit 1
redis_pin=$(sed -n 's/^redis==//p' scripts/requirements-test.txt)
ioredis_pin=$(node -p 'require("./clients/node/package.json").devDependencies.ioredis')

tmp=$(mktemp -d "${TMPDIR:-/tmp}/redislock-dist-check.XXXXXX")
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

passed=0
failed=0
# check DESCRIPTION COMMAND…: runs the command, its output to a log shown only on failure.
check() {
    local what=$1 log
    shift
    log=$tmp/check-$((passed + failed)).log
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "ok    $what"
    else
        failed=$((failed + 1))
        echo "FAIL  $what"
        sed 's/^/      /' "$log" | tail -20
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server NAME SERVER ARGS…: starts SERVER on a free port, loopback, no persistence;
# sets $port. Waits until it answers PING (10 s at most).
start_server() {
    local name=$1 server=$2 i
    shift 2
    port=$(free_port)
    mkdir -p "$tmp/$name"
    "$server" "$@" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp/$name" \
        --logfile "$tmp/$name/server.log" &
    pids+=($!)
    for ((i = 0; i < 200; i++)); do
        redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && return 0
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.05
    done
    echo "the server did not start; its log:"
    cat "$tmp/$name/server.log"
    return 1
}

stop_server() {
    redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
    wait "${pids[-1]}" 2>/dev/null
    unset 'pids[-1]'
}

# smoke: the module of the server on $port reports this release and grants and releases a lock.
smoke() {
    local modules info reply token released
    modules=$(redis-cli -p "$port" MODULE LIST) || return 1
    grep -qx redislock <<<"$modules" || { echo "MODULE LIST: $modules"; return 1; }
    grep -A1 -x ver <<<"$modules" | grep -qx "$number" || { echo "MODULE LIST, ver not $number: $modules"; return 1; }
    info=$(redis-cli -p "$port" INFO redislock | tr -d '\r')
    grep -qx "redislock_version:$version" <<<"$info" || { echo "INFO redislock: $info"; return 1; }
    reply=$(redis-cli -p "$port" LOCK.ACQUIRE dist-check:smoke '*' PX 10000) || return 1
    token=$(head -1 <<<"$reply")
    [[ $token =~ ^[0-9a-f]{32}$ ]] && [[ $(sed -n 2p <<<"$reply") =~ ^[1-9][0-9]*$ ]] ||
        { echo "LOCK.ACQUIRE answered: $reply"; return 1; }
    released=$(redis-cli -p "$port" LOCK.RELEASE dist-check:smoke "$token")
    [ "$released" = 1 ] || { echo "LOCK.RELEASE answered: $released"; return 1; }
    [ -z "$(redis-cli -p "$port" LOCK.INFO dist-check:smoke)" ] || { echo "the lock is still there"; return 1; }
}

# glibc_ok MODULE: every GLIBC_ version the module needs is 2.17 or older, and it needs no
# library besides glibc's.
glibc_ok() {
    local newest needed
    objdump -T "$1" | grep -o 'GLIBC_[0-9.]*' | sort -uV | sed 's/^/needs /'
    newest=$(objdump -T "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
    [ -n "$newest" ] || { echo "objdump -T found no GLIBC_ version"; return 1; }
    if [ "$(printf '%s\n%s\n' "$newest" "$triple_glibc" | sort -V | tail -1)" != "$triple_glibc" ]; then
        echo "needs GLIBC_$newest, newer than $triple_glibc"
        return 1
    fi
    needed=$(objdump -p "$1" | awk '$1 == "NEEDED" { print $2 }')
    echo "NEEDED: $needed"
    ! grep -vxE 'libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2' <<<"$needed"
}

tarball_contents() {
    local dir=$tmp/tarball/redislock-$version-linux-x86_64
    mkdir -p "$tmp/tarball"
    tar -xzf "$tarball" -C "$tmp/tarball" || return 1
    for f in redislock.so README.md LICENSE CHANGELOG.md redislock.conf; do
        [ -f "$dir/$f" ] || { echo "missing $f"; return 1; }
    done
    [ "$(ls "$dir" | wc -l)" = 5 ] || { ls "$dir"; return 1; }
    grep -qx 'loadmodule /usr/lib/redis/modules/redislock.so' "$dir/redislock.conf"
}

deb_contents() {
    local fields
    fields=$(dpkg-deb -f "$deb" Package Version Architecture Depends) || return 1
    echo "$fields"
    [ "$fields" = "$(printf 'Package: redislock\nVersion: %s\nArchitecture: amd64\nDepends: libc6 (>= 2.17)' "$version")" ] || return 1
    mkdir -p "$tmp/deb"
    dpkg -x "$deb" "$tmp/deb" || return 1
    [ -f "$tmp/deb/usr/lib/redis/modules/redislock.so" ] || { find "$tmp/deb"; return 1; }
    [ -f "$tmp/deb/usr/share/doc/redislock/copyright" ] || return 1
    cmp "$tmp/deb/usr/lib/redis/modules/redislock.so" "$tmp/tarball/redislock-$version-linux-x86_64/redislock.so"
}

# The tarball's module, loaded through the snippet: a config of the snippet with the module's
# path pointed at the unpacked file.
tarball_loads() {
    local dir=$tmp/tarball/redislock-$version-linux-x86_64 conf=$tmp/tarball/redis.conf
    sed "s|^loadmodule /usr/lib/redis/modules/redislock.so|loadmodule $dir/redislock.so|" \
        "$dir/redislock.conf" >"$conf"
    start_server "tarball-$1" "$2" "$conf" || return 1
    smoke
    local status=$?
    stop_server
    return $status
}

deb_loads() {
    start_server "deb-$1" "$2" --loadmodule "$tmp/deb/usr/lib/redis/modules/redislock.so" || return 1
    smoke
    local status=$?
    stop_server
    return $status
}

wheel_installs() {
    python3 -m venv "$tmp/venv" || return 1
    "$tmp/venv/bin/pip" install --disable-pip-version-check --no-input -q "$wheel" "redis==$redis_pin" || return 1
    mkdir -p "$tmp/sdist"
    tar -xzf "$sdist" -C "$tmp/sdist" || return 1
    [ -f "$tmp/sdist/redislock-$version/examples/quickstart.py" ] || { echo "no examples/quickstart.py in the sdist"; return 1; }
    (cd "$tmp" && "$tmp/venv/bin/python" -c '
import os, sys, redislock
print(redislock.__version__, redislock.__file__)
assert redislock.__version__ == sys.argv[1], redislock.__version__
assert redislock.__file__.startswith(os.path.realpath(sys.argv[2])), redislock.__file__
' "$version" "$tmp/venv")
}

sdist_builds_the_wheel() {
    "$tmp/venv/bin/pip" wheel --disable-pip-version-check --no-input -q --no-deps -w "$tmp/fromsdist" "$sdist" || return 1
    diff <(unzip -Z1 "$wheel" | sort) <(unzip -Z1 "$tmp/fromsdist/$(basename "$wheel")" | sort)
}

# pip install ./clients/python, from the checkout itself, writes nothing into it (no build/, no
# *.egg-info, no bytecode).
source_install_leaves_the_tree_alone() {
    local before after
    before=$(find clients/python -path '*/__pycache__' -prune -o -path '*/.pytest_cache' -prune -o -print | sort)
    "$tmp/venv/bin/pip" install --disable-pip-version-check --no-input -q --no-deps --force-reinstall \
        ./clients/python || return 1
    after=$(find clients/python -path '*/__pycache__' -prune -o -path '*/.pytest_cache' -prune -o -print | sort)
    diff <(echo "$before") <(echo "$after")
}

npm_installs() {
    mkdir -p "$tmp/node"
    echo '{ "private": true }' >"$tmp/node/package.json"
    (cd "$tmp/node" && npm install --no-audit --no-fund --loglevel=error "$npm_tgz" "ioredis@$ioredis_pin") || return 1
    cp clients/node/examples/quickstart.js "$tmp/node/"
    (cd "$tmp/node" && node -e '
const path = require("node:path");
const where = require.resolve("redislock");
const { version } = require("redislock");
console.log(version, where);
if (version !== process.argv[1]) throw new Error(`version ${version}`);
if (!where.startsWith(path.join(process.cwd(), "node_modules"))) throw new Error(where);
' "$version")
}

# The .crate, unpacked into a fresh project and added to it by path (as README.md shows), the
# crate's quickstart as the project's main. Its build directory is kept in target/ so that a second run does not build the redis
# crate and tokio again; the project itself is new each time.
crate_builds() {
    local dir=$tmp/rustapp/redislock-client-$version
    (cd "$tmp" && cargo new --quiet --bin --vcs none rustapp) || return 1
    # As README.md says: unpacked beside the project's Cargo.toml, added by path.
    (cd "$tmp/rustapp" && tar -xzf "$crate" && cargo add --quiet redislock-client --path "redislock-client-$version") || return 1
    [ -f "$dir/examples/quickstart.rs" ] || { echo "no examples/quickstart.rs in the .crate"; return 1; }
    grep -qx "version = \"$version\"" "$dir/Cargo.toml" || { echo "the .crate's version is not $version"; return 1; }
    cmp -s "$dir/LICENSE" LICENSE || { echo "the .crate has no LICENSE, or another one"; return 1; }
    cp "$dir/examples/quickstart.rs" "$tmp/rustapp/src/main.rs"
    cp Cargo.lock "$tmp/rustapp/"
    (cd "$tmp/rustapp" && CARGO_TARGET_DIR=$root/target/dist-check-rust cargo build --quiet) || return 1
    cp "$root/target/dist-check-rust/debug/rustapp" "$tmp/rustapp/rustapp"
    (cd "$tmp/rustapp" && cargo tree --quiet --depth 1) | tee /dev/stderr | grep -qF "redislock-client v$version ($dir)"
}

quickstarts_run() {
    start_server "clients-$1" "$2" --loadmodule "$tmp/deb/usr/lib/redis/modules/redislock.so" || return 1
    local status=0
    echo "# python examples/quickstart.py $port"
    (cd "$tmp" && REDIS_PORT=$port "$tmp/venv/bin/python" "$tmp/sdist/redislock-$version/examples/quickstart.py") || status=1
    echo "# node quickstart.js $port"
    (cd "$tmp/node" && REDIS_PORT=$port node quickstart.js) || status=1
    echo "# the .crate's quickstart.rs $port"
    local out
    out=$(cd "$tmp" && REDIS_PORT=$port "$tmp/rustapp/rustapp") || status=1
    echo "$out"
    grep -qE '^holding lock:report with fence [1-9][0-9]*$' <<<"$out" && grep -qx 'released; held now: false' <<<"$out" ||
        { echo "the Rust quickstart did not print what it should"; status=1; }
    stop_server
    return $status
}

label() { "$1" --version | cut -d' ' -f1-3; }

started=$(date +%s)
check "SHA256SUMS" bash -c "cd '$dist' && sha256sum -c SHA256SUMS"
check "tarball: redislock.so, README.md, LICENSE, CHANGELOG.md, redislock.conf" tarball_contents
check "tarball module: objdump -T, glibc $triple_glibc or older" glibc_ok "$tmp/tarball/redislock-$version-linux-x86_64/redislock.so"
check ".deb: fields, dpkg -x, the module at /usr/lib/redis/modules (the tarball's)" deb_contents
check ".deb module: objdump -T, glibc $triple_glibc or older" glibc_ok "$tmp/deb/usr/lib/redis/modules/redislock.so"
check "wheel: pip install into a fresh venv" wheel_installs
check "sdist: pip wheel gives the same files" sdist_builds_the_wheel
check "npm tarball: npm install into a fresh folder" npm_installs
check ".crate: LICENSE; a fresh cargo project depending on it by path builds its quickstart" crate_builds
i=0
for server in $servers; do
    i=$((i + 1))
    check "tarball module via redislock.conf on $(label "$server")" tarball_loads "$i" "$server"
    check ".deb module on $(label "$server")" deb_loads "$i" "$server"
    check "Python, Node.js and Rust quickstarts on $(label "$server")" quickstarts_run "$i" "$server"
done
# Last: it replaces the wheel's package in the venv.
check "pip install ./clients/python writes nothing into the checkout" source_install_leaves_the_tree_alone
echo "dist-check of redislock $version took $(($(date +%s) - started)) s"
echo "dist-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
