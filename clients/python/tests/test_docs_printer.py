"""docs_replies.tty(), which prints replies for the replay of the manual's sessions, against the
real redis-cli (or the valkey-cli next to the valkey-server under test), in RESP2 and RESP3."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from docs_replies import Bindings, Conn, Err, compare
from servers import Server, server_binary


def cli_binary() -> Optional[str]:
    """redis-cli, or the valkey-cli next to the valkey-server under test."""
    server = Path(shutil.which(server_binary()) or server_binary())
    for name in ("valkey-cli", "redis-cli"):
        if (server.parent / name).is_file():
            return str(server.parent / name)
    return shutil.which("redis-cli") or shutil.which("valkey-cli")


# Replies of every shape the pages show: flat and nested arrays, maps (RESP3) with values on one
# line and on several, sets, empty aggregates, nil, errors, integers.
CLI_SETUP = [
    ["LOCK.ACQUIRE", "lock:e", "worker-1", "PX", "60000"],
    ["LOCK.ACQUIRE", "lock:s", "reader-1", "PX", "60000", "SHARED"],
    ["LOCK.ACQUIRE", "lock:s", "reader-2", "PX", "30000", "SHARED"],
    ["LOCK.ACQUIRE", "lock:p", "job-1", "PX", "60000", "LIMIT", "3"],
    ["LOCK.FENCE", "gate", "5", "SET", "k", "v"],
    ["SADD", "set", "a", "b"],
    ["HSET", "hash", "f", "v"],
]
CLI_COMMANDS = [
    ["LOCK.INFO", "lock:e"],
    ["LOCK.INFO", "lock:s"],
    ["LOCK.INFO", "lock:p"],
    ["LOCK.INFO", "gate"],
    ["LOCK.INFO", "nothing"],
    ["LOCK.ACQUIRE", "lock:e", "worker-2", "PX", "1000"],
    ["LOCK.ACQUIRE", "lock:p", "job-2", "PX", "1000", "LIMIT", "2"],
    ["SMEMBERS", "set"],
    ["HGETALL", "hash"],
    ["LRANGE", "missing", "0", "-1"],
    ["CLIENT", "TRACKINGINFO"],
    ["COMMAND", "DOCS", "LOCK.ACQUIRE"],
]


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_replies_print_as_redis_cli_prints_them(resp3: bool) -> None:
    cli = cli_binary()
    if cli is None:
        pytest.skip("no redis-cli or valkey-cli to compare with")
    server = Server()
    conn = Conn(server.port)
    try:
        for command in CLI_SETUP:
            assert not isinstance(conn.call(command), Err), command
        if resp3:
            conn.call(["HELLO", "3"])
        for command in CLI_COMMANDS:
            shown = subprocess.run(
                [cli, "-p", str(server.port), "--no-raw", *(["-3"] if resp3 else []), *command],
                capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
            )
            expected = shown.stdout.rstrip("\n").split("\n")
            # Fences and TTLs are matched as on the pages; everything else must be equal.
            compare(expected, command, conn.call(command), Bindings(), True, f"{Path(cli).name} {' '.join(command)}")
    finally:
        conn.close()
        server.stop()
