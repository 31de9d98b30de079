"""Leader election for redis-py's synchronous clients: ``redislock.Election``. The decisions are
``_election``'s; this carries them out with blocking calls, on the lock's machinery (``Lock``:
its connections, its renewal thread, its lease clock)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator, Optional, Set, Union, overload

import redis as redis_py
from redis.exceptions import ConnectionError, LockError, TimeoutError

from ._base import logger
from ._common import Number
from ._durable import DEFAULT_TIMEOUT as DEFAULT_REPLICAS_TIMEOUT
from ._election import DEFAULT_LEASE, DataT, ElectionBase, Leader, Observation, data_arg, leader, observe_next
from ._flow import drive
from ._run import FOLLOW_BLOCK, RETRY_FIRST, CampaignCancelled, Run, cancellable, next_pause
from .lock import Lock

__all__ = ["Election", "Leader", "CampaignCancelled"]


class Election(ElectionBase[Lock]):
    """One candidate of the election ``name``: at most one candidate leads at a time, in a term
    that is a fencing token.

    ``Election(redis, name, lease=10, data=None, on_lost=None, replicas=0,
    replicas_timeout=1.0)``; ``redis`` is a ``redis.Redis`` or a ``redis.RedisCluster``.

    - ``campaign(timeout=None)`` waits in the server until this candidate leads
      (``LOCK.ACQUIRE name token PX lease EPHEMERAL DATA data BLOCK …``: first come, first
      served among the candidates) and returns the term (the grant's fence, greater than every
      term before it); with ``timeout`` (seconds), None if not elected by then. The term is bound
      to a connection the election opens for it (from the client's settings, never one of its
      pool; the server's idle ``timeout`` and the application's timeouts do not touch it): a
      leader whose process dies is succeeded at once. Its lease is renewed in the background
      (every third of ``lease``), on that connection, until ``resign()``, which closes it.
    - ``lost`` (a ``threading.Event``) is set and ``on_lost`` called once (with the election,
      from the process's renewal thread) when leadership is lost: a renewal found the term gone,
      or the lease clock ran out before a renewal was answered — before the server can grant the
      next term —, or the term's connection closed (``CLIENT KILL``, a restart), as soon as its
      socket says so, which may be after the next term was granted. ``is_leader`` turns False
      at the same moment.
    - ``resign()`` ends the term: True if it still led, False otherwise.
    - ``proclaim(data)`` changes the leader's data in its term (a re-grant with the term's
      token: the same term); ``LockNotOwnedError`` if this candidate does not lead.
    - ``leader()`` says who leads (``LOCK.INFO``): a ``Leader(term, data)``, or None.
    - ``observe()`` yields a ``Leader`` for each new leader, terms strictly increasing, and
      for each new value the leader proclaims (``LOCK.OBSERVE … AFTER … SEEN … BLOCK``), and
      None when nobody leads any more, through reconnects (see ``observe``).
    - ``run(fn, on_elected=None, on_new_leader=None)`` campaigns, calls ``fn(stop)`` while this
      candidate leads (``stop``, a ``threading.Event``, is set the moment leadership is lost),
      resigns when ``fn`` returns and campaigns again, until ``stop()``. ``cancel()`` (from any
      thread) ends a campaign that is waiting: it raises ``CampaignCancelled``.
    - ``data`` (bytes or a str, 1 to 4096 bytes): public, shown to every observer (an address,
      a host name). ``replicas``, ``replicas_timeout``: a term is granted only once that many
      replicas acknowledged it, as for ``Lock`` (``NotReplicatedError`` otherwise).
    """

    def __init__(
        self,
        redis: Union[redis_py.Redis, redis_py.RedisCluster],
        name: Union[str, bytes],
        *,
        lease: Number = DEFAULT_LEASE,
        data: DataT = None,
        on_lost: Optional[Callable[["Election"], Any]] = None,
        replicas: int = 0,
        replicas_timeout: Number = DEFAULT_REPLICAS_TIMEOUT,
    ) -> None:
        value = data_arg(data)
        lock = Lock(
            redis,
            name,
            lease=lease,
            thread_local=False,
            ephemeral=True,
            on_lost=self._signal_lost,
            replicas=replicas,
            replicas_timeout=replicas_timeout,
        )
        super().__init__(lock, name, lease, value, on_lost)
        self.redis = redis
        self._mutex = threading.Lock()
        #: The cancel flags of the campaigns now waiting.
        self._waiting: Set[threading.Event] = set()

    @property
    def lost(self) -> threading.Event:
        event: threading.Event = self._lock.lost
        return event

    @overload
    def campaign(self, timeout: None = None) -> int: ...
    @overload
    def campaign(self, timeout: Number) -> Optional[int]: ...

    def campaign(self, timeout: Optional[Number] = None) -> Optional[int]:
        """The term, once this candidate leads (at once if it leads already); with ``timeout``
        seconds, None if not elected by then (0: without waiting). A wait whose connection drops
        is sent once more with the time left, at the back of the queue."""
        return self._campaigning(timeout, None)

    def _campaigning(self, timeout: Optional[Number], running: Optional[Run]) -> Optional[int]:
        """``campaign``, ended by ``cancel()`` (and by the run's ``stop()``)."""
        lock: Lock = self._lock
        flag = threading.Event()
        with self._mutex:
            self._waiting.add(flag)

        def cancelled() -> bool:
            return flag.is_set() or (running is not None and running.stopped)

        try:
            term = lock._asking(cancellable(self._campaign(timeout), cancelled))
        except Exception as err:
            if cancelled() and not isinstance(err, CampaignCancelled):
                raise CampaignCancelled("the campaign was cancelled") from err
            raise
        finally:
            with self._mutex:
                self._waiting.discard(flag)
        if term is not None and cancelled():  # granted as it was cancelled: not taken
            self._resign_quietly()
            raise CampaignCancelled("the campaign was cancelled")
        return term

    def cancel(self) -> None:
        """Ends the campaign that is waiting (from any thread): ``campaign()`` raises
        ``CampaignCancelled`` (a ``run()`` returns). Its wait's connection is shut down, which
        takes the candidate out of the server's queue. Returns once that campaign has ended
        (at once when called from its own thread, or with none waiting)."""
        with self._mutex:
            flags = set(self._waiting)
        for flag in flags:
            flag.set()
        pause = threading.Event()  # never set: a bounded pause between looks
        while flags:
            pending = getattr(self._lock.local, "pending", None)
            if pending is not None:
                pending.interrupt()  # again, if it was opened anew meanwhile
            with self._mutex:
                flags &= self._waiting
            if flags:
                pause.wait(0.05)  # the campaign's own thread ends it

    def stop(self) -> None:
        """Ends ``run()`` (from any thread, or from ``fn``): no more campaigns, the work's
        ``stop`` event set, the term resigned; a campaign waiting is cancelled."""
        running: Optional[Run] = self._running
        if running is not None:
            running.stop()
        self.cancel()

    def run(
        self,
        fn: Callable[[threading.Event], Any],
        *,
        on_elected: Optional[Callable[[int], Any]] = None,
        on_new_leader: Optional[Callable[[Optional[Leader]], Any]] = None,
    ) -> None:
        """Campaigns; once elected calls ``on_elected(term)``, then ``fn(stop)`` in this thread;
        ``stop`` (a ``threading.Event``) is set the moment leadership is lost (as ``lost``),
        when ``stop()`` is called, and when ``fn`` returns — always before the term is
        resigned, so the next leader starts after it. When ``fn`` returns the term is resigned
        and the candidate campaigns again, until ``stop()`` (or ``cancel()``); then ``run``
        returns. An exception of ``fn`` resigns and ends the run with it. ``on_new_leader`` is
        called (from a thread of the run's own) with each change an observer sees: a
        ``Leader``, or None when nobody leads."""
        running = Run(on_elected, on_new_leader)
        with self._mutex:
            if self._running is not None:
                raise LockError(f"a run of the election {self.name!r} goes on already")
            self._running = running
        if on_new_leader is not None:
            threading.Thread(target=self._follow, args=(running,), name="redislock-follow", daemon=True).start()
        try:
            pause = RETRY_FIRST
            while running.campaigning():
                try:
                    got = self._campaigning(None, running)
                except CampaignCancelled:
                    break
                except (ConnectionError, TimeoutError) as err:
                    # The server is away (restarting, failing over): campaign again once it
                    # answers, as a run goes on until it is stopped.
                    logger.warning("Campaigning in election %r: %s; trying again", self.name, err)
                    _pause_unless_stopped(running, pause)
                    pause = next_pause(pause)
                    continue
                pause = RETRY_FIRST
                stop = threading.Event()
                term = running.elected(must_term(got), stop.set, lambda: self.is_leader and not self.lost.is_set())
                try:
                    if on_elected is not None:
                        on_elected(term.term)
                    if running.working(term):
                        fn(stop)
                finally:
                    running.finished(term)
                    self._resign_quietly()
        finally:
            running.end()
            with self._mutex:
                self._running = None

    def _resign_quietly(self) -> None:
        """A run's term ends: resigned; without an answer, its connection closed (which ends
        it in the server as well)."""
        try:
            self.resign()
        except Exception as err:
            logger.warning("Resigning in election %r: %s; closing the term's connection", self.name, err)
            lock: Lock = self._lock
            hold = lock._held()
            lock._forget()
            if hold is not None and hold.conn is not None:
                hold.conn.close()
            lock.local.token = lock.local.fence = lock.local.hold = None

    def _follow(self, running: Run) -> None:
        """The run's observer: ``on_new_leader`` for each change, until the run ends."""
        observation = Observation(self.name, block=FOLLOW_BLOCK)
        while not running.ended:
            try:
                change = drive(observe_next(observation), self._lock._carry)
            except Exception as err:
                logger.warning("Observing election %r for run(): %s; no more on_new_leader", self.name, err)
                return
            if running.seen(change):
                try:
                    running.on_new_leader(change)  # type: ignore[misc]
                except Exception:
                    logger.exception("on_new_leader callback of election %r failed", self.name)

    def resign(self) -> bool:
        """Ends the term (``LOCK.RELEASE``): True if this candidate still led, False if it did
        not lead or had lost its term. Without an answer the term is kept (``TimeoutError``,
        ``ConnectionError``): call it again."""
        lock: Lock = self._lock
        return lock._drive(self._resign())

    def proclaim(self, data: Union[str, bytes, memoryview]) -> None:
        """The leader's data becomes ``data`` (1 to 4096 bytes) in the same term: a re-grant with
        the term's token and the new ``DATA`` on the term's connection, which renews the lease
        too; every observer sees it (``observe()`` yields ``Leader(term, data)``), and later
        campaigns send it. ``LockNotOwnedError`` if this candidate does not lead (never elected,
        resigned, or the term lost)."""
        lock: Lock = self._lock
        lock._drive(self._proclaim(data))

    def leader(self) -> Optional[Leader]:
        """Who leads now: ``Leader(term, data)``, or None when nobody does (``LOCK.INFO``)."""
        return drive(leader(self.name), self._lock._carry)

    def observe(self) -> Iterator[Optional[Leader]]:
        """Each new leader, as it is granted: the current one first (if any), then every later
        one, terms strictly increasing; the same term again with its new data when the leader
        proclaims a value (``proclaim``); None when, after a leader, nobody leads (a resignation
        or a lease run out with no candidate waiting), once per vacancy. A handoff to a waiting
        candidate is one change: the next leader, no None between.
        Each wait is ``LOCK.OBSERVE name AFTER <fence last seen> SEEN <data seen> BLOCK`` (at
        most 5 s, then sent again), on a connection of the lock's own; a connection that fails is
        opened again and the wait re-armed with what was seen last, so a leader granted or a
        value proclaimed meanwhile is yielded at once (the latest value: values proclaimed
        while the observer was away are not replayed). It never ends by itself; needs a server with ``LOCK.OBSERVE``
        (``UnsupportedError`` otherwise)."""
        observation = Observation(self.name)
        while True:
            yield drive(observe_next(observation), self._lock._carry)


def must_term(term: Optional[int]) -> int:
    assert term is not None  # a campaign without a timeout returns a term or raises
    return term



def _pause_unless_stopped(running: Run, seconds: float) -> None:
    """Waits ``seconds``, or less once the run is stopped (looked at every 50 ms)."""
    deadline = time.monotonic() + seconds
    while running.campaigning() and time.monotonic() < deadline:
        time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
