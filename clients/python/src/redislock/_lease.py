"""One hold and the lease clock, without I/O: a grant's token, fence and lease, its conservative
local end, where its renewals stand; and ``Schedule``, the lease clocks and renewals of every hold
of a process (sync) or of an event loop (asyncio), which says, for a given moment, which holds are
due for a renewal and which have run out. The front ends run it on one thread or one task."""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any, List, Optional, Protocol, Tuple

from redis.exceptions import ResponseError

from ._common import lease_end, wrong_type
from ._durable import Durability
from ._flow import Send, unwrap

class Owner(Protocol):
    """What the schedule tells about a hold: the front end's lock."""

    name: Any


class Hold:
    """One grant: token, fence, lease (``ttl_ms``) and its conservative local end
    (``lease_end``, ``time.monotonic()``), and where its renewals stand. The lease clock runs
    for every hold: ``lost`` once ``lease_end`` has passed without a renewal answered in time,
    or once a renewal found the hold gone."""

    __slots__ = (
        "name",
        "token",
        "fence",
        "ttl_ms",
        "lease_end",
        "auto_renew",
        "next_renew",
        "renewing",
        "ended",
        "lost",
        "gone",
        "owner",
        "queued_at",
        "pid",
        "watched",
        "durable",
        "bound",
        "conn",
        "closed",
    )

    def __init__(
        self,
        name: Any,
        token: bytes,
        fence: int,
        ttl_ms: int,
        sent: float,
        auto_renew: bool,
        owner: Any = None,
        pid: int = 0,
        durable: Optional[Durability] = None,
        bound: bool = False,
    ) -> None:
        self.name = name
        self.token = token
        self.fence = fence
        self.ttl_ms = ttl_ms
        self.lease_end = lease_end(sent, ttl_ms)
        self.auto_renew = auto_renew
        self.next_renew = sent + self.period
        self.renewing = False
        self.ended = False
        self.lost = False
        self.gone = False
        self.owner = owner
        self.queued_at: Optional[float] = None
        self.pid = pid
        #: Put on a renewal schedule, which signals its loss (else ``lost`` reads the clock).
        self.watched = False
        #: The acknowledgements each renewal must get to count (``replicas=``, ``aof_*=``).
        self.durable = durable
        #: Bound to a connection (EPHEMERAL): its requests go on that connection (``Send.own``).
        self.bound = bound
        #: The front end's connection of the hold (bound holds), opaque here.
        self.conn: Any = None
        #: Lost because its connection closed (the server released it then).
        self.closed = False

    @property
    def period(self) -> float:
        """Renewals come every third of the lease."""
        return self.ttl_ms / 3000

    @property
    def retry_pause(self) -> float:
        """After a failed renewal: soon again, but not in a tight loop."""
        return min(max(self.ttl_ms / 20000, 0.01), 0.25)

    def left(self, now: Optional[float] = None) -> float:
        """Seconds left on the lease clock (0 once it ran out or the hold ended)."""
        if self.lost:
            return 0.0
        return max(0.0, self.lease_end - (time.monotonic() if now is None else now))

    def wake(self) -> Optional[float]:
        """When the schedule must look at this hold next: its next renewal, else its lease end;
        None once it ended."""
        if self.ended:
            return None
        if self.auto_renew and not self.renewing:
            return min(self.next_renew, self.lease_end)
        return self.lease_end

    def extended(self, sent: float, ttl_ms: int) -> None:
        """An EXTEND sent at ``sent`` was answered 1: the lease clock restarts from ``sent``."""
        self.lease_end = lease_end(sent, ttl_ms)

    def renewal(self, now: float) -> Send:
        """The renewal to send now (the schedule found it due)."""
        self.renewing = True
        left = max(self.lease_end - now, 0.001)
        return Send(
            ["LOCK.EXTEND", self.name, self.token, "PX", self.ttl_ms],
            bound=left,
            own=self.bound,
            follow=None if self.durable is None else self.durable.follow(left),
        )

    def renewed(self, sent: float, reply: Any = None, error: Optional[BaseException] = None) -> bool:
        """The outcome of the renewal sent at ``sent``: True when the hold is now known gone
        (answered 0, or the key holds another type); otherwise the lease clock moves on (an
        answer of 1) or the renewal is tried again soon (any error: READONLY during a failover,
        a connection that dropped, a timeout). A renewal answered 1 but not acknowledged by the
        replicas (or fsyncs) asked for does not count: the lease clock stays, and the renewal
        is tried again soon."""
        self.renewing = False
        if self.ended:
            return False
        now = time.monotonic()
        if error is not None:
            if isinstance(error, ResponseError) and wrong_type(error):
                self.gone = True
                return True
            self.next_renew = now + self.retry_pause
            return False
        if unwrap(reply) != 1:
            self.gone = True
            return True
        if self.durable is not None and not self.durable.acks(reply).ok:
            self.next_renew = now + self.retry_pause
            return False
        self.extended(sent, self.ttl_ms)
        self.next_renew = sent + self.period
        return False

    def end(self) -> None:
        """Released (or handed over): no more renewals, no loss to report."""
        self.ended = True

    def mark_lost(self, now: float) -> bool:
        """The hold is lost as of ``now``: True the first time only (a loss is signalled once,
        whichever of the lease clock, a renewal or the connection tells first)."""
        if self.lost:
            return False
        self.ended = True
        self.lost = True
        self.lease_end = min(self.lease_end, now)
        return True

    def connection_closed(self, now: float) -> bool:
        """The connection the hold is bound to closed: the server released the hold then. True
        when that is the loss to signal (not when the hold had ended or was lost already)."""
        if self.ended:
            return False
        self.closed = True
        self.gone = True
        return self.mark_lost(now)


class Schedule:
    """The lease clocks and renewals of many holds, in the order they come due: a heap of
    (moment, hold) with stale entries dropped as they surface."""

    def __init__(self) -> None:
        self._heap: List[Tuple[float, int, Hold]] = []
        self._seq = itertools.count()
        self._ended = 0

    def __len__(self) -> int:
        return len(self._heap) - self._ended

    def add(self, hold: Hold) -> None:
        """Schedule ``hold`` (again, after its moment changed: a renewal answered, an extend)."""
        when = hold.wake()
        if when is None or when == hold.queued_at:
            return
        if hold.queued_at is not None:
            self._ended += 1  # the earlier entry is stale now
        hold.queued_at = when
        heapq.heappush(self._heap, (when, next(self._seq), hold))

    def remove(self, hold: Hold) -> None:
        """``hold`` ended: its entry is dropped (at once when many are stale)."""
        hold.end()
        if hold.queued_at is not None:
            hold.queued_at = None
            self._ended += 1
        if self._ended > 64 and self._ended * 2 > len(self._heap):
            self._heap = [e for e in self._heap if e[2].queued_at == e[0]]
            heapq.heapify(self._heap)
            self._ended = 0

    def next_wake(self) -> Optional[float]:
        """The next moment something is due, None when nothing is scheduled."""
        while self._heap:
            when, _, hold = self._heap[0]
            if hold.queued_at == when:
                return when
            heapq.heappop(self._heap)
            self._ended = max(0, self._ended - 1)
        return None

    def due(self, now: float) -> Tuple[List[Tuple[Hold, Send]], List[Hold]]:
        """What is due at ``now``: the renewals to send, and the holds whose lease clock ran out
        (lost: the front end reports them)."""
        renew: List[Tuple[Hold, Send]] = []
        lost: List[Hold] = []
        while self._heap and self._heap[0][0] <= now:
            when, _, hold = heapq.heappop(self._heap)
            if hold.queued_at != when:
                self._ended = max(0, self._ended - 1)
                continue
            hold.queued_at = None
            if hold.ended:  # lost meanwhile (a renewal, its connection): signalled then
                continue
            if now >= hold.lease_end:
                if hold.mark_lost(now):
                    lost.append(hold)
                continue
            renew.append((hold, hold.renewal(now)))
            self.add(hold)  # its lease end, while the renewal is out
        return renew, lost


__all__ = ["Owner", "Hold", "Schedule"]
