"""What both front ends promise, each scenario run on the sync and the asyncio lock
(``fronts.Front``): the errors of guarded commands, a lease clock for every hold, the log line
of a loss; and, for the sync lock, one renewal thread for every hold of the process."""

from __future__ import annotations

import logging
import threading
import time
import tomllib
from typing import Any, Iterator, List

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError, ResponseError

import redislock
from redislock.lock import _Renewer
from fronts import FRONTS, Front
from servers import REPO, Server


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest, server: Server) -> Iterator[Front]:
    f = Front(request.param, server.port)
    try:
        yield f
    finally:
        f.close()


def test_inner_errors_stay_the_drivers_own(front: Front, r: redis.Redis) -> None:
    r.hset("h", "f", "v")
    client = front.client()
    lock = front.lock(client, "lock:e", timeout=10)
    assert lock.acquire()
    # The inner command's own errors: redis-py's ResponseError, never a lock error.
    with pytest.raises(ResponseError) as caught:
        lock.call("INCR", "h")
    assert "WRONGTYPE" in str(caught.value) and not isinstance(caught.value, LockError)
    with pytest.raises(ResponseError) as caught:
        lock.call("NOSUCH")
    assert "unknown command" in str(caught.value) and not isinstance(caught.value, LockError)
    assert lock.owned()  # still held: nothing above says otherwise
    # Replies as redis-py gives them for the command sent directly.
    assert lock.call("SET", "k", "v") is True
    assert lock.call("HGETALL", "h") == r.hgetall("h") == {b"f": b"v"}
    assert lock.call("GET", "k") == b"v" and lock.call("INCRBY", "n", 2) == 2
    gate = front.gate(client, "gate:e")
    with pytest.raises(ResponseError) as caught:
        gate.call(lock.fence, "INCR", "h")
    assert "WRONGTYPE" in str(caught.value) and not isinstance(caught.value, LockError)
    with pytest.raises(TypeError, match="fence"):
        gate.call(None, "SET", "k", "v")
    # NOTOWNER and STALEFENCE are the lock's.
    old = lock.fence
    r.delete("lock:e")
    with pytest.raises(LockNotOwnedError):
        lock.call("SET", "k", "v")
    newer = front.lock(client, "lock:e", timeout=10)
    assert newer.acquire()
    assert gate.call(newer.fence, "SET", "k", "v2") is True
    with pytest.raises(redislock.StaleFenceError):
        gate.call(old, "SET", "k", "v3")
    newer.release()


def test_every_hold_has_a_lease_clock(front: Front) -> None:
    """Without auto-renew, the lease running out is a loss: ``lost`` and ``on_lost`` at its
    local end, ``owned()`` False."""
    called = threading.Event()
    lock = front.lock(front.client(), "lock:clock", timeout=0.5, on_lost=lambda _: called.set())
    started = time.monotonic()
    assert lock.acquire()
    assert called.wait(3), "on_lost was not called when the lease ran out"
    assert 0.45 < time.monotonic() - started < 1.0  # at the lease clock's end (0.493 s)
    assert lock.lost.is_set() and not lock.owned()
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_a_loss_is_logged_alike(front: Front, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    called = threading.Event()
    lock = front.lock(front.client(), "lock:log", lease=0.3, on_lost=lambda _: called.set())
    with caplog.at_level(logging.WARNING, logger="redislock"):
        assert lock.acquire()
        r.delete("lock:log")
        assert called.wait(3)
    assert "Lock 'lock:log' was lost: a renewal found it held by no one or another" in caplog.text


def test_a_thousand_auto_renewed_holds_share_a_bounded_pool_of_threads(server: Server, r: redis.Redis) -> None:
    # One schedule thread and a worker pool that grows only while renewals queue up (a loaded
    # machine), never past its cap: a thousand holds never mean a thousand threads.
    bound = 1 + _Renewer.MAX_WORKERS
    client = server.client()
    before = threading.active_count()
    locks: List[Any] = [redislock.Lock(client, f"lock:many:{i}", lease=3) for i in range(1000)]
    for lock in locks:
        assert lock.acquire(blocking=False)
    start = calls(r, "lock.extend")
    # Every hold renewed at least once (each a second after its grant).
    deadline = time.monotonic() + 20
    while calls(r, "lock.extend") < start + 1000:
        assert time.monotonic() < deadline, "the renewals did not come"
        assert threading.active_count() - before <= bound
        time.sleep(0.05)  # polling server state: no event a client can await
    assert threading.active_count() - before <= bound
    assert not any(lock.lost.is_set() for lock in locks)
    for lock in locks:
        lock.release()


def calls(r: redis.Redis, command: str) -> int:
    stats: Any = r.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_the_package_metadata_uses_an_spdx_license() -> None:
    """``project.license`` as a table is deprecated; the backend must read an SPDX expression
    (flit_core 3.12 and newer do), and it builds without writing into the source tree."""
    project = tomllib.loads((REPO / "clients/python/pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert project["build-system"]["build-backend"] == "flit_core.buildapi"
    assert any(req.startswith("flit_core>=3.12") for req in project["build-system"]["requires"])
