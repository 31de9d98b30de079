"""``redislock.Election`` and ``redislock.asyncio.Election`` against a real server: a term is a
fence and carries the candidate's data; candidates wait in the server, first come first served,
and each term is greater than the last; a leader whose process is killed is succeeded at once; a
leader cut off from the server is signalled lost before its successor is granted; observers see
every leader, in order, through reconnects. The observation's decisions are also driven here
without a server (gaps, lower terms, failures).

The observation tests need ``LOCK.OBSERVE`` in the server's module and are skipped without it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
import redis
from redis.exceptions import ConnectionError, ResponseError

import redislock
from fronts import FRONTS, Front
from helpers import must
from proxy import Proxy
from redislock import Leader, UnsupportedError, _election, _flow
from redislock._election import Observation
from servers import REPO, Server

LEASE = 1.2


@pytest.fixture(params=FRONTS)
def front(request: Any, server: Server) -> Iterator[Front]:
    f = Front(request.param, server.port)
    try:
        yield f
    finally:
        f.close()


@pytest.fixture
def proxy(server: Server) -> Iterator[Proxy]:
    p = Proxy(server.port)
    try:
        yield p
    finally:
        p.close()


def has_data(r: redis.Redis) -> bool:
    """The module takes ``DATA`` (a build with ``LOCK.OBSERVE`` but not yet ``DATA`` does not):
    the observation tests give data where it can be given."""
    client: Any = r
    try:
        client.execute_command("LOCK.ACQUIRE", "probe:data", "t", "PX", 1, "DATA", "x")
    except ResponseError:
        return False
    r.delete("probe:data")
    return True


def needs_observe(r: redis.Redis) -> None:
    if not redislock.supports(r, "LOCK.OBSERVE"):
        pytest.skip("needs LOCK.OBSERVE, which this server's module does not have")


def waiters(r: redis.Redis, name: str) -> int:
    info = redislock.Lock(r, name).info()
    return 0 if info is None else int(info["waiters"])


def wait_for(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)  # polling server state (a candidate queued): no event a client can await


class Campaign:
    """A candidate's ``campaign`` on a thread of its own: the term, and the moment it came."""

    def __init__(self, election: Any, timeout: float = 5.0) -> None:
        self.term: Optional[int] = None
        self.at = 0.0
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, args=(election, timeout))
        self.thread.start()

    def _run(self, election: Any, timeout: float) -> None:
        try:
            self.term = election.campaign(timeout)
            self.at = time.monotonic()
        except BaseException as err:
            self.error = err

    def join(self) -> int:
        self.thread.join(10)
        assert self.error is None, self.error
        return must(self.term)


# --- campaign, resign, leader ---------------------------------------------------------------------


def test_campaign_returns_a_term_that_lock_info_shows_with_the_data(r: redis.Redis, front: Front) -> None:
    election = front.election(front.client(), "el:a", lease=10, data="10.0.0.5:8080")
    assert not election.is_leader and election.term is None
    assert election.leader() is None
    term = election.campaign()
    assert isinstance(term, int) and term > 0
    assert election.is_leader and election.term == term and election.lease_left > 9
    info = must(redislock.Lock(r, "el:a").info())
    assert info["fence"] == term and info["data"] == b"10.0.0.5:8080"
    assert info["client"] != 0  # EPHEMERAL: bound to the connection that asked
    assert election.leader() == Leader(term, b"10.0.0.5:8080")
    assert election.campaign() == term  # already the leader: the same term, nothing sent
    assert election.resign() is True
    assert not election.is_leader and r.exists("el:a") == 0
    assert election.resign() is False and election.leader() is None


def test_a_second_candidate_waits_and_gets_a_higher_term_after_resign(r: redis.Redis, front: Front) -> None:
    first = front.election(front.client(), "el:b", lease=10, data=b"first")
    second = front.election(front.client(), "el:b", lease=10, data=b"second")
    term = first.campaign()
    assert second.campaign(0) is None  # 0: does not wait
    assert second.campaign(0.1) is None  # not elected within its timeout
    waiting = Campaign(second)
    wait_for(lambda: waiters(r, "el:b") == 1)
    assert first.resign() is True
    successor = waiting.join()
    assert successor > term and second.is_leader and not first.is_leader
    assert first.leader() == Leader(successor, b"second")
    assert second.resign() is True


def test_candidates_are_elected_first_come_first_served(r: redis.Redis, front: Front) -> None:
    leader = front.election(front.client(), "el:fifo", lease=10)
    leader.campaign()
    queued = []
    for i in range(3):
        candidate = front.election(front.client(), "el:fifo", lease=10, data=f"c{i}")
        queued.append((candidate, Campaign(candidate)))
        wait_for(lambda: waiters(r, "el:fifo") == i + 1)
    terms = [leader.term]
    leader.resign()
    for candidate, waiting in queued:
        terms.append(waiting.join())  # each is elected once the one before resigns
        assert candidate.leader().data == candidate.data
        candidate.resign()
    assert terms == sorted(terms) and len(set(terms)) == 4


def test_on_lost_is_called_with_the_election_when_the_term_is_gone(r: redis.Redis, front: Front) -> None:
    lost = threading.Event()
    told: List[Any] = []

    def on_lost(election: Any) -> None:
        told.append(election)
        lost.set()

    election = front.election(front.client(), "el:gone", lease=0.3, on_lost=on_lost)
    election.campaign()
    r.delete("el:gone")  # an operator, an eviction
    assert lost.wait(5), "on_lost was not called"
    inner = election._lock if front.kind == "asyncio" else election  # behind its driver
    assert told == [inner] and election.lost.is_set() and not election.is_leader
    assert election.resign() is False


def test_a_term_not_acknowledged_by_the_replicas_asked_for_is_not_taken(r: redis.Redis, front: Front) -> None:
    election = front.election(front.client(), "el:durable", replicas=1, replicas_timeout=0.2)
    with pytest.raises(redislock.NotReplicatedError) as raised:
        election.campaign(2)
    assert raised.value.released and not election.is_leader
    assert r.exists("el:durable") == 0


def test_arguments_are_checked() -> None:
    r = redis.Redis(port=1)  # nothing is sent
    for data in ("", b"x" * 4097):
        with pytest.raises(ValueError):
            redislock.Election(r, "el:x", data=data)
    with pytest.raises(TypeError):
        redislock.Election(r, "el:x", data=7)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        redislock.Election(r, "el:x", lease=0)
    assert redislock.Election(r, "el:x", data="é" * 2048).data == "é".encode() * 2048
    with pytest.raises(TypeError):
        redislock.Election(r, "el:x").campaign("1")  # type: ignore[call-overload]


# --- a leader that dies, a leader cut off -----------------------------------------------------------

CHILD = """
import asyncio, sys
import redis, redis.asyncio, redislock, redislock.asyncio

port, front = int(sys.argv[1]), sys.argv[2]
if front == "sync":
    election = redislock.Election(redis.Redis(port=port), "el:kill", data="child")
    print(election.campaign(), flush=True)
    sys.stdin.read()  # leads until killed
else:
    async def main() -> None:
        election = redislock.asyncio.Election(redis.asyncio.Redis(port=port), "el:kill", data="child")
        print(await election.campaign(), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    asyncio.run(main())
"""


@pytest.mark.parametrize("child_front", FRONTS)
def test_a_killed_leader_is_succeeded_within_100_ms(server: Server, r: redis.Redis, child_front: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "clients/python/src"))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(server.port), child_front],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
    )
    try:
        assert child.stdout is not None
        term = int(child.stdout.readline())
        assert redislock.Election(r, "el:kill").leader() == Leader(term, b"child")
        successor = redislock.Election(server.client(), "el:kill", lease=10)
        waiting = Campaign(successor)
        wait_for(lambda: waiters(r, "el:kill") == 1)
        killed = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        new_term = waiting.join()
        elapsed = waiting.at - killed
        assert new_term > term
        assert elapsed < 0.1, f"succeeded after {elapsed * 1000:.0f} ms"
        successor.resign()
    finally:
        child.kill()
        child.wait()


def test_a_partitioned_leader_is_signalled_lost_before_its_successor_is_granted(
    server: Server, r: redis.Redis, proxy: Proxy, front: Front
) -> None:
    at: Dict[str, float] = {}
    leader = front.election(
        front_client_via(front, proxy),
        "el:cut",
        lease=LEASE,
        on_lost=lambda _: at.setdefault("lost", time.monotonic()),
    )
    term = leader.campaign()
    inner = leader._lock._lock if front.kind == "asyncio" else leader._lock  # behind its driver
    hold = inner.local.hold
    proxy.blackhole()
    at["partition"] = time.monotonic()
    successor = redislock.Election(server.client(), "el:cut", lease=10)
    waiting = Campaign(successor, timeout=LEASE + 5)
    new_term = waiting.join()
    wait_for(lambda: "lost" in at, seconds=5)  # signalled (when, the clocks below tell)
    # The term's lease clock ended before the successor was granted (``waiting.at``: after its
    # grant, on the same clock), within a lease of the partition.
    assert hold.lost and hold.lease_end < waiting.at
    assert hold.lease_end - at["partition"] < LEASE
    assert not leader.is_leader and leader.lost.is_set()
    assert new_term > term
    successor.resign()


def front_client_via(front: Front, proxy: Proxy) -> Any:
    """A client of the front at redis-py's defaults, through the proxy."""
    saved = front.port
    front.port = proxy.port
    try:
        return front.client()
    finally:
        front.port = saved


# --- observation --------------------------------------------------------------------------------------


class Seen:
    """The leaders an observer yielded, as they come (from any thread)."""

    def __init__(self) -> None:
        self.leaders: List[Optional[Leader]] = []
        self.cond = threading.Condition()

    def add(self, leader: Optional[Leader]) -> None:
        with self.cond:
            self.leaders.append(leader)
            self.cond.notify_all()

    def wait(self, count: int, seconds: float = 5.0) -> Optional[Leader]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.leaders) >= count, seconds), (
                f"seen {self.leaders}, waiting for leader number {count}"
            )
            return self.leaders[count - 1]


def observing(front: Front, election: Any, seen: Seen, count: int) -> None:
    """Runs ``election.observe()`` until it yielded ``count`` leaders: on a thread (sync), or as
    a task on the front's loop (asyncio)."""
    if front.kind == "sync":

        def run() -> None:
            for leader in election.observe():
                seen.add(leader)
                if len(seen.leaders) == count:
                    return

        threading.Thread(target=run, daemon=True).start()
        return

    async def watch() -> None:
        async for leader in election._lock.observe():
            seen.add(leader)
            if len(seen.leaders) == count:
                return

    assert front.loop is not None
    asyncio.run_coroutine_threadsafe(watch(), front.loop)


def test_observers_see_every_leader_in_order_through_three_changes_and_a_reconnect(
    server: Server, r: redis.Redis, proxy: Proxy, front: Front
) -> None:
    needs_observe(r)
    data = has_data(r)
    candidates = [
        redislock.Election(server.client(), "el:obs", lease=10, data=f"node-{i}" if data else None)
        for i in range(4)
    ]
    seen = Seen()
    observer = front.election(front_client_via(front, proxy), "el:obs")
    observing(front, observer, seen, 5)
    terms = [candidates[0].campaign()]
    assert must(seen.wait(1)).term == terms[0]
    # 1: a handoff to a waiting candidate (one change: never "nobody" in between).
    waiting = Campaign(candidates[1])
    wait_for(lambda: waiters(r, "el:obs") == 1)
    candidates[0].resign()
    terms.append(waiting.join())
    assert must(seen.wait(2)).term == terms[1]
    # 2: made while the observer's connection is silent, which is then cut: the observer
    # reconnects and asks AFTER the fence it last saw, so it is told at once.
    proxy.blackhole()
    candidates[1].resign()
    terms.append(candidates[2].campaign())
    proxy.cut()
    proxy.heal()
    assert must(seen.wait(3)).term == terms[2]
    # 3: a time without a leader ([0, nil]: None yielded, once), then a new one.
    candidates[2].resign()
    assert seen.wait(4) is None
    terms.append(candidates[3].campaign())
    assert must(seen.wait(5)).term == terms[3]
    leaders = [leader for leader in seen.leaders if leader is not None]
    assert len(leaders) == 4 and seen.leaders[3] is None
    assert [leader.term for leader in leaders] == terms
    assert terms == sorted(terms) and len(set(terms)) == 4
    expected = [c.data for c in candidates]
    assert [leader.data for leader in leaders] == expected
    candidates[3].resign()


# --- the observation's decisions, without a server ------------------------------------------------------


def script(*answers: Any) -> Tuple[Callable[[Any], Any], List[Any]]:
    """A ``carry`` that answers each command with the next of ``answers`` (an exception is
    raised) and takes the pauses as done, and the list of the requests it saw."""
    seen: List[Any] = []
    left = list(answers)

    def carry(request: Any) -> Any:
        seen.append(request)
        if isinstance(request, _flow.Pause):
            return None
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return carry, seen


def test_an_observation_skips_gaps_timeouts_and_older_terms() -> None:
    obs = Observation("el:x")
    carry, sent = script(
        [0, None],  # nobody leads
        None,  # the wait timed out
        [5, b"a"],
        ConnectionError("cut"),  # reconnects, asks again AFTER 5
        [3, b"old"],  # an older term (a failover that lost a grant): not given out
        [5, b"a"],  # seen before
        [9, None],
    )
    assert _flow.drive(_election.observe_next(obs), carry) == Leader(5, b"a")
    assert _flow.drive(_election.observe_next(obs), carry) == Leader(9, None)
    args = [r.args if isinstance(r, _flow.Send) else ("pause", r.seconds) for r in sent]
    assert args == [
        ["LOCK.OBSERVE", "el:x"],
        ["LOCK.OBSERVE", "el:x", "AFTER", 0, "SEEN", b""],
        ["LOCK.OBSERVE", "el:x", "AFTER", 0, "SEEN", b""],
        ["LOCK.OBSERVE", "el:x", "AFTER", 5, "SEEN", b"a"],
        ("pause", 0.05),
        ["LOCK.OBSERVE", "el:x", "AFTER", 5, "SEEN", b"a"],
        ["LOCK.OBSERVE", "el:x", "AFTER", 3, "SEEN", b"old"],
        ["LOCK.OBSERVE", "el:x", "AFTER", 5, "SEEN", b"a"],
    ]
    assert sent[0].wait_until is None and all(r.wait_until is not None for r in sent[1:] if isinstance(r, _flow.Send))


def test_an_observation_raises_what_waiting_cannot_mend() -> None:
    carry, _ = script(ResponseError("unknown command 'LOCK.OBSERVE', with args beginning with: 'el:x'"))
    with pytest.raises(UnsupportedError):
        _flow.drive(_election.observe_next(Observation("el:x")), carry)
    carry, _ = script(ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        _flow.drive(_election.observe_next(Observation("el:x")), carry)
    carry, sent = script(ResponseError("LOADING Redis is loading the dataset in memory"), [4, None])
    assert _flow.drive(_election.observe_next(Observation("el:x")), carry) == Leader(4, None)
    assert isinstance(sent[1], _flow.Pause)
