"""The example programs that the manual quotes (clients/python/examples, docs/examples) run
against a real server and exit 0."""

from __future__ import annotations

from pathlib import Path
import redis
from servers import Server

import os
import subprocess
import sys

import pytest

from servers import REPO

EXAMPLES = sorted((REPO / "clients/python/examples").glob("*.py")) + sorted(
    (REPO / "docs/examples").glob("*.py")
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_example_runs(server: Server, r: redis.Redis, path: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "clients/python/src"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env["REDIS_PORT"] = str(server.port)
    done = subprocess.run(
        [sys.executable, str(path)],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        cwd=tmp_path,  # where an example writes its files (reports.db)
    )
    assert done.returncode == 0, f"{path} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert r.dbsize() == 0, "the example left keys behind"
