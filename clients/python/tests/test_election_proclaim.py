"""``Election.proclaim(data)`` (sync and asyncio): the leader changes its data in the same term,
and observers (``observe()``, which sends ``SEEN`` with the data it saw) see each new value in
order, after a reconnect, and on a replica through a failover; a candidate that does not lead
cannot proclaim. The observation's decisions about values are also driven without a server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator, List

import pytest
import redis
from redis.exceptions import LockNotOwnedError, ResponseError

import redislock
from fronts import Front
from helpers import must
from proxy import Proxy
from redislock import Leader, _election, _flow
from redislock._election import Observation
from servers import Server
from test_election import LEASE, Seen, front, front_client_via, needs_observe, observing, proxy, script, wait_for

__all__ = ["front", "proxy"]  # the fixtures, shared with test_election


def needs_seen(r: redis.Redis) -> None:
    needs_observe(r)
    client: Any = r
    try:
        client.execute_command("LOCK.OBSERVE", "probe:seen", "AFTER", 0, "SEEN", "")
    except ResponseError:
        pytest.skip("needs LOCK.OBSERVE … SEEN, which this server's module does not have")


def test_observers_see_each_proclaimed_value_in_order_and_after_a_reconnect(
    r: redis.Redis, proxy: Proxy, front: Front
) -> None:
    needs_seen(r)
    leader = front.election(front.client(), "el:p", lease=10, data="v0")
    seen = Seen()
    observer = front.election(front_client_via(front, proxy), "el:p")
    observing(front, observer, seen, 7)
    term = leader.campaign()
    assert seen.wait(1) == Leader(term, b"v0")
    for n, value in enumerate(["v1", "v2", "v3"], start=2):
        leader.proclaim(value)
        assert seen.wait(n) == Leader(term, value.encode())
    assert leader.term == term
    info = must(redislock.Lock(r, "el:p").info())
    assert (int(info["fence"]), info["data"]) == (term, b"v3"), "the same term, the new data"
    # Proclaimed while the observer's connection is silent, then cut: seen once it reconnects.
    proxy.blackhole()
    leader.proclaim(b"v4")
    proxy.cut()
    proxy.heal()
    assert seen.wait(5) == Leader(term, b"v4")
    # The same value again is no change: the next thing seen is the one after it.
    leader.proclaim("v4")
    leader.proclaim("v5")
    assert seen.wait(6) == Leader(term, b"v5")
    # A new term after it, with the candidate's data as last proclaimed.
    leader.resign()
    assert seen.wait(7) is None
    assert leader.campaign() > term
    assert must(leader.leader()).data == b"v5"
    leader.resign()
    assert seen.leaders[:6] == [Leader(term, v) for v in [b"v0", b"v1", b"v2", b"v3", b"v4", b"v5"]]


def test_only_the_leader_can_proclaim(r: redis.Redis, front: Front) -> None:
    needs_seen(r)
    candidate = front.election(front.client(), "el:q", lease=3, data="a")
    with pytest.raises(LockNotOwnedError, match="does not lead"):
        candidate.proclaim("b")
    with pytest.raises(ValueError):
        candidate.proclaim("")
    term = candidate.campaign()
    candidate.resign()
    with pytest.raises(LockNotOwnedError, match="does not lead"):
        candidate.proclaim("b")
    # The term deleted under a leader whose lease clock still runs: the key is free, so the
    # re-grant would be a new term. It is not taken: released at once, and refused.
    term = candidate.campaign()
    r.delete("el:q")
    with pytest.raises(LockNotOwnedError, match="lost"):
        candidate.proclaim("b")
    assert redislock.Lock(r, "el:q").info() is None, "no new term left behind"
    wait_for(lambda: bool(candidate.lost.is_set()))
    # The term's connection killed: lost, and proclaim refuses.
    term = candidate.campaign()
    client_id = int(must(redislock.Lock(r, "el:q").info())["client"])
    r.client_kill_filter(_id=str(client_id))
    wait_for(lambda: bool(candidate.lost.is_set()))
    with pytest.raises(LockNotOwnedError):
        candidate.proclaim("b")
    assert term is not None


@pytest.fixture
def replicated() -> Iterator[List[Server]]:
    master, replica = Server(extra=["--repl-diskless-sync-delay", "0"]), Server()
    try:
        with replica.client() as c:
            c.replicaof("127.0.0.1", master.port)
            deadline = time.monotonic() + 10
            while c.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the replica did not sync"
                time.sleep(0.05)  # replication has no event a client can await
        yield [master, replica]
    finally:
        master.stop()
        replica.stop()


def observing_until(front: Front, election: Any, seen: Seen, last: bytes) -> None:
    """``observing``, until a leader with the data ``last`` is yielded (however many vacancies
    come before it)."""

    def step(leader: Any) -> bool:
        seen.add(leader)
        return leader is not None and bool(leader.data == last)

    if front.kind == "sync":

        def run() -> None:
            for leader in election.observe():
                if step(leader):
                    return

        threading.Thread(target=run, daemon=True).start()
        return

    async def watch() -> None:
        async for leader in election._lock.observe():
            if step(leader):
                return

    assert front.loop is not None
    asyncio.run_coroutine_threadsafe(watch(), front.loop)


def wait_seen(seen: Seen, leader: Leader) -> None:
    with seen.cond:
        assert seen.cond.wait_for(lambda: leader in seen.leaders, 10), f"{leader} not in {seen.leaders}"


def test_a_replica_s_observer_sees_each_value_through_a_failover(replicated: List[Server], front: Front) -> None:
    master, replica = replicated
    with master.client() as m:
        needs_seen(m)
    seen = Seen()
    saved = front.port
    front.port = replica.port
    observer = front.election(front.client(), "el:f")
    front.port = saved
    old = redislock.Election(master.client(), "el:f", lease=LEASE, data="m1")
    new = redislock.Election(replica.client(), "el:f", lease=10, data="r1")
    term = old.campaign()
    observing_until(front, observer, seen, b"r2")
    assert seen.wait(1) == Leader(term, b"m1")
    old.proclaim("m2")
    assert seen.wait(2) == Leader(term, b"m2"), "the master's re-grant, replicated"
    # The master dies; the replica is promoted and keeps the term until its lease ends, then
    # grants the next to the candidate waiting there.
    master.kill()
    wait_for(lambda: bool(old.lost.is_set()), LEASE * 3)
    with replica.client() as c:
        c.replicaof("NO", "ONE")
    with pytest.raises(LockNotOwnedError):
        old.proclaim("m3")
    new_term = must(new.campaign(LEASE * 5))
    assert new_term > term
    wait_seen(seen, Leader(new_term, b"r1"))
    new.proclaim("r2")
    wait_seen(seen, Leader(new_term, b"r2"))
    new.resign()
    leaders = [leader for leader in seen.leaders if leader is not None]
    assert leaders == [Leader(term, b"m1"), Leader(term, b"m2"), Leader(new_term, b"r1"), Leader(new_term, b"r2")]


def test_an_observation_gives_out_new_values_of_the_term_and_sends_what_it_saw() -> None:
    obs = Observation("el:x")
    carry, sent = script(
        [5, b"a"],
        [5, b"b"],  # a new value of term 5
        [5, b"b"],  # seen already (a reconnect's first answer)
        [3, b"old"],  # an older term after a failover: not given out
        [5, None],  # the data dropped: a new value too
        [0, None],
        [5, b"c"],  # the vacated term again (an older replica's): not given out
        [6, b"c"],
    )
    got = [_flow.drive(_election.observe_next(obs), carry) for _ in range(5)]
    assert got == [Leader(5, b"a"), Leader(5, b"b"), Leader(5, None), None, Leader(6, b"c")]
    args = [r.args for r in sent if isinstance(r, _flow.Send)]
    assert args[:5] == [
        ["LOCK.OBSERVE", "el:x"],
        ["LOCK.OBSERVE", "el:x", "AFTER", 5, "SEEN", b"a"],
        ["LOCK.OBSERVE", "el:x", "AFTER", 5, "SEEN", b"b"],
        ["LOCK.OBSERVE", "el:x", "AFTER", 5, "SEEN", b"b"],
        ["LOCK.OBSERVE", "el:x", "AFTER", 3, "SEEN", b"old"],
    ]
    assert args[5] == ["LOCK.OBSERVE", "el:x", "AFTER", 5, "SEEN", b""], "no data: the empty string"


def test_an_observation_falls_back_to_the_fence_on_a_server_without_seen() -> None:
    obs = Observation("el:x")
    refusal = ResponseError("syntax error: unknown option 'SEEN' (LOCK.OBSERVE takes AFTER and BLOCK)")
    carry, sent = script([5, b"a"], refusal, [6, b"b"])
    assert _flow.drive(_election.observe_next(obs), carry) == Leader(5, b"a")
    assert _flow.drive(_election.observe_next(obs), carry) == Leader(6, b"b")
    args = [r.args for r in sent]
    assert args[1][-2:] == ["SEEN", b"a"] and args[2] == ["LOCK.OBSERVE", "el:x", "AFTER", 5]
