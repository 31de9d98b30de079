"""Holds bound to a connection (``ephemeral=True``, ``MultiLock(ephemeral=True)``, every
``Election`` term), on both front ends against a real server: the hold lives on a connection of
the library's own, never one of the application's pool, so the server's idle ``timeout`` and
the application's own command timeouts do not touch it; a close of that connection
(``CLIENT KILL``) is signalled lost as soon as its socket reports it, well before the next
renewal would have found out; the connection is closed when the hold ends, and nothing is left
behind (connections, the watcher thread or task). And ``on_lost`` runs exactly once per loss,
for every kind of hold and every way of losing it.

Times are read from ``time.monotonic()``, the clock of the lease clocks, and compared as
recorded; the bounds leave a loaded scheduler a second or more.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator, List

import pytest
import redis
from redis.exceptions import TimeoutError

import redislock
import redislock.asyncio as alock
from fronts import FRONTS, Driven, Front
from helpers import must
from redislock import _aowned, _owned
from servers import Server

NAMES = ["{own}:a", "{own}:b"]


@pytest.fixture(params=FRONTS)
def front(request: Any, server: Server) -> Iterator[Front]:
    f = Front(request.param, server.port)
    try:
        yield f
    finally:
        f.close()


def wait_for(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)  # polling server state (a client gone): no event a client can await


class Losses:
    """``on_lost`` calls, counted, with the moment of the first; ``first`` is set by it."""

    def __init__(self) -> None:
        self.calls: List[float] = []
        self.first = threading.Event()

    def __call__(self, _: Any) -> None:
        self.calls.append(time.monotonic())
        self.first.set()


def make(front: Front, kind: str, client: Any, name: str, **kwargs: Any) -> Any:
    """A hold of ``kind``: an ephemeral lock, an ephemeral multi-lock, or an election."""
    if kind == "election":
        return front.election(client, name, **kwargs)
    if kind == "multi":
        if front.kind == "sync":
            return redislock.MultiLock(client, NAMES, ephemeral=True, **kwargs)
        return Driven(front, alock.MultiLock(client, NAMES, ephemeral=True, **kwargs))
    return front.lock(client, name, ephemeral=True, **kwargs)


def take(holder: Any, kind: str) -> None:
    if kind == "election":
        assert holder.campaign(5) is not None
    else:
        assert holder.acquire(blocking_timeout=5)


def give_back(holder: Any, kind: str) -> None:
    if kind == "election":
        assert holder.resign() is True
    else:
        holder.release()


def the_lock(front: Front, holder: Any, kind: str) -> Any:
    """The lock object that has the hold (an election's candidate lock; an asyncio one behind
    its driver)."""
    inner = holder._lock if isinstance(holder, Driven) else holder
    return inner._lock if kind == "election" else inner


def hold_of(lock: Any) -> Any:
    return lock._hold if hasattr(lock, "_hold") else lock.local.hold


def bound_id(r: redis.Redis, name: str) -> int:
    client: int = must(redislock.Lock(r, name).info())["client"]
    assert client != 0
    return client


def client_ids(r: redis.Redis) -> List[int]:
    return [int(c["id"]) for c in r.client_list()]


KINDS = ["lock", "multi", "election"]


# --- a close of the owned connection ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_connection_is_signalled_lost_before_the_next_renewal(
    server: Server, r: redis.Redis, front: Front, kind: str
) -> None:
    lease = 6.0
    losses = Losses()
    holder = make(front, kind, front.client(), "own:kill", lease=lease, on_lost=losses)
    take(holder, kind)
    lock = the_lock(front, holder, kind)
    hold = hold_of(lock)
    next_renewal = hold.next_renew  # the moment a renewal would have found the hold gone
    key = NAMES[0] if kind == "multi" else "own:kill"
    bound = bound_id(r, key)
    successor = redislock.Lock(server.client(), key, timeout=10)
    killed = time.monotonic()
    r.client_kill_filter(_id=str(bound))
    assert successor.acquire(blocking_timeout=5)  # the server ended the hold at the kill
    assert losses.first.wait(lease), "the close was not signalled"
    assert losses.calls[0] < next_renewal, (
        f"signalled {losses.calls[0] - killed:.3f} s after the kill, the next renewal was due "
        f"{next_renewal - killed:.3f} s after it"
    )
    assert hold.lost and hold.closed and hold.lease_end <= losses.calls[0]
    assert lock.lease_left == 0 and (not holder.is_leader if kind == "election" else not holder.owned())
    successor.release()
    assert len(losses.calls) == 1


def test_an_app_timeout_on_an_unrelated_blpop_does_not_touch_the_term(r: redis.Redis, front: Front) -> None:
    losses = Losses()
    client = front.client(socket_timeout=0.3)
    election = front.election(client, "own:blpop", lease=3, on_lost=losses)
    term = election.campaign(5)
    bound = bound_id(r, "own:blpop")
    with pytest.raises(TimeoutError):  # redis-py gives up on the read and closes that connection
        call = client.blpop(["own:nothing"], timeout=2)
        front.run(call) if front.kind == "asyncio" else call
    info = must(redislock.Lock(r, "own:blpop").info())
    assert (info["fence"], info["client"]) == (term, bound)
    assert election.is_leader and not losses.first.is_set()
    assert not losses.first.wait(1.5), "lost after the application's timeout"  # past a renewal
    assert election.is_leader and election.resign() is True


def test_the_server_timeout_does_not_depose_a_healthy_leader(r: redis.Redis, front: Front) -> None:
    losses = Losses()
    # A lease of 30 s: renewals every 10 s, far apart for the server's idle timeout of 3 s; the
    # keep-alive PINGs after a second of silence keep the term's connection open (the other two
    # seconds are for a busy machine's stalls).
    election = front.election(front.client(), "own:idle", lease=30, on_lost=losses)
    r.config_set("timeout", 3)
    try:
        term = election.campaign(5)
        bound = bound_id(r, "own:idle")
        # Two of the server's idle timeouts, before the first renewal.
        assert not losses.first.wait(6.5), "the server's timeout deposed the leader"
        assert election.is_leader and election.term == term
        assert must(redislock.Lock(r, "own:idle").info())["client"] == bound
        assert election.resign() is True
    finally:
        r.config_set("timeout", 0)


# --- nothing left behind ----------------------------------------------------------------------------


def owned_of(lock: Any) -> Any:
    return hold_of(lock).conn


def closed_and_unwatched(front: Front, owned: Any) -> bool:
    if front.kind == "sync":
        watcher = _owned.watcher()
        with watcher.mutex:
            watched = owned in watcher.watched
        return owned.dead and not watched and owned._conn._sock is None
    return owned.dead and owned._watching is None and owned._conn._writer is None and not _aowned._closing


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("end", ["released", "killed"])
def test_the_owned_connection_is_closed_when_the_hold_ends(
    r: redis.Redis, front: Front, kind: str, end: str
) -> None:
    before = set(client_ids(r))
    holder = make(front, kind, front.client(), "own:end", lease=5, on_lost=Losses())
    take(holder, kind)
    lock = the_lock(front, holder, kind)
    owned = owned_of(lock)
    key = NAMES[0] if kind == "multi" else "own:end"
    bound = bound_id(r, key)
    assert bound not in before
    if end == "released":
        give_back(holder, kind)
    else:
        r.client_kill_filter(_id=str(bound))
        wait_for(lambda: lock.lost.is_set())
    wait_for(lambda: closed_and_unwatched(front, owned))
    wait_for(lambda: bound not in client_ids(r))
    # A campaign or a wait that was not granted leaves no connection either.
    blocker = redislock.Lock(r, key, timeout=10)
    assert blocker.acquire(blocking=False)
    other = make(front, kind, front.client(), "own:end", lease=5)
    if kind == "election":
        assert other.campaign(0.1) is None
    else:
        assert other.acquire(blocking_timeout=0.1) is False
    blocker.release()
    app = {int(c["id"]) for c in r.client_list() if c.get("cmd") not in ("lock.acquire", "lock.acquireall")}
    wait_for(lambda: set(client_ids(r)) <= before | app)
    if front.kind == "sync":
        watcher = _owned.watcher()
        if not watcher.watched:  # nothing else watched in this process: the thread left
            wait_for(lambda: not any(t.name == "redislock-watch" for t in threading.enumerate()))


# --- on_lost, once per loss ----------------------------------------------------------------------------


def lose(r: redis.Redis, lock: Any, key: str, how: str) -> None:
    if how == "deleted":  # found by the next renewal
        r.delete(key)
    else:
        r.client_kill_filter(_id=str(bound_id(r, key)))


@pytest.mark.parametrize(
    "kind,how",
    [
        ("plain", "deleted"),
        ("multi-plain", "deleted"),
        ("lock", "deleted"),
        ("multi", "deleted"),
        ("election", "deleted"),
        ("lock", "killed"),
        ("multi", "killed"),
        ("election", "killed"),
    ],
)
def test_on_lost_runs_once_per_loss(r: redis.Redis, front: Front, kind: str, how: str) -> None:
    lease = 0.45
    losses = Losses()
    client = front.client()
    if kind == "plain":
        holder: Any = front.lock(client, "own:once", timeout=lease, auto_renew=True, on_lost=losses)
    elif kind == "multi-plain":
        holder = (
            redislock.MultiLock(client, NAMES, lease=lease, on_lost=losses)
            if front.kind == "sync"
            else Driven(front, alock.MultiLock(client, NAMES, lease=lease, on_lost=losses))
        )
    else:
        holder = make(front, kind, client, "own:once", lease=lease, on_lost=losses)
    take(holder, kind.replace("-plain", "").replace("plain", "lock"))
    lock = the_lock(front, holder, kind)
    hold = hold_of(lock)
    key = NAMES[0] if kind.startswith("multi") else "own:once"
    lose(r, lock, key, how)
    assert losses.first.wait(5), "the loss was not signalled"
    # The old lease's end, and the schedule's look at it, are past: still one call.
    time.sleep(2 * lease + 0.3)  # waiting for a moment to pass (nothing to await: no event)
    assert hold.lost and len(losses.calls) == 1, f"on_lost ran {len(losses.calls)} times"


def test_a_hold_found_gone_is_not_lost_again_at_its_lease_end() -> None:
    """The schedule's decision, without a server: a hold a renewal found gone (or whose
    connection closed) is not reported again when its old lease end comes up."""
    from redislock._lease import Hold, Schedule

    for how in ("renewal", "connection"):
        now = time.monotonic()
        hold = Hold("k", b"t", 1, 3000, now, auto_renew=True)
        schedule = Schedule()
        schedule.add(hold)
        renew, lost = schedule.due(now + 1.01)
        assert [h for h, _ in renew] == [hold] and not lost
        if how == "renewal":
            assert hold.renewed(now + 1.01, 0) and hold.mark_lost(now + 1.02)
        else:
            assert hold.connection_closed(now + 1.02) and hold.closed
        assert not hold.mark_lost(now + 1.03) and not hold.connection_closed(now + 1.03)
        assert schedule.due(now + 10) == ([], [])


def test_an_error_reply_on_the_holds_connection_leaves_the_hold_bound(r: redis.Redis, front: Front) -> None:
    losses = Losses()
    lock = front.lock(front.client(), "own:error", timeout=10, ephemeral=True, on_lost=losses)
    assert lock.acquire()
    bound = bound_id(r, "own:error")
    r.config_set("redislock.max-ttl", 20000)
    try:
        with pytest.raises(redis.exceptions.ResponseError, match="max-ttl"):
            lock.extend(100)  # refused on the hold's own connection, which stays as it was
    finally:
        r.config_set("redislock.max-ttl", 0)
    assert lock.extend(5) and bound_id(r, "own:error") == bound
    assert bound in client_ids(r) and lock.owned() and not losses.first.is_set()
    lock.release()
    wait_for(lambda: bound not in client_ids(r))
    assert not losses.calls


@pytest.mark.parametrize("kind", FRONTS)
def test_a_server_that_dies_ends_the_term_when_the_socket_says_so(kind: str) -> None:
    s = Server()
    front = Front(kind, s.port)
    try:
        losses = Losses()
        election = front.election(front.client(), "own:dies", lease=6, on_lost=losses)
        assert election.campaign(5) is not None
        hold = hold_of(the_lock(front, election, "election"))
        s.kill()  # its sockets close with it
        assert losses.first.wait(6), "the close was not signalled"
        assert losses.calls[0] < hold.next_renew and hold.closed and not election.is_leader
        assert len(losses.calls) == 1
    finally:
        front.close()
        s.stop()
