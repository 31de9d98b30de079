"""What a type checker says of code that uses the package (mypy --strict, as make test runs it
on the package, its examples and its tests): a lock's client must be a client, a with-block's
fence is an int (a multi-lock's fences a dict of ints), LOCK.INFO's fields have their types, and the asyncio lock is a lock_class
redis.asyncio accepts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import redislock
from servers import REPO

USE = '''
import redis
import redis.asyncio
import redislock
import redislock.asyncio

r = redis.Redis()
redislock.Lock({}, "x")  # line 8: not a client


def typed() -> int:
    with redislock.Lock(r, "x", timeout=5) as lock:
        fence: int = lock.fence
        info = lock.info()
        assert info is not None
        mode: str = info["mode"]
        ttl: int = info["holders"][0]["ttl"] + info["ttl"]
        return fence + ttl + len(mode)


async def drop_in(a: redis.asyncio.Redis) -> None:
    async with a.lock("x", timeout=5, lock_class=redislock.asyncio.Lock):
        pass
    async with redislock.asyncio.Lock(a, "x", timeout=5) as lock:
        fence: int = lock.fence
        print(fence)


from typing import Optional


def elected(e: redislock.Election) -> int:
    term: int = e.campaign()  # without a timeout: a term, never None
    maybe: Optional[int] = e.campaign(5)
    leader = e.leader()
    for change in e.observe():
        if change is None:  # nobody leads after a leader
            continue
        seen, data = change
        return seen + term + (maybe or 0) + (leader.term if leader else 0) + len(data or b"")
    return 0


async def aelected(e: redislock.asyncio.Election) -> int:
    term: int = await e.campaign()
    async for leader in e.observe():
        if leader is not None:
            return leader.term + term
    return 0


def several() -> int:
    with redislock.MultiLock(r, ["{acct}:a", "{acct}:b"], lease=5) as held:
        first: int = held.fences["{acct}:a"]  # held: a dict, not Optional
        token: bytes = held.token
        return first + len(token) + held.release()


async def asev(a: redis.asyncio.Redis) -> int:
    async with redislock.asyncio.MultiLock(a, ["{acct}:a"], timeout=5) as held:
        return sum(held.fences.values())
'''


def test_a_type_checker_reads_the_package_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api")
    use = tmp_path / "use.py"
    use.write_text(textwrap.dedent(USE))
    monkeypatch.setenv("MYPYPATH", str(Path(redislock.__file__).parents[1]))  # the package tested
    out, _, status = api.run(
        ["--strict", "--config-file", "", "--cache-dir", str(REPO / "target/mypy-cache"), str(use)]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "use.py:8:" in errors[0] and '"Lock"' in errors[0], out
    assert status == 1
