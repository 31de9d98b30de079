#!/usr/bin/env bash
# Checks for what building and testing redislock needs; on Debian, as root,
# installs what is missing, otherwise names it in one line and fails.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v cc >/dev/null 2>&1 || need+=(gcc)
# bindgen (used by the redis-module crate) loads libclang at build time.
if ! { ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so' ||
       compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null; }; then
    need+=(libclang-dev)
fi

if ((${#need[@]})); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "redislock: installing ${need[*]} with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "redislock: missing ${need[*]}; install with: sudo apt-get install ${need[*]}" >&2
        exit 1
    fi
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
