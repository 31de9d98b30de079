"""Durable grants on a real master and replica: ``replicas=``, ``aof_local=``, ``aof_replicas=``.

The replica is stopped with SIGSTOP (``Server.stopped``) where a test needs it not to
acknowledge: it then reads and acknowledges nothing until SIGCONT, as a replica asleep in
``DEBUG SLEEP`` — but from a moment the test knows. Each test starts once the replica has
acknowledged a write of the master (right after a full sync the first write can stay
unacknowledged for about 0.9 s on Redis 7.0).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator, List, Optional

import pytest
import redis

import redislock
import redislock.asyncio
from fronts import FRONTS, Front
from helpers import must
from servers import Server

#: A master with AOF (fsync always: WAITAOF answers at once) and a replica of it.
MASTER = ["--repl-diskless-sync-delay", "0", "--appendonly", "yes", "--appendfsync", "always"]


class Pair:
    def __init__(self) -> None:
        self.master = Server(extra=MASTER)
        try:
            self.replica = Server(
                extra=["--replicaof", "127.0.0.1", str(self.master.port), "--appendonly", "yes", "--appendfsync", "always"]
            )
        except BaseException:
            self.master.stop()
            raise

    def stop(self) -> None:
        self.replica.stop()
        self.master.stop()


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    p = Pair()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def m(pair: Pair) -> Iterator[Any]:
    """The master's client, once the replica acknowledges its writes; keys flushed."""
    client: Any = pair.master.client()
    client.flushall()
    deadline = time.monotonic() + 20
    acked: List[Any] = [["WAIT", 1, 1000], 1]
    if has_waitaof(client):  # its fsync is acknowledged apart; after a stop the first in ~1 s
        acked += [["WAITAOF", 1, 1, 1000], [1, 1]]
    for command, expected in zip(acked[::2], acked[1::2]):
        while True:  # a write of this connection, acknowledged (WAIT waits for it itself)
            client.set("durable:probe", 1)
            if client.execute_command(*command) == expected:
                break
            assert time.monotonic() < deadline, f"the replica does not acknowledge: {command}"
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest, pair: Pair) -> Iterator[Front]:
    f = Front(request.param, pair.master.port)
    try:
        yield f
    finally:
        f.close()


def calls(client: Any, command: str) -> int:
    stats: Any = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0


def has_waitaof(client: Any) -> bool:
    try:
        client.execute_command("WAITAOF", 0, 0, 1)
    except redis.exceptions.ResponseError as err:
        assert "unknown command" in str(err)
        return False
    return True


def in_thread(work: Any) -> Any:
    """Runs ``work()`` in a thread; ``.result()`` joins it and gives its value or raises."""
    out: List[Any] = []

    def run() -> None:
        try:
            out.append((True, work()))
        except BaseException as err:  # handed to the test's thread
            out.append((False, err))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    class Running:
        def done(self, within: Optional[float] = None) -> bool:
            thread.join(within)
            return not thread.is_alive()

        def result(self) -> Any:
            thread.join(30)
            ok, value = out[0]
            if not ok:
                raise value
            return value

    return Running()


def test_a_grant_is_reported_once_the_replica_has_it(pair: Pair, m: Any, front: Front) -> None:
    lock = front.lock(front.client(), "durable:a", timeout=10, replicas=1, replicas_timeout=5, thread_local=False)
    replica = pair.replica.client()
    try:
        with pair.replica.stopped():
            acquiring = in_thread(lock.acquire)
            assert not acquiring.done(within=0.3), "acquire returned before the replica had the grant"
        assert acquiring.result() is True
        info = redislock.Lock(replica, "durable:a").info()  # right away, on the replica
        assert info is not None and info["token"] == lock.token
        lock.release()
    finally:
        replica.close()


@pytest.mark.parametrize("how", ["direct", "ephemeral", "pool of its own"])
def test_a_grant_the_replica_does_not_acknowledge_is_released(pair: Pair, m: Any, front: Front, how: str) -> None:
    if how == "pool of its own":
        if front.kind != "sync":
            pytest.skip("the sync client shows the path")
        client: Any = redis.Redis(connection_pool=OwnPool(host="127.0.0.1", port=pair.master.port))
        front.clients.append(client)
    else:
        client = front.client()
    lock = front.lock(client, "durable:b", timeout=10, replicas=1, replicas_timeout=0.25, ephemeral=how == "ephemeral")
    with pair.replica.stopped():
        started = time.monotonic()
        with pytest.raises(redislock.NotReplicatedError) as raised:
            lock.acquire()
        took = time.monotonic() - started
        assert m.execute_command("LOCK.INFO", "durable:b") is None  # no hold left
    assert 0.25 <= took < 0.25 + 1.5
    assert isinstance(raised.value, redis.exceptions.LockError)
    assert raised.value.released and raised.value.replicas == 0 and raised.value.needed == 1
    assert lock.token is None and not lock.owned()
    # The replica is back: granted and acknowledged (a generous timeout on a loaded machine).
    again = front.lock(client, "durable:b", timeout=10, replicas=1, replicas_timeout=5, ephemeral=how == "ephemeral")
    assert again.acquire() is True
    again.release()


class OwnPool(redis.ConnectionPool):
    """A pool the lock cannot copy (as Sentinel's): its commands go through the client."""


def test_a_waited_grant_is_waited_for_on_its_own_connection(pair: Pair, m: Any, front: Front) -> None:
    # The handoff's write is made in the holder's LOCK.RELEASE; the waiter's WAIT, on the
    # connection that waited, must count it: with the replica stopped it counts 0.
    holder = redislock.Lock(m, "durable:c", timeout=10)
    assert holder.acquire()
    waiter = front.lock(
        front.client(), "durable:c", timeout=10, replicas=1, replicas_timeout=0.25, thread_local=False
    )
    waiting = in_thread(lambda: waiter.acquire(blocking_timeout=10))
    deadline = time.monotonic() + 5
    while must(holder.info())["waiters"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.005)  # polling server state: no event a client can await
    with pair.replica.stopped():
        holder.release()
        with pytest.raises(redislock.NotReplicatedError):
            waiting.result()
        assert m.execute_command("LOCK.INFO", "durable:c") is None
    # And with the replica running, the waited grant is acknowledged (a generous timeout).
    waiter = front.lock(front.client(), "durable:c", timeout=10, replicas=1, replicas_timeout=5, thread_local=False)
    assert holder.acquire()
    waiting = in_thread(lambda: waiter.acquire(blocking_timeout=10))
    while must(holder.info())["waiters"] != 1:
        time.sleep(0.005)
    holder.release()
    assert waiting.result() is True
    waiter.release()


def test_replicas_0_sends_no_wait(m: Any) -> None:
    before = calls(m, "wait")
    # Renewed every 0.5 s: a lease a loaded machine still renews in time.
    lock = redislock.Lock(m, "durable:d", lease=1.5)
    assert lock.acquire()
    renewals = calls(m, "lock.extend")
    deadline = time.monotonic() + 10
    while calls(m, "lock.extend") < renewals + 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)  # polling server state: no event a client can await
    lock.release()
    timed = redislock.Lock(m, "durable:d", timeout=5)
    assert timed.acquire() and timed.extend(1) and timed.reacquire()
    timed.release()
    assert calls(m, "wait") == before
    durable = redislock.Lock(m, "durable:d", timeout=5, replicas=1)
    assert durable.acquire() and durable.reacquire()
    durable.release()
    assert calls(m, "wait") == before + 2  # the grant's and the extension's


def test_a_renewal_not_acknowledged_does_not_move_the_lease_clock(pair: Pair, m: Any, front: Front) -> None:
    lost = threading.Event()
    lock = front.lock(
        front.client(), "durable:e", lease=0.9, replicas=1, replicas_timeout=0.05, on_lost=lambda _: lost.set()
    )
    assert lock.acquire()
    extends = calls(m, "lock.extend")
    with pair.replica.stopped():
        left = lock.lease_left
        time.sleep(0.45)  # a renewal comes due (every 0.3 s) and goes unacknowledged meanwhile
        assert calls(m, "lock.extend") > extends  # sent, and applied by the master …
        assert lock.lease_left < left - 0.35  # … but the lease clock did not move
    deadline = time.monotonic() + 2
    while lock.lease_left < 0.6:  # the next renewal is acknowledged: the clock moves again
        assert time.monotonic() < deadline and not lost.is_set()
        time.sleep(0.01)
    with pair.replica.stopped():
        end = time.monotonic() + lock.lease_left
        assert lost.wait(3), "the lease ran out with no acknowledged renewal: lost"
        assert time.monotonic() < end + 0.3
        assert m.execute_command("LOCK.INFO", "durable:e") is not None  # the master renewed it
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.release()  # a lost hold's release frees the key, and says it was lost
    assert m.execute_command("LOCK.INFO", "durable:e") is None


def test_extend_not_acknowledged_raises_and_keeps_the_hold(pair: Pair, m: Any) -> None:
    lock = redislock.Lock(m, "durable:f", timeout=5, replicas=1, replicas_timeout=0.1)
    assert lock.acquire()
    with pair.replica.stopped():
        left = lock.lease_left
        with pytest.raises(redislock.NotReplicatedError):
            lock.extend(60)
        assert lock.lease_left <= left  # not moved
        assert lock.owned()
    lock.release()


def test_waitaof_where_the_server_has_it(pair: Pair, m: Any, front: Front) -> None:
    if not has_waitaof(m):
        pytest.skip("this server has no WAITAOF (Redis before 7.2): see the test after")
    before = calls(m, "waitaof")
    # A replica's fsync can be acknowledged a second or two late (it reports its fsync at the
    # next ask or once a second): a timeout of 3 s for the grant that must succeed.
    lock = front.lock(front.client(), "durable:g", timeout=10, aof_local=True, aof_replicas=1, replicas_timeout=3)
    assert lock.acquire()
    lock.release()
    assert calls(m, "waitaof") >= before + 2  # the check before the first grant, the grant's
    with pair.replica.stopped():
        lock = front.lock(front.client(), "durable:g", timeout=10, aof_local=True, aof_replicas=1, replicas_timeout=0.25)
        with pytest.raises(redislock.NotReplicatedError) as raised:
            lock.acquire()
        assert raised.value.local == 1 and raised.value.replicas == 0
        assert m.execute_command("LOCK.INFO", "durable:g") is None
        local = front.lock(front.client(), "durable:g", timeout=10, aof_local=True, replicas_timeout=0.25)
        assert local.acquire()  # the master's own fsync needs no replica
        local.release()


def test_waitaof_where_the_server_lacks_it_or_appendonly_is_off(server: Server, r: Any, front: Front) -> None:
    # ``server``: one without AOF. Nothing is taken, and the error says why: no WAITAOF (Redis
    # 7.0), or no AOF to fsync (``aof_local`` where appendonly is off).
    plain = Front(front.kind, server.port)
    try:
        lock = plain.lock(plain.client(), "durable:h", timeout=10, aof_local=True, aof_replicas=1)
        before = calls(r, "lock.acquire")
        with pytest.raises(redislock.UnsupportedError, match="appendonly" if has_waitaof(r) else "WAITAOF"):
            lock.acquire()
        assert calls(r, "lock.acquire") == before  # checked before anything is asked for
        assert lock.token is None
    finally:
        plain.close()


def test_arguments_are_checked(m: Any) -> None:
    bads: List[Any] = [-1, 1.5, True, "1"]
    for bad in bads:
        with pytest.raises(ValueError):
            redislock.Lock(m, "durable:i", replicas=bad)
        with pytest.raises(ValueError):
            redislock.Lock(m, "durable:i", aof_replicas=bad)
    for timeout in (0, -1.0):
        with pytest.raises(ValueError):
            redislock.Lock(m, "durable:i", replicas=1, replicas_timeout=timeout)
    lock = redislock.Lock(m, "durable:i", replicas=2, replicas_timeout=0.5)
    assert (lock.replicas, lock.replicas_timeout, lock.aof_local, lock.aof_replicas) == (2, 0.5, False, 0)


def test_a_multi_lock_grant_and_renewals_wait_for_the_replica(pair: Pair, m: Any, front: Front) -> None:
    if not redislock.supports(m, "LOCK.ACQUIREALL"):
        pytest.skip("needs LOCK.ACQUIREALL, which this server's module does not have")
    names = ["{d}:a", "{d}:b"]
    if front.kind == "sync":
        lock: Any = redislock.MultiLock(front.client(), names, lease=0.9, replicas=1, replicas_timeout=0.25)
    else:
        from fronts import Driven

        lock = Driven(front, redislock.asyncio.MultiLock(front.client(), names, lease=0.9, replicas=1, replicas_timeout=0.25))
    with pair.replica.stopped():
        with pytest.raises(redislock.NotReplicatedError) as raised:
            lock.acquire()
        assert all(m.execute_command("LOCK.INFO", n) is None for n in names)  # released, every key
    assert raised.value.released and lock.token is None
    assert lock.acquire() is True
    replica = pair.replica.client()
    try:
        assert all(redislock.Lock(replica, n).info() is not None for n in names)  # on the replica at once
    finally:
        replica.close()
    with pair.replica.stopped():
        left = lock.lease_left
        time.sleep(0.45)  # a renewal comes due (every 0.3 s) and goes unacknowledged meanwhile
        assert lock.lease_left < left - 0.35  # the set's lease clock did not move
    lock.release()
