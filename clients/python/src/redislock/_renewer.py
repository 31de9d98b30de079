"""The renewal machinery of the sync front end: one schedule of the lease clocks and renewals of
every hold of the process (``_Renewer``), the jobs it runs (a renewal, a loss), the loss of a
hold whose own connection closed (``closed``), and ``lock.lost`` (``_LeaseEvent``)."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Optional, Tuple

from ._base import logger
from ._flow import Send
from ._lease import Hold, Schedule

if TYPE_CHECKING:
    from .lock import Lock

__all__ = ["renewer", "closed", "_Renewer", "_LeaseEvent"]


class _Renewer:
    """The lease clocks and renewals of every hold of this process: one thread keeps the
    schedule (it marks a hold lost the moment its lease clock runs out, whatever the network
    does), one worker thread sends the renewals and runs the ``on_lost`` callbacks. A renewal
    that hangs (a partitioned server) does not hold the others up: when a job has waited longer
    than its patience for a busy worker, another worker starts, and leaves again once idle."""

    MAX_WORKERS = 16
    IDLE = 5.0

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.schedule = Schedule()
        self.jobs: Deque[Tuple[float, float, Callable[[], None]]] = deque()
        self.workers = 0
        self.idle = 0
        self.thread: Optional[threading.Thread] = None

    def add(self, hold: Hold) -> None:
        with self.cond:
            self.schedule.add(hold)
            if self.thread is None:
                self.thread = threading.Thread(target=self._keep, name="redislock-schedule", daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def remove(self, hold: Hold) -> None:
        with self.cond:
            self.schedule.remove(hold)

    def submit(self, job: Callable[[], None], patience: float = 0.25) -> None:
        with self.cond:
            self.jobs.append((time.monotonic(), patience, job))
            self._staff(time.monotonic())
            self.cond.notify_all()

    def _staff(self, now: float) -> None:
        """Starts a worker when there is none, or when the oldest job waited past its patience
        with every worker busy."""
        if not self.jobs or self.idle or self.workers >= self.MAX_WORKERS:
            return
        queued, patience, _ = self.jobs[0]
        if self.workers and now - queued < patience:
            return
        self.workers += 1
        threading.Thread(target=self._work, name="redislock-renew", daemon=True).start()

    def _keep(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                renew, lost = self.schedule.due(now)
                for hold, request in renew:
                    self.jobs.append((now, min(0.25, hold.ttl_ms / 10000), _renewal(self, hold, request, now)))
                for hold in lost:  # signalled at once: a worker now, a new one if none is idle
                    self.jobs.append((now, 0.0, _loss(hold)))
                self._staff(now)
                if self.jobs:
                    self.cond.notify_all()
                wake = self.schedule.next_wake()
                if self.jobs and not self.idle:  # look again when the oldest job runs out of patience
                    queued, patience, _ = self.jobs[0]
                    wake = queued + patience if wake is None else min(wake, queued + patience)
                self.cond.wait(None if wake is None else max(0.0, wake - time.monotonic()))

    def _work(self) -> None:
        with self.cond:
            while True:
                while not self.jobs:
                    self.idle += 1
                    woken = self.cond.wait(self.IDLE)
                    self.idle -= 1
                    if not woken and not self.jobs and self.workers > 1:
                        self.workers -= 1
                        return
                _, _, job = self.jobs.popleft()
                if self.jobs:  # the scheduler looks again at whether more hands are needed
                    self.cond.notify_all()
                self.cond.release()
                try:
                    job()
                except Exception:  # a job never kills the worker
                    logger.exception("redislock renewal job failed")
                finally:
                    self.cond.acquire()


def _renewal(renewer: _Renewer, hold: Hold, request: Send, sent: float) -> Callable[[], None]:
    def job() -> None:
        owner: Lock = hold.owner
        reply: Any = None
        error: Optional[BaseException] = None
        try:
            reply = owner._carry_hold(hold, request)
        except Exception as err:
            error = err
        with renewer.cond:
            found_gone = hold.renewed(sent, reply, error)
            gone = found_gone and hold.mark_lost(time.monotonic())
            if not found_gone:
                renewer.schedule.add(hold)
                renewer.cond.notify_all()
        if gone:
            _loss(hold)()

    return job


def _loss(hold: Hold) -> Callable[[], None]:
    def job() -> None:
        owner: Lock = hold.owner
        if hold.conn is not None:  # a lost hold's own connection has nothing more to carry
            hold.conn.close()
        if owner._note_loss(hold):
            owner._call_on_lost(hold)

    return job


def closed(hold: Hold) -> None:
    """The connection ``hold`` is bound to closed (its watcher saw EOF or a reset, or a command
    on it failed): the server released the hold then. Marked lost at once (``lost``, ``owned``,
    ``is_leader`` say so from now), and signalled by a worker as any loss, once."""
    keeper = renewer()
    with keeper.cond:
        now = time.monotonic()
        if not hold.connection_closed(now):
            return
        keeper.jobs.append((now, 0.0, _loss(hold)))
        keeper._staff(now)
        keeper.cond.notify_all()


_renewer: Optional[_Renewer] = None
_renewer_mutex = threading.Lock()


def renewer() -> _Renewer:
    """The process's renewer (a forked child gets one of its own: the parent's threads are not
    there, and the parent's holds are not renewed from the child)."""
    global _renewer
    with _renewer_mutex:
        if _renewer is None or _renewer.pid != os.getpid():
            _renewer = _Renewer()
        return _renewer


class _LeaseEvent(threading.Event):
    """``lock.lost``: set when the hold is lost (see ``on_lost``), and read as set once the
    current hold's lease clock ran out, even where no renewal thread runs (a forked child)."""

    def __init__(self, lock: "Lock") -> None:
        super().__init__()
        self._lock = lock

    def _left(self) -> Optional[float]:
        """The lease time left where the event must read the lease clock itself: a hold that
        no renewal thread watches (without ``auto_renew`` and ``on_lost``, or in a forked
        child); None where the renewal thread sets the event."""
        hold = self._lock._held()
        if hold is None or hold.ended and not hold.lost:
            return None
        if hold.lost:  # whoever found it (a renewal, its connection) marked it already
            return 0.0
        if hold.watched and hold.pid == os.getpid():
            return None
        return hold.left()

    def is_set(self) -> bool:
        return super().is_set() or self._left() == 0.0

    def wait(self, timeout: Optional[float] = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = self._left()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left is None or (remaining is not None and remaining <= left):
                return super().wait(remaining)
            if super().wait(left) or self.is_set():
                return True
            # The lease clock moved on (a renewal was answered): wait on.
