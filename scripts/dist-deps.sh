#!/usr/bin/env bash
# Installs what `make dist` and `make dist-check` need, inside the repository, and prints
# nothing on success:
#   target/distenv       Python venv with scripts/requirements-dist.txt (build, ziglang,
#                        cargo-zigbuild)
#   target/tools/bin     cargo-deb (cargo install, pinned below; about 4 minutes the first time)
# plus, from the system: python3 with venv, npm, objdump (binutils), dpkg-deb and sha256sum.
# Idempotent (a stamp records what was installed). On failure prints one line naming what is
# missing or the log with the details, and exits 1.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

CARGO_DEB_VERSION=3.8.0
venv=target/distenv
requirements=scripts/requirements-dist.txt
log_dir=target/dist-logs
cargo=${CARGO:-cargo}

fail() {
    echo "redislock: $*" >&2
    exit 1
}

missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3-venv)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v objdump >/dev/null 2>&1 || missing+=(binutils)
command -v dpkg-deb >/dev/null 2>&1 || missing+=(dpkg)
command -v sha256sum >/dev/null 2>&1 || missing+=(coreutils)
command -v "$cargo" >/dev/null 2>&1 || fail "cargo not found; install the Rust toolchain (rustup) and retry"
((${#missing[@]} == 0)) || fail "missing ${missing[*]}; install with: sudo apt-get install ${missing[*]}"

mkdir -p "$log_dir"
want=$(cksum <"$requirements")
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.redislock-stamp" 2>/dev/null)" != "$want" ]; then
    if [ ! -x "$venv/bin/python" ]; then
        rm -rf "$venv"
        python3 -m venv "$venv" >"$log_dir/venv.log" 2>&1 ||
            fail "python3 -m venv $venv failed (python3-venv missing? see $log_dir/venv.log)"
    fi
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$requirements" \
        >"$log_dir/pip.log" 2>&1 ||
        fail "pip install -r $requirements into $venv failed (see $log_dir/pip.log)"
    echo "$want" >"$venv/.redislock-stamp"
fi

if ! target/tools/bin/cargo-deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION\|$CARGO_DEB_VERSION"; then
    "$cargo" install --locked --quiet --root target/tools --version "$CARGO_DEB_VERSION" cargo-deb \
        >"$log_dir/cargo-deb.log" 2>&1 ||
        fail "cargo install cargo-deb $CARGO_DEB_VERSION into target/tools failed (see $log_dir/cargo-deb.log)"
fi
