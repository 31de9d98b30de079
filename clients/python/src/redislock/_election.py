"""Leader election, without I/O: what an election asks of the server and what the answers mean,
for the sync front end (``redislock.Election``) and the asyncio one
(``redislock.asyncio.Election``).

A candidate is a lock of the front end (``_base.LockBase``) made ``EPHEMERAL``, without
``timeout`` (so its lease is renewed in the background until release), with ``thread_local``
off (leadership is the process's, not a thread's), and with the candidate's public data sent as
``DATA`` with every request for the grant. ``campaign`` is that lock's blocking ``acquire`` (a
wait in the server, first come, first served among the candidates), the term is the grant's
fence, the lock's lease clock (``lost``, ``on_lost``) says when leadership may be gone, and
``resign`` is its ``release``. ``proclaim`` is a re-grant of the term with new ``DATA``: the
same token, so the same fence.

Decided here: the data's bounds; what ``campaign``, ``proclaim`` and ``resign`` answer; who
leads, read with ``LOCK.INFO``; and the observation — which ``LOCK.OBSERVE`` to send next
(``AFTER`` the fence last seen and ``SEEN`` the data seen with it, so that a change made while
the observer was away or reconnecting is answered at once), which answers are a new leader
(terms strictly increasing: a lower fence is not), which are a new value of the leader given
out last (its term, other data), which are a vacancy (a key with no lock, ``[0, nil]``, after a
leader was given out: once per vacancy), and which errors are waited out.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Generic, List, NamedTuple, Optional, TypeVar, Union

from redis.exceptions import ClusterError, ConnectionError, LockNotOwnedError, ResponseError, TimeoutError

from . import _core
from ._common import LockInfo, Number, acquire_args, as_bytes, lock_error, parse_grant, translate, unsupported
from ._flow import Flow, Pause, Send, unwrap

logger = logging.getLogger("redislock")

#: The bounds of ``DATA`` (bytes), as the server has them.
MAX_DATA = 4096

#: The lease of a candidate's term, in seconds, unless the election is given another: a leader
#: cut off from the server is signalled lost, and succeeded, within one lease.
DEFAULT_LEASE = 10.0

#: The longest one ``LOCK.OBSERVE … BLOCK`` waits (seconds) before it is sent again: an observer
#: whose connection went silent (a partition) finds out within this (plus the read's grace) and
#: reconnects, instead of waiting for ever on a connection that will never answer.
OBSERVE_BLOCK = 5.0

#: The pauses between tries of an observation that failed (no connection, a server loading, a
#: Cluster moving the key): the first, doubled each time up to the last.
RETRY_FIRST = 0.05
RETRY_MOST = 1.0

#: Answers that say "not now": the observation tries again after a pause.
_NOT_NOW = ("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK")

DataT = Union[str, bytes, memoryview, None]


class Leader(NamedTuple):
    """Who leads: the term (the fence of the leader's grant) and the leader's data (``None``
    when it gave none)."""

    term: int
    data: Optional[bytes]


def data_arg(data: DataT) -> Optional[bytes]:
    """The candidate's data as sent with ``DATA`` (a str as UTF-8), checked: 1 to 4096 bytes."""
    if data is None:
        return None
    if isinstance(data, (bytes, str, memoryview)):
        value = as_bytes(data)
        if 1 <= len(value) <= MAX_DATA:
            return value
        raise ValueError(f"data must be 1 to {MAX_DATA} bytes, not {len(value)}")
    raise TypeError(f"data must be bytes or a str, not {type(data).__name__}")


def candidate_mode(data: Optional[bytes]) -> List[Any]:
    """What a candidate's ``LOCK.ACQUIRE`` adds to the lock's own options."""
    return [] if data is None else ["DATA", data]


def leader_of(info: Optional[LockInfo]) -> Optional[Leader]:
    """The leader that ``LOCK.INFO`` shows: the exclusive holder's fence and data (a key of
    another kind: its holder with the highest fence, as ``LOCK.OBSERVE`` reads it), or None
    when nobody holds the key."""
    if info is None:
        return None
    if "fence" in info and "token" in info:
        data = info.get("data")
        return Leader(int(info["fence"]), None if data is None else as_bytes(data))
    holders = info.get("holders") or []
    if not holders:
        return None
    top = max(holders, key=lambda h: int(h.get("fence", 0)))
    data = top.get("data")
    return Leader(int(top.get("fence", 0)), None if data is None else as_bytes(data))


def refused(err: ResponseError, name: Any, what: str) -> Exception:
    """A server's refusal of a read: ``UnsupportedError`` where the server does not know the
    command; otherwise the server's own error (``WRONGTYPE``: the key is not a lock)."""
    if unsupported(err):
        return translate(err, name, what)
    return err


def leader(name: Any) -> Flow[Optional[Leader]]:
    """Who leads now, read with ``LOCK.INFO`` (which every release with ``DATA`` has)."""
    try:
        return leader_of((yield from _core.info(name)))
    except ResponseError as err:
        raise refused(err, name, "leader") from err


class Observation:
    """Where one observer stands: the holder it last saw (``seen``, its fence, sent as
    ``AFTER``, and ``seen_data``, sent as ``SEEN``: empty for none), the leader it gave out last
    (``last``, ``last_data``), whether the last thing it gave out was a leader (``leading``: a
    vacancy is given out once, and only after a leader), whether the server takes ``SEEN``, and
    its failures in a row."""

    def __init__(self, name: Any, block: float = OBSERVE_BLOCK) -> None:
        self.name = name
        self.block = block
        self.seen: Optional[int] = None
        self.seen_data: Optional[bytes] = None
        self.last = 0
        self.last_data: Optional[bytes] = None
        self.leading = False
        self.with_seen = True
        self.failures = 0

    def request(self, now: float) -> Send:
        """The first: the current holder, at once. Then: a wait in the server until the holder
        differs from the one last seen (its fence, or its data), at most ``block`` seconds."""
        args: List[Any] = ["LOCK.OBSERVE", self.name]
        if self.seen is None:
            return Send(args)
        args += ["AFTER", self.seen]
        if self.with_seen:
            args += ["SEEN", b"" if self.seen_data is None else self.seen_data]
        return Send(args, wait_until=now + self.block)

    def answer(self, reply: Any) -> Union[Leader, None, "_Unchanged"]:
        """What to give out: a new leader, or the leader given out last with new data (a
        ``proclaim``); None, a vacancy (nobody holds the key, ``[0, nil]``, and the last thing
        given out was a leader); or ``UNCHANGED``: the wait ended without a change (nil), the key
        is still free, the fence is below the last term given out (an older holder after a
        failover), or it is that term with the data given out already."""
        self.failures = 0
        if reply is None:
            return UNCHANGED
        if not isinstance(reply, (list, tuple)) or len(reply) != 2:
            raise ResponseError(f"unexpected LOCK.OBSERVE reply: {reply!r}")
        fence, data = int(reply[0]), None if reply[1] is None else as_bytes(reply[1])
        self.seen, self.seen_data = fence, data
        if fence == 0:
            if not self.leading:
                return UNCHANGED
            self.leading = False
            return None
        if fence < self.last or (fence == self.last and (not self.leading or data == self.last_data)):
            return UNCHANGED
        self.last, self.last_data = fence, data
        self.leading = True
        return Leader(fence, data)

    def refused_seen(self, err: ResponseError) -> bool:
        """A server whose ``LOCK.OBSERVE`` does not know ``SEEN`` (an older redislock): observed
        by fence alone from now on (a new value of a term is not seen there). True if so."""
        if self.with_seen and "unknown option 'SEEN'" in str(err):
            self.with_seen = False
            return True
        return False

    def failed(self) -> float:
        """The pause before trying again after a failure."""
        pause = min(RETRY_FIRST * float(2**self.failures), RETRY_MOST)
        self.failures += 1
        return pause


class _Unchanged:
    """Nothing to give out (see ``Observation.answer``)."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()


def _not_now(err: ResponseError) -> bool:
    return isinstance(err, _core.REDIRECTS) or str(err).startswith(_NOT_NOW)


def observe_next(obs: Observation) -> Flow[Optional[Leader]]:
    """The next change: ``LOCK.OBSERVE`` sent and re-armed until a holder with a higher term
    than any given out before answers (that leader), the leader given out last answers with new
    data (that leader again, its new value), or the key is free after a leader was given out
    (None: nobody leads). A connection that fails (a cut, a partition seen as a
    read that timed out, a server restarting or loading, a Cluster redirect) is waited out and
    the wait sent again ``AFTER`` the fence last seen, so that a change made meanwhile is
    answered at once. Raises only what waiting cannot mend: ``UnsupportedError`` (a server
    without ``LOCK.OBSERVE``) and the server's refusals (``WRONGTYPE``)."""
    while True:
        try:
            reply = yield obs.request(time.monotonic())
        except ResponseError as err:
            if obs.refused_seen(err):
                continue
            if not _not_now(err):
                raise refused(err, obs.name, "observe") from err
            failure: Exception = err
        except (ConnectionError, TimeoutError, ClusterError, OSError) as err:
            failure = err
        else:
            found = obs.answer(unwrap(reply))
            if isinstance(found, _Unchanged):
                continue
            return found
        if obs.failures == 0:
            logger.warning("Observing election %r: %s; trying again", obs.name, failure)
        yield Pause(obs.failed())


# --- what both front ends share -------------------------------------------------------------------

L = TypeVar("L")


class ElectionBase(Generic[L]):
    """An election without its I/O, over a candidate lock of type ``L`` (see the module)."""

    _kind = "redislock.Election"

    def __init__(self, lock: L, name: Any, lease: Number, data: Optional[bytes], on_lost: Any) -> None:
        candidate: Any = lock
        self._lock: Any = candidate
        self.name = name
        self.lease = lease
        self.data = data
        #: Called with the election when leadership is lost (see ``lost``).
        self.on_lost = on_lost
        #: The run now going on (``run()``), whose work a loss cancels first.
        self._running: Any = None
        #: The candidate lock's options without ``DATA``.
        self._mode: List[Any] = list(candidate._spec.mode)
        candidate._spec.mode.extend(candidate_mode(data))

    def _signal_lost(self, lock: Any) -> Any:
        """The candidate lock's ``on_lost``: the run's work cancelled at once (if a run goes
        on), then the election's own, called with the election."""
        running = self._running
        if running is not None:
            running.lost()
        callback: Optional[Callable[[Any], Any]] = self.on_lost
        return None if callback is None else callback(self)

    def __repr__(self) -> str:
        return f"<{self._kind} name={self.name!r} term={self.term!r}>"

    @property
    def is_leader(self) -> bool:
        """This candidate leads: its term was granted and its lease clock has not run out (no
        I/O: the lease clock is local)."""
        left: float = self._lock.lease_left
        return left > 0

    @property
    def term(self) -> Optional[int]:
        """The term this candidate leads in, None when it does not lead."""
        fence: Optional[int] = self._lock.fence
        return fence if self.is_leader else None

    @property
    def lease_left(self) -> float:
        """Seconds left on the term's lease by the local clock (0 when not leading)."""
        left: float = self._lock.lease_left
        return left

    @property
    def lost(self) -> Any:
        """Set when leadership is lost: a renewal found the term gone, or the lease clock ran out
        before a renewal was answered — before the server can grant the next term. Cleared by
        the next term."""
        return self._lock.lost

    def _campaign(self, timeout: Optional[Number]) -> Flow[Optional[int]]:
        """The term: at once if this candidate leads already; else once the server grants it
        (``timeout`` None: waits without limit; 0 or less: does not wait), or None."""
        if self.is_leader:
            return self.term
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
        granted = yield from self._lock._acquire(None, True, timeout, None)
        fence: Optional[int] = self._lock.fence if granted else None
        return fence

    def _proclaim(self, data: DataT) -> Flow[None]:
        """The term's data becomes ``data``: ``LOCK.ACQUIRE`` again with the term's token, its
        lease and the new ``DATA``, on the term's connection — a re-grant: the same term (fence),
        its lease renewed, and observers see the new value. Later campaigns send it too.
        ``LockNotOwnedError`` if this candidate does not lead (never led, resigned, lost); a grant
        of a new term (the old one had ended and the key was free) is released at once, not taken.
        With ``replicas``, one not acknowledged in time raises ``NotReplicatedError`` (the server
        has the new data)."""
        value = data_arg(data)
        if value is None:
            raise TypeError(f"proclaim() needs data: bytes or a str of 1 to {MAX_DATA} bytes")
        lock = self._lock
        token, term = lock.token, self.term
        if token is None or term is None:
            raise lock_error(LockNotOwnedError, "Cannot proclaim: this candidate does not lead", self.name)
        spec, own = lock._spec, _core.bound(lock.local)
        durable = spec.durable
        follow = None if durable is None else durable.follow(spec.ttl_ms / 1000)
        args = [*acquire_args(self.name, token, spec.ttl_ms, self._mode, None), "DATA", value]
        sent = time.monotonic()
        try:
            reply = yield Send(args, own=own, follow=follow)
            grant = parse_grant(unwrap(reply))
            if grant is not None and grant[1] != term:
                yield Send(["LOCK.RELEASE", self.name, token], own=own)
        except ResponseError as err:
            raise translate(err, self.name, "proclaim") from err
        if grant is None or grant[1] != term:
            raise lock_error(LockNotOwnedError, "Cannot proclaim: the term was lost", self.name)
        self.data = value
        spec.mode = [*self._mode, *candidate_mode(value)]
        if durable is not None:
            acks = durable.acks(reply)
            if not acks.ok:
                raise durable.shortfall(acks, self.name, "proclamation")
        if lock.local.hold is not None:
            lock.local.hold.extended(sent, spec.ttl_ms)

    def _resign(self) -> Flow[bool]:
        """True if this candidate led until the release; False if it did not lead, or its term
        was lost meanwhile. Without an answer (``TimeoutError``, ``ConnectionError``) the term
        is kept, and ``resign()`` can be called again."""
        if self._lock.token is None:
            return False
        try:
            yield from self._lock._release()
        except LockNotOwnedError:
            return False
        return True


__all__ = [
    "Leader",
    "Observation",
    "ElectionBase",
    "DEFAULT_LEASE",
    "MAX_DATA",
    "OBSERVE_BLOCK",
    "data_arg",
    "leader",
    "leader_of",
    "observe_next",
]
