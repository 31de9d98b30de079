#!/usr/bin/env bash
# Checks for what building and testing redislock needs; on Debian, as root,
# installs what is missing, otherwise names it in one line and fails.
#
# REDISLOCK_DEPS_ROOT (tests only) prefixes every library directory searched,
# and REDISLOCK_DEPS_DRY_RUN=1 prints what would be installed instead of
# installing it, so the checks can be tested against a fake machine.
set -euo pipefail

root=${REDISLOCK_DEPS_ROOT:-}

# bindgen (used by the redis-module crate) loads libclang's C API at build
# time: libclang.so, libclang-<version>.so or a versioned libclang.so.N, in
# $LIBCLANG_PATH, llvm-config's libdir or the usual library directories.
# libclang-cpp.so.N (the C++ library LLVM packages pull in) is not it.
have_libclang() {
    local dirs=() d f
    [ -n "${LIBCLANG_PATH:-}" ] && dirs+=("$LIBCLANG_PATH")
    if [ -z "$root" ] && command -v llvm-config >/dev/null 2>&1; then
        dirs+=("$(llvm-config --libdir 2>/dev/null || true)")
    fi
    for d in "$root"/usr/lib/llvm-*/lib "$root"/usr/lib/*-linux-gnu "$root"/lib/*-linux-gnu \
             "$root"/usr/lib64 "$root"/usr/lib "$root"/usr/local/lib "$root"/lib; do
        dirs+=("$d")
    done
    for d in "${dirs[@]}"; do
        [ -d "$d" ] || continue
        for f in "$d"/libclang.so "$d"/libclang.so.[0-9]* "$d"/libclang-[0-9]*.so "$d"/libclang-[0-9]*.so.[0-9]*; do
            [ -e "$f" ] && return 0
        done
    done
    return 1
}

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v cc >/dev/null 2>&1 || need+=(gcc)
have_libclang || need+=(libclang-dev)

if ((${#need[@]})); then
    if [ "${REDISLOCK_DEPS_DRY_RUN:-0}" = 1 ]; then
        echo "redislock: would install ${need[*]}"
        exit 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "redislock: installing ${need[*]} with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "redislock: missing ${need[*]}; install with: sudo apt-get install ${need[*]}" >&2
        exit 1
    fi
    if ! have_libclang; then
        echo "redislock: libclang-dev is installed but no libclang.so was found; set LIBCLANG_PATH to its directory" >&2
        exit 1
    fi
fi

if [ "${REDISLOCK_DEPS_DRY_RUN:-0}" = 1 ]; then
    echo "redislock: nothing to install"
    exit 0
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "redislock: cargo not found; install the Rust toolchain (rustup) and retry" >&2
    exit 1
fi

version=$(redis-server --version | sed -n 's/.*v=\([0-9]*\)\..*/\1/p')
if [ -n "$version" ] && [ "$version" -lt 7 ]; then
    echo "redislock: redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') is too old; Redis 7.0 or newer is needed" >&2
    exit 1
fi
