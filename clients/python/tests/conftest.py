"""Fixtures: a server with the module per test module (keys are flushed between tests), and
helpers shared by the test files."""

from __future__ import annotations

from typing import Any

import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from servers import Server  # noqa: E402


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def r(server: Server) -> Iterator[Any]:
    client = server.client()
    client.flushall()
    try:
        yield client
    finally:
        client.close()


def pytest_report_header(config: Any) -> Any:
    from servers import module_path, server_binary
    import subprocess

    version = subprocess.run([server_binary(), "--version"], capture_output=True, text=True).stdout
    return [f"server: {version.strip()}", f"module: {module_path()}"]
