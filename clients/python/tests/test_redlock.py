"""redislock.Redlock over independent servers."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from redis.backoff import NoBackoff
from redis.exceptions import LockError
from redis.retry import Retry

import redislock
from helpers import must
from servers import Server


@pytest.fixture
def servers() -> Iterator[Any]:
    started = []
    try:
        for _ in range(3):
            started.append(Server())
        yield started
    finally:
        for s in started:
            s.stop()


def clients(servers: Any) -> Any:
    # Short timeouts and no retries: a server that does not answer must not eat the lease.
    return [
        s.client(socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
        for s in servers
    ]


def test_majority_grant_and_release_everywhere(servers: Any) -> None:
    cs = clients(servers)
    lock = redislock.Redlock(cs, "lock:red", ttl=10)
    assert lock.acquire()
    assert len(lock.fences) == 3 and 9 < lock.validity <= 10
    tokens = {must(redislock.lock.parse_info(c.execute_command("LOCK.INFO", "lock:red")))["token"] for c in cs}
    assert tokens == {lock.token}  # one client-chosen token on every server
    # A second Redlock cannot get a majority, and leaves nothing behind.
    other = redislock.Redlock(cs, "lock:red", ttl=10, retry_count=1, retry_delay=0.01)
    assert other.acquire() is False
    assert lock.extend(20) and lock.validity > 19
    lock.release()
    assert all(c.exists("lock:red") == 0 for c in cs)


def test_survives_a_minority_of_servers_down(servers: Any) -> None:
    cs = clients(servers)
    servers[2].kill()
    with redislock.Redlock(cs, "lock:red", ttl=10) as lock:
        assert sorted(lock.fences) == [0, 1]
    assert all(c.exists("lock:red") == 0 for c in cs[:2])


def test_fails_cleanly_without_a_majority(servers: Any) -> None:
    cs = clients(servers)
    servers[1].kill()
    servers[2].kill()
    lock = redislock.Redlock(cs, "lock:red", ttl=10, retry_count=1, retry_delay=0.01)
    assert lock.acquire() is False
    assert cs[0].exists("lock:red") == 0  # the one grant was released
    with pytest.raises(redislock.RedlockError):
        with lock:
            pass
    assert isinstance(redislock.RedlockError(), LockError)
