"""``Election.run`` and the observation of a vacancy, sync and asyncio, against a real server:
``observe()`` yields None once when the last leader resigns with no candidate waiting; the work
of ``run`` is cancelled (its ``stop`` event set; asyncio: its task cancelled) when leadership is
lost — its connection killed, its key deleted — and the candidate campaigns again; a successor's
work starts only after its predecessor's was cancelled (recorded clocks); ``cancel()`` from
another thread ends a blocked sync campaign; each callback is called once per event. The run's
decisions (``_run``) and the observation's are also driven here without a server.

Waits are for events the run records (a condition), never sleeps; assertions compare the clocks
and counts recorded.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest
import redis

import redislock
from fronts import FRONTS, Front
from helpers import must
from proxy import Proxy
from redislock import CampaignCancelled, Leader, _election, _flow, _run
from servers import Server

LEASE = 1.2


@pytest.fixture(params=FRONTS)
def front(request: Any, server: Server) -> Iterator[Front]:
    f = Front(request.param, server.port)
    try:
        yield f
    finally:
        f.close()


def needs_observe(r: redis.Redis) -> None:
    if not redislock.supports(r, "LOCK.OBSERVE"):
        pytest.skip("needs LOCK.OBSERVE, which this server's module does not have")


def waiters(r: redis.Redis, name: str) -> int:
    info = redislock.Lock(r, name).info()
    return 0 if info is None else int(info["waiters"])


def wait_for(predicate: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)  # polling server state (a candidate queued): no event a client can await


class Record:
    """What happened, in order, with the moment (``time.monotonic()``): (kind, value, at)."""

    def __init__(self) -> None:
        self.events: List[Tuple[str, Any, float]] = []
        self.cond = threading.Condition()

    def add(self, kind: str, value: Any = None) -> None:
        with self.cond:
            self.events.append((kind, value, time.monotonic()))
            self.cond.notify_all()

    def of(self, *kinds: str) -> List[Tuple[str, Any, float]]:
        with self.cond:
            return [e for e in self.events if e[0] in kinds]

    def wait(self, kind: str, count: int = 1, seconds: float = 15.0) -> Tuple[str, Any, float]:
        with self.cond:
            ok = self.cond.wait_for(lambda: len([e for e in self.events if e[0] == kind]) >= count, seconds)
            assert ok, f"waiting for {kind} number {count}; seen {self.events}"
            return [e for e in self.events if e[0] == kind][count - 1]


class Runner:
    """``election.run`` in the background (a thread; asyncio: a task on the front's loop). Its
    work records ``start`` (the term) and returns at once if ``returns``; else it waits for its
    ``stop`` and records ``stopped`` (asyncio: ``cancelled`` when its task is cancelled)."""

    def __init__(self, front: Front, election: Any, returns: bool = False, follow: bool = True) -> None:
        self.front = front
        self.election = election
        self.inner = election._lock if front.kind == "asyncio" else election  # behind its driver
        self.rec = Record()
        self.runs: List[Any] = []  # the run's core, for the terms' recorded firing
        self.returns = returns
        self.error: Optional[BaseException] = None
        resign = self.inner.resign  # recorded as it is called: the handle fired before?

        def recorded() -> Any:
            self.rec.add("resign")
            return resign()  # a coroutine (asyncio), awaited by the caller

        self.inner.resign = recorded
        kwargs = {"on_elected": self.elected, "on_new_leader": (lambda leader: self.rec.add("leader", leader)) if follow else None}
        if front.kind == "sync":
            self.thread = threading.Thread(target=self._sync, args=(kwargs,))
            self.thread.start()
        else:
            assert front.loop is not None
            self.future = asyncio.run_coroutine_threadsafe(self.inner.run(self._awork, **kwargs), front.loop)

    def elected(self, term: int) -> None:
        self.rec.add("elected", term)
        if not self.runs or self.runs[-1] is not self.inner._running:
            self.runs.append(self.inner._running)

    def _sync(self, kwargs: Any) -> None:
        try:
            self.inner.run(self._work, **kwargs)
        except BaseException as err:
            self.error = err

    def _work(self, stop: threading.Event) -> None:
        self.rec.add("start", self.inner.term)
        if self.returns:
            return
        stop.wait()
        self.rec.add("stopped")

    async def _awork(self, stop: asyncio.Event) -> None:
        self.rec.add("start", self.inner.term)
        if self.returns:
            return
        try:
            await stop.wait()
            self.rec.add("stopped")
        except asyncio.CancelledError:
            self.rec.add("stopped", "cancelled")
            raise

    def terms(self) -> List[_run.Term]:
        return [term for run in self.runs for term in run.terms]

    def stop(self) -> None:
        if self.front.kind == "sync":
            self.inner.stop()
            self.thread.join(15)
            assert not self.thread.is_alive(), "run() did not return after stop()"
            assert self.error is None, self.error
        else:
            assert self.front.loop is not None
            self.front.loop.call_soon_threadsafe(self.inner.stop)
            self.future.result(15)


def term_client(r: redis.Redis, name: str) -> int:
    """The id of the connection the term lives on (LOCK.INFO's ``client``)."""
    return int(must(redislock.Lock(r, name).info())["client"])


# --- vacancy -----------------------------------------------------------------------------------------


def test_observe_yields_none_once_when_the_leader_resigns_with_no_successor(r: redis.Redis, front: Front) -> None:
    needs_observe(r)
    rec = Record()
    observer = front.election(front.client(), "el:vacant")
    if front.kind == "sync":

        def follow() -> None:
            for change in observer.observe():
                rec.add("change", change)

        threading.Thread(target=follow, daemon=True).start()
    else:

        async def afollow() -> None:
            async for change in observer._lock.observe():
                rec.add("change", change)

        assert front.loop is not None
        asyncio.run_coroutine_threadsafe(afollow(), front.loop)
    first = redislock.Election(r, "el:vacant", lease=10)
    second = redislock.Election(r, "el:vacant", lease=10)
    term = first.campaign()
    assert rec.wait("change", 1)[1] == Leader(term, None)
    assert first.resign() is True  # nobody waits: the lock is free
    assert rec.wait("change", 2)[1] is None
    later = second.campaign()
    assert rec.wait("change", 3)[1] == Leader(later, None)
    assert [e[1] for e in rec.of("change")] == [Leader(term, None), None, Leader(later, None)]
    second.resign()
    assert rec.wait("change", 4)[1] is None


# --- run: the work is cancelled when leadership is lost ---------------------------------------------


@pytest.mark.parametrize("how", ["client-kill", "key-deleted"])
def test_run_cancels_the_work_when_leadership_is_lost_and_campaigns_again(
    r: redis.Redis, front: Front, how: str
) -> None:
    runner = Runner(front, front.election(front.client(), f"el:run-{how}", lease=LEASE), follow=False)
    try:
        _, first, _ = runner.rec.wait("start")
        if how == "client-kill":
            killer: Any = r
            killer.execute_command("CLIENT", "KILL", "ID", term_client(r, f"el:run-{how}"))
        else:
            r.delete(f"el:run-{how}")  # an operator: the next renewal finds the term gone
        runner.rec.wait("stopped")
        _, second, _ = runner.rec.wait("start", 2)  # elected again, its work started again
        assert second > first
    finally:
        runner.stop()
    elected = [e[1] for e in runner.rec.of("elected")]
    assert elected == [e[1] for e in runner.rec.of("start")]  # on_elected once per term, then the work
    assert elected[:2] == [first, second] and len(set(elected)) == len(elected)
    assert len(runner.rec.of("stopped")) == len(elected)  # each work ended once
    terms = runner.terms()
    assert terms[0].why == _run.LOST and terms[-1].why == _run.STOPPED
    assert must(terms[0].fired_at) <= runner.rec.of("stopped")[0][2]
    assert r.exists(f"el:run-{how}") == 0  # the last term resigned


def test_a_successor_starts_only_after_its_predecessor_was_cancelled(r: redis.Redis, front: Front) -> None:
    needs_observe(r)
    name = "el:run-handoff"
    first = Runner(front, front.election(front.client(), name, lease=10, data="first"))
    first.rec.wait("start")
    second = Runner(front, front.election(front.client(), name, lease=10, data="second"))
    wait_for(lambda: waiters(r, name) == 1)
    second.rec.wait("leader")  # its observer saw the first leading
    first.stop()  # its work is stopped, then its term resigned: the second is elected
    _, term, started = second.rec.wait("start")
    second.rec.wait("leader", 2)  # and then itself
    second.stop()
    (before,) = first.terms()
    assert before.why == _run.STOPPED and must(before.fired_at) < first.rec.of("resign")[0][2] < started
    assert first.rec.of("stopped")[0][2] < started
    # on_new_leader: the second's observer saw the first's term, then its own, each once.
    leaders = [e[1] for e in second.rec.of("leader")]
    assert [leader.term for leader in leaders[:2]] == [before.term, term]
    assert [leader.data for leader in leaders[:2]] == [b"first", b"second"]
    assert leaders[2:] in ([], [None])  # resigned with nobody waiting: a vacancy, if seen before the end


def test_a_work_that_returns_hands_over_before_the_successor_starts(r: redis.Redis, front: Front) -> None:
    name = "el:run-returns"
    holder = redislock.Election(r, name, lease=10)
    holder.campaign()
    first = Runner(front, front.election(front.client(), name, lease=10), returns=True, follow=False)
    wait_for(lambda: waiters(r, name) == 1)
    second = Runner(front, front.election(front.client(), name, lease=10), follow=False)
    wait_for(lambda: waiters(r, name) == 2)
    holder.resign()  # the first is elected, its work returns at once, it resigns: the second leads
    _, term, started = second.rec.wait("start")
    first_term = first.terms()[0]
    assert first_term.why == _run.RETURNED and must(first_term.fired_at) < first.rec.of("resign")[0][2] < started
    assert first_term.term < term
    second.stop()
    first.stop()
    assert len(second.rec.of("elected")) == 1


def test_a_partitioned_leader_s_work_is_cancelled_before_its_successor_starts(
    server: Server, r: redis.Redis, front: Front
) -> None:
    name = "el:run-cut"
    proxy = Proxy(server.port)
    try:
        saved, front.port = front.port, proxy.port
        try:
            client = front.client()
        finally:
            front.port = saved
        first = Runner(front, front.election(client, name, lease=LEASE), follow=False)
        first.rec.wait("start")
        second = Runner(front, front.election(front.client(), name, lease=10), follow=False)
        wait_for(lambda: waiters(r, name) == 1)
        hold = (first.inner._lock).local.hold
        proxy.blackhole()  # the first's renewals go unanswered: its lease clock runs out
        _, _, started = second.rec.wait("start")
        first.rec.wait("stopped")
        before = first.terms()[0]
        # Its work was cancelled at the lease's local end, which comes before the server's: the
        # successor, granted at the server's end, starts after it (recorded clocks).
        assert before.why == _run.LOST and hold.lost and hold.lease_end < started
        proxy.heal()
        second.stop()
        first.stop()
    finally:
        proxy.close()


@pytest.mark.parametrize("kind", FRONTS)
def test_a_killed_server_cancels_the_work_at_the_close_and_the_run_goes_on_when_it_is_back(kind: str) -> None:
    s = Server()  # a server of its own, killed with SIGKILL
    try:
        front = Front(kind, s.port)
    except BaseException:
        s.stop()
        raise
    try:
        # A lease of 30 s: the first renewal would come 10 s after the grant.
        runner = Runner(front, front.election(front.client(), "el:run-kill9", lease=30), follow=False)
        _, _, started = runner.rec.wait("start")
        s.kill()  # the term's socket closes with the server
        _, _, stopped = runner.rec.wait("stopped")
        term = runner.terms()[0]
        # Told by the close, long before a renewal could have found out (recorded clocks).
        assert term.why == _run.LOST and must(term.fired_at) <= stopped < started + 5
        s.start(port=s.port)  # the server comes back: the run campaigns again and is elected
        runner.rec.wait("start", 2)
        runner.stop()
    finally:
        front.close()
        s.stop()


# --- cancel() -----------------------------------------------------------------------------------------


def test_cancel_from_another_thread_ends_a_blocked_campaign(r: redis.Redis) -> None:
    holder = redislock.Election(r, "el:cancel", lease=10)
    holder.campaign()
    candidate = redislock.Election(redis.Redis(port=r.connection_pool.connection_kwargs["port"]), "el:cancel")
    rec = Record()

    def campaign() -> None:
        try:
            rec.add("term", candidate.campaign())
        except CampaignCancelled as err:
            rec.add("cancelled", err)

    thread = threading.Thread(target=campaign)
    thread.start()
    wait_for(lambda: waiters(r, "el:cancel") == 1)
    candidate.cancel()  # returns once the campaign has ended
    assert rec.of("cancelled") and not rec.of("term")
    thread.join(5)
    assert not thread.is_alive()
    wait_for(lambda: waiters(r, "el:cancel") == 0)  # out of the server's queue
    holder.resign()
    assert holder.leader() is None and not candidate.is_leader
    candidate.cancel()  # nothing waiting: nothing to do
    assert candidate.campaign(1) is not None  # a later campaign is not cancelled
    candidate.resign()


# --- the decisions, without a server -------------------------------------------------------------------


def test_a_vacancy_is_given_out_once_and_only_after_a_leader() -> None:
    obs = _election.Observation("el:x")
    assert obs.answer([0, None]) is _election.UNCHANGED  # nobody led yet
    assert obs.answer([5, b"a"]) == Leader(5, b"a")
    assert obs.answer(None) is _election.UNCHANGED
    assert obs.answer([0, None]) is None
    assert obs.answer([0, None]) is _election.UNCHANGED  # the same vacancy, seen again
    assert obs.answer([3, b"old"]) is _election.UNCHANGED  # an older term (a failover)
    assert obs.answer([9, None]) == Leader(9, None)


def test_a_term_fires_once_and_a_stopped_run_campaigns_no_more() -> None:
    fired: List[int] = []
    run = _run.Run()
    term = run.elected(5, lambda: fired.append(5), lambda: True)
    assert run.working(term) and run.campaigning()
    run.lost()
    run.stop()
    run.finished(term)
    assert fired == [5] and term.why == _run.LOST and not run.campaigning()
    late = run.elected(6, lambda: fired.append(6), lambda: True)  # granted as it stopped
    assert not run.working(late) and late.why == _run.STOPPED and fired == [5, 6]
    gone = _run.Run().elected(7, lambda: fired.append(7), lambda: False)  # lost before it began
    assert gone.why == _run.LOST and fired == [5, 6, 7]


def test_a_cancelled_campaign_takes_no_grant() -> None:
    cancelled = threading.Event()

    def flow() -> Any:
        reply = yield _flow.Send(["LOCK.ACQUIRE"])
        return reply

    replies = iter(["granted"])

    def carry(request: Any) -> Any:
        cancelled.set()  # cancelled while the request was out
        return next(replies)

    with pytest.raises(CampaignCancelled):
        _flow.drive(_run.cancellable(flow(), cancelled.is_set), carry)
    cancelled.clear()
    assert _flow.drive(_run.cancellable(flow(), cancelled.is_set), lambda _: "granted") == "granted"
