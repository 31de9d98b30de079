"""Locks on several resources at once, without I/O: the decisions of ``redislock.MultiLock`` and
``redislock.asyncio.MultiLock``.

A multi-lock takes every one of its keys in one atomic step (``LOCK.ACQUIREALL numkeys key …
token PX lease``): all of them or none, with one token and one fence per key. Afterwards each
key is an ordinary lock held by that token, and the set has one lease clock: it runs out, or a
renewal finds any key gone, and the whole set is lost (``lost``, ``on_lost``), before the server
can grant any of the keys to anyone else. ``LOCK.RELEASEALL`` gives every key back at once.

Renewals are one ``LOCK.EXTEND`` per key, one after the other, each bounded by the lease time
left, on the lock's usual path (its own connections on a single server, the Cluster client with
its redirects on a Cluster, ``WAIT`` after each extension for ``replicas=``). Not a transaction:
an extension of one key does not depend on another's, and the lease clock only moves when every
key's extension was answered 1 (and acknowledged), so a renewal that went through in part counts
as none and is tried again soon. A transaction would need one connection for the whole exchange,
which neither the lock's own bounded connections nor the Cluster client's retries give, and
would buy nothing the lease clock does not already decide.

The front ends reuse the lock's machinery: ``MultiHold`` is a ``_lease.Hold`` on the same
renewal schedule; its renewal is one ``RenewAll`` request, which the front end carries out as
the flow ``renew_all`` (each key's extension in turn).
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Sequence, Tuple, Union

from redis.exceptions import (
    ClusterCrossSlotError,
    ClusterError,
    ConnectionError,
    LockError,
    LockNotOwnedError,
    ResponseError,
    TimeoutError,
)

from ._common import (
    EncodableT,
    as_bytes,
    as_str,
    lock_error,
    renew_at_once,
    translate,
    wrong_type,
)
from ._core import CUT_SHORT, REDIRECTS, _settle
from ._lease import Hold
from ._durable import Durability, check
from ._flow import Flow, Pause, Send, unwrap

__all__ = [
    "MAX_KEYS",
    "CrossSlotError",
    "MultiSpec",
    "MultiHold",
    "RenewAll",
    "check_names",
    "cluster_slot",
    "acquire_all",
    "release_all",
    "renew_all",
]

#: The most keys one request may name (the server's bound).
MAX_KEYS = 64

Name = Union[str, bytes, memoryview]


class CrossSlotError(LockError, ValueError):
    """The keys of a multi-lock are not in one Cluster slot (the server's ``CROSSSLOT``, or the
    client's own check on a Cluster client, before anything is sent): give them one hash tag,
    ``{account}:a`` and ``{account}:b``."""


def check_names(names: Sequence[Name]) -> List[Name]:
    """1 to 64 distinct names (as the server takes them), in the order given."""
    if isinstance(names, (str, bytes, memoryview)):
        raise TypeError("names must be a list of key names, not one name")
    given: List[Name] = [bytes(n) if isinstance(n, memoryview) else n for n in names]  # hashable keys
    if not 1 <= len(given) <= MAX_KEYS:
        raise ValueError(f"a multi-lock takes 1 to {MAX_KEYS} names, not {len(given)}")
    seen = set()
    for name in given:
        if not isinstance(name, (str, bytes, memoryview)):
            raise TypeError(f"a lock name is a str or bytes, not {name!r}")
        key = as_bytes(name)
        if key in seen:
            raise ValueError(f"{as_str(name)!r} is named twice")
        seen.add(key)
    return given


def cluster_slot(names: Sequence[Name], slot_of: Any) -> int:
    """The one Cluster slot of ``names`` (``slot_of``: bytes → slot), or ``CrossSlotError``."""
    slots = {slot_of(as_bytes(n)) for n in names}
    if len(slots) > 1:
        raise CrossSlotError(
            f"the keys of a multi-lock must be in one Cluster slot, these are in {len(slots)}: "
            f"{', '.join(repr(as_str(n)) for n in names)} (give them one hash tag, as {{tag}}:name)"
        )
    slot: int = slots.pop()
    return slot


def label(names: Sequence[Name]) -> str:
    """How the set is named in errors and logs."""
    return "[" + ", ".join(as_str(n) for n in names) + "]"


def error_of(err: ResponseError, names: Sequence[Name], what: str) -> Exception:
    """A server error as the multi-lock raises it."""
    if isinstance(err, ClusterCrossSlotError) or str(err).startswith("CROSSSLOT"):
        return CrossSlotError(f"{label(names)}: CROSSSLOT {err}")  # redis-py drops the word
    return translate(err, label(names), what)


class MultiSpec:
    """What a multi-lock was made with."""

    def __init__(
        self,
        names: Sequence[Name],
        ttl_ms: int,
        mode: Sequence[EncodableT],
        auto_renew: bool,
        ephemeral: bool,
        durable: Optional[Durability] = None,
    ) -> None:
        self.names = list(names)
        self.ttl_ms = ttl_ms
        self.mode = list(mode)
        self.auto_renew = auto_renew
        self.ephemeral = ephemeral
        self.durable = durable

    def args(self, token: bytes) -> List[Any]:
        return ["LOCK.ACQUIREALL", len(self.names), *self.names, token, "PX", self.ttl_ms, *self.mode]

    def grant(self, reply: Any) -> Optional[Tuple[bytes, List[int]]]:
        """``[token, [fence, …]]`` (one fence per key, in order), or None (not granted)."""
        if reply is None:
            return None
        if (
            not isinstance(reply, (list, tuple))
            or len(reply) != 2
            or not isinstance(reply[1], (list, tuple))
            or len(reply[1]) != len(self.names)
        ):
            raise LockError(f"unexpected LOCK.ACQUIREALL reply: {reply!r}")
        return as_bytes(reply[0]), [int(f) for f in reply[1]]


class RenewAll(Send):
    """The renewal of every key of a ``MultiHold``: the front end carries it out as the flow
    ``renew_all``, and gives back one result per key (a reply, or the error)."""

    __slots__ = ("hold", "until")

    def __init__(self, hold: "MultiHold", until: float) -> None:
        super().__init__([], bound=max(until - time.monotonic(), 0.001), own=hold.bound)
        self.hold = hold
        self.until = until


def extension(
    name: Name, token: bytes, ttl_ms: int, until: float, durable: Optional[Durability], own: bool = False
) -> Send:
    """One key's ``LOCK.EXTEND``, bounded by the time left until ``until`` (``own``: on the
    connection the hold is bound to)."""
    left = max(until - time.monotonic(), 0.001)
    return Send(
        ["LOCK.EXTEND", name, token, "PX", ttl_ms],
        bound=left,
        own=own,
        follow=None if durable is None else durable.follow(left),
    )


def renew_all(req: RenewAll) -> Flow[List[Any]]:
    """Each key's extension in turn: its reply, or the error it met. Stops at the first key
    found gone (answered 0, or holding another type: the set is lost whatever the others say),
    and once the lease's time is over (the rest could not count any more)."""
    hold = req.hold
    results: List[Any] = []
    for name in hold.names:
        if time.monotonic() >= req.until:
            results.append(TimeoutError("the lease ran out before every key was renewed"))
            break
        try:
            reply = yield extension(name, hold.token, hold.ttl_ms, req.until, hold.durable, hold.bound)
        except Exception as err:  # the hold decides what it means
            results.append(err)
            if isinstance(err, ResponseError) and wrong_type(err):
                break
            continue
        results.append(reply)
        if unwrap(reply) != 1:
            break
    return results


class MultiHold(Hold):
    """The grant of a multi-lock: one token, a fence per key, one lease clock for the set."""

    __slots__ = ("names", "fences")

    def __init__(
        self,
        names: Sequence[Name],
        token: bytes,
        fences: Sequence[int],
        ttl_ms: int,
        sent: float,
        auto_renew: bool,
        owner: Any = None,
        pid: int = 0,
        durable: Optional[Durability] = None,
        bound: bool = False,
    ) -> None:
        super().__init__(label(names), token, fences[0], ttl_ms, sent, auto_renew, owner, pid, durable, bound)
        self.names = list(names)
        self.fences = list(fences)

    def renewal(self, now: float) -> Send:
        self.renewing = True
        return RenewAll(self, self.lease_end)

    def renewed(self, sent: float, reply: Any = None, error: Optional[BaseException] = None) -> bool:
        """True when a key was found gone (the set is lost); the lease clock moves on only when
        every key's extension was answered 1 (and acknowledged, with ``replicas=``); otherwise
        the renewal is tried again soon."""
        self.renewing = False
        if self.ended:
            return False
        now = time.monotonic()
        results: Sequence[Any] = reply if error is None and isinstance(reply, list) else []
        complete = error is None and len(results) == len(self.names)
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, ResponseError) and wrong_type(result):
                    self.gone = True
                    return True
                complete = False
            elif unwrap(result) != 1:
                self.gone = True
                return True
            elif self.durable is not None and not self.durable.acks(result).ok:
                complete = False
        if not complete:
            self.next_renew = now + self.retry_pause
            return False
        self.extended(sent, self.ttl_ms)
        self.next_renew = sent + self.period
        return False


def renew_keys(spec: MultiSpec, token: bytes) -> Flow[bool]:
    """Every key extended to the full lease (after a grant that came after a wait): True when
    each answered 1 (and was acknowledged); False when one was not answered; raises
    ``LockNotOwnedError`` when one is gone already."""
    until = time.monotonic() + spec.ttl_ms / 1000
    for name in spec.names:
        try:
            reply = yield extension(name, token, spec.ttl_ms, until, spec.durable, spec.ephemeral)
        except (ConnectionError, OSError, ResponseError):
            return False
        if unwrap(reply) != 1:
            raise lock_error(LockNotOwnedError, "granted, but gone before it was renewed", label(spec.names))
        if spec.durable is not None and not spec.durable.acks(reply).ok:
            return False
    return True


def acquire_all(
    spec: MultiSpec, token: bytes, wait_ms: Optional[int]
) -> Flow[Optional[Tuple[bytes, List[int], float]]]:
    """Take every key: (token, fences, moment the lease clock starts) once granted, None if not.
    ``wait_ms`` as for ``_core.acquire`` (None: do not wait; 0: without limit). The same
    re-queue rules as a single lock: a wait whose connection dropped is sent once more with the
    time left, one that meets a Cluster redirect is sent again while time is left, one cut short
    by a read bound goes on. A key holding another type (a plain string) is polled: not granted
    until it is gone. With ``spec.durable``, a grant not acknowledged in time is released (all
    keys) and ``NotReplicatedError`` raised."""
    durable = spec.durable
    names = label(spec.names)
    if durable is not None and not durable.checked:
        yield from check(durable, names)
    follow = None if durable is None else durable.follow(spec.ttl_ms / 1000)
    deadline = None if not wait_ms else time.monotonic() + wait_ms / 1000
    requeued = False
    args = spec.args(token)
    while True:
        if deadline is not None and deadline <= time.monotonic():
            return None
        sent = time.monotonic()
        try:
            if wait_ms is None:
                reply = yield Send(args, own=spec.ephemeral, follow=follow)
            elif deadline is None:
                reply = yield Send(
                    [*args, "BLOCK", 0], idempotent=False, forever=True, own=spec.ephemeral, follow=follow
                )
            else:
                reply = yield Send(args, idempotent=False, wait_until=deadline, own=spec.ephemeral, follow=follow)
            grant = spec.grant(unwrap(reply))
        except ResponseError as err:
            if wait_ms is not None and isinstance(err, REDIRECTS):
                yield from _settle(deadline)
                continue
            if not wrong_type(err):
                raise error_of(err, spec.names, "acquire") from err
            if wait_ms is None:
                return None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            yield Pause(0.1 if left is None else min(0.1, left))
            continue
        except ClusterError:
            if wait_ms is None:
                raise
            yield from _settle(deadline)
            continue
        except ConnectionError as err:
            if wait_ms is None or requeued or isinstance(err, TimeoutError):
                raise
            requeued = True
            continue
        if grant is None:
            if wait_ms == 0 or (deadline is not None and deadline - time.monotonic() > CUT_SHORT):
                continue
            return None
        if durable is not None:
            acks = durable.acks(reply)
            if not acks.ok:
                released = yield from _give_back(spec, grant[0], max(durable.timeout_ms / 1000, 1.0))
                raise durable.shortfall(acks, names, "grant", released)
        if wait_ms is not None and renew_at_once(sent, time.monotonic(), spec.ttl_ms):
            renew_sent = time.monotonic()
            try:
                if (yield from renew_keys(spec, grant[0])):
                    sent = renew_sent
            except LockNotOwnedError:
                yield from _give_back(spec, grant[0], 1.0)
                continue  # gone already (a lease shorter than the round trip): wait on
        return grant[0], grant[1], sent


def _give_back(spec: MultiSpec, token: bytes, bound: float) -> Flow[bool]:
    """``LOCK.RELEASEALL`` of a grant the lock will not keep: True if answered."""
    try:
        yield Send(["LOCK.RELEASEALL", len(spec.names), *spec.names, token], bound=bound, own=spec.ephemeral)
    except (ConnectionError, OSError, ResponseError):
        return False  # not answered: the keys end with their lease
    return True


def release_all(
    names: Sequence[Name], token: Optional[bytes], lost: bool, bound: float, own: bool = False
) -> Flow[int]:
    """``LOCK.RELEASEALL``: how many keys it released. ``LockError`` when not held;
    ``LockNotOwnedError`` (after the keys still held were released) when any key was no longer
    held by the token, or the set was signalled lost."""
    if token is None:
        raise lock_error(LockError, "Cannot release a lock that's not owned or is already unlocked.", label(names))
    try:
        released = yield Send(["LOCK.RELEASEALL", len(names), *names, token], bound=bound, own=own)
    except ResponseError as err:
        raise error_of(err, names, "release") from err
    count = int(unwrap(released) or 0)
    if count != len(names) or lost:
        raise lock_error(
            LockNotOwnedError,
            f"Cannot release a lock that's no longer owned ({count} of {len(names)} keys were still held)",
            label(names),
        )
    return count
