#!/usr/bin/env bash
# Builds the release artifacts into dist/ (emptied first):
#   redislock-VERSION-linux-x86_64.tar.gz   the module (redislock.so), README.md, LICENSE,
#                                           CHANGELOG.md and redislock.conf (a redis.conf snippet)
#   redislock_VERSION_amd64.deb             the module at /usr/lib/redis/modules/redislock.so,
#                                           the docs and the snippet under /usr/share/doc/redislock
#   redislock-VERSION.tar.gz, redislock-VERSION-py3-none-any.whl   the Python client
#   redislock-VERSION.tgz                   the Node.js client (npm pack)
#   redislock-client-VERSION.crate          the Rust client (cargo package; not on crates.io:
#                                           unpack it and depend on it by path)
#   SHA256SUMS                              sha256sum -c checks them
# The module is built with cargo-zigbuild for x86_64-unknown-linux-gnu with glibc 2.17, so that
# it loads on any x86_64 Linux with glibc 2.17 or newer (the one of `cargo build` needs this
# machine's glibc); into target/dist-build, leaving target/release alone. The clients are
# packed from copies under target/dist-stage, so nothing is written into the source tree.
# scripts/dist-deps.sh installs the tools first (make dist runs it). Quiet apart from the list
# of artifacts; on failure prints one line naming the log with the details.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

cargo=${CARGO:-cargo}
venv=$root/target/distenv
stage=$root/target/dist-stage
logs=$root/target/dist-logs
out=$root/dist
triple=x86_64-unknown-linux-gnu
glibc=2.17

fail() {
    echo "redislock: $*" >&2
    exit 1
}

[ -x "$venv/bin/python" ] && [ -x target/tools/bin/cargo-deb ] ||
    fail "the dist tools are missing; run scripts/dist-deps.sh (make dist does)"

# --- One version ----------------------------------------------------------------------------
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || fail "no version in Cargo.toml"
py_version=$(sed -n '/^\[project\]/,/^\[/s/^version = "\(.*\)"$/\1/p' clients/python/pyproject.toml)
node_version=$(node -p 'require("./clients/node/package.json").version')
rust_version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' clients/rust/Cargo.toml)
if [ "$py_version" != "$version" ] || [ "$node_version" != "$version" ] || [ "$rust_version" != "$version" ]; then
    fail "versions differ: Cargo.toml $version, clients/python/pyproject.toml $py_version, clients/node/package.json $node_version, clients/rust/Cargo.toml $rust_version"
fi

rm -rf "$out" "$stage"
mkdir -p "$out" "$stage" "$logs"

# --- The module, for glibc 2.17 ----------------------------------------------------------------
# bindgen (redis-module's build script) parses redismodule.h with libclang; cargo-zigbuild hands
# it zig's header directories in a form libclang 14 does not apply, so they are given again as
# plain -isystem flags (the variable named with the target's dashes is the one bindgen reads
# first; cargo-zigbuild appends its own flags to it).
zig_includes=$("$venv/bin/python" -m ziglang cc -target "x86_64-linux-gnu.$glibc" -E -v -x c /dev/null \
    -o /dev/null 2>&1 | sed -n '/^#include <...> search starts here:/,/^End of search list/{/^ /p}')
[ -n "$zig_includes" ] || fail "zig cc named no include directories (python -m ziglang in $venv)"
bindgen_args=""
for dir in $zig_includes; do
    bindgen_args+=" -isystem $(realpath "$dir")"
done
if ! env PATH="$venv/bin:$PATH" "BINDGEN_EXTRA_CLANG_ARGS_$triple=$bindgen_args" \
    "$cargo" zigbuild --release --locked --target "$triple.$glibc" --target-dir target/dist-build \
    >"$logs/zigbuild.log" 2>&1; then
    tail -5 "$logs/zigbuild.log" >&2
    fail "cargo zigbuild failed (see $logs/zigbuild.log)"
fi
module=target/dist-build/$triple/release/libredislock.so

# Timestamps and owners in the archives come from the last commit, so that a rebuild of the same
# commit gives the same bytes.
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH=$epoch

# --- The tarball ------------------------------------------------------------------------------
name=redislock-$version-linux-x86_64
mkdir -p "$stage/$name"
cp "$module" "$stage/$name/redislock.so"
cp README.md LICENSE CHANGELOG.md packaging/redislock.conf "$stage/$name/"
chmod 644 "$stage/$name"/*
# Redis and Valkey refuse a module file without execute permission.
chmod 755 "$stage/$name/redislock.so"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" |
    gzip -9n >"$out/$name.tar.gz"

# --- The .deb (cargo-deb; its metadata is [package.metadata.deb] in Cargo.toml) ----------------
if ! CARGO_TARGET_DIR=target/dist-build target/tools/bin/cargo-deb --no-build --no-strip --no-dbgsym \
    --target "$triple" --deb-version "$version" --output "$out/redislock_${version}_amd64.deb" \
    >"$logs/cargo-deb.log" 2>&1; then
    tail -5 "$logs/cargo-deb.log" >&2
    fail "cargo-deb failed (see $logs/cargo-deb.log)"
fi

# --- The Python client: sdist and wheel, from a copy ---------------------------------------------
mkdir -p "$stage/python"
tar -C clients/python --exclude=__pycache__ --exclude=.pytest_cache --exclude=.mypy_cache \
    --exclude=build --exclude='*.egg-info' --exclude=dist -cf - . | tar -C "$stage/python" -xf -
cp LICENSE "$stage/python/"
if ! "$venv/bin/python" -m build --sdist --wheel --outdir "$out" "$stage/python" \
    >"$logs/python-build.log" 2>&1; then
    tail -5 "$logs/python-build.log" >&2
    fail "python -m build failed (see $logs/python-build.log)"
fi

# --- The Node.js client: npm pack, from a copy ------------------------------------------------
mkdir -p "$stage/node"
tar -C clients/node --exclude=node_modules --exclude=test -cf - . | tar -C "$stage/node" -xf -
cp LICENSE "$stage/node/"
if ! (cd "$stage/node" && npm pack --silent --pack-destination "$out") >"$logs/npm-pack.log" 2>&1; then
    tail -5 "$logs/npm-pack.log" >&2
    fail "npm pack failed (see $logs/npm-pack.log)"
fi

# --- The Rust client: cargo package ------------------------------------------------------------
# The crate keeps `publish = false` (it is not on crates.io); cargo package writes the .crate all
# the same. Packed from the working tree as the other clients are (--allow-dirty); not built
# here (--no-verify): make dist-check builds and runs it in a fresh project.
if ! "$cargo" package -p redislock-client --no-verify --allow-dirty --target-dir target/dist-build \
    >"$logs/cargo-package.log" 2>&1; then
    tail -5 "$logs/cargo-package.log" >&2
    fail "cargo package failed (see $logs/cargo-package.log)"
fi
cp "target/dist-build/package/redislock-client-$version.crate" "$out/"

# --- Checksums --------------------------------------------------------------------------------
(cd "$out" && sha256sum -- * >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)

newest=$(objdump -T "$module" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "dist/ (redislock $version; the module needs $newest at most):"
(cd "$out" && ls -l -- * | awk '{ printf "  %-48s %9d bytes\n", $9, $5 }')
